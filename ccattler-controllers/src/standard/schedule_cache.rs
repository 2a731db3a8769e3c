//! [`ScheduleCache`]: the scheduler controller's [`Cluster`] and [`LiveIndex`], patched together
//! from one snapshot to the next.

use std::collections::BTreeSet;

use parking_lot::Mutex;

use ccattler_core::schema::{self, RecordKey, Resources};
use ccattler_core::{FactView, Key};

use super::cluster::Cluster;
use super::spread::SpreadState;
use super::volumes::Volumes;
use crate::scheduler::LiveIndex;

/// What the scheduler controller keeps between passes, all derived from the last view.
#[derive(Debug)]
pub(crate) struct ScheduleState {
    view: FactView,
    /// The cluster of the view.
    pub cluster: Cluster,
    /// The nodes, reservations and placed instances of the view, for the scheduler.
    pub index: LiveIndex,
    /// Instances the last pass wrote for (a placement that did not mirror their desired
    /// record, a placed record without a placement), to check again next pass.
    pub pending: BTreeSet<String>,
    /// Which services' rebalancing suggestions to judge next.
    pub spread: SpreadState,
    /// The volumes of the view: declarations and attachments.
    pub volumes: Volumes,
}

/// Keeps a [`ScheduleState`] in step with the snapshots the scheduler controller is handed.
///
/// # Guarantees
///
/// The state handed to a pass is the one a first read of the same view builds; only the cost
/// differs. It is taken out while a pass runs and put back only when the pass succeeds, so a
/// panic or an error makes the next pass start afresh from its view.
#[derive(Debug, Default)]
pub(crate) struct ScheduleCache {
    last: Mutex<Option<ScheduleState>>,
}

impl ScheduleCache {
    /// Runs `pass` on the state of `view` and the instances to check: those whose placement
    /// may no longer mirror their desired record, or whose placed record may have lost its
    /// placement (after a fresh read, every instance and every id a placement or placed record
    /// names; otherwise those whose records changed since the previous pass, and those that
    /// did not mirror it then).
    pub(super) fn run<R, E>(
        &self,
        view: &FactView,
        pass: impl FnOnce(&mut ScheduleState, BTreeSet<String>) -> Result<R, E>,
    ) -> Result<R, E> {
        let previous = self.last.lock().take();
        let (mut state, mut check) = match previous {
            Some(mut state) => {
                let check = patch(&mut state, view);
                (state, check)
            }
            None => read(view),
        };
        check.extend(std::mem::take(&mut state.pending));
        let out = pass(&mut state, check)?;
        *self.last.lock() = Some(state);
        Ok(out)
    }
}

/// The state of `view` from scratch, and every instance to check.
fn read(view: &FactView) -> (ScheduleState, BTreeSet<String>) {
    let mut cluster = Cluster::read(view);
    cluster.take_touched();
    let mut index = LiveIndex::default();
    for (name, status) in &cluster.nodes {
        index.set_node(
            name,
            Some(status),
            cluster.alive.contains(name),
            reserved(&cluster, name),
        );
    }
    for instance in cluster.instances.values() {
        if let Some(node) = &instance.node {
            index.set_instance(&instance.id, Some((&instance.desired.service, node)));
        }
    }
    for (id, node) in cluster.placed() {
        index.hold_ports(id, Some((node, &held(&cluster, id))));
    }
    let mut check: BTreeSet<String> = cluster.instances.keys().cloned().collect();
    check.extend(cluster.placed().map(|(id, _)| id.to_owned()));
    check.extend(
        view.scan(schema::PLACED)
            .filter_map(|fact| RecordKey::parse(&fact.key)?.instance().map(str::to_owned)),
    );
    let state = ScheduleState {
        view: view.clone(),
        cluster,
        index,
        pending: BTreeSet::new(),
        spread: SpreadState::default(),
        volumes: Volumes::read(view),
    };
    (state, check)
}

/// Patches `state` to `view`; returns the instances whose records changed.
fn patch(state: &mut ScheduleState, view: &FactView) -> BTreeSet<String> {
    let mut ids = BTreeSet::new();
    let mut nodes = BTreeSet::new();
    let mut services = BTreeSet::new();
    let mut spread = BTreeSet::new();
    let mut node_changed = false;
    for (key, _, new) in view.changes_since(&state.view) {
        state.cluster.apply(key, new);
        state.volumes.apply(key, new);
        classify(key, &mut ids, &mut nodes, &mut services);
        match RecordKey::parse(key) {
            Some(RecordKey::Rebalance(service)) => {
                spread.insert(service.to_owned());
            }
            Some(RecordKey::NodeLease(_) | RecordKey::Node(_)) => node_changed = true,
            _ => {}
        }
    }
    state.cluster.take_touched();
    let cluster = &state.cluster;
    let index = &mut state.index;
    for id in &ids {
        let now = cluster.instances.get(id).and_then(|instance| {
            let node = instance.node.as_deref()?;
            Some((instance.desired.service.as_str(), node))
        });
        if let Some((service, node)) = now {
            nodes.insert(node.to_owned());
            spread.insert(service.to_owned());
        }
        if let Some((service, node)) = index.set_instance(id, now) {
            nodes.insert(node);
            spread.insert(service); // it left a node: its service may be settled now
        }
        // Held while placed, whether or not its record is still there.
        let ports = held(cluster, id);
        index.hold_ports(
            id,
            cluster.placement(id).map(|(node, ..)| (node, &ports[..])),
        );
        if let Some(instance) = cluster.instances.get(id) {
            spread.insert(instance.desired.service.clone());
        }
    }
    spread.extend(services.iter().cloned());
    // A service's resources changed: so did the reservation of every node holding it.
    for service in &services {
        nodes.extend(index.nodes_of(service));
    }
    for name in &nodes {
        index.set_node(
            name,
            cluster.nodes.get(name),
            cluster.alive.contains(name),
            reserved(cluster, name),
        );
    }
    state.spread.changed((!node_changed).then_some(spread));
    state.view = view.clone();
    ids
}

/// Notes what a changed key bears on: an instance, a node, or a service's spec.
fn classify(
    key: &Key,
    ids: &mut BTreeSet<String>,
    nodes: &mut BTreeSet<String>,
    services: &mut BTreeSet<String>,
) {
    match RecordKey::parse(key) {
        Some(RecordKey::Placement { node, instance }) => {
            nodes.insert(node.to_owned());
            ids.insert(instance.to_owned());
        }
        Some(RecordKey::Instance(id) | RecordKey::Placed(id)) => {
            ids.insert(id.to_owned());
        }
        Some(RecordKey::NodeLease(node) | RecordKey::Node(node)) => {
            nodes.insert(node.to_owned());
        }
        Some(RecordKey::Service(service)) => {
            services.insert(service.to_owned());
        }
        _ => {}
    }
}

/// The host ports instance `id`'s placement holds.
fn held(cluster: &Cluster, id: &str) -> Vec<u16> {
    cluster.host_ports(id).iter().map(|b| b.host).collect()
}

/// What the cluster reserves on node `name`.
fn reserved(cluster: &Cluster, name: &str) -> Resources {
    cluster
        .usage
        .get(name)
        .map(|u| Resources {
            cpu: u.cpu,
            memory: u.memory,
        })
        .unwrap_or_default()
}
