//! [`feasibility`]: which services a cluster cannot run, and why, judged by the pure scheduler.

use std::collections::BTreeMap;
use std::fmt;

use ccattler_controllers::apply::DesiredFacts;
use ccattler_controllers::lang::{self, SourceFile};
use ccattler_controllers::scheduler::{self, Node, Rebalance, Request, ScheduleInput, VolumeNeed};
use ccattler_controllers::standard::IntentResolver;
use ccattler_core::schema::{Cpu, Memory, NodeStatus, RecordKey, ServiceSpec, VolumeSpec};

use super::{Workload, render};
use crate::cluster::NodeSpec;

/// A service the cluster cannot run in full.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unsatisfiable {
    /// The service.
    pub service: String,
    /// How many of its instances find no node.
    pub unplaced: usize,
    /// Of how many.
    pub of: usize,
    /// The scheduler's reason for the first of them.
    pub reason: String,
}

impl fmt::Display for Unsatisfiable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "service {}: {} of its {} instances cannot be placed: {}",
            self.service, self.unplaced, self.of, self.reason
        )
    }
}

/// The services of `desired` that `nodes` cannot run in full, even on a clean start with every
/// node alive: the pure scheduler places every instance of every service (its count as the
/// intent resolver gives it) on the nodes, and names the service and its reason for each
/// instance left over. Empty when the document can converge on that cluster.
///
/// A document this finds anything in can never converge there; one it finds nothing in may
/// still fail to under faults (a node down leaves less room): that is the simulation's to say.
pub fn feasibility(desired: &DesiredFacts, nodes: &[NodeSpec]) -> Vec<Unsatisfiable> {
    declared_unplaced(desired, nodes, false)
}

/// As [`feasibility`], with each service that scales on a metric counted at its `max`: where
/// a load surge (the simulation's `load-surge` fault) takes it. A document this finds anything
/// in cannot converge on that cluster once a surge has scaled it out.
pub fn feasibility_at_max(desired: &DesiredFacts, nodes: &[NodeSpec]) -> Vec<Unsatisfiable> {
    declared_unplaced(desired, nodes, true)
}

fn declared_unplaced(
    desired: &DesiredFacts,
    nodes: &[NodeSpec],
    at_max: bool,
) -> Vec<Unsatisfiable> {
    let services: Vec<ServiceSpec> = desired
        .iter()
        .filter(|(key, _)| matches!(RecordKey::parse(key), Some(RecordKey::Service(_))))
        .filter_map(|(_, value)| serde_json::from_slice(value).ok())
        .collect();
    let volumes: Vec<VolumeSpec> = desired
        .iter()
        .filter(|(key, _)| matches!(RecordKey::parse(key), Some(RecordKey::Volume(_))))
        .filter_map(|(_, value)| serde_json::from_slice(value).ok())
        .collect();
    unplaced((&services, &volumes), nodes, 1, (false, at_max))
}

/// The share of its cluster's capacity a generated workload fits in: every document is placed
/// on its nodes at `1 / HEADROOM` of their capacity, so that it still fits with a node down.
/// A shrunk workload is held to the same, so a shrunk failure is never one of room.
pub(super) const HEADROOM: u64 = 2;

/// What a workload's documents leave unplaced on its nodes at `1 / divisor` of their capacity,
/// each service counted with its rollout's extra instances (`max_extra` above its count), and
/// one that scales on a metric at its `max` (where a load surge may take it).
/// Documents the language refuses are not judged here (building the simulation reports them).
pub(super) fn of_workload(workload: &Workload, divisor: u64) -> Vec<Unsatisfiable> {
    let mut found = Vec::new();
    for (_, services) in workload.states() {
        let text = render::document(&services, &workload.network);
        let Ok(compiled) = lang::check(&SourceFile::new("workload.cca", text)) else {
            continue;
        };
        let declared = (&compiled.services[..], &compiled.volumes[..]);
        for problem in unplaced(declared, &workload.nodes, divisor, (true, true)) {
            if found
                .iter()
                .all(|f: &Unsatisfiable| f.service != problem.service)
            {
                found.push(problem);
            }
        }
    }
    found
}

/// Each instance's volumes count against the storage of the node it goes to, as a first
/// attachment would. `(with_extra, at_max)`: count each service's rollout extra
/// (`max_extra`), and a service that scales on a metric at its `max`.
fn unplaced(
    (services, volumes): (&[ServiceSpec], &[VolumeSpec]),
    nodes: &[NodeSpec],
    divisor: u64,
    (with_extra, at_max): (bool, bool),
) -> Vec<Unsatisfiable> {
    let divisor = divisor.max(1);
    let statuses: Vec<NodeStatus> = nodes
        .iter()
        .map(|node| {
            let mut status = node.status.clone();
            status.cpu = Cpu::from_millis(status.cpu.millis() / divisor);
            status.memory = Memory::from_bytes(status.memory.bytes() / divisor);
            status.storage = Memory::from_bytes(status.storage.bytes() / divisor);
            status
        })
        .collect();
    let nodes: Vec<Node<'_>> = statuses
        .iter()
        .map(|status| Node::from_status(status, true))
        .collect();
    let mut ids = Vec::new();
    for spec in services {
        let mut count = IntentResolver::resolve(spec, None, None).instances;
        if at_max && let Some(scale) = spec.scale.as_ref().filter(|s| !s.targets.is_empty()) {
            // Under a load surge the autoscaler may take it to its most.
            count = count.max(scale.max);
        }
        let extra = if with_extra { spec.update.max_extra } else { 0 };
        for i in 0..count + extra {
            ids.push((spec, format!("{}#{i}", spec.name)));
        }
    }
    let needs: BTreeMap<&str, (Vec<u16>, u32)> = services
        .iter()
        .map(|spec| (spec.name.as_str(), scheduler::port_needs(spec)))
        .collect();
    let mounts: Vec<Vec<VolumeNeed<'_>>> = ids
        .iter()
        .map(|(spec, id)| {
            spec.volumes
                .iter()
                .filter_map(|mount| volumes.iter().find(|v| v.name == mount.volume))
                // Named after the instance: each instance's volumes are its own here (a
                // stateful identity's), and only their sizes count.
                .map(|volume| VolumeNeed {
                    name: id,
                    size: volume.size,
                    node: None,
                })
                .collect()
        })
        .collect();
    let requests: Vec<Request<'_>> = ids
        .iter()
        .zip(&mounts)
        .map(|((spec, id), mounts)| {
            let (fixed, any) = &needs[spec.name.as_str()];
            Request {
                instance: id,
                service: &spec.name,
                resources: spec.resources,
                placement: &spec.placement,
                ports: scheduler::Ports { fixed, any: *any },
                volumes: mounts,
            }
        })
        .collect();
    let plan = scheduler::schedule(&ScheduleInput {
        nodes: &nodes,
        requests: &requests,
        rebalance: Rebalance::Off,
        ..ScheduleInput::default()
    });
    let service_of: BTreeMap<&str, &str> = ids
        .iter()
        .map(|(spec, id)| (id.as_str(), spec.name.as_str()))
        .collect();
    let mut by_service: BTreeMap<&str, (usize, String)> = BTreeMap::new();
    for (id, why) in &plan.unsatisfied {
        let service = service_of.get(id).copied().unwrap_or("?");
        let entry = by_service
            .entry(service)
            .or_insert_with(|| (0, why.to_string()));
        entry.0 += 1;
    }
    by_service
        .into_iter()
        .map(|(service, (unplaced, reason))| Unsatisfiable {
            service: service.to_owned(),
            unplaced,
            of: ids.iter().filter(|(spec, _)| spec.name == service).count(),
            reason,
        })
        .collect()
}
