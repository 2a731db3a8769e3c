//! [`SchedulerController`]: assigns instances to nodes as the pure
//! [`schedule`](crate::scheduler::schedule) function would, reading the ranking off a
//! `LiveIndex` (the scheduler's node tables) kept between passes.

use std::collections::{BTreeMap, BTreeSet};

use ccattler_core::schema::{
    self, Assignment, DesiredState, Placement, RecordKey, ServiceSpec, Unschedulable, ZonePolicy,
};
use ccattler_core::{Change, Controller, FactView, ReconcileContext, ReconcileError};

use super::cluster::Cluster;
use super::events::placement_events;
use super::host_ports;
use super::room;
use super::schedule_cache::{ScheduleCache, ScheduleState};
use super::volumes::Volumes;
use crate::scheduler::{LiveIndex, Placed, Ports, Request, VolumeNeed};

/// Writes `placement/{node}/{id}` for every running instance without one,
/// `status/unschedulable/{id}` with the reason for those that fit nowhere, and
/// `status/rebalance/{svc}` for services whose spread should even out.
///
/// # Node failure
///
/// A node whose lease expired takes nothing new. Its placements are kept: the instances may well
/// still run there (a partition is not a crash), and the instance controller replaces them
/// elsewhere meanwhile. When the node comes back and has reported anew, the instance controller
/// stops the surplus, starting on the most crowded node, which evens the spread out again.
/// Moving instances is thus always "start the new, then stop the old", never a placement
/// rewritten under a running instance.
///
/// # Rebalancing
///
/// A service left skewed (placed while few nodes were up) gets a `status/rebalance/{svc}`
/// record naming one instance to move, which the instance controller performs new-before-old.
/// The rule, and why moves end where a fresh placement would put the service, are in
/// [`RebalanceMove`](ccattler_core::schema::RebalanceMove) and the `spread` module's docs: a
/// settled service gets a record while its most crowded alive node holds at least two more
/// than the node one more instance would be placed on. See "Cost" for when services are
/// judged.
///
/// # Volumes
///
/// An instance that mounts volumes (`volume NAME /path` in its service) is placed only where
/// they can be: on the node a volume is attached to (`volume/attachment/{vol}`: its data is
/// there), or, for a volume attached nowhere yet, on a node whose storage left (what it reports,
/// less the sizes of the volumes attached there) takes the volume's declared size. A volume is
/// attached to one instance at a time: an instance whose volume another instance still holds
/// waits, with a reason naming that instance. The attachment is written in the pass that
/// places the instance, ahead of its placement; a persistent volume stays attached to its node
/// once its instance is gone, any other volume's attachment goes with its instance. So the
/// replacement of an instance with a persistent volume runs where the data is, and while that
/// node is down or full, its reason says so (`0/3 nodes can run it: 2 are not n1, where volume
/// data is attached, 1 is not alive`); no data is moved or deleted for it. When that node is
/// alive but full, instances that could run elsewhere are moved off it to make room (a
/// `status/rebalance/{svc}` record with `room_for`; the rule is in the `room` module), and
/// requests pinned to a node are placed ahead of the others in a pass. While the instance
/// that owns a persistent volume is away for a moment (between the stop of a replaced instance
/// and the start of its replacement, say), the room it comes back to on that node is held from
/// instances that could run anywhere, and from the first attachment of another volume whose
/// owner the node could not then run beside it.
///
/// # Static host ports and required labels
///
/// An instance that needs a static host port can only go where that port is free; one whose
/// service requires a node label, a zone or an architecture only where the node has it. When
/// those nodes lack only cpu or memory for it, room is made the same way on the one nearest to
/// taking it (one such instance of a service a pass).
///
/// # Guarantees
///
/// - An instance is never assigned twice: existing placements are kept until the instance
///   record is forgotten, then deleted.
/// - Existing placements count against node capacity, including those of stopping instances.
/// - A placement mirrors its instance's desired state and version, so an agent learns that an
///   instance must stop from its own `placement/{node}/` prefix alone.
/// - Unschedulable reasons are rewritten when they change and removed once the instance is
///   placed or forgotten.
///
/// # Cost
///
/// Placements are those of [`schedule`](crate::scheduler::schedule) with
/// [`Rebalance::Off`](crate::scheduler::Rebalance::Off) (room held for a volume's absent owner
/// counting as load), computed differently: the controller
/// keeps its reading of the cluster and the scheduler's node tables between passes (nodes grouped
/// by attributes, then by load in order of utilisation; per-service instance counts) and patches
/// both with the facts that changed. A pass costs time for those facts and for the instances it
/// places, not for every node: after one node of 10,000 dies, placing its ten instances elsewhere
/// reads a handful of nodes, about as fast as in a cluster of 1,000. The first pass, or the first
/// after a failed one, reads everything.
/// Each pass sums the sizes of the volumes attached to each node (the records are decoded once,
/// as they change). A request that mounts a volume attached to a node may look at every node to
/// find that one.
/// An instance that fits nowhere costs a pass over every node, to count in its
/// [`Unsatisfied`](crate::scheduler::Unsatisfied) reason why each node cannot take it.
///
/// Rebalancing costs, per service judged, a pass over its instances and the ranking of one
/// more instance. A pass judges the services whose instances, spec or record changed; every
/// service (O(instances) in all) after a fresh read, when a node's status or liveness changed,
/// and otherwise at most every 5 s of reconcile time (a pass that judged only some services,
/// or changed anything, asks the runner for another within 5 s, whether or not anything else
/// changes), which bounds how late a reservation freed by one service, or a service its own
/// placements settled, is noticed as room for a move. A full judgement that changes nothing
/// asks for no other pass: a cluster where nothing changes costs none. So an incremental pass may
/// suggest a move up to 5 s later than a fresh read of the same view would; placements are
/// the same either way.
#[derive(Debug, Default)]
pub struct SchedulerController {
    cache: ScheduleCache,
}

impl SchedulerController {
    /// A new controller (with an empty cache of the cluster it reads).
    pub fn new() -> Self {
        Self::default()
    }
}

impl Controller for SchedulerController {
    fn name(&self) -> &str {
        "scheduler"
    }

    fn watches(&self) -> Vec<String> {
        vec![
            schema::DESIRED_INSTANCES.into(),
            schema::DESIRED_SERVICES.into(),
            schema::OBSERVED_NODES.into(),
            schema::NODE_LEASES.into(),
            schema::DESIRED_VOLUMES.into(),
            // Effective counts: which owners of persistent data are expected back.
            schema::EFFECTIVE_SERVICES.into(),
        ]
    }

    fn write_domain(&self) -> Vec<String> {
        vec![
            schema::PLACEMENTS.into(),
            schema::UNSCHEDULABLE.into(),
            schema::PLACED.into(),
            schema::REBALANCE_MOVES.into(),
            schema::VOLUME_ATTACHMENTS.into(),
        ]
    }

    fn reconcile(
        &self,
        facts: &FactView,
        ctx: &mut ReconcileContext<'_>,
    ) -> Result<Vec<Change>, ReconcileError> {
        self.cache.run(facts, |state, check| {
            let ScheduleState {
                cluster,
                index,
                pending,
                spread,
                volumes,
                ..
            } = state;
            let mut changes = mirror(cluster, facts, &check, pending);
            let to_check = (&check, &mut *pending);
            let waiting = plan((cluster, volumes), index, facts, to_check, &mut changes)?;
            let judged = (ctx.now(), waiting.as_slice());
            if let Some(sweep_in) = spread.suggest(cluster, index, facts, judged, &mut changes)? {
                ctx.requeue_after(sweep_in);
            }
            for event in placement_events(facts, &changes) {
                ctx.record(event);
            }
            Ok(changes)
        })
    }
}

/// Placed instances whose desired record changed: their placement mirrors it again. Those that
/// needed it are remembered in `pending`, to be checked again next pass.
fn mirror(
    cluster: &Cluster,
    facts: &FactView,
    check: &BTreeSet<String>,
    pending: &mut BTreeSet<String>,
) -> Vec<Change> {
    let mut changes = Vec::new();
    for id in check {
        let Some(instance) = cluster.instances.get(id) else {
            continue;
        };
        let Some((node, key, _)) = cluster.placement(id) else {
            continue;
        };
        let wanted = schema::encode(&Assignment {
            instance: instance.id.clone(),
            service: instance.desired.service.clone(),
            node: node.to_owned(),
            version: instance.desired.version.clone(),
            state: instance.desired.state,
            ports: cluster.host_ports(id).to_vec(),
            volumes: cluster.placed_volumes(id).to_vec(),
        });
        if facts.get(key.as_str()).map(|f| &f.value) != Some(&wanted) {
            changes.push(Change::put(key.clone(), wanted));
            pending.insert(id.clone());
        }
    }
    changes
}

/// Whether `placement` rules nodes out by what they are (a required label, zone or
/// architecture), so that room elsewhere is no use to its instances.
fn filters_nodes(placement: &Placement) -> bool {
    !placement.require.is_empty()
        || placement.architecture.is_some()
        || matches!(placement.zone, Some(ZonePolicy::Only(_)))
}

/// Places the running instances without a placement, writes why the rest fit nowhere, and
/// deletes stale reasons and orphaned placements, and the placed records of the instances in
/// `check` that have no placement left (each remembered in `pending`, to be checked again next
/// pass should the delete not land). Returns the instances left waiting for room on one node:
/// those a volume pins there, and of each service that needs a static host port, the first
/// left waiting, with the node nearest to taking it: (instance, node).
fn plan(
    (cluster, volumes): (&Cluster, &Volumes),
    index: &mut LiveIndex,
    facts: &FactView,
    (check, pending): (&BTreeSet<String>, &mut BTreeSet<String>),
    changes: &mut Vec<Change>,
) -> Result<Vec<(String, String)>, ReconcileError> {
    // Each service's host ports, once per pass, for its requests to borrow; and the names of
    // the volumes each instance mounts. An instance of a deleted service is left out: the
    // instance controller stops it.
    let mut needs: BTreeMap<&str, (Vec<u16>, u32)> = BTreeMap::new();
    let mut candidates = Vec::new();
    for instance in cluster.unplaced() {
        let service = instance.desired.service.as_str();
        if let Some(spec) = cluster.services.get(service) {
            needs
                .entry(service)
                .or_insert_with(|| crate::scheduler::port_needs(spec));
            candidates.push((instance, spec, Volumes::names(instance, spec)));
        }
    }
    // The volumes each request mounts, or why it waits (held by another instance).
    index.reset_storage(volumes.reserved());
    let mut claimed = BTreeMap::new();
    let mut waiting: Vec<(&str, String)> = Vec::new();
    let mut mounts: Vec<Vec<VolumeNeed<'_>>> = Vec::new();
    let mut unplaced = Vec::new();
    for (instance, spec, names) in &candidates {
        match volumes.needs(cluster, instance, (spec, names), &mut claimed) {
            Ok(need) => {
                mounts.push(need);
                unplaced.push((*instance, *spec));
            }
            Err(why) => waiting.push((&instance.id, why)),
        }
    }
    let mut requests = Vec::with_capacity(unplaced.len());
    for ((instance, spec), volumes) in unplaced.into_iter().zip(&mounts) {
        let ports = needs
            .get(instance.desired.service.as_str())
            .map_or(Ports::NONE, |(fixed, any)| Ports { fixed, any: *any });
        requests.push(Request {
            instance: &instance.id,
            service: &instance.desired.service,
            resources: spec.resources,
            placement: &spec.placement,
            ports,
            volumes,
        });
    }
    // Room kept for the owners of persistent data that are away for a moment.
    let absent = volumes.hold_for_absent(cluster, index, &claimed);
    let Placed {
        placements,
        mut unsatisfied,
    } = if requests.is_empty() {
        Placed::default()
    } else {
        index.place(&requests)
    };
    room::release(index, absent);
    let mut pinned_waiting: Vec<(String, String)> = Vec::new();
    let mut bound = BTreeSet::new();
    for r in requests
        .iter()
        .filter(|r| unsatisfied.contains_key(r.instance))
    {
        if let Some(node) = r.volumes.iter().find_map(|v| v.node) {
            pinned_waiting.push((r.instance.to_owned(), node.to_owned()));
        } else if (!r.ports.fixed.is_empty() || filters_nodes(r.placement))
            && bound.insert(r.service)
        {
            // A static host port binds it to the nodes where that port is free, a required
            // label, zone or architecture to the nodes that have it: when those lack only cpu
            // or memory, room is made on the nearest to fitting, as for an instance its volume
            // pins (the first such instance of a service each pass).
            if let Some(node) = index.nearest_fit(r.placement, r.resources, r.ports) {
                pinned_waiting.push((r.instance.to_owned(), node.to_owned()));
            }
        }
    }
    unsatisfied.extend(waiting);
    // Node by node: the commits go out in transactions of a bounded size, and a node that hears
    // of its placements together fetches, starts and reports them together.
    let mut by_node: Vec<(&str, &String)> = placements.iter().map(|(i, n)| (*i, n)).collect();
    by_node.sort_by_key(|&(_, node)| node);
    let with_spec: Vec<(&str, &str, &ServiceSpec)> = by_node
        .iter()
        .filter_map(|&(instance, node)| {
            let service = &cluster.instances.get(instance)?.desired.service;
            Some((instance, node.as_str(), cluster.services.get(service)?))
        })
        .collect();
    let (mut host_ports, no_port) = host_ports::allocate(cluster, &with_spec);
    unsatisfied.extend(no_port);
    let mut attached = BTreeSet::new();
    for (instance, node) in by_node {
        let desired = &cluster.instances[instance].desired;
        let Some(ports) = host_ports.remove(instance) else {
            continue; // no host port left on its node: placed again next pass
        };
        // Its volumes' attachments go first: no placement lands without them.
        let carried = match cluster.services.get(&desired.service) {
            Some(spec) => volumes.attach(&cluster.instances[instance], node, spec, changes)?,
            None => Vec::new(),
        };
        attached.extend(carried.iter().map(|v| v.name.clone()));
        // Beside the placement, the one key that guards where this instance goes: a view that
        // missed its placement elsewhere (watches of different prefixes lag apart) holds an
        // older revision of it, so this commit conflicts instead of placing it twice.
        changes.push(Change::put(
            schema::keys::placed(instance)?,
            schema::encode(node),
        ));
        changes.push(Change::put(
            schema::keys::placement(node, instance)?,
            schema::encode(&Assignment {
                instance: (*instance).to_owned(),
                service: desired.service.clone(),
                node: node.clone(),
                version: desired.version.clone(),
                state: DesiredState::Running,
                ports,
                volumes: carried,
            }),
        ));
    }
    volumes.release(cluster, &attached, changes);
    for (instance, reason) in &unsatisfied {
        let service = &cluster.instances[*instance].desired.service;
        changes.push(Change::put(
            schema::keys::unschedulable(instance)?,
            schema::encode(&Unschedulable {
                service: service.clone(),
                reason: reason.clone(),
            }),
        ));
    }
    for fact in facts.scan(schema::UNSCHEDULABLE) {
        let id = RecordKey::parse(&fact.key).and_then(|r| r.instance());
        if !id.is_some_and(|id| unsatisfied.contains_key(id)) {
            changes.push(Change::delete(fact.key.clone()));
        }
    }
    for key in cluster.orphan_placements() {
        changes.push(Change::delete(key.clone()));
    }
    // An instance's placed record goes with its placement (guarded like it): none is kept for
    // an instance that has no placement. Only a change to its records can leave one without:
    // those instances are in `check` (every one after a fresh read).
    for id in check {
        if placements.contains_key(id.as_str()) || cluster.placement(id).is_some() {
            continue; // placed: most of them, and no key to build
        }
        let key = schema::keys::placed(id)?;
        if facts.contains(key.as_str()) {
            changes.push(Change::delete(key));
            pending.insert(id.clone());
        }
    }
    Ok(pinned_waiting)
}
