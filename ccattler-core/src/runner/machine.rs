//! [`ControllerLoop`]: the deterministic heart of the runner.

use std::collections::VecDeque;
use std::time::Duration;

use super::batches::Batches;
use super::step::{MARKER_VALUE, check_changes, commit_marker, error_chain};
use super::{Backoff, LoopConfig};
use crate::{
    Change, Compare, Controller, Event, EventRing, FactView, Key, KeyError, LeaseId, Op,
    ReconcileError, Revision, Scan, StoreError, Txn, TxnResponse, WatchEvent,
};

/// After this many conflicts in a row the loop lists again instead of trusting its view.
const CONFLICTS_BEFORE_RELIST: u32 = 5;

/// What the driver must do next. Drain them with [`ControllerLoop::next_action`].
#[derive(Debug, Clone)]
pub enum Action {
    /// Scan each prefix, then report every result (in order) with [`ControllerLoop::listed`].
    List {
        /// The prefixes to scan.
        prefixes: Vec<String>,
    },
    /// Drop the current watches and watch each prefix from its revision. Report a watch that
    /// cannot start, or that ends, with [`ControllerLoop::watch_failed`]; feed events with
    /// [`ControllerLoop::event`].
    Watch {
        /// `(prefix, start revision)` pairs.
        starts: Vec<(String, Revision)>,
    },
    /// Call the controller's reconcile on `view` through [`reconcile`](super::reconcile) and
    /// report with [`ControllerLoop::reconciled_with`].
    Reconcile {
        /// The immutable snapshot to reconcile on.
        view: FactView,
    },
    /// Commit `txn` as it is (its guards, the commit marker and the leader's fences are in it)
    /// and report with [`ControllerLoop::committed`].
    Commit {
        /// The guarded transaction.
        txn: Txn,
    },
    /// A commit conflicted while the loop holds fences: run `txn` (the fences alone, no
    /// operations) and report with [`ControllerLoop::fences_checked`], so that the loop tells a
    /// lost race from a lost leadership.
    CheckFences {
        /// The fences as a transaction with no operations.
        txn: Txn,
    },
    /// The fences no longer hold: this replica does not lead any more. The loop has stopped;
    /// the driver stops every controller of the replica and campaigns again.
    Deposed,
    /// Something failed; the loop restarts (lists again) after `retry_in`. Log it.
    Failed {
        /// What failed, for people.
        reason: String,
        /// When the loop tries again.
        retry_in: Duration,
    },
    /// The controller failed fatally: the driver must stop every controller and report it.
    Fatal {
        /// What failed, for people.
        message: String,
    },
}

/// Why a reconcile produced no changes.
#[derive(Debug)]
#[non_exhaustive]
pub enum ReconcileFailure {
    /// The controller returned an error.
    Error(ReconcileError),
    /// The controller panicked; the payload's message if it had one.
    Panicked(String),
}

/// Counters of what a loop has done, for tests and metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoopStats {
    /// Reconciles started.
    pub reconciles: u64,
    /// Transactions committed successfully.
    pub commits: u64,
    /// Changes committed (after dropping no-ops).
    pub changes: u64,
    /// Commits that lost a race (a guard compare failed, the fences still holding).
    pub conflicts: u64,
    /// Failures that led to a restart (errors, panics, rejected changes, store errors).
    pub failures: u64,
    /// Reconciles rejected because they wrote outside the write domain or a key twice.
    pub rejected: u64,
    /// Full lists (the first, resyncs, restarts and relists).
    pub lists: u64,
    /// Resyncs that found the facts the view held: no reconcile followed.
    pub quiet_resyncs: u64,
    /// Watch events applied to the view.
    pub events: u64,
    /// [`Event`]s added to a commit (in the store if that commit landed).
    pub events_written: u64,
    /// [`Event`]s not written: no events lease yet, no room left in the transaction, or an
    /// object that is not a valid key path.
    pub events_dropped: u64,
}

/// Where a loop writes its controller's [`Event`]s.
#[derive(Debug)]
struct EventSink {
    ring: EventRing,
    lease: Option<LeaseId>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    NeedList,
    Listing,
    Live,
    Reconciling,
    Committing,
    CheckingFences,
    Waiting { until: Duration, then: Resume },
    Stopped,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resume {
    List,
    Reconcile,
}

/// The loop logic of one controller as a pure state machine.
///
/// # Expected flow
///
/// Inputs: [`tick`](Self::tick) (time moved), [`listed`](Self::listed), [`event`](Self::event),
/// [`watch_failed`](Self::watch_failed), [`reconciled_step`](Self::reconciled_step),
/// [`committed`](Self::committed). Outputs: [`next_action`](Self::next_action) until `None`, then
/// wait for a watch event or for [`deadline`](Self::deadline). At most one list, reconcile or
/// commit is outstanding at a time.
///
/// # Guarantees
///
/// - **Coalescing.** Any number of events that arrive while the loop is busy, or before the driver
///   asks for the next action, lead to one reconcile.
/// - **Guarded commits.** Every change is guarded by the mod revision the reconciled view had for
///   its key (0 for a key the view does not hold), even when events moved the live view while
///   the reconcile ran, so a change to a key that moved since is a
///   conflict, not a lost update. No-op changes (putting the value already held, deleting a
///   missing key) are dropped before committing. A pass with more changes than one transaction
///   holds ([`set_max_changes`](Self::set_max_changes)) is committed in consecutive
///   transactions, each with the guards of that view, its own commit marker rewrite and the
///   fences; a conflict drops the rest of the pass (see `batches.rs` for why that is as safe as
///   one transaction, and what atomicity it gives up). Its events are written after its
///   changes.
/// - **Read your writes.** After a commit at revision C the loop applies its own changes to the
///   view at C, so the next reconcile sees them even before the watch echoes them; echoes and any
///   event older than what the view holds for a key are ignored.
/// - **Write domain.** A reconcile that writes outside the controller's write domain, or writes
///   one key twice, is rejected whole and counted as a failure.
/// - **Fences.** Every commit carries the fences [`set_fences`](Self::set_fences) gives (the
///   leader's compare on its election key). A commit that conflicts is followed by a check of
///   the fences alone ([`Action::CheckFences`]); if they no longer hold, the loop stops with
///   [`Action::Deposed`] and commits nothing more. A driver cannot forget them: it commits the
///   transaction the loop hands it, as it is.
/// - **One writer at a time.** With a commit marker ([`set_commit_marker`](Self::set_commit_marker),
///   which [`for_controller`](Self::for_controller) sets), every commit also rewrites
///   `runner/commit/{controller}` guarded by the revision the view holds, so a late commit of an
///   earlier loop of the same controller makes the next commit of this one conflict and read
///   again, instead of building on a view that misses it.
/// - **Determinism.** No clock, no I/O; jitter (of conflict retries and resyncs) comes from a
///   generator seeded at construction.
///
/// # Timing
///
/// Failures (errors, panics, rejected changes, store errors) restart the loop (a fresh list)
/// after [`LoopConfig::restart_delays`]; a successful reconcile resets that schedule, and so
/// does a successful list after a store error (the store answers again). Conflicts
/// retry the reconcile after a jittered exponential delay, and list again after five in a row.
/// Every [`LoopConfig::resync_interval`] the loop lists again (each wait shortened by a random
/// fraction of up to a tenth, so loops started together spread their lists). A resync that
/// finds the facts the live view holds (every key at the revision the view has for it) and
/// nothing pending keeps the view it has and calls no reconcile: the controller has already
/// planned on these facts. A reconcile that asked for another pass
/// ([`ReconcileContext::requeue_after`](crate::ReconcileContext::requeue_after)) gets it by
/// then, on the view as it is, whether or not anything changed.
#[derive(Debug)]
pub struct ControllerLoop {
    prefixes: Vec<String>,
    domain: Vec<String>,
    config: LoopConfig,
    max_changes: usize,
    phase: Phase,
    view: FactView,
    /// The view the reconcile in flight was handed: its changes are judged and guarded by it,
    /// not by the live view, which events may advance while the reconcile runs.
    planned_on: FactView,
    dirty: bool,
    relist_after_busy: bool,
    now: Duration,
    next_resync: Duration,
    /// The list under way is a resync (see "Timing").
    resyncing: bool,
    /// The pass the last reconcile asked for, by then.
    wake: Option<Duration>,
    failures: u32,
    /// Whether the last failure was the store's (see `fail_on_store`).
    store_failed: bool,
    conflicts: u32,
    rng: crate::seeded::Seeded,
    /// What is left to commit of the last reconcile.
    batches: Batches,
    /// The changes of the transaction being committed.
    in_flight: Vec<Change>,
    outbox: VecDeque<Action>,
    stats: LoopStats,
    marker: Option<Key>,
    fences: Vec<Compare>,
    events: Option<EventSink>,
}

impl ControllerLoop {
    /// A loop for a controller that reads `watches` and writes `write_domain`.
    ///
    /// The loop watches the union of both, since it must know the current revision of every key
    /// it writes in order to guard the write. `seed` drives the jitter of conflict retries and
    /// resyncs.
    pub fn new(
        watches: Vec<String>,
        write_domain: Vec<String>,
        config: LoopConfig,
        seed: u64,
    ) -> Self {
        let mut prefixes: Vec<String> = watches.into_iter().chain(write_domain.clone()).collect();
        prefixes.sort();
        prefixes.dedup();
        // A prefix covered by a shorter one would deliver every event twice.
        let covered: Vec<String> = prefixes
            .iter()
            .filter(|p| {
                prefixes
                    .iter()
                    .any(|q| q != *p && p.starts_with(q.as_str()))
            })
            .cloned()
            .collect();
        prefixes.retain(|p| !covered.contains(p));
        ControllerLoop {
            prefixes,
            domain: write_domain,
            config,
            max_changes: usize::MAX,
            phase: Phase::NeedList,
            view: FactView::new(),
            planned_on: FactView::new(),
            dirty: false,
            relist_after_busy: false,
            now: Duration::ZERO,
            next_resync: Duration::MAX,
            resyncing: false,
            wake: None,
            failures: 0,
            store_failed: false,
            conflicts: 0,
            rng: crate::seeded::Seeded::new(seed),
            batches: Batches::default(),
            in_flight: Vec::new(),
            outbox: VecDeque::new(),
            stats: LoopStats::default(),
            marker: None,
            fences: Vec::new(),
            events: None,
        }
    }

    /// A loop for `controller` as every runner sets one up: its watches and write domain, its
    /// commit marker, and its events when `config` keeps any
    /// ([`LoopConfig::events_max_age`] above zero; give the lease with
    /// [`set_events_lease`](Self::set_events_lease)). The tokio runner and the testkit's
    /// simulation both build their loops here.
    ///
    /// # Errors
    ///
    /// [`KeyError`] when the controller's name cannot name its commit marker key.
    pub fn for_controller(
        controller: &dyn Controller,
        config: LoopConfig,
        seed: u64,
    ) -> Result<Self, KeyError> {
        let marker = commit_marker(controller.name())?;
        let events = !config.events_max_age.is_zero();
        let mut machine = ControllerLoop::new(
            controller.watches(),
            controller.write_domain(),
            config,
            seed,
        );
        machine.set_commit_marker(marker);
        if events {
            machine.set_event_writer(controller.name());
        }
        Ok(machine)
    }

    /// Fences every commit from now on with `fences` (a leadership's compares, see
    /// [`Leadership::fences`](super::Leadership::fences)); see "Fences" above. Empty (the
    /// default) for a runner without election.
    pub fn set_fences(&mut self, fences: Vec<Compare>) {
        self.fences = fences;
    }

    /// Writes the [`Event`]s its controller records (see [`crate::event`]) under
    /// `event/{object}/{writer}/{slot}`, each commit's with its changes, attached to the lease
    /// [`set_events_lease`](Self::set_events_lease) gives. Without this call, or while no lease
    /// is set, events are dropped (and counted in [`LoopStats::events_dropped`]).
    pub fn set_event_writer(&mut self, writer: &str) {
        self.events = Some(EventSink {
            ring: EventRing::new(writer),
            lease: None,
        });
    }

    /// The lease events are attached to from now on (the driver rotates it, so that events
    /// expire after their max age); `None` drops events until one is set.
    pub fn set_events_lease(&mut self, lease: Option<LeaseId>) {
        if let Some(sink) = &mut self.events {
            sink.lease = lease;
        }
    }

    /// Guards every commit with the controller's commit marker `key` (see "One writer at a
    /// time" above): the loop also lists and watches it, and each commit rewrites it. Its key is
    /// [`commit_marker`] of the controller's name. Call it before the first
    /// [`next_action`](Self::next_action); each commit then holds one more op.
    pub fn set_commit_marker(&mut self, key: Key) {
        let covered = self.prefixes.iter().any(|p| key.has_prefix(p));
        if !covered {
            self.prefixes.push(key.as_str().to_owned());
            self.prefixes.sort();
        }
        self.marker = Some(key);
    }

    /// Limits how many operations and compares beyond the changes' own go into one transaction:
    /// the store's op limit ([`StoreLimits::max_txn_ops`](crate::StoreLimits)). The loop keeps
    /// room for the commit marker and the fences. A reconcile that returns more changes than
    /// fit is committed in consecutive transactions, each change guarded by the revision of
    /// the view it was planned on (see "Guarded commits" above).
    pub fn set_max_changes(&mut self, max: usize) {
        self.max_changes = max.max(1);
    }

    /// The prefixes the loop lists and watches.
    pub fn prefixes(&self) -> &[String] {
        &self.prefixes
    }

    /// The live view (not a snapshot handed to a reconcile).
    pub fn view(&self) -> &FactView {
        &self.view
    }

    /// What the loop has done so far.
    pub fn stats(&self) -> LoopStats {
        self.stats
    }

    /// Whether the loop stopped for good: after a fatal error, or deposed ([`Action::Deposed`]).
    pub fn is_stopped(&self) -> bool {
        self.phase == Phase::Stopped
    }

    /// Whether the loop has nothing to do until an event arrives or its deadline passes.
    pub fn is_idle(&self) -> bool {
        self.outbox.is_empty()
            && match self.phase {
                Phase::Live => !self.dirty,
                Phase::Waiting { .. } | Phase::Stopped => true,
                _ => false,
            }
    }

    /// The next time at which [`tick`](Self::tick) has work to do, if any.
    pub fn deadline(&self) -> Option<Duration> {
        match self.phase {
            Phase::Waiting { until, .. } => Some(until),
            Phase::Live => Some(
                self.wake
                    .map_or(self.next_resync, |w| w.min(self.next_resync)),
            ),
            _ => None,
        }
    }

    /// Time moved to `now` (monotonic, from the driver's origin).
    pub fn tick(&mut self, now: Duration) {
        self.now = self.now.max(now);
        match self.phase {
            Phase::Waiting { until, then } if self.now >= until => {
                self.phase = match then {
                    Resume::List => Phase::NeedList,
                    Resume::Reconcile => {
                        self.dirty = true;
                        Phase::Live
                    }
                };
            }
            Phase::Live if self.now >= self.next_resync => {
                self.phase = Phase::NeedList;
                self.resyncing = true;
            }
            Phase::Live if self.wake.is_some_and(|w| self.now >= w) => {
                self.wake = None;
                self.dirty = true;
            }
            _ => {}
        }
    }

    /// The next thing the driver must do, or `None` when the loop waits.
    pub fn next_action(&mut self) -> Option<Action> {
        if let Some(action) = self.outbox.pop_front() {
            return Some(action);
        }
        match self.phase {
            Phase::NeedList => {
                self.phase = Phase::Listing;
                self.stats.lists += 1;
                Some(Action::List {
                    prefixes: self.prefixes.clone(),
                })
            }
            Phase::Live if self.dirty => {
                self.phase = Phase::Reconciling;
                self.dirty = false;
                // This pass may ask again; what the last one asked for is superseded.
                self.wake = None;
                self.stats.reconciles += 1;
                self.planned_on = self.view.clone();
                Some(Action::Reconcile {
                    view: self.view.clone(),
                })
            }
            _ => None,
        }
    }

    /// The result of an [`Action::List`]: one scan per prefix, in order.
    pub fn listed(&mut self, result: Result<Vec<Scan>, StoreError>) {
        if self.phase != Phase::Listing {
            return;
        }
        match result {
            Ok(scans) => {
                if std::mem::take(&mut self.store_failed) {
                    self.failures = 0;
                }
                let revision = scans.iter().map(|s| s.revision).max().unwrap_or_default();
                let starts = self
                    .prefixes
                    .iter()
                    .zip(&scans)
                    .map(|(prefix, scan)| (prefix.clone(), scan.revision.next()))
                    .collect();
                let resync = std::mem::take(&mut self.resyncing);
                // Only what differs is changed: the view keeps sharing the rest with the
                // snapshots the controller derived its state from, so catching up costs it
                // the differences.
                let changed = self.view.sync_to_scans(scans, revision);
                if !resync || changed > 0 {
                    self.dirty = true;
                } else if !self.dirty {
                    // Nothing was missed: nothing new to plan on.
                    self.stats.quiet_resyncs += 1;
                }
                self.outbox.push_back(Action::Watch { starts });
                self.phase = Phase::Live;
                self.relist_after_busy = false;
                let wait = Backoff::resync_delay(self.config.resync_interval, self.rng.unit());
                self.next_resync = self.now.saturating_add(wait);
            }
            Err(err) => self.fail_on_store(format!("listing failed: {err}")),
        }
    }

    /// A watch event arrived. Call it for every event available before asking for the next action,
    /// so bursts coalesce into one reconcile.
    pub fn event(&mut self, event: WatchEvent) {
        if matches!(
            self.phase,
            Phase::NeedList | Phase::Listing | Phase::Stopped
        ) {
            return; // the list about to happen, or just made, supersedes it
        }
        if !self.view.apply_event(event) {
            return; // our own commit's echo, older than what we hold, or a no-op delete
        }
        self.stats.events += 1;
        self.dirty = true;
    }

    /// A watch could not start or ended. A compaction means "list again" at once; any other
    /// failure restarts the loop with backoff.
    pub fn watch_failed(&mut self, error: StoreError) {
        match self.phase {
            Phase::NeedList | Phase::Listing | Phase::Stopped => {}
            Phase::Waiting { until, .. } => {
                self.phase = Phase::Waiting {
                    until,
                    then: Resume::List,
                };
            }
            Phase::Reconciling | Phase::Committing | Phase::CheckingFences => {
                self.relist_after_busy = true
            }
            Phase::Live => {
                if matches!(error, StoreError::Compacted { .. }) {
                    self.phase = Phase::NeedList;
                } else {
                    self.fail_on_store(format!("watch failed: {error}"));
                }
            }
        }
    }

    /// The result of an [`Action::Reconcile`] (no events, no pass asked for).
    pub fn reconciled(&mut self, result: Result<Vec<Change>, ReconcileFailure>) {
        self.reconciled_with(result, Vec::new());
    }

    /// The result of an [`Action::Reconcile`] as [`reconcile`](super::reconcile) returns it:
    /// its changes, the [`Event`]s to write with them, and the pass it asked for (see
    /// "Timing"). Drivers hand every reconcile's result here.
    pub fn reconciled_step(&mut self, step: super::Reconciled) {
        if self.phase == Phase::Reconciling && step.result.is_ok() {
            self.wake = step.requeue.map(|after| self.now.saturating_add(after));
        }
        self.reconciled_with(step.result, step.events);
    }

    /// The result of an [`Action::Reconcile`] with the [`Event`]s the controller recorded
    /// ([`ReconcileContext::take_events`](crate::ReconcileContext::take_events)): written in the
    /// commit of the changes, or not at all. No pass asked for: see
    /// [`reconciled_step`](Self::reconciled_step).
    pub fn reconciled_with(
        &mut self,
        result: Result<Vec<Change>, ReconcileFailure>,
        events: Vec<Event>,
    ) {
        if self.phase != Phase::Reconciling {
            return;
        }
        let changes = match result {
            Ok(changes) => changes,
            Err(ReconcileFailure::Error(ReconcileError::Fatal { message })) => {
                self.phase = Phase::Stopped;
                self.outbox.push_back(Action::Fatal { message });
                return;
            }
            Err(ReconcileFailure::Error(err)) => return self.fail(error_chain(&err)),
            Err(ReconcileFailure::Panicked(message)) => {
                return self.fail(format!("reconcile panicked: {message}"));
            }
        };
        if let Err(reason) = self.check_changes(&changes) {
            self.stats.rejected += 1;
            return self.fail(reason);
        }
        let planned_on = std::mem::take(&mut self.planned_on);
        let effective: Vec<Change> = changes
            .into_iter()
            .filter(|change| !planned_on.is_noop(change))
            .collect();
        if effective.is_empty() {
            self.failures = 0;
            self.conflicts = 0;
            return self.finish_busy();
        }
        self.batches = Batches::new(effective, &planned_on, self.marker.as_ref());
        self.add_events(events);
        self.commit_next();
    }

    /// Hands out the next transaction of the pass (see [`Batches`] for why a pass larger than
    /// the store's op limit may take several).
    fn commit_next(&mut self) {
        let (txn, changes) = self.batches.next_txn(self.max_changes, &self.fences);
        self.in_flight = changes;
        self.phase = Phase::Committing;
        self.outbox.push_back(Action::Commit { txn });
    }

    /// Adds the events' puts to the pass, after its changes, as the lease allows.
    fn add_events(&mut self, events: Vec<Event>) {
        let Some(sink) = &mut self.events else {
            self.stats.events_dropped += events.len() as u64;
            return;
        };
        for mut event in events {
            let key = sink.lease.map(|_| sink.ring.next_key(&event.object));
            match (sink.lease, key) {
                (Some(lease), Some(Ok(key))) => {
                    event.source = sink.ring.writer().to_owned();
                    self.batches.push_event(Op::Put {
                        key,
                        value: crate::schema::encode(&event),
                        lease: Some(lease),
                    });
                    self.stats.events_written += 1;
                }
                _ => self.stats.events_dropped += 1,
            }
        }
    }

    /// The result of an [`Action::Commit`].
    pub fn committed(&mut self, result: Result<TxnResponse, StoreError>) {
        if self.phase != Phase::Committing {
            return;
        }
        let changes = std::mem::take(&mut self.in_flight);
        if !matches!(&result, Ok(response) if response.succeeded) {
            // What is left of the pass was planned on a view that is wrong now.
            self.batches = Batches::default();
        }
        match result {
            Ok(response) if response.succeeded => {
                self.stats.commits += 1;
                self.stats.changes += changes.len() as u64;
                self.failures = 0;
                self.conflicts = 0;
                self.apply_own(changes, response.revision);
                self.batches.committed(response.revision);
                if self.batches.is_done() {
                    self.finish_busy();
                } else {
                    self.commit_next();
                }
            }
            Ok(_) if !self.fences.is_empty() => {
                // A lost race, or a lost leadership: the fences alone tell.
                self.phase = Phase::CheckingFences;
                self.outbox.push_back(Action::CheckFences {
                    txn: Txn {
                        compares: self.fences.clone(),
                        ..Txn::default()
                    },
                });
            }
            Ok(_) => self.conflicted(),
            Err(err) => self.fail_on_store(format!("commit failed: {err}")),
        }
    }

    /// The result of an [`Action::CheckFences`]. Fences that hold make the conflict an ordinary
    /// lost race; fences that fail stop the loop with [`Action::Deposed`]. A store error tells
    /// nothing: the loop treats it as a lost race, and its next commit carries the fences again.
    pub fn fences_checked(&mut self, result: Result<TxnResponse, StoreError>) {
        if self.phase != Phase::CheckingFences {
            return;
        }
        match result {
            Ok(response) if !response.succeeded => {
                self.phase = Phase::Stopped;
                self.outbox.push_back(Action::Deposed);
            }
            _ => self.conflicted(),
        }
    }

    /// A commit lost a race: reconcile again after a jittered delay, or list again after
    /// too many in a row.
    fn conflicted(&mut self) {
        self.stats.conflicts += 1;
        self.conflicts += 1;
        if self.conflicts >= CONFLICTS_BEFORE_RELIST || self.relist_after_busy {
            self.conflicts = 0;
            self.phase = Phase::NeedList;
        } else {
            let delay = Backoff::conflict_delay(&self.config, self.conflicts, self.rng.unit());
            self.phase = Phase::Waiting {
                until: self.now.saturating_add(delay),
                then: Resume::Reconcile,
            };
        }
    }

    fn finish_busy(&mut self) {
        self.phase = if self.relist_after_busy {
            Phase::NeedList
        } else {
            Phase::Live
        };
    }

    /// A failure of the store (a list, a watch or a commit that could not be made): like
    /// [`fail`](Self::fail), but the next list that succeeds starts the restart schedule over.
    /// A store that answers again is not a reason to wait the schedule's longest delay: after
    /// a flaky minute, the loop would otherwise sit out 30 s with the store well.
    fn fail_on_store(&mut self, reason: String) {
        self.fail(reason);
        self.store_failed = true;
    }

    fn fail(&mut self, reason: String) {
        self.store_failed = false;
        self.failures = self.failures.saturating_add(1);
        self.stats.failures += 1;
        let retry_in = Backoff::restart_delay(&self.config, self.failures);
        self.in_flight.clear();
        self.batches = Batches::default();
        self.phase = Phase::Waiting {
            until: self.now.saturating_add(retry_in),
            then: Resume::List,
        };
        self.outbox.push_back(Action::Failed { reason, retry_in });
    }

    fn check_changes(&self, changes: &[Change]) -> Result<(), String> {
        check_changes(&self.domain, changes)
    }

    fn apply_own(&mut self, mut changes: Vec<Change>, revision: Revision) {
        if let Some(marker) = &self.marker {
            changes.push(Change::put(marker.clone(), MARKER_VALUE));
        }
        self.view.apply(changes, revision);
    }
}
