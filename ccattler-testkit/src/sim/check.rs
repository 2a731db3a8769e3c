//! The invariants a simulation checks after every step, and the first one broken.
//!
//! Some are judged on the store as the checker follows it (a watch of every key), some on the
//! simulators' ground truth when an agent acts, some on each commit as it lands. An invariant
//! about a state the controllers correct as soon as they hear of it (too many instances running,
//! an endpoint that lists an instance no longer ready) is broken only when the state lasts longer
//! than its grace; the others are broken at once. While the control plane is unreachable (an
//! outage the run scripts), nobody can correct the store, so the store is not judged, and
//! grace periods start over when it is back.
//!
//! Judging a service costs O(its instances). A service of up to 256 instances is judged after
//! every step that touched it; a larger one at most every 100 ms of virtual time, so that a run
//! of 10,000 instances stays affordable (a breach shorter than that can go unseen there).

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use ccattler_controllers::standard::Cluster;
use ccattler_core::schema::{self, Assignment, DesiredState, Endpoints, RecordKey};
use ccattler_core::{EventKind, FactStore, Key, Op, Revision, Txn};
use ccattler_store::{MemoryStore, MemoryWatch};
use futures_util::{FutureExt, StreamExt};

use super::world::ready;

/// How long a service may run more instances than `desired + max_extra`: the time a returning
/// node's surplus takes to be noticed and stopped, even through delayed messages and a slow
/// store.
pub const EXCESS_GRACE: Duration = Duration::from_secs(15);

/// How long an endpoint may list an instance that stopped being ready, or whose node died. A
/// network delay cut the endpoint controller off for up to 10 s, each of its messages (the
/// news, its commit, the answer, and a retry after a conflict) up to 3 s late; then the news
/// reaches it, and it commits (up to 3.5 s more through a slow store, with retries after
/// transient errors). Seed 23 of the CI slice measured 10.1 s.
pub const ENDPOINT_GRACE: Duration = Duration::from_secs(15);

/// One invariant of the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Invariant {
    /// No service has more instances running (and reported so) on live nodes than its count
    /// plus its update policy's `max_extra`, for longer than [`EXCESS_GRACE`].
    TooManyRunning,
    /// During a rollout in a run without faults so far, the ready instances of a service never
    /// drop below its count minus `max_unavailable` (once it had its count ready).
    RolloutAvailability,
    /// An endpoint lists only instances that are ready on live nodes (within
    /// [`ENDPOINT_GRACE`]).
    EndpointsReady,
    /// No instance id runs on two live nodes at once.
    RunsOnce,
    /// No desired fact (services, volumes, network policy) is written by anyone but the
    /// user's apply, and no agent writes outside its node's keys.
    SingleWriter,
    /// No commit of a runner replica lands while another replica holds the leadership (the
    /// fence on every leader's commit makes a deposed leader's commits fail).
    DeposedWrite,
    /// No workload is stopped unless the control plane asked for it (its placement says stop,
    /// or is gone), or its own liveness probe or init timeout did: never because the control
    /// plane was unreachable.
    NoStopForOutage,
}

impl Invariant {
    /// The invariant's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Invariant::TooManyRunning => "too-many-running",
            Invariant::RolloutAvailability => "rollout-availability",
            Invariant::EndpointsReady => "endpoints-ready",
            Invariant::RunsOnce => "runs-once",
            Invariant::SingleWriter => "single-writer",
            Invariant::NoStopForOutage => "no-stop-for-outage",
            Invariant::DeposedWrite => "deposed-write",
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

/// A rollout being watched: its version and the floor of ready instances.
#[derive(Debug)]
struct Rollout {
    version: String,
    floor: usize,
}

/// Follows the store and judges the store-side invariants.
pub(crate) struct Checker {
    watch: Option<MemoryWatch>,
    cluster: Cluster,
    /// `endpoint/service/{svc}` by service (the cluster does not read them).
    endpoints: BTreeMap<String, Vec<String>>,
    excess_since: BTreeMap<String, Duration>,
    endpoint_since: BTreeMap<String, Duration>,
    /// Per service: the version in force, and whether all its instances were ready in it.
    versions: BTreeMap<String, (String, bool)>,
    rollouts: BTreeMap<String, Rollout>,
    /// When each large service was last judged.
    judged: BTreeMap<String, Duration>,
    /// Large services touched since they were last judged.
    deferred: std::collections::BTreeSet<String>,
}

/// A service with more instances than this is large: see [`LARGE_EVERY`].
const LARGE_SERVICE: usize = 256;

/// How often a large service is judged at most.
const LARGE_EVERY: Duration = Duration::from_millis(100);

impl Checker {
    pub(crate) fn new(store: &MemoryStore) -> Self {
        Checker {
            watch: ready(store.watch("", Revision::ZERO.next())).ok(),
            cluster: Cluster::default(),
            endpoints: BTreeMap::new(),
            excess_since: BTreeMap::new(),
            endpoint_since: BTreeMap::new(),
            versions: BTreeMap::new(),
            rollouts: BTreeMap::new(),
            judged: BTreeMap::new(),
            deferred: std::collections::BTreeSet::new(),
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
            if let Some(RecordKey::Endpoints(service)) = RecordKey::parse(&event.fact.key) {
                let addresses = fact
                    .and_then(|f| schema::decode::<Endpoints>(f).ok())
                    .map(|e| e.addresses);
                match addresses {
                    Some(addresses) => self.endpoints.insert(service.to_owned(), addresses),
                    None => self.endpoints.remove(service),
                };
                services.insert(service.to_owned());
            }
            self.cluster.apply(&event.fact.key, fact);
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
            // Judging costs O(instances of the service): a large one is judged at most every
            // LARGE_EVERY of virtual time, and what touched it meanwhile waits for then.
            let large = self
                .cluster
                .instances_of(&service)
                .nth(LARGE_SERVICE)
                .is_some();
            if large {
                let last = self.judged.get(&service).copied().unwrap_or_default();
                if now < last + LARGE_EVERY && !last.is_zero() {
                    self.deferred.insert(service);
                    continue;
                }
                self.judged.insert(service.clone(), now);
            }
            if let Some(broken) = self.judge(&service, now, calm) {
                return Some(broken);
            }
        }
        None
    }

    fn judge(&mut self, service: &str, now: Duration, calm: bool) -> Option<(Invariant, String)> {
        let cluster = &self.cluster;
        let Some(effective) = cluster.effective.get(service) else {
            self.excess_since.remove(service);
            self.endpoint_since.remove(service);
            return None;
        };
        let update = cluster
            .services
            .get(service)
            .map(|s| s.update)
            .unwrap_or_default();
        let count = effective.instances as usize;
        let instances: Vec<_> = cluster.instances_of(service).collect();
        let running = instances
            .iter()
            .filter(|i| i.node_alive && i.is_running())
            .count();
        let limit = count + update.max_extra as usize;
        if running > limit {
            let since = *self.excess_since.entry(service.to_owned()).or_insert(now);
            if now.saturating_sub(since) > EXCESS_GRACE {
                return Some((
                    Invariant::TooManyRunning,
                    format!(
                        "{service} has {running} instances running on live nodes for {count} desired (max_extra {}) since {since:?}",
                        update.max_extra
                    ),
                ));
            }
        } else {
            self.excess_since.remove(service);
        }

        let serving: std::collections::HashSet<&str> = instances
            .iter()
            .filter(|i| i.node_alive && i.is_ready())
            .filter_map(|i| i.report().and_then(|o| o.address.as_deref()))
            .collect();
        let bad: Vec<String> = self
            .endpoints
            .get(service)
            .into_iter()
            .flatten()
            .filter(|address| !serving.contains(address.as_str()))
            .cloned()
            .collect();
        if bad.is_empty() {
            self.endpoint_since.remove(service);
        } else {
            let since = *self.endpoint_since.entry(service.to_owned()).or_insert(now);
            if now.saturating_sub(since) > ENDPOINT_GRACE {
                let seen: Vec<String> = bad
                    .iter()
                    .map(|address| {
                        let holder = instances.iter().find(|i| {
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

        let ready_count = instances
            .iter()
            .filter(|i| i.desired.state == DesiredState::Running && i.node_alive && i.is_ready())
            .count();
        let current_ready = instances
            .iter()
            .filter(|i| i.desired.version == effective.version && i.node_alive && i.is_ready())
            .count();
        let (version, all_ready) = self
            .versions
            .entry(service.to_owned())
            .or_insert_with(|| (effective.version.clone(), false));
        if *version != effective.version {
            if *all_ready && calm {
                let floor = count.saturating_sub(update.max_unavailable as usize);
                self.rollouts.insert(
                    service.to_owned(),
                    Rollout {
                        version: effective.version.clone(),
                        floor,
                    },
                );
            }
            *version = effective.version.clone();
            *all_ready = false;
        }
        if current_ready >= count {
            *all_ready = true;
        }
        match self.rollouts.get(service) {
            Some(rollout) if !calm || rollout.version != effective.version => {
                self.rollouts.remove(service);
            }
            Some(_) if current_ready >= count => {
                self.rollouts.remove(service);
            }
            Some(rollout) if ready_count < rollout.floor => {
                return Some((
                    Invariant::RolloutAvailability,
                    format!(
                        "{service} has {ready_count} ready instances during its rollout, below {count} - max_unavailable {} = {}",
                        update.max_unavailable, rollout.floor
                    ),
                ));
            }
            _ => {}
        }
        None
    }
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
