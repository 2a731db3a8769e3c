//! What goes into [`schedule`](super::schedule) and what comes out.

use std::collections::BTreeMap;

use ccattler_core::schema::{Cpu, Memory, NodeStatus, Placement, PortRange, Resources};

use super::{Unsatisfied, VolumeNeed};

/// A node as the scheduler sees it: allocatable capacity, the attributes placement filters on,
/// and whether it is alive.
#[derive(Clone, Copy, Debug)]
pub struct Node<'a> {
    /// The node's name (unique in the input; ties in the ranking are broken by it).
    pub name: &'a str,
    /// Allocatable CPU.
    pub cpu: Cpu,
    /// Allocatable memory.
    pub memory: Memory,
    /// Labels (`disk = ssd`), matched by `require` and `prefer`.
    pub labels: &'a BTreeMap<String, String>,
    /// Taints: only services that accept every one of them are placed here.
    pub taints: &'a [String],
    /// The zone, if the node reports one.
    pub zone: Option<&'a str>,
    /// CPU architecture (`amd64`).
    pub architecture: &'a str,
    /// Whether the node is alive (its lease is held). Dead nodes take nothing.
    pub alive: bool,
    /// The host ports it hands out to declared ports that are not fixed.
    pub ports: PortRange,
    /// The storage it offers to volumes (see [`ScheduleInput::storage`] for what is reserved).
    pub storage: Memory,
}

impl<'a> Node<'a> {
    /// The node an agent reported, alive or not.
    pub fn from_status(status: &'a NodeStatus, alive: bool) -> Self {
        Node {
            name: &status.name,
            cpu: status.cpu,
            memory: status.memory,
            labels: &status.labels,
            taints: &status.taints,
            zone: status.zone.as_deref(),
            architecture: &status.architecture,
            alive,
            ports: status.ports,
            storage: status.storage,
        }
    }
}

/// An instance already assigned to a node. It stays where it is (only [`Schedule::rebalance`]
/// suggests moving it) and its resources count against its node's capacity.
#[derive(Clone, Copy, Debug)]
pub struct Existing<'a> {
    /// The instance id.
    pub instance: &'a str,
    /// Its service.
    pub service: &'a str,
    /// The node it is assigned to. An unknown node name is ignored (it uses no known capacity).
    pub node: &'a str,
    /// What it reserves on its node.
    pub resources: Resources,
    /// Its service's placement: a suggested move only targets nodes that satisfy it.
    pub placement: &'a Placement,
    /// The host ports it holds on its node (by number).
    pub ports: &'a [u16],
    /// The host ports it would need on another node (for [`Schedule::rebalance`] moves).
    pub needs: Ports<'a>,
    /// It mounts a volume, whose data is on its node: never moved.
    pub pinned: bool,
}

/// An instance to place.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// The instance id (unique across requests and existing instances).
    pub instance: &'a str,
    /// Its service: spreading counts the service's instances.
    pub service: &'a str,
    /// What it needs on its node.
    pub resources: Resources,
    /// Where it may (filters) and should (ranking) run.
    pub placement: &'a Placement,
    /// The host ports it needs on its node.
    pub ports: Ports<'a>,
    /// The volumes it mounts: it goes to the node they are attached to, if any, and those not
    /// attached yet need their sizes of the node's storage.
    pub volumes: &'a [VolumeNeed<'a>],
}

/// The host ports an instance needs on its node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Ports<'a> {
    /// Ports it needs by number (`expose 80 static`): free on the node, in its range or not.
    pub fixed: &'a [u16],
    /// How many ports of the node's range it needs, any free ones.
    pub any: u32,
}

impl Ports<'_> {
    /// No port at all.
    pub const NONE: Ports<'static> = Ports { fixed: &[], any: 0 };
}

/// Which services [`schedule`](super::schedule) looks at for [`Schedule::rebalance`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Rebalance {
    /// Suggest no moves.
    Off,
    /// Only services that have a request in this call.
    Requested,
    /// Every service with an existing instance (the default).
    #[default]
    All,
}

/// Everything one scheduling pass reads. Borrowed, so building it copies no strings.
#[derive(Clone, Copy, Debug, Default)]
pub struct ScheduleInput<'a> {
    /// Every known node, alive or not, in any order.
    pub nodes: &'a [Node<'a>],
    /// Instances already assigned; the caller leaves out those on nodes it gave up on.
    pub existing: &'a [Existing<'a>],
    /// Instances to place, in any order.
    pub requests: &'a [Request<'a>],
    /// Which services get rebalancing suggestions.
    pub rebalance: Rebalance,
    /// What is already reserved on each node, precomputed by the caller. When `None` (the
    /// default), [`existing`](Self::existing) reserves capacity; when given, it is the nodes'
    /// whole reservation (nodes not listed have none) and `existing` only counts instances for spreading and rebalancing, so
    /// a caller that keeps the totals up to date can pass just the existing instances of the
    /// services it places, and a call costs time in proportion to nodes and those services, not
    /// to every instance of the cluster.
    pub reserved: Option<&'a [(&'a str, Resources)]>,
    /// What the volumes attached to each node reserve of its storage (nodes not listed: none).
    pub storage: &'a [(&'a str, Memory)],
}

/// A suggestion to move an existing instance: start a replacement on `to`, then stop the one on
/// `from`. The scheduler does not move anything itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Move<'a> {
    /// The existing instance to replace.
    pub instance: &'a str,
    /// Its service.
    pub service: &'a str,
    /// The node it is on.
    pub from: &'a str,
    /// The node its replacement should go to.
    pub to: &'a str,
}

/// The result of one scheduling pass. Every request appears exactly once, in `placements` or in
/// `unsatisfied`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Schedule<'a> {
    /// Instance id to the node it was placed on.
    pub placements: BTreeMap<&'a str, &'a str>,
    /// Instance id to why no node could take it.
    pub unsatisfied: BTreeMap<&'a str, Unsatisfied<'a>>,
    /// Moves that would even out skewed services, in the order they were planned (by service
    /// name, then one move after another). Each respects the capacity left after `placements`
    /// and the moves before it.
    pub rebalance: Vec<Move<'a>>,
}

impl Schedule<'_> {
    /// How many instances this pass placed on `node`.
    pub fn placed_on(&self, node: &str) -> usize {
        self.placements.values().filter(|n| **n == node).count()
    }
}
