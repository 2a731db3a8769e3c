//! Test clusters with owned data, and owned results that are easy to assert on.

use std::collections::BTreeMap;

use ccattler_core::schema::{Memory, NodeStatus, Placement, Resources};

use super::{
    Existing, Move, Node, Ports, Rebalance, Request, Schedule, ScheduleInput, VolumeNeed, schedule,
};

/// An instance, existing (with a node) or requested (without).
#[derive(Clone, Debug, Default)]
pub(crate) struct Inst {
    pub instance: String,
    pub service: String,
    pub node: String,
    pub resources: Resources,
    pub placement: Placement,
    /// The host ports it needs by number.
    pub fixed: Vec<u16>,
    /// How many ports of its node's range it needs.
    pub any: u32,
    /// The host ports an existing instance holds.
    pub held: Vec<u16>,
    /// The volumes it mounts.
    pub volumes: Vec<VolumeNeed<'static>>,
}

impl Inst {
    /// The host ports it needs.
    pub(crate) fn ports(&self) -> Ports<'_> {
        Ports {
            fixed: &self.fixed,
            any: self.any,
        }
    }
}

/// A cluster to schedule on.
#[derive(Clone, Debug, Default)]
pub(crate) struct Fixture {
    pub nodes: Vec<(NodeStatus, bool)>,
    pub existing: Vec<Inst>,
    pub requests: Vec<Inst>,
    pub rebalance: Rebalance,
    /// What attached volumes reserve of each node's storage.
    pub storage: Vec<(&'static str, Memory)>,
}

/// What a schedule decided, owned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Result {
    pub placements: BTreeMap<String, String>,
    pub unsatisfied: BTreeMap<String, String>,
    pub moves: Vec<(String, String, String)>,
}

impl Result {
    /// Instances placed on `node` by this call.
    pub(super) fn on(&self, node: &str) -> usize {
        self.placements.values().filter(|n| *n == node).count()
    }
}

pub(crate) fn res(cpu: &str, memory: &str) -> Resources {
    Resources {
        cpu: cpu.parse().expect("cpu"),
        memory: memory.parse().expect("memory"),
    }
}

impl Fixture {
    /// Adds an alive `amd64` node without labels, taints or zone.
    pub(super) fn node(mut self, name: &str, cpu: &str, memory: &str) -> Self {
        let status = NodeStatus {
            name: name.into(),
            cpu: cpu.parse().expect("cpu"),
            memory: memory.parse().expect("memory"),
            architecture: "amd64".into(),
            ..NodeStatus::default()
        };
        self.nodes.push((status, true));
        self
    }

    /// Edits the last node added.
    pub(super) fn with(mut self, edit: impl FnOnce(&mut NodeStatus)) -> Self {
        if let Some((status, _)) = self.nodes.last_mut() {
            edit(status);
        }
        self
    }

    /// Marks node `name` alive or dead.
    pub(super) fn alive(mut self, name: &str, alive: bool) -> Self {
        for (status, a) in &mut self.nodes {
            if status.name == name {
                *a = alive;
            }
        }
        self
    }

    /// Adds `n` existing instances `{service}-e{i}` on `node`.
    pub(super) fn existing(mut self, service: &str, node: &str, n: usize, need: Resources) -> Self {
        let start = self.existing.len();
        for i in start..start + n {
            self.existing.push(Inst {
                instance: format!("{service}-e{i}"),
                service: service.into(),
                node: node.into(),
                resources: need,
                placement: Placement::default(),
                ..Inst::default()
            });
        }
        self
    }

    /// Adds `n` requests `{service}-{i}` (numbered after the requests already there).
    pub(super) fn request(
        mut self,
        service: &str,
        n: usize,
        need: Resources,
        p: &Placement,
    ) -> Self {
        let start = self.requests.len();
        for i in start..start + n {
            self.requests.push(Inst {
                instance: format!("{service}-{i:03}"),
                service: service.into(),
                node: String::new(),
                resources: need,
                placement: p.clone(),
                ..Inst::default()
            });
        }
        self
    }

    /// Gives the last `n` requests (or existing instances, with `existing`) these host ports:
    /// `fixed` by number, `any` of the node's range; existing ones hold `held`.
    pub(super) fn ports(mut self, n: usize, fixed: &[u16], any: u32, held: &[u16]) -> Self {
        let list = if held.is_empty() {
            &mut self.requests
        } else {
            &mut self.existing
        };
        let from = list.len().saturating_sub(n);
        for inst in &mut list[from..] {
            inst.fixed = fixed.to_vec();
            inst.any = any;
            inst.held = held.to_vec();
        }
        self
    }

    /// Makes the last request mount volume `name` of `size`, attached to `node` if given.
    pub(super) fn volume(
        mut self,
        name: &'static str,
        size: &str,
        node: Option<&'static str>,
    ) -> Self {
        if let Some(last) = self.requests.last_mut() {
            last.volumes.push(VolumeNeed {
                name,
                size: size.parse().expect("size"),
                node,
            });
        }
        self
    }

    /// Reserves `size` of node `node`'s storage for the volumes attached there.
    pub(super) fn attached(mut self, node: &'static str, size: &str) -> Self {
        self.storage.push((node, size.parse().expect("size")));
        self
    }

    /// The requests as the scheduler takes them.
    pub(super) fn borrowed_requests(&self) -> Vec<Request<'_>> {
        self.requests
            .iter()
            .map(|i| Request {
                instance: &i.instance,
                service: &i.service,
                resources: i.resources,
                placement: &i.placement,
                ports: i.ports(),
                volumes: &i.volumes,
            })
            .collect()
    }

    /// Runs the scheduler and hands the borrowed schedule to `check`.
    pub(super) fn with_schedule<T>(&self, check: impl FnOnce(&Schedule<'_>) -> T) -> T {
        let nodes: Vec<Node<'_>> = self
            .nodes
            .iter()
            .map(|(status, alive)| Node::from_status(status, *alive))
            .collect();
        let existing: Vec<Existing<'_>> = self
            .existing
            .iter()
            .map(|i| Existing {
                instance: &i.instance,
                service: &i.service,
                node: &i.node,
                resources: i.resources,
                placement: &i.placement,
                ports: &i.held,
                needs: i.ports(),
                pinned: !i.volumes.is_empty(),
            })
            .collect();
        let requests = self.borrowed_requests();
        check(&schedule(&ScheduleInput {
            nodes: &nodes,
            existing: &existing,
            requests: &requests,
            rebalance: self.rebalance,
            reserved: None,
            storage: &self.storage,
        }))
    }

    /// Runs the scheduler.
    pub(super) fn run(&self) -> Result {
        self.with_schedule(|s| Result {
            placements: s
                .placements
                .iter()
                .map(|(i, n)| (i.to_string(), n.to_string()))
                .collect(),
            unsatisfied: s
                .unsatisfied
                .iter()
                .map(|(i, why)| (i.to_string(), why.to_string()))
                .collect(),
            moves: s
                .rebalance
                .iter()
                .map(
                    |Move {
                         instance, from, to, ..
                     }| {
                        (instance.to_string(), from.to_string(), to.to_string())
                    },
                )
                .collect(),
        })
    }
}
