//! [`SchedulerController`]: assigns instances to nodes with the pure [`schedule`] function.

use std::collections::BTreeSet;

use ccattler_core::schema::{self, Assignment, DesiredState, Placement, Resources, Unschedulable};
use ccattler_core::{Change, Controller, FactView, ReconcileContext, ReconcileError};

use super::cluster::Cluster;
use crate::scheduler::{Existing, Node, Rebalance, Request, ScheduleInput, schedule};

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
/// - Unschedulable reasons are rewritten when they change and removed once the instance is
///   placed or forgotten.
#[derive(Debug, Clone, Copy, Default)]
pub struct SchedulerController;

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
        let cluster = Cluster::read(facts);
        let mut changes = Vec::new();
        let nodes: Vec<Node<'_>> = cluster
            .nodes
            .values()
            .map(|status| Node::from_status(status, cluster.alive.contains(&status.name)))
            .collect();
        let fallback = Placement::default();
        let needs = |service: &str| {
            cluster
                .services
                .get(service)
                .map_or((Resources::default(), &fallback), |spec| {
                    (spec.resources, &spec.placement)
                })
        };
        let mut existing = Vec::new();
        let mut requests = Vec::new();
        for instance in cluster.instances.values() {
            let (resources, placement) = needs(&instance.desired.service);
            match &instance.node {
                Some(node) => existing.push(Existing {
                    instance: &instance.id,
                    service: &instance.desired.service,
                    node,
                    resources,
                    placement,
                }),
                None if instance.desired.state == DesiredState::Running
                    && cluster.services.contains_key(&instance.desired.service) =>
                {
                    requests.push(Request {
                        instance: &instance.id,
                        service: &instance.desired.service,
                        resources,
                        placement,
                    });
                }
                None => {}
            }
        }
        let plan = schedule(&ScheduleInput {
            nodes: &nodes,
            existing: &existing,
            requests: &requests,
            rebalance: Rebalance::Off,
        });
        for (instance, node) in &plan.placements {
            let service = &cluster.instances[*instance].desired.service;
            changes.push(Change::put(
                schema::keys::placement(node, instance)?,
                schema::encode(&Assignment {
                    instance: (*instance).to_owned(),
                    service: service.clone(),
                    node: (*node).to_owned(),
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
        for (instance, (_, key, _)) in &cluster.placements {
            if !cluster.instances.contains_key(instance) {
                changes.push(Change::delete(key.clone()));
            }
        }
        Ok(changes)
    }
}
