//! The invariants a simulation checks after every step, each with its precise statement and
//! the bound it allows, and the first one broken.
//!
//! Some are judged on the store as the checker follows it (a watch of every key), some on the
//! simulators' ground truth when an agent acts, some on each commit as it lands. A state the
//! control plane corrects as soon as it hears of it (too many instances wanted, an endpoint that
//! lists an instance no longer ready) breaks its invariant only when it lasts longer than its
//! bound; each bound is derived below from the fault model ([`FaultKind`](super::FaultKind))
//! and the timeouts. While the control plane is unreachable (an outage the run scripts),
//! nobody can correct the store, so the store is not judged, and bounds start over when it is
//! back.
//!
//! Every service is judged after every step that touched it, however large: each counts
//! incrementally ([`Tally`]), one instance at a time, so judging costs the same for ten
//! instances as for ten thousand.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use ccattler_controllers::standard::{Cluster, Standing};
use ccattler_core::schema::{
    self, Assignment, DesiredInstance, DesiredState, Endpoints, InstanceObservation, ObservedState,
    RecordKey, VolumeAttachment,
};
use ccattler_core::{EventKind, FactStore, FactView, Key, Op, Revision, Txn, Value};
use ccattler_store::{MemoryStore, MemoryWatch};
use futures_util::{FutureExt, StreamExt};

use super::tally::Tally;
use super::world::ready;

/// How long a service may have more instances wanted running than `count + max_extra`.
///
/// Only a node that comes back does it: its instances were replaced while its lease was gone,
/// and count again once it registers. The instance controller stops the surplus once the node
/// has reported (one agent pass, 1 s, after registering); that report can be held back by a
/// network delay on the agent (a window of up to 10 s, each message up to 3 s late), the
/// controller's commit by one on the controller (3 s more), a slow store (0.5 s per message)
/// and a conflict's retry. 15 s covers the worst of these together.
pub const EXCESS_GRACE: Duration = Duration::from_secs(15);

/// How long an endpoint may list an instance that stopped being ready, or whose node died. A
/// network delay cut the endpoint controller off for up to 10 s, each of its messages (the
/// news, its commit, the answer, and a retry after a conflict) up to 3 s late; then the news
/// reaches it, and it commits (up to 3.5 s more through a slow store, with retries after
/// transient errors). Seed 23 of the CI slice measured 10.1 s.
pub const ENDPOINT_GRACE: Duration = Duration::from_secs(15);

/// How long after a secret changes the instances that take it from the environment may be
/// restarted by their agents (by design: every instance on a node at once, which a service's
/// update policy does not bound). An agent fetches its instances' secrets again every
/// [`AgentConfig::secret_refresh_interval`](ccattler_runtime::agent::AgentConfig) (10 s), or
/// sooner when a spec changes; the stops it then makes are reported within a pass. A rollout
/// of such a service is not held to its floor when this window overlaps it: the stops that
/// took availability were not the rollout's. (Seed 132899907 of `--generate`: a secret set
/// at 6.4 s, a new version at 9.6 s; the agent fetched the secret with the new spec and
/// restarted the three instances the rollout had not stopped yet.)
pub const SECRET_RESTART_WINDOW: Duration = Duration::from_secs(15);

/// How much longer [`EXCESS_GRACE`] and [`ENDPOINT_GRACE`] are when a controller's watch lost
/// an event without breaking (the lost-messages fault) since the state began, or within this
/// long before: that controller learns what it missed only at its next resync, every
/// [`LoopConfig::resync_interval`](ccattler_core::runner::LoopConfig) (30 s).
pub const SILENT_LOSS_GRACE: Duration = Duration::from_secs(30);

/// How long an instance may still run after its agent heard that it must stop (its placement
/// says stop, or is gone, in an event its watch delivered or a list it read).
///
/// The agent decides at once (a pass follows every placement change; one observation in flight
/// first, a few ms) and stops it on the instance's lane, behind at most the action in flight
/// there (a probe, a few ms; a start in flight is waited for and not counted). A stale
/// observation (the runtime answering with what it saw when the window began, 1 to 5 s at the
/// default rates) can hide the instance until the window ends and the next pass (1 s) sees it:
/// 5 s + 1 s, and 1 s to spare. A longer window (a schedule given by hand) extends the bound
/// to its end plus 2 s.
pub const STOP_BOUND: Duration = Duration::from_secs(7);

/// One invariant of the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Invariant {
    /// The instances of a service the control plane wants running (desired running, placed on
    /// a node that holds its lease, not ended) never exceed its count plus its update policy's
    /// `max_extra` for longer than [`EXCESS_GRACE`] ([`SILENT_LOSS_GRACE`] more after a
    /// controller's watch lost an event), but for one more per wanted instance whose report is
    /// stale: the instance controller keeps those (their state is unknown) with their
    /// replacements until their node reports again or loses its lease, however long a node
    /// that returned and cannot report holds its lease.
    TooManyRunning,
    /// An instance its agent heard it must stop does not run [`STOP_BOUND`] later (the
    /// simulators' truth), unless its start is still in flight.
    StopsWhenAsked,
    /// The instance controller never asks a ready instance to stop when that leaves its service
    /// fewer than `count - max_unavailable` ready (counted as of the store it read; new
    /// instances that ended for good under their restart policy are left out of the count, as
    /// they will never be ready): whatever availability a service loses below that floor,
    /// faults took, never the controllers.
    StopsWithinBudget,
    /// In a run without any fault so far, during a rollout (once the service had its count
    /// ready), the ready instances of a service never drop below its count minus
    /// `max_unavailable`; not while an environment secret of the service changed within
    /// [`SECRET_RESTART_WINDOW`] (its agents restart those instances).
    RolloutAvailability,
    /// An endpoint lists only instances that are ready on live nodes (within
    /// [`ENDPOINT_GRACE`], [`SILENT_LOSS_GRACE`] more after a controller's watch lost an
    /// event).
    EndpointsReady,
    /// No instance id runs on two live nodes at once.
    RunsOnce,
    /// No desired fact (services, volumes, network policy) is written by anyone but the
    /// user's apply, and no agent writes outside its node's keys.
    SingleWriter,
    /// No agent reports an instance ready (nor running) before every init step of its version
    /// passed.
    ReadyAfterInit,
    /// No commit of a runner replica lands while another replica holds the leadership (the
    /// fence on every leader's commit makes a deposed leader's commits fail).
    DeposedWrite,
    /// An instance starts with a persistent volume only on the node that volume is attached
    /// to, and only where it started before (its data is there) unless the volume was released
    /// and attached anew since; and never while another instance that mounts it runs (the
    /// simulators' truth).
    VolumeAttached,
    /// No workload is stopped unless the control plane asked for it (its placement says stop,
    /// or is gone, as far as its agent could have heard), or its own liveness probe or init
    /// timeout did: never because the control plane was unreachable.
    NoStopForOutage,
}

impl Invariant {
    /// The invariant's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Invariant::TooManyRunning => "too-many-running",
            Invariant::StopsWhenAsked => "stops-when-asked",
            Invariant::StopsWithinBudget => "stops-within-budget",
            Invariant::RolloutAvailability => "rollout-availability",
            Invariant::EndpointsReady => "endpoints-ready",
            Invariant::RunsOnce => "runs-once",
            Invariant::SingleWriter => "single-writer",
            Invariant::ReadyAfterInit => "ready-after-init",
            Invariant::NoStopForOutage => "no-stop-for-outage",
            Invariant::DeposedWrite => "deposed-write",
            Invariant::VolumeAttached => "volume-attached",
        }
    }
}

impl fmt::Display for Invariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An invariant broken during a run: the run stops there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Which.
    pub invariant: Invariant,
    /// When, in virtual time.
    pub at: Duration,
    /// The step (events handled so far).
    pub step: u64,
    /// What was seen, for people.
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invariant {} broken at {:?} (step {}): {}",
            self.invariant, self.at, self.step, self.detail
        )
    }
}

/// Follows the store and judges the store-side invariants.
pub(crate) struct Checker {
    watch: Option<MemoryWatch>,
    cluster: Cluster,
    tally: Tally,
    /// `endpoint/service/{svc}` by service (the cluster does not read them).
    endpoints: BTreeMap<String, Vec<String>>,
    /// The revision each service's effective record was last written at.
    effective_at: BTreeMap<String, Revision>,
    excess_since: BTreeMap<String, Duration>,
    endpoint_since: BTreeMap<String, Duration>,
    /// Per service: the version in force, and the count at which all its instances were last
    /// seen ready in it.
    versions: BTreeMap<String, (String, Option<usize>)>,
    /// Services in a rollout being watched (calm runs): the version rolled out, and the count
    /// in force when it began.
    rollouts: BTreeMap<String, (String, usize)>,
    /// Services touched while the control plane was unreachable: judged once it is back.
    deferred: std::collections::BTreeSet<String>,
    /// When a controller's watch last lost an event without breaking.
    silent_loss: Option<Duration>,
    /// When each secret last changed (put or deleted).
    secret_changed: BTreeMap<String, Duration>,
}

impl Checker {
    pub(crate) fn new(store: &MemoryStore) -> Self {
        Checker {
            watch: ready(store.watch("", Revision::ZERO.next())).ok(),
            cluster: Cluster::default(),
            tally: Tally::default(),
            endpoints: BTreeMap::new(),
            effective_at: BTreeMap::new(),
            excess_since: BTreeMap::new(),
            endpoint_since: BTreeMap::new(),
            versions: BTreeMap::new(),
            rollouts: BTreeMap::new(),
            deferred: std::collections::BTreeSet::new(),
            silent_loss: None,
            secret_changed: BTreeMap::new(),
        }
    }

    /// Whether every declared service has its effective count of instances of the version in
    /// force, wanted and ready on live nodes, as of the last step (O(services): from the tally).
    pub(crate) fn all_ready(&self) -> bool {
        self.cluster.services.keys().all(|service| {
            let Some(effective) = self.cluster.effective.get(service) else {
                return false;
            };
            let totals = self.tally.of(service);
            let count = effective.instances as usize;
            totals.current_ready == count && totals.wanted == count
        })
    }

    /// A controller's watch lost an event without breaking, at `now`: see
    /// [`SILENT_LOSS_GRACE`].
    pub(crate) fn silently_lost(&mut self, now: Duration) {
        self.silent_loss = Some(now);
    }

    /// The bound a state that began at `since` has: `grace`, and [`SILENT_LOSS_GRACE`] more if
    /// a controller may have missed an event that would end it.
    fn bound(&self, since: Duration, grace: Duration) -> Duration {
        let lossy = self
            .silent_loss
            .is_some_and(|at| at + SILENT_LOSS_GRACE >= since);
        if lossy {
            grace + SILENT_LOSS_GRACE
        } else {
            grace
        }
    }

    /// Takes in what the store committed since the last call and judges the services it
    /// touched (and those inside a grace period). `calm`: no fault has struck yet.
    /// `reachable`: the control plane can be reached; while it cannot, nobody can correct the
    /// store, so nothing is judged, and grace periods start over once it is back.
    pub(crate) fn after_step(
        &mut self,
        now: Duration,
        calm: bool,
        reachable: bool,
    ) -> Option<(Invariant, String)> {
        let Some(watch) = self.watch.as_mut() else {
            return Some((Invariant::SingleWriter, "the checker's watch failed".into()));
        };
        let mut services = std::mem::take(&mut self.deferred);
        while let Some(Some(item)) = watch.next().now_or_never() {
            let event = match item {
                Ok(event) => event,
                Err(err) => {
                    let detail = format!("the checker's watch failed: {err}");
                    return Some((Invariant::SingleWriter, detail));
                }
            };
            let fact = (event.kind == EventKind::Put).then_some(&event.fact);
            match RecordKey::parse(&event.fact.key) {
                Some(RecordKey::Endpoints(service)) => {
                    let addresses = fact
                        .and_then(|f| schema::decode::<Endpoints>(f).ok())
                        .map(|e| e.addresses());
                    match addresses {
                        Some(addresses) => self.endpoints.insert(service.to_owned(), addresses),
                        None => self.endpoints.remove(service),
                    };
                    services.insert(service.to_owned());
                }
                Some(RecordKey::Effective(service)) => {
                    self.effective_at
                        .insert(service.to_owned(), event.revision());
                }
                Some(RecordKey::Secret(name)) => {
                    self.secret_changed.insert(name.to_owned(), now);
                }
                _ => {}
            }
            self.cluster.apply(&event.fact.key, fact);
            self.tally.changed(&self.cluster, &event.fact.key);
        }
        services.extend(self.cluster.take_touched());
        if !reachable {
            self.deferred = services;
            self.excess_since.clear();
            self.endpoint_since.clear();
            return None;
        }
        services.extend(self.excess_since.keys().cloned());
        services.extend(self.endpoint_since.keys().cloned());
        for service in services {
            if let Some(broken) = self.judge(&service, now, calm) {
                return Some(broken);
            }
        }
        None
    }

    /// Whether an environment secret of `service` changed within [`SECRET_RESTART_WINDOW`]
    /// before `now`: its agents may be restarting its instances for it.
    fn restarting_for_a_secret(&self, service: &str, now: Duration) -> bool {
        let Some(spec) = self.cluster.services.get(service) else {
            return false;
        };
        spec.secrets
            .iter()
            .filter(|secret| secret.mount.is_none())
            .filter_map(|secret| self.secret_changed.get(&secret.name))
            .any(|at| now.saturating_sub(*at) <= SECRET_RESTART_WINDOW)
    }

    fn judge(&mut self, service: &str, now: Duration, calm: bool) -> Option<(Invariant, String)> {
        // Stops a secret's change makes are not a rollout's (see SECRET_RESTART_WINDOW).
        let calm = calm && !self.restarting_for_a_secret(service, now);
        let cluster = &self.cluster;
        let Some(effective) = cluster.effective.get(service) else {
            self.excess_since.remove(service);
            self.endpoint_since.remove(service);
            self.rollouts.remove(service);
            return None;
        };
        let update = cluster
            .services
            .get(service)
            .map(|s| s.update)
            .unwrap_or_default();
        let count = effective.instances as usize;
        let totals = self.tally.of(service);
        let limit = count + update.max_extra as usize + totals.stale;
        if totals.wanted > limit {
            let since = *self.excess_since.entry(service.to_owned()).or_insert(now);
            if now.saturating_sub(since) > self.bound(since, EXCESS_GRACE) {
                return Some((
                    Invariant::TooManyRunning,
                    format!(
                        "{service} has {} instances wanted running on live nodes ({} reported running, {} stale) for {count} desired (max_extra {}) since {since:?}",
                        totals.wanted, totals.running, totals.stale, update.max_extra
                    ),
                ));
            }
        } else {
            self.excess_since.remove(service);
        }

        let bad: Vec<&String> = self
            .endpoints
            .get(service)
            .into_iter()
            .flatten()
            .filter(|address| !totals.serving.contains_key(address.as_str()))
            .collect();
        if bad.is_empty() {
            self.endpoint_since.remove(service);
        } else {
            let since = *self.endpoint_since.entry(service.to_owned()).or_insert(now);
            if now.saturating_sub(since) > self.bound(since, ENDPOINT_GRACE) {
                let seen: Vec<String> = bad
                    .iter()
                    .map(|address| {
                        let holder = cluster.instances_of(service).find(|i| {
                            i.observed.as_ref().and_then(|o| o.address.as_deref())
                                == Some(address.as_str())
                        });
                        match holder {
                            None => format!("{address}: no instance reports it"),
                            Some(i) => format!(
                                "{address}: {} on {:?}, node alive {}, report {}, ready {}",
                                i.id,
                                i.node,
                                i.node_alive,
                                if i.is_stale() { "stale" } else { "fresh" },
                                i.is_ready()
                            ),
                        }
                    })
                    .collect();
                return Some((
                    Invariant::EndpointsReady,
                    format!(
                        "endpoints of {service} list addresses not ready on a live node since {since:?}: {}",
                        seen.join("; ")
                    ),
                ));
            }
        }

        // A deleted service is stopped whole (its effective record outlives its spec for a
        // moment): no rollout of it is held to a floor, least of all the default policy's.
        if !cluster.services.contains_key(service) {
            self.rollouts.remove(service);
            self.versions.remove(service);
            return None;
        }
        // A rollout is held to the floor only if it began with every instance ready at the
        // count in force: right after a scale-up, the new instances are not ready yet, and a
        // new version then does not take availability the service had.
        let (version, all_ready_at) = self
            .versions
            .entry(service.to_owned())
            .or_insert_with(|| (effective.version.clone(), None));
        if *version != effective.version {
            if all_ready_at.is_some_and(|at| at >= count) && calm {
                self.rollouts
                    .insert(service.to_owned(), (effective.version.clone(), count));
            }
            *version = effective.version.clone();
            *all_ready_at = None;
        }
        if totals.current_ready >= count {
            *all_ready_at = Some(count);
        }
        // The floor follows the count in force down (a scale-down during the rollout lowers
        // it), but not up: instances added by a scale-up during the rollout are not ready at
        // once, and no stop took that availability.
        let started_at = self.rollouts.get(service).map_or(count, |(_, at)| *at);
        let floor = count
            .min(started_at)
            .saturating_sub(update.max_unavailable as usize);
        match self.rollouts.get(service) {
            Some((rolled, _)) if !calm || *rolled != effective.version => {
                self.rollouts.remove(service);
            }
            Some(_) if totals.current_ready >= count => {
                self.rollouts.remove(service);
            }
            Some(_) if totals.ready < floor => {
                return Some((
                    Invariant::RolloutAvailability,
                    format!(
                        "{service} has {} ready instances during its rollout, below {} - max_unavailable {} = {floor}",
                        totals.ready,
                        count.min(started_at),
                        update.max_unavailable
                    ),
                ));
            }
            _ => {}
        }
        None
    }

    /// Judges a commit of the instance controller before it lands: the ready instances it
    /// asks to stop must leave each service at least `count - max_unavailable` ready
    /// ([`Invariant::StopsWithinBudget`]), all counted on `view`, the facts the controller
    /// planned on (its own reading: under message delays a view may lag the store).
    pub(crate) fn stops_within_budget(
        &self,
        txn: &Txn,
        view: &FactView,
    ) -> Option<(Invariant, String)> {
        let mut stopping: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for op in &txn.then {
            let Op::Put { key, value, .. } = op else {
                continue;
            };
            let Some(RecordKey::Instance(id)) = RecordKey::parse(key) else {
                continue;
            };
            let Ok(asked) = serde_json::from_slice::<DesiredInstance>(value) else {
                continue;
            };
            if asked.state == DesiredState::Stopped {
                stopping
                    .entry(asked.service)
                    .or_default()
                    .push(id.to_owned());
            }
        }
        for (service, ids) in stopping {
            let seen = service_as_seen(view, &service);
            let (Some(effective), Some(spec)) =
                (seen.effective.get(&service), seen.services.get(&service))
            else {
                continue; // deleted: every instance goes
            };
            let instances: Vec<_> = seen.instances_of(&service).collect();
            let ready = |i: &&ccattler_controllers::standard::Instance| {
                i.desired.state == DesiredState::Running && i.node_alive && i.is_ready()
            };
            let stopped: Vec<&str> = instances
                .iter()
                .filter(|i| ids.contains(&i.id) && ready(i))
                .map(|i| i.id.as_str())
                .collect();
            if stopped.is_empty() {
                continue;
            }
            // New instances that ended for good will never be ready: the floor leaves them
            // out, as the instance controller documents.
            let finished = instances
                .iter()
                .filter(|i| {
                    i.desired.version == effective.version
                        && i.standing(spec.restart) == Standing::Finished
                })
                .count();
            let floor = (effective.instances as usize)
                .saturating_sub(finished)
                .saturating_sub(spec.update.max_unavailable as usize);
            let left = instances.iter().filter(|i| ready(i)).count() - stopped.len();
            if left < floor {
                return Some((
                    Invariant::StopsWithinBudget,
                    format!(
                        "the instance controller asked {} ready instances of {service} to stop ({}), leaving {left} ready of {} (max_unavailable {}, ended for good {finished}): below the floor {floor}",
                        stopped.len(),
                        stopped.join(", "),
                        effective.instances,
                        spec.update.max_unavailable
                    ),
                ));
            }
        }
        None
    }
}

/// What `view` holds of `service`, read as the standard controllers read it: its spec and
/// effective record, its instances with their placements and reports, and the node leases.
/// Costs O(the service's instances and the nodes), not O(the view): a placement of an instance
/// on a node whose lease is gone is not read (such an instance does not count as ready).
fn service_as_seen(view: &FactView, service: &str) -> Cluster {
    let mut cluster = Cluster::default();
    let mut apply = |fact: &ccattler_core::Fact| cluster.apply(&fact.key, Some(fact));
    for key in [
        schema::keys::service(service),
        schema::keys::effective(service),
    ]
    .into_iter()
    .flatten()
    {
        if let Some(fact) = view.get(key.as_str()) {
            apply(fact);
        }
    }
    let nodes: Vec<String> = view
        .scan(schema::NODE_LEASES)
        .filter_map(|fact| match RecordKey::parse(&fact.key) {
            Some(RecordKey::NodeLease(node)) => Some(node.to_owned()),
            _ => None,
        })
        .collect();
    view.scan(schema::NODE_LEASES).for_each(&mut apply);
    // Instance ids begin with the service's name, `/` as `.`: only those are read.
    let ids = format!("{}-", service.replace('/', "."));
    let instances = format!("{}{ids}", schema::DESIRED_INSTANCES);
    for fact in view.scan(&instances) {
        if schema::decode::<DesiredInstance>(fact).is_ok_and(|d| d.service == service) {
            apply(fact);
        }
    }
    for node in &nodes {
        let Ok(prefix) = schema::keys::node_placements(node) else {
            continue;
        };
        for fact in view.scan(&format!("{prefix}{ids}")) {
            apply(fact);
            if let Some(RecordKey::Placement { node, instance }) = RecordKey::parse(&fact.key)
                && let Ok(key) = schema::keys::observed_instance(node, instance)
                && let Some(report) = view.get(key.as_str())
            {
                apply(report);
            }
        }
    }
    cluster
}

/// Whether a commit of `writer` writes only keys it may: no controller writes a desired key.
pub(crate) fn commit_writes(writer: &str, txn: &Txn) -> Option<(Invariant, String)> {
    for op in &txn.then {
        let (Op::Put { key, .. } | Op::Delete { key }) = op;
        if schema::APPLIED.iter().any(|prefix| key.has_prefix(prefix)) {
            return Some((
                Invariant::SingleWriter,
                format!("{writer} wrote {key}, which only the user's apply may write"),
            ));
        }
    }
    None
}

/// Whether an agent's report stays within its node's keys: its observations and its events.
pub(crate) fn report_writes(node: &str, keys: &[&Key]) -> Option<(Invariant, String)> {
    let own = schema::keys::node_observations(node).unwrap_or_else(|_| "\0".to_owned());
    let writer = schema::keys::node_event_writer(node);
    let its_event = |key: &Key| matches!(schema::RecordKey::parse(key), Some(schema::RecordKey::Event { writer: w, .. }) if w == writer);
    keys.iter()
        .find(|k| !k.has_prefix(&own) && !its_event(k))
        .map(|key| {
            (
                Invariant::SingleWriter,
                format!("the agent of {node} wrote {key}, outside {own}"),
            )
        })
}

/// Whether every observation an agent's report puts says its instance ran only after its init
/// steps passed.
pub(crate) fn reports_after_init(node: &str, puts: &[(Key, Value)]) -> Option<(Invariant, String)> {
    puts.iter().find_map(|(key, value)| {
        let seen: InstanceObservation = serde_json::from_slice(value).ok()?;
        let early = (seen.ready || seen.state == ObservedState::Running)
            && seen.init_done < seen.init_steps;
        early.then(|| {
            (
                Invariant::ReadyAfterInit,
                format!(
                    "the agent of {node} reported {key} {:?} (ready {}) after {} of {} init steps",
                    seen.state, seen.ready, seen.init_done, seen.init_steps
                ),
            )
        })
    })
}

/// Whether the control plane asked for instance `id` to stop on `node` (or no longer placed it
/// there), as far as its agent can know: the store says so now, or says otherwise only since a
/// revision newer than `heard`, the newest of the node's placements its agent has heard of (a
/// stop asked, then the same id placed there again before the agent heard of it).
pub(crate) fn stop_is_asked(
    store: &MemoryStore,
    node: &str,
    id: &str,
    heard: Revision,
) -> Result<(), String> {
    let Ok(key) = schema::keys::placement(node, id) else {
        return Ok(());
    };
    match ready(store.get(&key)) {
        Ok(None) | Err(_) => Ok(()),
        Ok(Some(fact)) if fact.mod_revision > heard => Ok(()),
        Ok(Some(fact)) => match schema::decode::<Assignment>(&fact) {
            Ok(a) if a.state == DesiredState::Running => Err(format!(
                "the agent of {node} stopped {id}, which its placement (revision {}) still wants running",
                fact.mod_revision
            )),
            _ => Ok(()),
        },
    }
}

/// The persistent volumes placed instance `owner` mounts on `node`, as its placement carries
/// them (none when it is no longer placed there), each with the create revision of its
/// attachment (a new one: the volume was released and attached anew), after checking that each
/// is attached to `node` in the store (a volume whose attachment is gone is not judged).
pub(crate) fn persistent_volumes(
    store: &MemoryStore,
    node: &str,
    owner: &str,
) -> Result<Vec<(String, Revision)>, (Invariant, String)> {
    let Ok(key) = schema::keys::placement(node, owner) else {
        return Ok(Vec::new());
    };
    let Ok(Some(fact)) = ready(store.get(&key)) else {
        return Ok(Vec::new());
    };
    let Ok(assignment) = schema::decode::<Assignment>(&fact) else {
        return Ok(Vec::new());
    };
    let mut volumes = Vec::new();
    for volume in assignment.volumes.iter().filter(|v| v.persistent) {
        let Ok(key) = schema::keys::volume_attachment(&volume.name) else {
            continue;
        };
        let Ok(Some(fact)) = ready(store.get(&key)) else {
            continue;
        };
        if let Ok(attached) = schema::decode::<VolumeAttachment>(&fact)
            && attached.node != node
        {
            return Err((
                Invariant::VolumeAttached,
                format!(
                    "{owner} starts on {node} with volume {}, whose data is on {}",
                    volume.name, attached.node
                ),
            ));
        }
        volumes.push((volume.name.clone(), fact.create_revision));
    }
    Ok(volumes)
}
