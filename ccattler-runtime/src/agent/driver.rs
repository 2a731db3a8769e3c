//! The tokio driver of one [`AgentLoop`]: performs its actions against a store and a runtime,
//! publishes the node's [`NodeSnapshot`] and records the agent's metrics (listed in
//! `local.rs`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use ccattler_core::{FactStore, Runtime, StoreError, WatchEvent};
use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt};
use tokio::time::Instant;

use super::action::{Action, Lane};
use super::cache::{Cache, Desired};
use super::cache_writer::CacheWriter;
use super::keeper::Keeper;
use super::local::{self, NodeSnapshot, PASS_DURATION};
use super::machine::AgentLoop;
use super::perform::{self, Outcome};
use super::trace;
use super::{AgentError, NodeAgent};

/// One action being performed: the outcome once it completes (`None` for an action of another
/// lane, which the driver never sends there).
type InFlight = Pin<Box<dyn Future<Output = Option<Outcome>> + Send>>;

/// The snapshot is published at most this often (and once more after the last change).
const PUBLISH_EVERY: Duration = Duration::from_millis(100);

impl<S: FactStore + Clone, R: Runtime> NodeAgent<S, R> {
    /// Runs until `shutdown` completes. Workloads keep running after it returns.
    ///
    /// It builds no [`NodeSnapshot`] and so records none of the gauges a snapshot answers
    /// (instances by state, ready, connected): a process that runs many agents (`cca dev`, a
    /// test cluster) would pay for each and could not tell them apart in one set of gauges.
    /// [`run_publishing`](Self::run_publishing) does both.
    ///
    /// # Errors
    ///
    /// [`AgentError::Cache`] when the cache directory cannot be written at start.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) -> Result<(), AgentError> {
        self.drive(shutdown, None).await
    }

    /// Like [`run`](Self::run), and sends the node's [`NodeSnapshot`] to `snapshots` as it
    /// changes (at most every 100 ms, and once after the last change), whether or not the
    /// store is reachable. Subscribe with `snapshots.subscribe()` before or while it runs.
    ///
    /// # Errors
    ///
    /// [`AgentError::Cache`] when the cache directory cannot be written at start.
    pub async fn run_publishing(
        self,
        shutdown: impl Future<Output = ()> + Send,
        snapshots: tokio::sync::watch::Sender<NodeSnapshot>,
    ) -> Result<(), AgentError> {
        self.drive(shutdown, Some(snapshots)).await
    }

    async fn drive(
        self,
        shutdown: impl Future<Output = ()> + Send,
        snapshots: Option<tokio::sync::watch::Sender<NodeSnapshot>>,
    ) -> Result<(), AgentError> {
        let node = self.config.node.clone();
        let (desired, cache) = if self.config.persist_cache {
            let cache = Cache::new(&self.config.cache_dir);
            let desired = cache.load();
            cache.save(&desired).map_err(|source| AgentError::Cache {
                dir: self.config.cache_dir.clone(),
                source,
            })?;
            (desired, Some(CacheWriter::spawn(cache, node.clone())))
        } else {
            (Desired::default(), None)
        };
        let mut machine = AgentLoop::new(self.config.clone(), desired);
        let origin = Instant::now();
        machine.set_epoch(std::time::SystemTime::now());
        let mut shutdown = std::pin::pin!(shutdown);
        let mut watch: Option<S::Watch> = None;
        // Every action runs on its own: the loop bounds how many of each kind are in flight.
        let mut store_op: Option<InFlight> = None;
        // The lease is renewed by a keeper of its own, which reports only a renewal that failed.
        let mut keeper: Option<Keeper> = None;
        let (renewal_failed, mut renewal_failures) = tokio::sync::mpsc::unbounded_channel();
        let mut runtime_ops: FuturesUnordered<InFlight> = FuturesUnordered::new();
        // When the pass under way began, and when the snapshot was last published.
        let mut pass_began: Option<Instant> = None;
        let mut published: Option<Instant> = None;
        let mut changed = true;
        loop {
            machine.tick(origin.elapsed());
            while let Some(action) = machine.next_action() {
                tracing::trace!(node = %node, "{action}");
                match action {
                    Action::Watch { prefix, from } => match self.store.watch(&prefix, from).await {
                        Ok(started) => watch = Some(started),
                        Err(err) => {
                            watch = None;
                            local::store_error("watch");
                            machine.watch_failed(err);
                        }
                    },
                    Action::SaveCache { desired } => {
                        if let Some(cache) = &cache {
                            cache.save(desired);
                        }
                    }
                    Action::KeepLease { lease, every } => {
                        let on = self.config.renew_on;
                        let failed = renewal_failed.clone();
                        keeper = Some(Keeper::start(&self.store, lease, every, on, failed));
                    }
                    Action::Disconnected { reason, retry_in } => {
                        watch = None;
                        keeper = None;
                        tracing::warn!(node = %node, retry_in = ?retry_in, "store unreachable, workloads keep running: {reason}");
                    }
                    Action::RuntimeFailed { reason } => {
                        tracing::warn!(node = %node, "{reason}");
                    }
                    Action::MeasureVolumes { dir } => {
                        // A walk of the volumes' files: on a blocking thread, never the loop's.
                        runtime_ops.push(Box::pin(async move {
                            let measured =
                                tokio::task::spawn_blocking(move || super::measure_volumes(&dir));
                            // A walk that panicked measured nothing: the round goes on without.
                            Some(Outcome::VolumesMeasured(measured.await.unwrap_or_default()))
                        }));
                    }
                    action if action.lane() == Lane::Store => {
                        let store = self.store.clone();
                        let (node, ttl) = (node.clone(), self.config.lease_ttl);
                        let operation = local::store_operation(&action);
                        if operation == "list" {
                            local::listed();
                        }
                        store_op = Some(Box::pin(async move {
                            let outcome = perform::store_action(&store, &node, ttl, action).await;
                            if outcome.as_ref().and_then(Outcome::error).is_some() {
                                local::store_error(operation);
                            }
                            outcome
                        }));
                    }
                    action => {
                        let runtime = Arc::clone(&self.runtime);
                        let probe = match &action {
                            Action::Probe { kind, .. } => Some(kind.name()),
                            Action::Observe { .. } => {
                                pass_began.get_or_insert_with(Instant::now);
                                None
                            }
                            _ => None,
                        };
                        let span = trace::span(&node, &action, machine.desired());
                        runtime_ops.push(Box::pin(async move {
                            let outcome =
                                trace::traced_runtime_action(runtime.as_ref(), action, span).await;
                            if let (Some(kind), Some(Outcome::Probed { result, .. })) =
                                (probe, &outcome)
                            {
                                local::probed(kind, result.is_ok());
                            }
                            outcome
                        }));
                    }
                }
            }
            if runtime_ops.is_empty()
                && let Some(began) = pass_began.take()
            {
                metrics::histogram!(PASS_DURATION).record(began.elapsed().as_secs_f64());
            }
            let publish_at = (changed && snapshots.is_some())
                .then(|| published.map_or_else(Instant::now, |at| at + PUBLISH_EVERY));
            if let Some(at) = publish_at
                && Instant::now() >= at
                && let Some(snapshots) = &snapshots
            {
                let snapshot = machine.snapshot();
                snapshot.record();
                snapshots.send_replace(snapshot);
                published = Some(Instant::now());
                changed = false;
            }
            let deadline = machine.deadline().and_then(|d| origin.checked_add(d));
            let deadline = match (deadline, publish_at.filter(|_| changed)) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            changed = true;
            tokio::select! {
                biased;
                () = &mut shutdown => {
                    // Its renewals end with the agent: the node's lease runs out unless the
                    // agent starts again within its TTL.
                    drop(keeper);
                    if let Some(cache) = cache {
                        cache.close().await;
                    }
                    return Ok(());
                }
                Some(outcome) = renewal_failures.recv() => {
                    feed(&mut machine, Some(outcome));
                }
                outcome = in_flight(&mut store_op) => {
                    store_op = None;
                    feed(&mut machine, outcome);
                }
                Some(outcome) = runtime_ops.next(), if !runtime_ops.is_empty() => {
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
                                local::store_error("watch");
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
