//! The tokio driver of one [`AgentLoop`]: performs its actions against a store and a runtime.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use ccattler_core::{FactStore, Runtime, StoreError, WatchEvent};
use futures_util::{FutureExt, StreamExt};
use tokio::time::Instant;

use super::action::{Action, Lane};
use super::cache::Cache;
use super::machine::AgentLoop;
use super::perform::{self, Outcome};
use super::{AgentError, NodeAgent};

/// One action being performed: the outcome once it completes (`None` for an action of another
/// lane, which the driver never sends there).
type InFlight = Pin<Box<dyn Future<Output = Option<Outcome>> + Send>>;

impl<S: FactStore + Clone, R: Runtime> NodeAgent<S, R> {
    /// Runs until `shutdown` completes. Workloads keep running after it returns.
    ///
    /// # Errors
    ///
    /// [`AgentError::Cache`] when the cache directory cannot be written at start.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) -> Result<(), AgentError> {
        let cache = Cache::new(&self.config.cache_dir);
        let desired = cache.load();
        cache.save(&desired).map_err(|source| AgentError::Cache {
            dir: self.config.cache_dir.clone(),
            source,
        })?;
        let node = self.config.node.clone();
        let mut machine = AgentLoop::new(self.config.clone(), desired);
        let origin = Instant::now();
        let mut shutdown = std::pin::pin!(shutdown);
        let mut watch: Option<S::Watch> = None;
        let mut store_op: Option<InFlight> = None;
        let mut runtime_op: Option<InFlight> = None;
        loop {
            machine.tick(origin.elapsed());
            while let Some(action) = machine.next_action() {
                tracing::trace!(node = %node, "{action}");
                match action {
                    Action::Watch { prefix, from } => match self.store.watch(&prefix, from).await {
                        Ok(started) => watch = Some(started),
                        Err(err) => {
                            watch = None;
                            machine.watch_failed(err);
                        }
                    },
                    Action::SaveCache { desired } => {
                        if let Err(err) = cache.save(&desired) {
                            tracing::warn!(node = %node, error = %err, path = %cache.path().display(), "cannot write the agent's cache");
                        }
                    }
                    Action::Disconnected { reason, retry_in } => {
                        watch = None;
                        tracing::warn!(node = %node, retry_in = ?retry_in, "store unreachable, workloads keep running: {reason}");
                    }
                    Action::RuntimeFailed { reason } => {
                        tracing::warn!(node = %node, "{reason}");
                    }
                    action if action.lane() == Lane::Store => {
                        let store = self.store.clone();
                        let (node, ttl) = (node.clone(), self.config.lease_ttl);
                        store_op = Some(Box::pin(async move {
                            perform::store_action(&store, &node, ttl, action).await
                        }));
                    }
                    action => {
                        let runtime = Arc::clone(&self.runtime);
                        runtime_op = Some(Box::pin(async move {
                            perform::runtime_action(runtime.as_ref(), action).await
                        }));
                    }
                }
            }
            let deadline = machine.deadline().and_then(|d| origin.checked_add(d));
            tokio::select! {
                biased;
                () = &mut shutdown => return Ok(()),
                outcome = in_flight(&mut store_op) => {
                    store_op = None;
                    feed(&mut machine, outcome);
                }
                outcome = in_flight(&mut runtime_op) => {
                    runtime_op = None;
                    feed(&mut machine, outcome);
                }
                item = next_event(&mut watch) => {
                    // Drain everything already delivered, so a burst makes one pass.
                    let mut item = item;
                    loop {
                        match item {
                            Some(Ok(event)) => machine.event(event),
                            Some(Err(err)) => {
                                watch = None;
                                machine.watch_failed(err);
                                break;
                            }
                            None => {
                                watch = None;
                                machine.watch_failed(StoreError::unavailable("the placement watch ended"));
                                break;
                            }
                        }
                        match watch.as_mut().and_then(|w| w.next().now_or_never()) {
                            Some(next) => item = next,
                            None => break,
                        }
                    }
                }
                () = sleep_until(deadline) => {}
            }
        }
    }
}

fn feed(machine: &mut AgentLoop, outcome: Option<Outcome>) {
    match outcome {
        Some(outcome) => {
            if let Some(error) = outcome.error() {
                tracing::debug!(node = %machine.node(), "{error}");
            }
            outcome.feed(machine);
        }
        None => {
            tracing::error!(node = %machine.node(), "an action was sent to the wrong lane; it was dropped")
        }
    }
}

async fn in_flight(slot: &mut Option<InFlight>) -> Option<Outcome> {
    match slot {
        Some(future) => future.await,
        None => std::future::pending().await,
    }
}

async fn next_event<W>(watch: &mut Option<W>) -> Option<Result<WatchEvent, StoreError>>
where
    W: futures_core::Stream<Item = Result<WatchEvent, StoreError>> + Unpin,
{
    match watch {
        Some(watch) => watch.next().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
