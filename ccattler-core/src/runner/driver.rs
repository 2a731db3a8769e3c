//! The tokio driver of one [`ControllerLoop`]: performs its actions against a store.

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use futures_util::stream::SelectAll;
use futures_util::{FutureExt, StreamExt};
use tokio::sync::watch;
use tracing::Instrument;

use super::commit_trace;
use super::{Action, ControllerLoop, LoopConfig};
use crate::{Compare, Controller, FactStore, RandomIds, ReconcileContext, Scan, StoreError};

/// Why a controller task ended.
#[derive(Debug)]
pub(crate) enum Exit {
    /// Cancelled by the runner (shutdown or leadership change).
    Cancelled,
    /// The controller failed fatally.
    Fatal(String),
    /// A commit was rejected because this replica no longer leads.
    LeadershipLost,
}

/// Everything one controller task needs.
pub(crate) struct Task<S> {
    pub store: S,
    pub controller: Arc<dyn Controller>,
    pub fences: Vec<Compare>,
    pub config: LoopConfig,
    pub seed: u64,
    pub cancel: watch::Receiver<bool>,
    /// The lease events are attached to; `None` when the runner writes no events.
    pub events_lease: Option<watch::Receiver<Option<crate::LeaseId>>>,
}

impl<S: FactStore> Task<S> {
    /// Runs the loop until cancelled, a fatal error, or lost leadership.
    pub(super) async fn run(mut self) -> Exit {
        let name = self.controller.name().to_owned();
        let mut machine =
            match ControllerLoop::for_controller(&*self.controller, self.config.clone(), self.seed)
            {
                Ok(machine) => machine,
                // The runner checks every name at setup; this is for a caller that did not.
                Err(err) => return Exit::Fatal(format!("no commit marker key: {err}")),
            };
        machine.set_fences(self.fences.clone());
        machine.set_max_changes(self.store.limits().max_txn_ops);
        let mut ids = RandomIds::from_entropy();
        let origin = tokio::time::Instant::now();
        let mut watches: SelectAll<S::Watch> = SelectAll::new();
        let mut pending_events: u64 = 0;
        loop {
            machine.tick(origin.elapsed());
            while let Some(action) = machine.next_action() {
                match action {
                    Action::List { prefixes } => {
                        metrics::counter!("ccattler_lists_total", "controller" => name.clone())
                            .increment(1);
                        let listed = list(&self.store, &prefixes).await;
                        // Building a view of every listed fact (and dropping the one it
                        // replaces) is work in proportion to the store: off the executor.
                        let building = tokio::task::spawn_blocking(move || {
                            machine.listed(listed);
                            machine
                        });
                        machine = tokio::select! {
                            biased;
                            _ = self.cancel.changed() => return Exit::Cancelled,
                            built = building => match built {
                                Ok(machine) => machine,
                                Err(err) => return Exit::Fatal(format!("the thread building the view failed: {err}")),
                            },
                        };
                    }
                    Action::Watch { starts } => {
                        watches = SelectAll::new();
                        for (prefix, start) in starts {
                            match self.store.watch(&prefix, start).await {
                                Ok(watch) => watches.push(watch),
                                Err(err) => {
                                    machine.watch_failed(err);
                                    break;
                                }
                            }
                        }
                    }
                    Action::Reconcile { view } => {
                        metrics::gauge!("ccattler_queue_depth", "controller" => name.clone())
                            .set(pending_events as f64);
                        pending_events = 0;
                        let span = tracing::debug_span!(
                            "reconcile",
                            controller = %name,
                            revision = %view.revision(),
                            facts = view.len()
                        );
                        if let Some(leases) = &self.events_lease {
                            machine.set_events_lease(*leases.borrow());
                        }
                        let pass = off_the_executor(Arc::clone(&self.controller), view, ids, span);
                        let (step, took);
                        (step, ids, took) = tokio::select! {
                            biased;
                            _ = self.cancel.changed() => return Exit::Cancelled,
                            done = pass => match done {
                                Ok(done) => done,
                                Err(err) => return Exit::Fatal(format!("the reconcile thread failed: {err}")),
                            },
                        };
                        metrics::counter!("ccattler_reconciles_total", "controller" => name.clone())
                            .increment(1);
                        metrics::histogram!(
                            "ccattler_reconcile_duration_seconds",
                            "controller" => name.clone()
                        )
                        .record(took.as_secs_f64());
                        machine.reconciled_step(step);
                    }
                    Action::Commit { txn } => {
                        // The commit marker and the events are the runner's own writes, not
                        // changes.
                        let own = |key: &crate::Key| {
                            key.has_prefix(super::COMMIT_MARKERS)
                                || key.has_prefix(crate::schema::EVENTS)
                        };
                        let changes = txn.then.iter().filter(|op| !own(op.key())).count() as u64;
                        let traced = commit_trace::changes(&txn.then, own);
                        let span = tracing::debug_span!("commit", controller = %name, changes);
                        let result = self.store.txn(txn).instrument(span.clone()).await;
                        match &result {
                            Ok(response) if response.succeeded => {
                                span.in_scope(|| {
                                    commit_trace::committed(&traced, response.revision);
                                });
                                metrics::counter!("ccattler_changes_committed_total", "controller" => name.clone())
                                    .increment(changes);
                            }
                            Ok(_) => {
                                tracing::debug!(controller = %name, "commit conflict");
                            }
                            Err(_) => {}
                        }
                        let conflicts = machine.stats().conflicts;
                        machine.committed(result);
                        count_conflict(&name, conflicts, &machine);
                    }
                    Action::CheckFences { txn } => {
                        let conflicts = machine.stats().conflicts;
                        machine.fences_checked(self.store.txn(txn).await);
                        count_conflict(&name, conflicts, &machine);
                    }
                    Action::Deposed => {
                        tracing::warn!(controller = %name, "commit rejected by the leader fence");
                        return Exit::LeadershipLost;
                    }
                    Action::Failed { reason, retry_in } => {
                        metrics::counter!("ccattler_controller_failures_total", "controller" => name.clone())
                            .increment(1);
                        tracing::warn!(controller = %name, retry_in = ?retry_in, "{reason}");
                    }
                    Action::Fatal { message } => {
                        tracing::error!(controller = %name, "fatal: {message}");
                        return Exit::Fatal(message);
                    }
                }
                machine.tick(origin.elapsed());
            }
            let deadline = machine.deadline().and_then(|d| origin.checked_add(d));
            tokio::select! {
                biased;
                _ = self.cancel.changed() => return Exit::Cancelled,
                item = watches.next(), if !watches.is_empty() => {
                    let mut item = item;
                    // Drain everything already delivered so a burst makes one reconcile, giving
                    // the executor back between slices of a long burst.
                    let mut drained = 0usize;
                    loop {
                        match item {
                            Some(Ok(event)) => {
                                pending_events += 1;
                                machine.event(event);
                                drained += 1;
                                if drained.is_multiple_of(DRAIN_SLICE) {
                                    tokio::task::yield_now().await;
                                }
                            }
                            Some(Err(err)) => {
                                machine.watch_failed(err);
                                break;
                            }
                            None => {
                                machine.watch_failed(StoreError::unavailable("watch ended"));
                                break;
                            }
                        }
                        match watches.next().now_or_never() {
                            Some(next) => item = next,
                            None => break,
                        }
                    }
                }
                _ = sleep_until(deadline), if deadline.is_some() => {}
            }
        }
    }
}

/// How many watch events the driver applies before it lets other tasks run.
const DRAIN_SLICE: usize = 256;

/// Runs one reconcile on tokio's blocking pool, so that a long pass never holds an executor
/// thread: lease renewals, agents' reports and watch deliveries sharing the runtime go on while
/// it runs. The id source goes there and back (it is the loop's, and must advance in order);
/// the view is dropped there too, and the reconcile's duration comes back with its result.
fn off_the_executor(
    controller: Arc<dyn Controller>,
    view: crate::FactView,
    mut ids: RandomIds,
    span: tracing::Span,
) -> tokio::task::JoinHandle<(super::Reconciled, RandomIds, std::time::Duration)> {
    tokio::task::spawn_blocking(move || {
        let _entered = span.enter();
        let started = Instant::now();
        let mut ctx = ReconcileContext::new(SystemTime::now(), &mut ids);
        let step = super::reconcile(&*controller, &view, &mut ctx);
        drop(ctx);
        drop(view);
        let took = started.elapsed();
        (step, ids, took)
    })
}

async fn list<S: FactStore>(store: &S, prefixes: &[String]) -> Result<Vec<Scan>, StoreError> {
    let mut scans = Vec::with_capacity(prefixes.len());
    for prefix in prefixes {
        scans.push(store.scan(prefix).await?);
    }
    Ok(scans)
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Counts a conflict the loop recorded since it held `before` (a lost race, not a lost
/// leadership: the loop counts only those).
fn count_conflict(name: &str, before: u64, machine: &ControllerLoop) {
    if machine.stats().conflicts > before {
        metrics::counter!("ccattler_commit_conflicts_total", "controller" => name.to_owned())
            .increment(1);
    }
}
