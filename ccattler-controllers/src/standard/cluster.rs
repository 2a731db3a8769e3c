//! [`Cluster`]: the typed, cross-referenced reading of a fact view that the standard controllers
//! share, patchable one fact at a time (see [`ClusterCache`](super::ClusterCache)).
//!
//! Facts that do not decode are skipped (and listed in [`Cluster::invalid`]), so one bad value
//! never stops a controller; each controller decides what a missing record means.
//!
//! Which observations are trusted (fresh) is documented on [`Cluster`], "Stale observations".
//!
//! # Cost
//!
//! [`Cluster::read`] decodes every fact: O(facts). [`ClusterCache::read`](super::ClusterCache::read) patches the cluster it
//! built for the previous snapshot with only the facts that changed since (found by
//! [`FactView::changes_since`], which skips the tree nodes both snapshots share), so a reconcile
//! after one change costs O(log n) per changed fact, plus, for a node whose lease came, went or
//! was created again, O(log n) for each of its instances. Every map is persistent, so handing a
//! controller its own copy is O(1).

use std::sync::Arc;

use imbl::{OrdMap, OrdSet};

use ccattler_core::schema::{
    self, Assignment, Cpu, DesiredInstance, DesiredState, EffectiveService, InstanceObservation,
    Memory, NodeStatus, ObservedState, PortBinding, RebalanceMove, RecordKey, RestartPolicy,
    ServiceSpec, VolumeSpec,
};
use ccattler_core::{Fact, FactView, Key, Revision};

/// A desired instance with everything known about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Instance {
    /// Its id (the last segment of `desired/instance/{id}`).
    pub id: String,
    /// The desired record (shared with the cluster's index of records).
    pub desired: Arc<DesiredInstance>,
    /// The key of the desired record.
    pub key: Key,
    /// The mod revision of the desired record.
    pub revision: Revision,
    /// The node it is placed on, if any.
    pub node: Option<String>,
    /// What the agent of that node last reported, if anything, stale or not: see
    /// [`fresh`](Self::fresh). [`report`](Self::report) gives it only when it is fresh.
    /// (Shared with the cluster's index of observations.)
    pub observed: Option<Arc<InstanceObservation>>,
    /// Whether `observed` was written during its node's current registration (the
    /// observation's mod revision is at least the create revision of the node's lease fact).
    /// False when nothing was reported, when unplaced, and while the node holds no lease. A
    /// stale report (false with `observed` set) makes the instance's state unknown: it counts
    /// as pending, neither running nor ready.
    pub fresh: bool,
    /// Whether its node is alive (holds its lease). False when unplaced.
    pub node_alive: bool,
}

/// How an instance counts for its service.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Standing {
    /// Asked to stop.
    Stopping,
    /// Placed on a node that is not alive: it does not count, and is replaced.
    Lost,
    /// Ended in failure (or exited, under restart `always`) and will be replaced.
    Replaceable,
    /// Ended and not to be replaced (restart `never`, or a clean exit under `on_failure`): it
    /// still counts, so it is not recreated endlessly.
    Finished,
    /// Pending, pulling, starting or running, or of unknown state (a stale report): present
    /// work.
    Active,
}

impl Instance {
    /// How this instance counts, under its service's restart policy.
    pub fn standing(&self, restart: RestartPolicy) -> Standing {
        if self.desired.state == DesiredState::Stopped {
            return Standing::Stopping;
        }
        if self.node.is_some() && !self.node_alive {
            return Standing::Lost;
        }
        // A stale report says nothing about now: unknown, so pending.
        let state = self.report().map_or(ObservedState::Pending, |o| o.state);
        match state {
            ObservedState::Failed | ObservedState::Stopped if restart.replaces_failed() => {
                Standing::Replaceable
            }
            ObservedState::Exited if restart == RestartPolicy::Always => Standing::Replaceable,
            ObservedState::Failed | ObservedState::Stopped | ObservedState::Exited => {
                Standing::Finished
            }
            _ => Standing::Active,
        }
    }

    /// What its node's agent reports, if the report is fresh (written during the node's current
    /// registration); `None` when nothing was reported or the report is stale.
    pub fn report(&self) -> Option<&InstanceObservation> {
        self.observed.as_deref().filter(|_| self.fresh)
    }

    /// Whether the agent reports it running, in a fresh report.
    pub fn is_running(&self) -> bool {
        self.report()
            .is_some_and(|o| o.state == ObservedState::Running)
    }

    /// Whether it is running and ready, in a fresh report.
    pub fn is_ready(&self) -> bool {
        self.is_running() && self.report().is_some_and(|o| o.ready)
    }

    /// Whether its node holds its lease but the report held is stale (written before the node's
    /// current registration): the instance's state is unknown until its agent reports again.
    /// False when nothing was reported.
    pub fn is_stale(&self) -> bool {
        self.node_alive && self.observed.is_some() && !self.fresh
    }

    /// Whether it is gone for good: unplaced, or reported ended by its node's agent. An ended
    /// report counts even when stale: this decides only when to forget an instance asked to
    /// stop, and an agent never starts an instance asked to stop.
    ///
    /// A stateful identity (an instance with an ordinal) is gone only once its agent reported
    /// it ended *after seeing the stop* ([`InstanceObservation::stop_asked`]): an ended report
    /// from before may be followed by the agent restarting it under its restart policy, and the
    /// same identity must never run on two nodes. So a stateful instance asked to stop on a
    /// node that does not come back keeps its identity until it does.
    pub fn is_gone(&self) -> bool {
        let identity = self.desired.ordinal.is_some();
        match (&self.node, &self.observed) {
            (None, _) => true,
            (Some(_), Some(o)) => !o.state.is_active() && (o.stop_asked || !identity),
            (Some(_), None) => false,
        }
    }
}

/// CPU and memory reserved on a node by the instances placed there.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Reserved CPU.
    pub cpu: Cpu,
    /// Reserved memory.
    pub memory: Memory,
}

/// One placement of an instance as its fact says.
#[derive(Clone, Debug)]
struct PlacementKey {
    key: Key,
    node: String,
    revision: Revision,
    service: String,
    /// The host ports it was given.
    ports: Vec<PortBinding>,
    /// The volumes attached to it, as they were declared when it was placed.
    volumes: Vec<VolumeSpec>,
}

/// One node's observation of an instance: the node, the observation and its mod revision.
type Reported = (String, Arc<InstanceObservation>, Revision);

/// A desired record with its key, mod revision and create revision.
type DesiredRecord = (Arc<DesiredInstance>, Key, Revision, Revision);

/// Everything held of one instance id before it is joined into an [`Instance`]: one entry per
/// id, so that refreshing an instance after a fact changed looks the large maps up once, not
/// once per kind of record. Each part is shared, so copying an entry (every update of a map
/// shared with the previous snapshot does) costs a few reference counts.
#[derive(Clone, Debug, Default)]
struct Records {
    desired: Option<Arc<DesiredRecord>>,
    /// Every placement key (almost always one), in key order; should there be several (a bug
    /// of the writer), the first counts.
    placements: Arc<Vec<PlacementKey>>,
    /// What nodes report of it (almost always one node).
    observations: Arc<Vec<Reported>>,
    /// What it reserves, and on which node.
    reserved: Option<(String, Usage)>,
}

impl Records {
    fn is_empty(&self) -> bool {
        self.desired.is_none()
            && self.placements.is_empty()
            && self.observations.is_empty()
            && self.reserved.is_none()
    }

    /// The node of the placement that counts, with its key and mod revision.
    fn placement(&self) -> Option<(&String, &Key, Revision)> {
        self.placements
            .first()
            .map(|p| (&p.node, &p.key, p.revision))
    }

    /// What `node` reports, with the report's mod revision.
    fn observation(&self, node: &str) -> Option<(&Arc<InstanceObservation>, Revision)> {
        self.observations
            .iter()
            .find(|(n, ..)| n == node)
            .map(|(_, o, revision)| (o, *revision))
    }
}

/// Every standard record a view holds, decoded and cross-referenced.
///
/// # Stale observations
///
/// An observation of an instance on node N is trusted only if it was written during N's current
/// registration: its fact's mod revision is at least the create revision of N's current
/// `lease/node/N` fact. A node that crashed and registered again (a new lease, so a new lease
/// fact) still has the reports its previous run wrote, and those say nothing about what runs
/// there now. Revisions order the two writes exactly, with no clocks. An untrusted observation
/// makes its instance's state unknown ([`Instance::fresh`] is false): present work, but neither
/// running nor ready, until the node's agent writes a report again ([`Instance::is_stale`]). So
/// an agent that registers anew must write every report anew, changed or not (the node agent
/// puts its lease id in every report, [`InstanceObservation::lease`], so each one changes).
///
/// Stale reports last one agent pass after the node registers. Meanwhile the instance
/// controller defers stopping the surplus of a service with stale instances (see
/// [`InstanceController`](super::InstanceController), "Returning nodes"): the real surplus is
/// known only once the node has reported. The deferral writes nothing, so it cannot make
/// controllers loop; it keeps at most one instance above the count per stale instance, and ends
/// when the node reports, or when it loses its lease again (its instances are then lost, stale
/// or not): a node that registers and never reports holds it only while it keeps its lease.
#[derive(Clone, Debug, Default)]
pub struct Cluster {
    /// Desired services by name.
    pub services: OrdMap<String, ServiceSpec>,
    /// Effective counts and versions by service.
    pub effective: OrdMap<String, EffectiveService>,
    /// Desired instances by id, joined with their placement and observation. Each is shared
    /// (`Arc`): a map node holds 64 entries, and every update of a persistent map copies the
    /// nodes on its path, so small entries keep both memory and updates cheap at 100,000
    /// instances.
    pub instances: OrdMap<String, Arc<Instance>>,
    /// Nodes that report status, by name.
    pub nodes: OrdMap<String, NodeStatus>,
    /// Nodes that hold their lease.
    pub alive: OrdSet<String>,
    /// When each node that holds its lease registered: the create revision of its current
    /// `lease/node/{node}` fact. Observations older than this are stale.
    pub registered: OrdMap<String, Revision>,
    /// What placed instances reserve, per node (resources of their service's current spec).
    pub usage: OrdMap<String, Usage>,
    /// The scheduler's suggested move per service (`status/rebalance/{svc}`).
    pub moves: OrdMap<String, RebalanceMove>,
    /// Keys whose value did not decode.
    pub invalid: OrdSet<Key>,
    /// What is held of each instance id: desired record, placements, observations,
    /// reservation. Keyed by id alone so that a lookup borrows the id.
    records: OrdMap<String, Arc<Records>>,
    by_node: OrdMap<String, OrdSet<String>>,
    by_service: OrdMap<String, OrdSet<String>>,
    /// Each service's instances by id, beside `instances`: a walk of one service's instances
    /// (every pass that judges it) then costs no lookup in the map of all instances.
    of_service: OrdMap<String, OrdMap<String, Arc<Instance>>>,
    unplaced: OrdSet<String>,
    orphans: OrdSet<String>,
    touched: std::collections::BTreeSet<String>,
}

impl Cluster {
    /// Reads every standard record present in `view` (a controller sees only what it watches).
    pub fn read(view: &FactView) -> Self {
        let mut cluster = Cluster::default();
        for fact in view.iter() {
            cluster.apply(&fact.key, Some(fact));
        }
        cluster
    }

    /// The instances of one service, in id order.
    pub fn instances_of<'a>(&'a self, service: &str) -> impl Iterator<Item = &'a Instance> + 'a {
        self.of_service
            .get(service)
            .into_iter()
            .flat_map(|instances| instances.values().map(Arc::as_ref))
    }

    /// The instances placed on `node`, in id order (kept as an index: no scan).
    pub fn instances_on<'a>(&'a self, node: &str) -> impl Iterator<Item = &'a Instance> + 'a {
        self.by_node
            .get(node)
            .into_iter()
            .flat_map(|ids| ids.iter())
            .filter_map(|id| self.instances.get(id).map(|i| &**i))
    }

    /// Every service that has an effective record or instances, sorted.
    pub fn service_names(&self) -> std::collections::BTreeSet<&str> {
        self.effective
            .keys()
            .chain(self.by_service.keys())
            .map(String::as_str)
            .collect()
    }

    /// Whether most nodes look dead at once: fewer than half of the nodes known (those that hold
    /// a lease, and those instances are placed on) hold their lease. With no node known, false.
    ///
    /// Nodes seldom fail together; the control plane losing sight of all of them (its own
    /// outage outlived their leases, or a network split) is the likelier cause, and replacing
    /// every instance then would double the workload the moment the nodes reconnect.
    pub fn most_nodes_dead(&self) -> bool {
        let dead = self
            .by_node
            .iter()
            .filter(|(node, ids)| !ids.is_empty() && !self.alive.contains(*node))
            .count();
        let known = self.alive.len() + dead;
        known > 0 && self.alive.len() * 2 < known
    }

    /// Running instances without a placement, in id order (kept as an index: no scan).
    pub fn unplaced(&self) -> impl Iterator<Item = &Instance> + '_ {
        self.unplaced
            .iter()
            .filter_map(|id| self.instances.get(id).map(Arc::as_ref))
    }

    /// Services whose records changed since [`take_touched`](Self::take_touched) was last
    /// called: their spec, effective record, rebalance record, status or endpoints, instances,
    /// or their instances' placement, observation or node liveness.
    pub fn take_touched(&mut self) -> std::collections::BTreeSet<String> {
        std::mem::take(&mut self.touched)
    }

    /// Keys of placements whose instance record is gone (kept as an index: no scan).
    pub fn orphan_placements(&self) -> impl Iterator<Item = &Key> + '_ {
        self.orphans
            .iter()
            .filter_map(|id| self.placement(id).map(|(_, key, _)| key))
    }

    /// Where instance `id` is placed, whether or not its desired record exists: the node, the
    /// placement's key and its mod revision. Should it have several placements (a bug of the
    /// writer), the first by key counts.
    pub fn placement(&self, id: &str) -> Option<(&str, &Key, Revision)> {
        let (node, key, revision) = self.records.get(id)?.placement()?;
        Some((node, key, revision))
    }

    /// The host ports instance `id`'s placement (the one that counts) was given; none when it
    /// is not placed or exposes no port.
    pub fn host_ports(&self, id: &str) -> &[PortBinding] {
        self.records
            .get(id)
            .and_then(|r| r.placements.first())
            .map_or(&[], |p| p.ports.as_slice())
    }

    /// The volumes instance `id`'s placement (the one that counts) carries; none when it is
    /// not placed or mounts none.
    pub fn placed_volumes(&self, id: &str) -> &[VolumeSpec] {
        self.records
            .get(id)
            .and_then(|r| r.placements.first())
            .map_or(&[], |p| p.volumes.as_slice())
    }

    /// The host ports held on `node` by the instances placed there (those whose record is
    /// gone too, until their placement is deleted).
    pub fn host_ports_on(&self, node: &str) -> std::collections::BTreeSet<u16> {
        self.by_node
            .get(node)
            .into_iter()
            .flatten()
            .flat_map(|id| self.host_ports(id))
            .map(|binding| binding.host)
            .collect()
    }

    /// Every placed instance id (its record may be gone), with its node, in id order.
    pub fn placed(&self) -> impl Iterator<Item = (&str, &str)> + '_ {
        self.records.iter().filter_map(|(id, records)| {
            let (node, ..) = records.placement()?;
            Some((id.as_str(), node.as_str()))
        })
    }

    /// Every service a record names: a spec, an instance, or a placement (whose instance record
    /// may be gone). What a first read touches, without the records a
    /// [`SharedCluster`](super::SharedCluster) leaves to each reader.
    pub(super) fn services_named(&self) -> std::collections::BTreeSet<String> {
        let placed = self
            .records
            .values()
            .flat_map(|r| r.placements.iter().map(|p| &p.service));
        self.services
            .keys()
            .chain(self.by_service.keys())
            .chain(placed)
            .cloned()
            .collect()
    }

    /// Takes the records a [`SharedCluster`](super::SharedCluster) does not hold (effective
    /// counts, rebalance moves, node status and their undecodable keys) from `own`, a cluster
    /// that a reader patched with only those. O(log n): the maps are persistent.
    pub(super) fn overlay(&mut self, own: &Cluster) {
        self.effective = own.effective.clone();
        self.moves = own.moves.clone();
        self.nodes = own.nodes.clone();
        if !own.invalid.is_empty() {
            self.invalid = self.invalid.clone().union(own.invalid.clone());
        }
    }

    /// Applies one fact change: `fact` is the key's new fact, `None` when it was deleted.
    pub fn apply(&mut self, key: &Key, fact: Option<&Fact>) {
        forget(&mut self.invalid, key.as_str());
        let Some(record) = RecordKey::parse(key) else {
            return;
        };
        // A service's own outputs are records of it too: a write to one that its controller
        // did not make (a late commit of an earlier loop) must make it plan the service again,
        // and one left of a deleted service (its delete lost with a restart) must be found.
        if let RecordKey::ServiceStatus(name)
        | RecordKey::Endpoints(name)
        | RecordKey::InitStatus(name) = record
        {
            self.touched.insert(name.to_owned());
            return;
        }
        if let RecordKey::Service(name) = record {
            let spec = self.decode::<ServiceSpec>(key, fact);
            match spec {
                Some(spec) => self.services.insert(name.to_owned(), spec),
                None => self.services.remove(name),
            };
            self.touched.insert(name.to_owned());
            self.refresh_service(name);
        } else if let RecordKey::Effective(name) = record {
            self.touched.insert(name.to_owned());
            match self.decode::<EffectiveService>(key, fact) {
                Some(e) => self.effective.insert(name.to_owned(), e),
                None => self.effective.remove(name),
            };
        } else if let RecordKey::Rebalance(name) = record {
            self.touched.insert(name.to_owned());
            match self.decode::<RebalanceMove>(key, fact) {
                Some(m) => self.moves.insert(name.to_owned(), m),
                None => self.moves.remove(name),
            };
        } else if let RecordKey::NodeLease(node) = record {
            match fact {
                Some(fact) => {
                    self.alive.insert(node.to_owned());
                    self.registered
                        .insert(node.to_owned(), fact.create_revision);
                }
                None => {
                    self.alive.remove(node);
                    self.registered.remove(node);
                }
            }
            // Only the node's registration changed: of each instance placed there, only
            // `node_alive` and `fresh` follow (what `refresh` would recompute), so re-judge
            // those without re-deriving the rest.
            let ids: Vec<String> = self
                .by_node
                .get(node)
                .map(|ids| ids.iter().cloned().collect())
                .unwrap_or_default();
            for id in ids {
                let written = self
                    .records
                    .get(&id)
                    .and_then(|r| r.observation(node))
                    .map(|(_, written)| written);
                let (alive, fresh) = judge(&self.registered, &self.alive, node, written);
                if let Some(instance) = self.instances.get_mut(&id)
                    && (instance.node_alive, instance.fresh) != (alive, fresh)
                {
                    let changed = Arc::make_mut(instance);
                    changed.node_alive = alive;
                    changed.fresh = fresh;
                    self.touched.insert(changed.desired.service.clone());
                    let instance = Arc::clone(instance);
                    file_by_service(&mut self.of_service, None, &instance);
                }
            }
        } else if let RecordKey::Node(node) = record {
            match self.decode::<NodeStatus>(key, fact) {
                Some(status) => self.nodes.insert(node.to_owned(), status),
                None => self.nodes.remove(node),
            };
        } else if let RecordKey::Placement { node, instance: id } = record {
            self.set_placement(node, id, key, fact);
        } else if let RecordKey::ObservedInstance { node, instance: id } = record {
            let observed = self.decode::<InstanceObservation>(key, fact).map(|o| {
                (
                    Arc::new(o),
                    fact.map(|f| f.mod_revision).unwrap_or_default(),
                )
            });
            self.update(id, |records| set_observation(records, node, observed));
        } else if let RecordKey::Instance(id) = record {
            let desired = self.decode::<DesiredInstance>(key, fact).map(|d| {
                let revision = fact.map(|f| f.mod_revision).unwrap_or_default();
                let created = fact.map(|f| f.create_revision).unwrap_or_default();
                Arc::new((Arc::new(d), key.clone(), revision, created))
            });
            let service = desired.as_ref().map(|d| d.0.service.clone());
            let old = self.update(id, |records| {
                std::mem::replace(&mut records.desired, desired)
            });
            let old_service = old.map(|d| d.0.service.clone());
            if old_service != service {
                if let Some(old_service) = &old_service {
                    unindex(&mut self.by_service, old_service, id);
                }
                if let Some(service) = &service {
                    index(&mut self.by_service, service, id);
                }
            }
            if let Some(old_service) = old_service {
                self.touched.insert(old_service);
            }
        }
    }

    fn decode<T: serde::de::DeserializeOwned>(
        &mut self,
        key: &Key,
        fact: Option<&Fact>,
    ) -> Option<T> {
        let fact = fact?;
        match schema::decode::<T>(fact) {
            Ok(record) => Some(record),
            Err(_) => {
                self.invalid.insert(key.clone());
                None
            }
        }
    }

    /// Records or forgets the placement stored at `key` (on `node`, of instance `id`).
    fn set_placement(&mut self, node: &str, id: &str, key: &Key, fact: Option<&Fact>) {
        let assigned = fact.and_then(|_| self.decode::<Assignment>(key, fact));
        let revision = fact.map(|f| f.mod_revision).unwrap_or_default();
        let service = self.update(id, |records| {
            let keys = Arc::make_mut(&mut records.placements);
            let at = keys.binary_search_by(|p| p.key.cmp(key));
            match (assigned, at) {
                (Some(assignment), at) => {
                    let service = assignment.service;
                    let entry = PlacementKey {
                        key: key.clone(),
                        node: node.to_owned(),
                        revision,
                        service: service.clone(),
                        ports: assignment.ports,
                        volumes: assignment.volumes,
                    };
                    match at {
                        Ok(i) => keys[i] = entry,
                        Err(i) => keys.insert(i, entry),
                    }
                    Some(service)
                }
                (None, Ok(i)) => Some(keys.remove(i).service),
                (None, Err(_)) => None,
            }
        });
        // A placement left of a deleted record holds its service back (a stateful identity
        // waits for it), so its going touches the service too.
        if let Some(service) = service {
            self.touched.insert(service);
        }
    }

    fn refresh_service(&mut self, service: &str) {
        let ids: Vec<String> = self
            .by_service
            .get(service)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default();
        for id in ids {
            self.update(&id, |_| ());
        }
    }

    /// Edits what is held of instance `id`, then joins it again: its [`Instance`], its
    /// reservation and the indexes of placed, unplaced and orphaned instances.
    ///
    /// Called for every fact that changes, so it looks each large map up once: at 100,000
    /// instances, these lookups are most of what a controller's cache costs.
    fn update<R>(&mut self, id: &str, edit: impl FnOnce(&mut Records) -> R) -> R {
        if !self.records.contains_key(id) {
            self.records.insert(id.to_owned(), Arc::default());
        }
        let Some(records) = self.records.get_mut(id) else {
            unreachable!("inserted above");
        };
        let records = Arc::make_mut(records);
        let was_on = records.placement().map(|(node, ..)| node.clone());
        let out = edit(records);
        let placement = records
            .placement()
            .map(|(node, key, revision)| (node.clone(), key.clone(), revision));
        let desired = records.desired.clone();
        let reservation = match (&placement, &desired) {
            (Some((node, ..)), Some(d)) => {
                let resources = self
                    .services
                    .get(&d.0.service)
                    .map(|s| s.resources)
                    .unwrap_or_default();
                Some((
                    node.clone(),
                    Usage {
                        cpu: resources.cpu,
                        memory: resources.memory,
                    },
                ))
            }
            _ => None,
        }
        .filter(|(_, held)| *held != Usage::default());
        let reserved = if records.reserved == reservation {
            None
        } else {
            Some(std::mem::replace(
                &mut records.reserved,
                reservation.clone(),
            ))
        };
        let placed = placement.as_ref().map(|(node, ..)| node.clone());
        let report = placed
            .as_deref()
            .and_then(|node| records.observation(node))
            .map(|(o, written)| (Arc::clone(o), written));
        if records.is_empty() {
            self.records.remove(id);
        }
        if let Some(before) = reserved {
            self.reserve(before, reservation);
        }
        if was_on != placed {
            if let Some(node) = &was_on {
                unindex(&mut self.by_node, node, id);
            }
            if let Some(node) = &placed {
                index(&mut self.by_node, node, id);
            }
        }
        self.join(id, desired, placed, report);
        out
    }

    /// Makes the [`Instance`] of `id` from its desired record, its node and that node's
    /// report, and files it as unplaced or orphaned as it is.
    fn join(
        &mut self,
        id: &str,
        desired: Option<Arc<DesiredRecord>>,
        placed: Option<String>,
        report: Option<(Arc<InstanceObservation>, Revision)>,
    ) {
        let Some(desired) = desired else {
            if let Some(gone) = self.instances.remove(id) {
                unfile_by_service(&mut self.of_service, &gone);
            }
            forget(&mut self.unplaced, id);
            if placed.is_some() {
                keep(&mut self.orphans, id);
            } else {
                forget(&mut self.orphans, id);
            }
            return;
        };
        let (record, key, revision, created) = desired.as_ref();
        if !self.touched.contains(&record.service) {
            self.touched.insert(record.service.clone());
        }
        forget(&mut self.orphans, id);
        if placed.is_none() && record.state == DesiredState::Running {
            keep(&mut self.unplaced, id);
        } else {
            forget(&mut self.unplaced, id);
        }
        // A report older than the record belongs to an earlier instance of the same id (a
        // stateful identity deleted and created again): it says nothing of this one.
        let written = report.as_ref().map(|(_, written)| *written);
        let observed = report
            .filter(|(_, written)| written >= created)
            .map(|(o, _)| o);
        let (node_alive, fresh) = placed.as_deref().map_or((false, false), |node| {
            judge(&self.registered, &self.alive, node, written)
        });
        let instance = Arc::new(Instance {
            id: id.to_owned(),
            desired: Arc::clone(record),
            key: key.clone(),
            revision: *revision,
            node: placed,
            observed,
            fresh,
            node_alive,
        });
        let before = self.instances.insert(id.to_owned(), Arc::clone(&instance));
        file_by_service(&mut self.of_service, before.as_deref(), &instance);
    }

    /// Moves a reservation from `before` to `now` in the per-node usage.
    fn reserve(&mut self, before: Option<(String, Usage)>, now: Option<(String, Usage)>) {
        if let Some((node, held)) = before {
            let usage = self.usage.entry(node.clone()).or_default();
            usage.cpu = usage.cpu.saturating_sub(held.cpu);
            usage.memory = usage.memory.saturating_sub(held.memory);
            if *usage == Usage::default() {
                self.usage.remove(&node);
            }
        }
        if let Some((node, held)) = now {
            let usage = self.usage.entry(node).or_default();
            usage.cpu = usage.cpu.checked_add(held.cpu).unwrap_or(usage.cpu);
            usage.memory = usage
                .memory
                .checked_add(held.memory)
                .unwrap_or(usage.memory);
        }
    }
}

/// Records (or, with `None`, forgets) what `node` reports.
fn set_observation(
    records: &mut Records,
    node: &str,
    observed: Option<(Arc<InstanceObservation>, Revision)>,
) {
    let at = records.observations.iter().position(|(n, ..)| n == node);
    if observed.is_none() && at.is_none() {
        return;
    }
    let reports = Arc::make_mut(&mut records.observations);
    match (observed, at) {
        (Some((o, revision)), Some(i)) => reports[i] = (node.to_owned(), o, revision),
        (Some((o, revision)), None) => reports.push((node.to_owned(), o, revision)),
        (None, Some(i)) => {
            reports.swap_remove(i);
        }
        (None, None) => {}
    }
}

/// Whether `node` holds its lease, and whether a report it wrote at revision `written` (`None`:
/// no report) is fresh: written at or after the node's current lease fact was created.
fn judge(
    registered: &OrdMap<String, Revision>,
    alive: &OrdSet<String>,
    node: &str,
    written: Option<Revision>,
) -> (bool, bool) {
    let fresh = match (registered.get(node), written) {
        (Some(since), Some(written)) => written >= *since,
        _ => false,
    };
    (alive.contains(node), fresh)
}

/// Files `instance` under its service, taking out what `before` (the instance it replaces)
/// filed under another service.
fn file_by_service(
    of_service: &mut OrdMap<String, OrdMap<String, Arc<Instance>>>,
    before: Option<&Instance>,
    instance: &Arc<Instance>,
) {
    if let Some(before) = before.filter(|b| b.desired.service != instance.desired.service) {
        unfile_by_service(of_service, before);
    }
    of_service
        .entry(instance.desired.service.clone())
        .or_default()
        .insert(instance.id.clone(), Arc::clone(instance));
}

/// Takes `instance` out of its service's map, and the service with it once it holds none.
fn unfile_by_service(
    of_service: &mut OrdMap<String, OrdMap<String, Arc<Instance>>>,
    instance: &Instance,
) {
    let service = &instance.desired.service;
    if let Some(instances) = of_service.get_mut(service) {
        instances.remove(&instance.id);
        if instances.is_empty() {
            of_service.remove(service);
        }
    }
}

/// Takes `id` out of `set` if it holds it, looking first: a persistent map copies the path to
/// where a key would be even when it is absent (when a snapshot shares that path), and most
/// calls find nothing to take. At 100,000 instances those copies were a sixth of what
/// filing an instance cost.
fn forget<K: Ord + Clone + std::borrow::Borrow<str>>(set: &mut OrdSet<K>, id: &str) {
    if set.contains(id) {
        set.remove(id);
    }
}

/// Puts `id` in `set` unless it holds it already (which would copy a path, as in [`forget`]).
fn keep(set: &mut OrdSet<String>, id: &str) {
    if !set.contains(id) {
        set.insert(id.to_owned());
    }
}

fn index(map: &mut OrdMap<String, OrdSet<String>>, group: &str, id: &str) {
    map.entry(group.to_owned())
        .or_default()
        .insert(id.to_owned());
}

fn unindex(map: &mut OrdMap<String, OrdSet<String>>, group: &str, id: &str) {
    if let Some(set) = map.get_mut(group) {
        set.remove(id);
        if set.is_empty() {
            map.remove(group);
        }
    }
}

#[cfg(test)]
#[path = "cluster_tests.rs"]
mod tests;
