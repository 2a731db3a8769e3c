//! [`AgentLoop`]: the deterministic heart of the node agent.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use ccattler_core::runner::Backoff;
use ccattler_core::schema::{self, Assignment, InstanceObservation, NodeTelemetry, keys};
use ccattler_core::{EventRing, Key, LeaseId, Revision};

use super::action::{Action, Sample};
use super::cache::Desired;
use super::config::AgentConfig;
use super::plan::Track;
use super::probe::ProbeKind;
use super::scope::Scope;
use super::telemetry::Measuring;
use super::work::{Observe, Work};

/// While a start is in flight (an image pull can take long), how often the runtime is observed
/// to report its progress.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// How long, at most, what a finished runtime action did waits for the observation that
/// reports it (and for the pass that judges its instance again) while other actions are still
/// queued or in flight: the actions that finish meanwhile share one observation, one report
/// and one pass (a burst of a hundred starts costs a few, not one each over all instances).
pub(super) const ACTION_BATCH: Duration = Duration::from_millis(100);

/// How often at most the sweep over every placement follows watch events. What it forgets
/// (specs, secrets, tracks of ids no longer placed) only costs memory while it stays; on a
/// node of a hundred placements whose events come one commit at a time, a sweep per batch of
/// events cost more than the events. It also waits for events numbering half the node's
/// placements (so its cost spreads over them: O(1) an event), or for the next list.
pub(super) const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// Counters of what an agent loop has done, for tests, metrics and the simulation's summary.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AgentStats {
    /// Registrations that succeeded (the first one and every re-registration).
    pub registrations: u64,
    /// Times the store was lost (a failed store action, watch or renewal).
    pub disconnects: u64,
    /// Start attempts of instances and init steps.
    pub starts: u64,
    /// Stop requests.
    pub stops: u64,
    /// Probe checks.
    pub probes: u64,
    /// Report transactions that succeeded.
    pub reports: u64,
    /// Placed instances a pass decided for, summed over passes (a pass after placement events
    /// decides for those they named; the periodic pass for those whose runtime sample changed
    /// and those a pass left unsettled; a pass after a list, specs or secrets for every one).
    pub decided: u64,
}

/// Where the agent stands with the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Link {
    /// Not connected; register at `retry_at`.
    Down { retry_at: Duration },
    /// A registration is in flight.
    Registering,
    /// Registered under `lease`; the list is in flight.
    Listing { lease: LeaseId },
    /// Registered, listed and watching under `lease` (kept alive by the driver since
    /// [`Action::KeepLease`]); list again at `resync_at`.
    Live { lease: LeaseId, resync_at: Duration },
}

/// The store action in flight, to match its result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum StoreOp {
    Register,
    List,
    FetchSpecs(Vec<String>),
    FetchSecrets(Vec<String>),
    Report(Vec<(String, Option<InstanceObservation>)>),
    Telemetry(Box<NodeTelemetry>),
}

/// A runtime action of one instance in flight, to match its result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum RuntimeOp {
    Start(String),
    StartInit(String, usize),
    /// Reading the output of an instance's ended init step.
    ReadOutput(String, usize),
    Stop(String),
    UpdateFiles(String),
    Remove(String),
    Probe(String, ProbeKind),
}

impl RuntimeOp {
    /// The id the op names: an instance's, or an init step's for a stop or removal of one.
    pub(super) fn instance(&self) -> &str {
        match self {
            RuntimeOp::Start(id)
            | RuntimeOp::StartInit(id, _)
            | RuntimeOp::ReadOutput(id, _)
            | RuntimeOp::Stop(id)
            | RuntimeOp::UpdateFiles(id)
            | RuntimeOp::Remove(id)
            | RuntimeOp::Probe(id, _) => id,
        }
    }

    /// The id the runtime knows the action by (an init step's own id for its start), which its
    /// outcome names.
    pub(super) fn runtime_id(&self) -> std::borrow::Cow<'_, str> {
        match self {
            RuntimeOp::StartInit(id, step) | RuntimeOp::ReadOutput(id, step) => {
                super::spec::init_id(id, *step).into()
            }
            RuntimeOp::Start(id)
            | RuntimeOp::Stop(id)
            | RuntimeOp::UpdateFiles(id)
            | RuntimeOp::Remove(id)
            | RuntimeOp::Probe(id, _) => id.as_str().into(),
        }
    }
}

/// The loop logic of one node's agent as a pure state machine.
///
/// # Expected flow
///
/// Inputs: [`tick`](Self::tick) (time moved), and the result of each action the loop asked for:
/// [`registered`](Self::registered), [`listed`](Self::listed), [`event`](Self::event) and
/// [`watch_failed`](Self::watch_failed) for the placement watch,
/// [`fetched_specs`](Self::fetched_specs), [`fetched_secrets`](Self::fetched_secrets),
/// [`renewed`](Self::renewed), [`reported`](Self::reported),
/// [`telemetry_written`](Self::telemetry_written), [`observed`](Self::observed),
/// [`done`](Self::done), [`read_output`](Self::read_output) and [`probed`](Self::probed). Outputs: [`next_action`](Self::next_action)
/// until `None`, then wait for a result, a watch event or [`deadline`](Self::deadline).
///
/// The driver performs every action as soon as the loop hands it out, concurrently with those
/// in flight; the loop bounds them ([`Lane`](super::Lane)): one store action and one
/// observation at a time, and one runtime action per instance, for up to
/// [`AgentConfig::parallel_actions`] instances at once. A watch delivers events without holding
/// the store lane. The lease is not renewed by the loop: once registered, the loop hands out
/// [`Action::KeepLease`], a standing order its driver performs on a schedule of its own, so that
/// no pass, report or busy runtime can make the node's lease lapse while its process lives and
/// its store answers.
///
/// Every [`AgentConfig::resync_interval`] the loop lists its placements again, the safety net
/// against a watch that lost an event without breaking (each wait shortened by up to a tenth,
/// so agents started together spread their lists).
///
/// One pass: observe the runtime (the instances the pass decides for and those whose actions
/// finished since an observation covered them, through
/// [`Runtime::observe_some`](ccattler_core::Runtime::observe_some); every instance on the first
/// pass, the periodic one and after a list); compare with the placements (of the instances the
/// pass decides for: every one on the first pass and after a list, specs or secrets arrive;
/// else those events named, those whose runtime sample changed and, on the periodic pass, those
/// still pending: a running instance with nothing pending is decided for again only once its
/// sample, placement, spec or secrets change); queue the starts,
/// stops, removals and probes that are due, each on its instance's lane (an instance whose lane
/// is still busy waits for a later pass); as actions finish, observe again, report what changed
/// and pass again over the instances that acted: at once when no other action is queued or in
/// flight, else within 100 ms of the first unreported one, so that a burst of actions costs one
/// observation, one report and one pass, not one each. A pass runs every
/// [`AgentConfig::sync_interval`], and at once after a placement, spec or secret changes; the
/// specs that new placements need are fetched in one action. While a start is in flight, the
/// runtime is observed every second and the report follows it (a pull's progress).
///
/// Every [`AgentConfig::telemetry_interval`] the loop looks at what its running instances use
/// (the samples of its last observation) and writes the node's telemetry record when it moved
/// enough ([`NodeTelemetry`] states the rule): use never goes into an observation.
///
/// # Guarantees
///
/// - **Workloads outlive the control plane.** Nothing the store does, fails to do or says while
///   unreachable stops an instance: a store failure only disconnects (workloads keep running and
///   crashed ones restart per policy) and registration is retried after
///   [`AgentConfig::reconnect_delay`], at least every third of the lease TTL.
/// - **Adoption.** The loop starts from the cached [`Desired`]; what the runtime already runs is
///   adopted, never restarted, and its probes start over. Nothing is reported before the
///   runtime was observed once, so a restarted agent never reports a running instance as
///   pending; an observation the store already holds is not written again.
/// - **Orphans are stopped only after a successful list.** An instance that no placement names
///   is stopped (then removed) only once the placements were listed from the store since this
///   loop was made; a cache alone never stops anything.
/// - **Each version its own spec.** An instance starts and restarts with the spec of the version
///   its placement names, never the service's newest; if that version is no longer in the store
///   (and not cached) it is reported failed instead of started with another.
/// - **Restart policy.** An ended instance is started again only if its service's restart
///   policy says so (`always`; `on_failure` unless it exited with 0).
/// - **Init order.** Init steps run one at a time, in order, each to exit code 0 within its
///   timeout, before the first start of the main process; a failed step is retried with backoff.
/// - **Probe thresholds.** Liveness and readiness are judged only after the startup probe first
///   passes; a verdict changes after `failure_threshold` failures or `success_threshold`
///   successes in a row; a failed liveness probe is reported unhealthy in one pass and restarts
///   the instance (per its restart policy) in the next.
/// - **Failures are reported, not fatal.** A start that fails is reported `failed` with the
///   reason and retried after [`AgentConfig::retry_delays`]. What only needs time (a spec not
///   fetched yet) is reported `pending` with what it waits for, never `failed`: the instance
///   controller replaces a failed instance.
/// - **Secrets are never empty.** An instance whose spec names a secret the store does not
///   hold is not started (nor any init step): it is reported `pending`, its reason naming the
///   missing secret, and starts once a later fetch finds it. Secrets cannot be watched, so the
///   loop fetches those its specs name again every [`AgentConfig::secret_refresh_interval`]. A
///   changed value reaches running instances: mounted files are rewritten in place
///   ([`Runtime::update_files`](ccattler_core::Runtime::update_files)), and an instance that
///   reads it from its environment (or whose runtime cannot rewrite files) is stopped and
///   started again at once with the new value, without a report showing it stopped. A deleted
///   secret leaves running instances as they are.
/// - **Determinism.** No clock, no I/O, no randomness: the same inputs give the same actions.
#[derive(Debug)]
pub struct AgentLoop {
    pub(super) config: AgentConfig,
    pub(super) volumes: PathBuf,
    pub(super) now: Duration,
    pub(super) desired: Desired,
    /// Whether the placements were listed from the store since the loop was made.
    pub(super) synced: bool,
    pub(super) link: Link,
    pub(super) failures: u32,
    pub(super) store_busy: Option<StoreOp>,
    /// The runtime actions, one lane per instance, and the observation in flight.
    pub(super) work: Work,
    /// Observe again to report what the actions did: once no action is queued or in flight,
    /// or by this time (and once no observation is in flight).
    pub(super) report_observe: Option<Duration>,
    /// While a start is in flight, when the runtime is observed again to report its progress.
    pub(super) progress_at: Duration,
    pub(super) observed: BTreeMap<String, Sample>,
    pub(super) tracks: BTreeMap<String, Track>,
    /// Observations as the store holds them (as far as the loop knows), by instance id;
    /// `None` for a value that does not decode (the next report writes it again).
    pub(super) reported: BTreeMap<String, Option<InstanceObservation>>,
    /// The create revision of each id's placement as last seen, kept while the runtime may
    /// still hold something of the id ([`holds`](Self::holds)): a placement created again
    /// (another create revision) is a new incarnation.
    pub(super) placed_at: BTreeMap<String, Revision>,
    pub(super) report_wanted: bool,
    /// The instances the next report looks at.
    pub(super) report_scope: Scope,
    /// The instances the next pass decides for (see [`Scope`]).
    pub(super) pass_scope: Scope,
    /// Placement events since the last sweep ([`Self::sweep_placements`]), which the first
    /// action from `sweep_at` on makes once they number half the placements (see
    /// [`SWEEP_EVERY`]).
    pub(super) unswept_events: usize,
    /// When the next sweep after placement events may run (at most one each [`SWEEP_EVERY`]).
    pub(super) sweep_at: Duration,
    /// Whether an observation of the runtime has arrived since the loop began.
    pub(super) runtime_seen: bool,
    pub(super) pass_wanted: bool,
    /// The next pass observes every instance the runtime holds (the periodic one), whatever
    /// it decides for.
    pub(super) observe_all: bool,
    /// Placed instances the last pass that decided for them left unsettled: the periodic pass
    /// decides for these (see [`settle`](super::settle)).
    pub(super) unsettled: BTreeSet<String>,
    /// Pass again over the instances whose lanes acted since the last pass's observation: once
    /// no action is queued or in flight, or by this time.
    pub(super) repass: Option<Duration>,
    pub(super) next_pass: Duration,
    pub(super) spec_fetches: BTreeSet<(String, String)>,
    pub(super) secret_fetches: BTreeSet<String>,
    /// Versions a placement names that the store no longer holds.
    pub(super) unavailable: BTreeSet<(String, String)>,
    /// Secrets a spec names that the store does not hold (as last fetched).
    pub(super) missing_secrets: BTreeSet<String>,
    /// When the secrets the placed specs name are fetched again, to see changes.
    pub(super) secrets_refresh_at: Duration,
    /// The telemetry record the store holds under the current lease, as far as the loop knows.
    pub(super) telemetry_written: Option<NodeTelemetry>,
    /// When the telemetry is looked at again.
    pub(super) telemetry_at: Duration,
    /// What the last measurement of the node's volumes found (`None`: none was taken yet).
    pub(super) disk: Option<super::VolumeDisk>,
    /// Where this telemetry round's measurement of the volumes stands.
    pub(super) measuring: Measuring,
    /// The slots of the events this node writes, per instance.
    pub(super) event_ring: EventRing,
    /// The wall-clock time of `now` zero, for the events' timestamps.
    pub(super) epoch: SystemTime,
    pub(super) outbox: VecDeque<Action>,
    /// The cache file is older than [`desired`](Self::desired).
    cache_dirty: bool,
    pub(super) stats: AgentStats,
}

impl AgentLoop {
    /// A loop for the node `config` describes, starting from `cached` (what the cache file held,
    /// or [`Desired::default`]). The first pass and the first registration are due at once.
    pub fn new(config: AgentConfig, cached: Desired) -> Self {
        let event_ring = EventRing::new(keys::node_event_writer(&config.node));
        let volumes = config.cache_dir.join("volumes");
        AgentLoop {
            work: Work::new(config.parallel_actions),
            config,
            volumes,
            now: Duration::ZERO,
            desired: cached,
            synced: false,
            link: Link::Down {
                retry_at: Duration::ZERO,
            },
            failures: 0,
            store_busy: None,
            report_observe: None,
            repass: None,
            progress_at: Duration::ZERO,
            observed: BTreeMap::new(),
            tracks: BTreeMap::new(),
            reported: BTreeMap::new(),
            placed_at: BTreeMap::new(),
            report_wanted: false,
            report_scope: Scope::default(),
            pass_scope: Scope::default(),
            runtime_seen: false,
            pass_wanted: true,
            observe_all: false,
            unsettled: BTreeSet::new(),
            unswept_events: 0,
            sweep_at: Duration::ZERO,
            next_pass: Duration::ZERO,
            spec_fetches: BTreeSet::new(),
            secret_fetches: BTreeSet::new(),
            unavailable: BTreeSet::new(),
            missing_secrets: BTreeSet::new(),
            secrets_refresh_at: Duration::ZERO,
            telemetry_written: None,
            telemetry_at: Duration::ZERO,
            disk: None,
            measuring: Measuring::Due,
            event_ring,
            epoch: SystemTime::UNIX_EPOCH,
            outbox: VecDeque::new(),
            cache_dirty: false,
            stats: AgentStats::default(),
        }
    }

    /// Sets the wall-clock time of `now` zero (the driver's origin), for the timestamps of the
    /// events the loop writes; the Unix epoch until set.
    pub fn set_epoch(&mut self, epoch: SystemTime) {
        self.epoch = epoch;
    }

    /// The node's name.
    pub fn node(&self) -> &str {
        &self.config.node
    }

    /// What the loop knows it should run (what it caches).
    pub fn desired(&self) -> &Desired {
        &self.desired
    }

    /// What the loop has done so far.
    pub fn stats(&self) -> AgentStats {
        self.stats
    }

    /// Whether the loop is registered, listed and watching its placements.
    pub fn is_connected(&self) -> bool {
        matches!(self.link, Link::Live { .. })
    }

    /// The lease the node holds while connected.
    pub fn lease(&self) -> Option<LeaseId> {
        match self.link {
            Link::Live { lease, .. } | Link::Listing { lease } => Some(lease),
            _ => None,
        }
    }

    /// The next time at which [`tick`](Self::tick) has work to do.
    pub fn deadline(&self) -> Option<Duration> {
        // A busy store lane gets a result first, and the loop is asked again then.
        let link = match self.link {
            _ if self.store_busy.is_some() => None,
            Link::Down { retry_at } => Some(retry_at),
            Link::Live { resync_at, .. } if !self.desired.names_secrets() => Some(resync_at),
            Link::Live { resync_at, .. } => Some(resync_at.min(self.secrets_refresh_at)),
            Link::Registering | Link::Listing { .. } => None,
        };
        let observing = self.work.observing().is_some();
        let pass = (!observing).then_some(self.next_pass);
        let progress = (!observing && self.work.starting()).then_some(self.progress_at);
        let batched = [self.report_observe, self.repass]
            .into_iter()
            .flatten()
            .min();
        let batched = batched.filter(|_| !observing);
        let telemetry = self
            .telemetry_due()
            .filter(|_| self.store_busy.is_none() && self.measuring != Measuring::InFlight);
        [link, pass, progress, batched, telemetry]
            .into_iter()
            .flatten()
            .min()
    }

    /// When what finishes now is due to be observed at the latest ([`ACTION_BATCH`] from now).
    pub(super) fn batch_due(&self) -> Duration {
        self.now.saturating_add(ACTION_BATCH)
    }

    /// Time moved to `now` (monotonic, from the driver's origin).
    pub fn tick(&mut self, now: Duration) {
        self.now = self.now.max(now);
        if self.now >= self.next_pass {
            self.observe_all = true;
            self.pass_wanted = true;
        }
    }

    /// The next thing the driver must do, or `None` until a result, an event or the deadline.
    pub fn next_action(&mut self) -> Option<Action> {
        let unswept = self.unswept_events;
        if unswept > 0 && unswept >= self.desired.placements.len() / 2 && self.now >= self.sweep_at
        {
            self.sweep_at = self.now.saturating_add(SWEEP_EVERY);
            self.sweep_placements();
        }
        if let Some(action) = self.outbox.pop_front() {
            return Some(action);
        }
        if self.cache_dirty {
            self.cache_dirty = false;
            return Some(Action::SaveCache {
                desired: Box::new(self.desired.clone()),
            });
        }
        if let Some(action) = self.measure_work() {
            return Some(action);
        }
        if self.store_busy.is_none()
            && let Some(action) = self.store_work()
        {
            return Some(action);
        }
        self.runtime_work()
    }

    fn store_work(&mut self) -> Option<Action> {
        match self.link {
            Link::Down { retry_at } if self.now >= retry_at => {
                self.link = Link::Registering;
                self.store_busy = Some(StoreOp::Register);
                Some(Action::Register {
                    lease: self.desired.lease_id(),
                    status: schema::encode(&self.config.status()),
                })
            }
            Link::Live {
                lease, resync_at, ..
            } if self.now >= resync_at => {
                // The safety net against a watch that lost an event without breaking.
                self.link = Link::Listing { lease };
                self.store_busy = Some(StoreOp::List);
                Some(self.list_action())
            }
            Link::Live { lease, .. } => {
                if !self.spec_fetches.is_empty() {
                    let (services, keys) = spec_keys(std::mem::take(&mut self.spec_fetches));
                    if !keys.is_empty() {
                        self.store_busy = Some(StoreOp::FetchSpecs(services));
                        return Some(Action::FetchSpecs { keys });
                    }
                }
                if !self.secret_fetches.is_empty() {
                    let (names, keys) = keyed(
                        std::mem::take(&mut self.secret_fetches),
                        schema::keys::secret,
                    );
                    self.store_busy = Some(StoreOp::FetchSecrets(names));
                    return Some(Action::FetchSecrets { keys });
                }
                if self.now >= self.secrets_refresh_at {
                    // Secrets are not watchable (no watch shows them): fetched again on a
                    // timer, so that a changed one reaches the instances that use it.
                    self.secrets_refresh_at =
                        self.now.saturating_add(self.config.secret_refresh_interval);
                    let named = self.desired.named_secrets();
                    if !named.is_empty() {
                        self.secret_fetches = named;
                        return self.store_work();
                    }
                }
                // Not before the runtime was looked at once: a restarted agent would report
                // what runs as pending, then as running again.
                if self.report_wanted && self.runtime_seen {
                    self.report_wanted = false;
                    let scope = self.report_scope.take();
                    let changes = self.report_changes(lease, &scope);
                    if !changes.applied.is_empty() {
                        self.store_busy = Some(StoreOp::Report(changes.applied));
                        let mut events = Vec::new();
                        for (id, event) in changes.events {
                            if let Ok(key) = self.event_ring.next_key(&id) {
                                events.push((key, schema::encode(&event)));
                            }
                        }
                        let event_deletes = changes
                            .gone
                            .iter()
                            .flat_map(|id| self.event_ring.forget(id).unwrap_or_default())
                            .collect();
                        return Some(Action::Report {
                            puts: changes.puts,
                            deletes: changes.deletes,
                            events,
                            event_deletes,
                            lease,
                        });
                    }
                }
                self.telemetry_work(lease)
            }
            _ => None,
        }
    }

    fn runtime_work(&mut self) -> Option<Action> {
        if let Some((action, op)) = self.work.next() {
            match &op {
                RuntimeOp::Start(_) | RuntimeOp::StartInit(..) => {
                    self.stats.starts += 1;
                    self.progress_at = self.now.saturating_add(PROGRESS_EVERY);
                }
                RuntimeOp::Stop(_) => self.stats.stops += 1,
                RuntimeOp::Probe(..) => self.stats.probes += 1,
                _ => {}
            }
            return Some(action);
        }
        let (now, idle) = (self.now, self.work.is_idle());
        let due = |at: Option<Duration>| at.is_some_and(|at| now >= at || idle);
        if !self.work.can_observe() {
            return None;
        }
        if self.pass_wanted || due(self.repass) {
            self.pass_wanted = false;
            self.repass = None;
            self.report_observe = None;
            self.next_pass = self.now.saturating_add(self.config.sync_interval);
            let ids = if std::mem::take(&mut self.observe_all) {
                self.mark_unsettled();
                None
            } else {
                self.pass_scope
                    .ids()
                    .and_then(|scope| self.covers(scope.iter()))
            };
            self.work.observe(Observe::Decide, ids.clone());
            return Some(Action::Observe { ids });
        }
        let progress = self.work.starting() && self.now >= self.progress_at;
        if due(self.report_observe) || progress {
            self.report_observe = None;
            self.progress_at = self.now.saturating_add(PROGRESS_EVERY);
            let ids = self.covers(self.work.starting_lanes().filter(|_| progress));
            if ids.as_ref().is_some_and(BTreeSet::is_empty) {
                return None; // an observation in between covered what finished
            }
            self.work.observe(Observe::Report, ids.clone());
            return Some(Action::Observe { ids });
        }
        None
    }

    /// The runtime ids an observation looks at: those of `lanes` and of the lanes that finished
    /// an action since an observation covered them, each instance's with those of its init
    /// steps; `None` (every instance) until the runtime was observed once.
    fn covers<'a>(&'a self, lanes: impl Iterator<Item = &'a String>) -> Option<BTreeSet<String>> {
        if !self.runtime_seen {
            return None;
        }
        let mut ids = BTreeSet::new();
        for lane in lanes.chain(self.work.unobserved()) {
            if let Some(spec) = self.desired.spec_of(lane) {
                ids.extend((0..spec.init.len()).map(|step| super::spec::init_id(lane, step)));
            }
            ids.insert(lane.clone());
        }
        Some(ids)
    }

    /// Clears the store lane and hands back the op in flight, if it is the one `matches`
    /// expects (a result of another action leaves the lane as it is).
    pub(super) fn store_done(&mut self, matches: impl FnOnce(&StoreOp) -> bool) -> Option<StoreOp> {
        if self.store_busy.as_ref().is_some_and(matches) {
            self.store_busy.take()
        } else {
            None
        }
    }

    /// Asks for what one placement needs: its version's spec, and the secrets it names.
    pub(super) fn want(&mut self, assignment: &Assignment) {
        match self.desired.spec(&assignment.service, &assignment.version) {
            Some(spec) => self
                .secret_fetches
                .extend(spec.secrets.iter().map(|s| s.name.clone())),
            None => {
                self.spec_fetches
                    .insert((assignment.service.clone(), assignment.version.clone()));
            }
        }
    }

    /// Asks for a pass that decides for every instance (see [`Scope`]).
    pub(super) fn want_full_pass(&mut self) {
        self.pass_scope.mark_all();
        self.pass_wanted = true;
    }

    /// After a list replaced the placements: the sweep, and a pass and a report asked for.
    pub(super) fn placements_changed(&mut self) {
        self.sweep_placements();
        self.placements_noted();
    }

    /// A pass and a report asked for, and the cache saved, after placements changed. The
    /// events (or the list) marked the instances the pass decides for.
    pub(super) fn placements_noted(&mut self) {
        self.save_cache();
        self.pass_wanted = true;
        self.report_wanted = true;
    }

    /// Forgets the specs, secrets, tracks and creation revisions no placement needs any more.
    /// O(placements on the node): made after each list, and after watch events at most once
    /// each [`SWEEP_EVERY`], once they number half the placements (see `event`, which forgets
    /// at once what correctness needs).
    pub(super) fn sweep_placements(&mut self) {
        self.unswept_events = 0;
        self.desired.forget_unused();
        let named = self.desired.named_secrets();
        self.missing_secrets.retain(|name| named.contains(name));
        let placements = &self.desired.placements;
        self.tracks.retain(|id, _| placements.contains_key(id));
        let gone: Vec<String> = self
            .placed_at
            .keys()
            .filter(|id| !placements.contains_key(*id) && !self.holds(id))
            .cloned()
            .collect();
        for id in gone {
            self.placed_at.remove(&id);
        }
    }

    /// Whether the runtime may still hold something of instance `id`: the instance, one of its
    /// init steps, or what an action on it under way may leave.
    pub(super) fn holds(&self, id: &str) -> bool {
        self.observed.contains_key(id)
            || super::spec::held_init_step(&self.observed, id).is_some()
            || self.work.busy(id)
    }

    /// Records that `id`'s placement was created at `created`. Placed anew over an earlier
    /// incarnation of the id (a create revision other than the one last seen, or `report_older`:
    /// the store's report of the id is older than the placement), the id starts over: a new
    /// track that removes what the runtime holds of it first, and a report written anew.
    pub(super) fn note_placed(&mut self, id: &str, created: Revision, report_older: bool) {
        self.report_scope.mark(id);
        self.pass_scope.mark(id);
        let before = self.placed_at.insert(id.to_owned(), created);
        if report_older || before.is_some_and(|before| before != created) {
            let track = Track {
                anew: true,
                ..Track::default()
            };
            self.tracks.insert(id.to_owned(), track);
            self.reported.remove(id);
        }
    }

    pub(super) fn list_action(&self) -> Action {
        Action::List {
            placements: self.placements_prefix(),
            observations: keys::node_observations(&self.config.node)
                .unwrap_or_else(|_| self.unmatchable()),
        }
    }

    /// `placement/{node}/`. [`NodeAgent::new`](super::NodeAgent::new) refuses a node name that
    /// is not one segment; a loop built directly with one lists and watches nothing.
    pub(super) fn placements_prefix(&self) -> String {
        keys::node_placements(&self.config.node).unwrap_or_else(|_| self.unmatchable())
    }

    /// The wait before the next list of the placements: the resync interval shortened by a
    /// fraction drawn from the node's name and the time, so the loop stays deterministic (a
    /// replayed simulation lists at the same moments) while agents started together do not.
    pub(super) fn resync_delay(&self) -> Duration {
        let draw = crate::names::stable_hash(&format!("{}@{:?}", self.config.node, self.now));
        // The top 53 bits, as many as an f64 holds exactly.
        let unit = (draw >> 11) as f64 / (1u64 << 53) as f64;
        Backoff::resync_delay(self.config.resync_interval, unit)
    }

    /// A prefix no key has (keys never hold NUL).
    fn unmatchable(&self) -> String {
        "\0".to_owned()
    }

    /// Marks the cache stale: one [`Action::SaveCache`] follows, however many changes a burst
    /// of events made (each save is a synced write of the whole file). Nothing follows when the
    /// cache is not persisted.
    pub(super) fn save_cache(&mut self) {
        self.cache_dirty = self.config.persist_cache;
    }

    pub(super) fn disconnect(&mut self, reason: String) {
        self.stats.disconnects += 1;
        self.failures = self.failures.saturating_add(1);
        let retry_in = self.config.reconnect_delay(self.failures);
        self.link = Link::Down {
            retry_at: self.now.saturating_add(retry_in),
        };
        self.spec_fetches.clear();
        self.secret_fetches.clear();
        self.outbox
            .push_back(Action::Disconnected { reason, retry_in });
    }
}

/// Each name with its key, leaving out the names that make no key (nothing to fetch for them).
/// The keys that may hold the specs wanted, `(service, version)` each: the spec kept of that
/// version (`rollout/spec/{svc}/{version}`), and the service's desired spec (which serves its
/// own version where no rollout controller keeps specs). Returns the service of each key.
fn spec_keys(wanted: BTreeSet<(String, String)>) -> (Vec<String>, Vec<Key>) {
    let services: BTreeSet<&str> = wanted.iter().map(|(service, _)| service.as_str()).collect();
    let desired = services
        .into_iter()
        .filter_map(|service| Some((service.to_owned(), schema::keys::service(service).ok()?)));
    let kept = wanted.iter().filter_map(|(service, version)| {
        Some((
            service.clone(),
            schema::keys::spec_version(service, version).ok()?,
        ))
    });
    desired.chain(kept).collect::<Vec<_>>().into_iter().unzip()
}

fn keyed<E>(
    names: BTreeSet<String>,
    key: impl Fn(&str) -> Result<Key, E>,
) -> (Vec<String>, Vec<Key>) {
    names
        .into_iter()
        .filter_map(|name| {
            let key = key(&name).ok()?;
            Some((name, key))
        })
        .unzip()
}
