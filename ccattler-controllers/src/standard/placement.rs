//! [`SchedulerController`]: assigns instances to nodes with the pure [`schedule`] function.

use std::collections::BTreeSet;

use ccattler_core::schema::{self, Assignment, DesiredState, Placement, Resources, Unschedulable};
use ccattler_core::{Change, Controller, FactView, ReconcileContext, ReconcileError};

use super::cache::PlanCache;
use crate::scheduler::{Existing, Node, Rebalance, Request, Schedule, ScheduleInput, schedule};

/// Writes `placement/{node}/{id}` for every running instance without one, and
/// `status/unschedulable/{id}` with the reason for those that fit nowhere.
///
/// # Node failure
///
/// A node whose lease expired takes nothing new. Its placements are kept: the instances may well
/// still run there (a partition is not a crash), and the instance controller replaces them
/// elsewhere meanwhile. When the node comes back, the instance controller stops the surplus,
/// starting on the most crowded node, which evens the spread out again. Moving instances is thus
/// always "start the new, then stop the old", never a placement rewritten under a running
/// instance.
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
#[derive(Debug, Default)]
pub struct SchedulerController {
    cache: PlanCache,
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
            schema::INSTANCES.into(),
            schema::SERVICES.into(),
            schema::NODES.into(),
            schema::NODE_LEASES.into(),
        ]
    }

    fn write_domain(&self) -> Vec<String> {
        vec![schema::PLACEMENTS.into(), schema::UNSCHEDULABLE.into()]
    }

    fn reconcile(
        &self,
        facts: &FactView,
        _ctx: &mut ReconcileContext<'_>,
    ) -> Result<Vec<Change>, ReconcileError> {
        let (cluster, to_plan) = self.cache.begin(facts);
        let mut changes = Vec::new();
        // Placed instances whose desired state changed: mirror it into their placement.
        let mut with_changes = BTreeSet::new();
        for service in &to_plan {
            for instance in cluster.instances_of(service) {
                let Some((node, key, _)) = cluster.placements.get(&instance.id) else {
                    continue;
                };
                let wanted = schema::encode(&Assignment {
                    instance: instance.id.clone(),
                    service: instance.desired.service.clone(),
                    node: node.clone(),
                    version: instance.desired.version.clone(),
                    state: instance.desired.state,
                });
                if facts.get(key.as_str()).map(|f| &f.value) != Some(&wanted) {
                    changes.push(Change::put(key.clone(), wanted));
                    with_changes.insert(service.clone());
                }
            }
        }
        self.cache.finish(with_changes);
        let fallback = Placement::default();
        let needs = |service: &str| {
            cluster
                .services
                .get(service)
                .map_or((Resources::default(), &fallback), |spec| {
                    (spec.resources, &spec.placement)
                })
        };
        // Only what this pass needs: the unplaced instances, the existing instances of their
        // services (for spreading), and the per-node totals the cache keeps up to date. A pass
        // after one node died costs time for its instances and the node list, not the cluster.
        let mut requests = Vec::new();
        let mut services = BTreeSet::new();
        for instance in cluster.unplaced() {
            if !cluster.services.contains_key(&instance.desired.service) {
                continue; // deleted: the instance controller stops it
            }
            let (resources, placement) = needs(&instance.desired.service);
            services.insert(instance.desired.service.as_str());
            requests.push(Request {
                instance: &instance.id,
                service: &instance.desired.service,
                resources,
                placement,
            });
        }
        let mut existing = Vec::new();
        for service in &services {
            for instance in cluster.instances_of(service) {
                if let Some(node) = &instance.node {
                    let (resources, placement) = needs(service);
                    existing.push(Existing {
                        instance: &instance.id,
                        service: &instance.desired.service,
                        node,
                        resources,
                        placement,
                    });
                }
            }
        }
        // The node list and reservations are only built when there is something to place.
        let busy = !requests.is_empty();
        let reserved: Vec<(&str, Resources)> = cluster
            .usage
            .iter()
            .take(if busy { usize::MAX } else { 0 })
            .map(|(node, u)| {
                let resources = Resources {
                    cpu: u.cpu,
                    memory: u.memory,
                };
                (node.as_str(), resources)
            })
            .collect();
        // Both maps are sorted by name: walk them together rather than look each node up.
        let mut alive = cluster.alive.iter().peekable();
        let nodes: Vec<Node<'_>> = cluster
            .nodes
            .values()
            .take(if busy { usize::MAX } else { 0 })
            .map(|status| {
                while alive.next_if(|name| **name < status.name).is_some() {}
                let is_alive = alive.next_if(|name| **name == status.name).is_some();
                Node::from_status(status, is_alive)
            })
            .collect();
        let plan = if busy {
            schedule(&ScheduleInput {
                nodes: &nodes,
                existing: &existing,
                requests: &requests,
                rebalance: Rebalance::Off,
                reserved: Some(&reserved),
            })
        } else {
            Schedule::default()
        };
        for (instance, node) in &plan.placements {
            let service = &cluster.instances[*instance].desired.service;
            changes.push(Change::put(
                schema::keys::placement(node, instance)?,
                schema::encode(&Assignment {
                    instance: (*instance).to_owned(),
                    service: service.clone(),
                    node: (*node).to_owned(),
                    version: cluster.instances[*instance].desired.version.clone(),
                    state: DesiredState::Running,
                }),
            ));
        }
        let mut unschedulable = BTreeSet::new();
        for (instance, why) in &plan.unsatisfied {
            unschedulable.insert(*instance);
            let service = &cluster.instances[*instance].desired.service;
            changes.push(Change::put(
                schema::keys::unschedulable(instance)?,
                schema::encode(&Unschedulable {
                    service: service.clone(),
                    reason: why.to_string(),
                }),
            ));
        }
        for fact in facts.scan(schema::UNSCHEDULABLE) {
            let id = fact
                .key
                .strip_prefix(schema::UNSCHEDULABLE)
                .unwrap_or_default();
            if !unschedulable.contains(id) {
                changes.push(Change::delete(fact.key.clone()));
            }
        }
        for key in cluster.orphan_placements() {
            changes.push(Change::delete(key.clone()));
        }
        Ok(changes)
    }
}
