//! [`LiveIndex`]: the scheduler's tables kept from one pass to the next, so that placing `k`
//! instances costs time for those `k`, not for every node of the cluster.
//!
//! [`schedule`](super::schedule) builds its node tables from scratch on every call: linear in the
//! nodes. A controller that schedules after every change (one node died, ten replacements to
//! place) pays that for a handful of requests. The live index instead keeps, up to date as the
//! caller reports changes:
//!
//! - every node's capacity, reservation and liveness ([`LiveIndex::set_node`]), and what the
//!   volumes attached to it reserve of its storage ([`LiveIndex::reset_storage`]);
//! - per service, how many of its instances each node holds ([`LiveIndex::set_instance`]);
//! - the alive nodes grouped by *class*: equal architecture, zone, taints, and labels among the
//!   keys placements name, so the hard filters and `prefer` of a placement are checked once per
//!   class, not once per node;
//! - inside a class, the nodes grouped by *load* (capacity and reservation) in order of
//!   utilisation, and inside a load by name, so the ranking reads the best nodes first.
//!
//! # Guarantees
//!
//! [`LiveIndex::place`] returns exactly the placements and the unsatisfied reasons (as text) that
//! [`schedule`](super::schedule) returns for the same nodes, existing instances and requests
//! (with [`Rebalance::Off`]). The index is unchanged by `place`.
//!
//! # Cost
//!
//! Keeping the index up to date costs `O(log n)` per changed node or instance. Placing one request
//! costs one filter check per class of nodes, then a walk over the loads of the eligible classes
//! in order of utilisation that stops at the first that cannot beat the best found (in a cluster
//! of few node shapes and similar services: a handful), skipping the nodes that already hold the
//! service. When every eligible node holds the service, it also looks at each of those nodes.
//! A placement naming a label key no placement named before classes every node again, once. Nodes
//! that differ in what placements look at (a placement requiring a host name label) form a class
//! each, and the filter check becomes linear in those nodes again. A run of requests that fits
//! nowhere costs one pass over every node to explain why, as in [`schedule`](super::schedule).
//! Storage is no class attribute: a request that mounts volumes checks each node it looks at,
//! and one whose volume is attached to a node may look at every node to find that one.
//!
//! [`Rebalance::Off`]: super::Rebalance::Off

mod place;

pub(crate) use place::Placed;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};

use ccattler_core::schema::{Cpu, Memory, NodeStatus, Placement, PortRange, Resources};

use super::Node;
use super::index::{FastMap, Frac, Usage};
use super::ports::HostPorts;
use super::volume::Storage;

/// What the hard filters and `prefer` of a placement look at, apart from liveness and resources:
/// of the labels, only those whose key some placement names.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Attrs {
    architecture: String,
    zone: Option<String>,
    labels: BTreeMap<String, String>,
    taints: Vec<String>,
}

impl Attrs {
    fn of(status: &NodeStatus, keys: &BTreeSet<String>) -> Self {
        Attrs {
            architecture: status.architecture.clone(),
            zone: status.zone.clone(),
            labels: named(status, keys)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            taints: status.taints.clone(),
        }
    }

    fn matches(&self, status: &NodeStatus, keys: &BTreeSet<String>) -> bool {
        self.architecture == status.architecture
            && self.zone == status.zone
            && named(status, keys).eq(self.labels.iter())
            && self.taints == status.taints
    }

    /// A node of this class as the filters see it (alive: only alive nodes are grouped).
    fn node(&self) -> Node<'_> {
        Node {
            name: "",
            cpu: Cpu::from_millis(0),
            memory: Memory::from_bytes(0),
            labels: &self.labels,
            taints: &self.taints,
            zone: self.zone.as_deref(),
            architecture: &self.architecture,
            alive: true,
            ports: PortRange::default(),
            storage: Memory::from_bytes(0),
        }
    }
}

/// The labels of `status` whose key is in `keys`, in key order.
fn named<'s>(
    status: &'s NodeStatus,
    keys: &'s BTreeSet<String>,
) -> impl Iterator<Item = (&'s String, &'s String)> + 's {
    status.labels.iter().filter(|(k, _)| keys.contains(*k))
}

/// A node's capacity and reservation, ordered by utilisation first (the figures after it only
/// keep unequal loads apart). Opaque outside the index: what [`LiveIndex::hold`] hands back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Load {
    util: Frac,
    cpu_cap: u64,
    mem_cap: u64,
    cpu: u64,
    mem: u64,
}

impl Load {
    fn new(cpu_cap: u64, mem_cap: u64, cpu: u64, mem: u64) -> Self {
        let usage = Usage {
            cpu_cap,
            mem_cap,
            cpu,
            mem,
        };
        Load {
            util: usage.util_after(Resources::default()),
            cpu_cap,
            mem_cap,
            cpu,
            mem,
        }
    }

    /// This load with `need` reserved on top.
    fn plus(&self, need: Resources) -> Self {
        Load::new(
            self.cpu_cap,
            self.mem_cap,
            self.cpu.saturating_add(need.cpu.millis()),
            self.mem.saturating_add(need.memory.bytes()),
        )
    }

    fn usage(&self) -> Usage {
        Usage {
            cpu_cap: self.cpu_cap,
            mem_cap: self.mem_cap,
            cpu: self.cpu,
            mem: self.mem,
        }
    }
}

/// Nodes of equal attributes.
#[derive(Debug)]
struct Class {
    attrs: Attrs,
    zone: u32,
    /// The alive nodes, by load, then name.
    by_load: BTreeMap<Load, BTreeSet<String>>,
}

#[derive(Clone, Copy, Debug)]
struct LiveNode {
    class: usize,
    load: Load,
    alive: bool,
}

/// The scheduler's node and instance tables, patched change by change. See the
/// [module docs](self).
#[derive(Debug, Default)]
pub(crate) struct LiveIndex {
    nodes: FastMap<String, LiveNode>,
    /// What each node reports, to class it again when `keys` grows.
    statuses: FastMap<String, NodeStatus>,
    /// The label keys placements have named so far (`require`, `prefer`): nodes are classed by
    /// these labels only, so a label of one node each (a host name) does not make a class of
    /// one node each. Only grows.
    keys: BTreeSet<String>,
    /// Never shrinks: a class whose nodes all left stays, empty (there are few distinct ones).
    classes: Vec<Class>,
    class_of: FastMap<Attrs, usize>,
    /// Zone ids; `None` is a zone of its own, as in [`schedule`](super::schedule).
    zones: FastMap<Option<String>, u32>,
    /// Placed instances: id to (service, node).
    instances: FastMap<String, (String, String)>,
    /// Each known node's host ports (kept for nodes that left, so a node reporting again finds
    /// what its instances hold).
    ports: FastMap<String, HostPorts>,
    /// The host ports each instance holds, and on which node.
    held: FastMap<String, (String, Vec<u16>)>,
    /// Per service, per node, how many of its instances are placed there (never zero).
    counts: FastMap<String, FastMap<String, u32>>,
    /// What the volumes attached to each node reserve of its storage, in bytes (never zero).
    storage_used: FastMap<String, u64>,
    /// Runs longer than this are placed from heaps (`None`: the default of `place.rs`); tests
    /// set 0 to prove the heaps pick what the search picks.
    long_run: Option<usize>,
}

impl LiveIndex {
    /// Sets what is known of node `name`: its status (`None`: it is not a node, or no longer),
    /// whether it is alive, and the cpu and memory reserved on it.
    pub(crate) fn set_node(
        &mut self,
        name: &str,
        status: Option<&NodeStatus>,
        alive: bool,
        reserved: Resources,
    ) {
        let old = self.nodes.remove(name);
        if let Some(old) = old.filter(|o| o.alive) {
            self.detach(old.class, old.load, name);
        }
        let Some(status) = status else {
            self.statuses.remove(name);
            return;
        };
        let class = match old {
            Some(old) if self.classes[old.class].attrs.matches(status, &self.keys) => old.class,
            _ => self.class_for(Attrs::of(status, &self.keys)),
        };
        self.statuses.insert(name.to_owned(), status.clone());
        self.ports
            .entry(name.to_owned())
            .or_default()
            .set_range(status.ports);
        let load = Load::new(
            status.cpu.millis(),
            status.memory.bytes(),
            reserved.cpu.millis(),
            reserved.memory.bytes(),
        );
        self.nodes
            .insert(name.to_owned(), LiveNode { class, load, alive });
        if alive {
            self.attach(class, load, name);
        }
    }

    /// Sets where instance `id` is placed: `(service, node)`, or `None` when it is not (or no
    /// longer) placed. Returns where it was before.
    pub(crate) fn set_instance(
        &mut self,
        id: &str,
        now: Option<(&str, &str)>,
    ) -> Option<(String, String)> {
        if let Some((service, node)) = &self.instances.get(id)
            && now == Some((service.as_str(), node.as_str()))
        {
            return now.map(|(s, n)| (s.to_owned(), n.to_owned()));
        }
        let before = self.instances.remove(id);
        if let Some((service, node)) = &before {
            self.uncount(service, node);
        }
        if let Some((service, node)) = now {
            *self
                .counts
                .entry(service.to_owned())
                .or_default()
                .entry(node.to_owned())
                .or_default() += 1;
            self.instances
                .insert(id.to_owned(), (service.to_owned(), node.to_owned()));
        }
        before
    }

    /// Sets the host ports instance `id` holds: on `node`, by number (`None`, or no port: it
    /// holds none).
    pub(crate) fn hold_ports(&mut self, id: &str, now: Option<(&str, &[u16])>) {
        let now = now.filter(|(_, ports)| !ports.is_empty());
        if let Some((node, ports)) = &self.held.get(id)
            && now == Some((node.as_str(), ports.as_slice()))
        {
            return;
        }
        if let Some((node, ports)) = self.held.remove(id)
            && let Some(table) = self.ports.get_mut(&node)
        {
            table.release(&ports);
        }
        if let Some((node, ports)) = now {
            self.ports.entry(node.to_owned()).or_default().hold(ports);
            self.held
                .insert(id.to_owned(), (node.to_owned(), ports.to_vec()));
        }
    }

    /// Sets what the volumes attached to each node reserve of its storage (nodes not listed:
    /// none). Costs time for the nodes listed.
    pub(crate) fn reset_storage<'n>(&mut self, used: impl IntoIterator<Item = (&'n str, Memory)>) {
        self.storage_used.clear();
        for (node, used) in used {
            self.set_storage(node, used);
        }
    }

    /// Sets what the volumes attached to node `node` reserve of its storage.
    fn set_storage(&mut self, node: &str, used: Memory) {
        if used.is_zero() {
            self.storage_used.remove(node);
        } else {
            self.storage_used.insert(node.to_owned(), used.bytes());
        }
    }

    /// Node `node`'s storage: what it reports it offers, and what is reserved of it.
    fn storage(&self, node: &str) -> Storage {
        Storage {
            cap: self.statuses.get(node).map_or(0, |s| s.storage.bytes()),
            used: self.storage_used.get(node).copied().unwrap_or(0),
        }
    }

    /// Whether `node` can take a request mounting `volumes` (most mount none: no lookup).
    fn volumes_fit(&self, node: &str, volumes: &[super::VolumeNeed<'_>]) -> bool {
        volumes.is_empty() || self.storage(node).check(node, volumes).is_ok()
    }

    /// Whether `node`'s host ports can take `ports` (a node that never reported takes none).
    fn ports_fit(&self, node: &str, ports: super::Ports<'_>) -> bool {
        // Most requests need no port: no lookup per candidate node for them.
        ports == super::Ports::NONE || self.ports.get(node).is_some_and(|p| p.fits(ports))
    }

    /// What alive node `node` has left of cpu and memory, whatever else it lacks (`None`: not
    /// alive, or unknown).
    pub(crate) fn free(&self, node: &str) -> Option<Resources> {
        let live = self.nodes.get(node).filter(|n| n.alive)?;
        let load = live.load;
        Some(Resources {
            cpu: Cpu::from_millis(load.cpu_cap.saturating_sub(load.cpu)),
            memory: Memory::from_bytes(load.mem_cap.saturating_sub(load.mem)),
        })
    }

    /// Whether alive node `node` passes `placement`'s filters (architecture, zone, labels,
    /// taints), whatever its load. `placement` must have been seen by a [`place`](Self::place)
    /// before (the nodes are classed by the labels placements name).
    pub(crate) fn admits(&self, node: &str, placement: &Placement) -> bool {
        self.nodes.get(node).is_some_and(|n| {
            n.alive && super::index::eligible(&self.classes[n.class].attrs.node(), placement)
        })
    }

    /// Where moving load away would make room for a request that found no node: of the alive
    /// nodes that pass `placement`'s filters, whose host ports can take `ports` and whose
    /// capacity could ever take `need`, the one that lacks least of `need` now (cpu, then
    /// memory, then the first name). `None` when no node qualifies. Linear in the nodes;
    /// `placement` must have been seen by a [`place`](Self::place) before.
    pub(crate) fn nearest_fit(
        &self,
        placement: &Placement,
        need: Resources,
        ports: super::Ports<'_>,
    ) -> Option<&str> {
        self.nodes
            .iter()
            .filter(|(name, n)| {
                n.alive
                    && n.load.usage().could_ever_fit(need)
                    && super::index::eligible(&self.classes[n.class].attrs.node(), placement)
                    && self.ports_fit(name, ports)
            })
            .map(|(name, n)| {
                let lacks_cpu = (n.load.cpu + need.cpu.millis()).saturating_sub(n.load.cpu_cap);
                let lacks_mem = (n.load.mem + need.memory.bytes()).saturating_sub(n.load.mem_cap);
                ((lacks_cpu, lacks_mem, name.as_str()), name.as_str())
            })
            .min()
            .map(|(_, name)| name)
    }

    /// Adds `need` to alive node `node`'s reservation (beyond its capacity, if so: it then
    /// takes nothing that needs room) when it passes `placement`'s filters and its capacity
    /// could ever take `need`. Returns the load before, for [`unhold`](Self::unhold).
    pub(crate) fn hold(
        &mut self,
        node: &str,
        placement: &Placement,
        need: Resources,
    ) -> Option<Load> {
        let before = self.nodes.get(node)?.load;
        if !self.admits(node, placement) || !before.usage().could_ever_fit(need) {
            return None;
        }
        self.reload(node, before.plus(need));
        Some(before)
    }

    /// Puts node `node`'s load back to what [`hold`](Self::hold) returned.
    pub(crate) fn unhold(&mut self, node: &str, before: Load) {
        self.reload(node, before);
    }

    /// The nodes holding at least one instance of `service`, in no particular order.
    pub(crate) fn nodes_of(&self, service: &str) -> Vec<String> {
        self.counts
            .get(service)
            .map(|c| c.keys().cloned().collect())
            .unwrap_or_default()
    }

    fn uncount(&mut self, service: &str, node: &str) {
        if let Some(per_node) = self.counts.get_mut(service) {
            if let Some(n) = per_node.get_mut(node) {
                *n -= 1;
                if *n == 0 {
                    per_node.remove(node);
                }
            }
            if per_node.is_empty() {
                self.counts.remove(service);
            }
        }
    }

    /// Makes sure nodes are classed by every label key `placement` names; classes every node
    /// again (linear in the nodes, once per new key) when one is new.
    fn learn(&mut self, placement: &Placement) {
        let named = placement.require.keys().chain(placement.prefer.keys());
        let mut grew = false;
        for key in named {
            if !self.keys.contains(key) {
                self.keys.insert(key.clone());
                grew = true;
            }
        }
        if !grew {
            return;
        }
        self.classes.clear();
        self.class_of.clear();
        let names: Vec<String> = self.nodes.keys().cloned().collect();
        for name in names {
            let Some(status) = self.statuses.get(&name) else {
                continue;
            };
            let class = self.class_for(Attrs::of(status, &self.keys));
            if let Some(node) = self.nodes.get_mut(&name) {
                node.class = class;
                let (alive, load) = (node.alive, node.load);
                if alive {
                    self.attach(class, load, &name);
                }
            }
        }
    }

    fn class_for(&mut self, attrs: Attrs) -> usize {
        if let Some(&class) = self.class_of.get(&attrs) {
            return class;
        }
        let next = u32::try_from(self.zones.len()).unwrap_or(u32::MAX);
        let zone = *self.zones.entry(attrs.zone.clone()).or_insert(next);
        let class = self.classes.len();
        self.class_of.insert(attrs.clone(), class);
        self.classes.push(Class {
            attrs,
            zone,
            by_load: BTreeMap::new(),
        });
        class
    }

    fn attach(&mut self, class: usize, load: Load, name: &str) {
        self.classes[class]
            .by_load
            .entry(load)
            .or_default()
            .insert(name.to_owned());
    }

    fn detach(&mut self, class: usize, load: Load, name: &str) {
        let by_load = &mut self.classes[class].by_load;
        if let Some(names) = by_load.get_mut(&load) {
            names.remove(name);
            if names.is_empty() {
                by_load.remove(&load);
            }
        }
    }

    /// Moves alive node `name` to another load (its class stays).
    fn reload(&mut self, name: &str, load: Load) {
        let Some(node) = self.nodes.get_mut(name) else {
            return;
        };
        let (class, old) = (node.class, node.load);
        node.load = load;
        if node.alive {
            self.detach(class, old, name);
            self.attach(class, load, name);
        }
    }
}
