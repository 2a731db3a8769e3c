//! [`StatusController`]: the counts a person looks at, per service.

use ccattler_core::schema::{self, ServiceStatus};
use ccattler_core::{Change, Controller, FactView, ReconcileContext, ReconcileError};

use std::sync::Arc;

use super::cache::PlanCache;
use super::cluster::Standing;
use super::shared::SharedCluster;

/// Writes `status/service/{svc}`: desired, present, running and ready as separate numbers
/// (replica count and availability are different things), and whether the service is being
/// deleted.
///
/// `present` counts what the instance controller counts (current-version instances that are
/// pending, placed, starting or running, plus ended ones that are not replaced). `running` and
/// `ready` count only fresh reports ([`Instance::fresh`](super::Instance::fresh)): an instance
/// whose node crashed and registered again is present but neither, until its agent reports it
/// anew. A deleted service keeps a status with `deleting: true` until its last instance record
/// is gone; then the status goes too.
#[derive(Debug, Default)]
pub struct StatusController {
    cache: PlanCache,
}

impl StatusController {
    /// A new controller (with an empty cache of the cluster it reads).
    pub fn new() -> Self {
        Self::default()
    }

    /// A new controller whose cache of the cluster is `shared` with other controllers in this
    /// process: the same plans, each record decoded once between them.
    pub fn sharing(shared: Arc<SharedCluster>) -> Self {
        StatusController {
            cache: PlanCache::sharing(shared),
        }
    }
}

impl Controller for StatusController {
    fn name(&self) -> &str {
        "status"
    }

    fn watches(&self) -> Vec<String> {
        vec![
            schema::DESIRED_SERVICES.into(),
            schema::EFFECTIVE_SERVICES.into(),
            schema::DESIRED_INSTANCES.into(),
            schema::PLACEMENTS.into(),
            schema::OBSERVED_INSTANCES.into(),
            schema::NODE_LEASES.into(),
        ]
    }

    fn write_domain(&self) -> Vec<String> {
        vec![schema::SERVICE_STATUSES.into()]
    }

    fn reconcile(
        &self,
        facts: &FactView,
        _ctx: &mut ReconcileContext<'_>,
    ) -> Result<Vec<Change>, ReconcileError> {
        self.cache
            .sync_per_service(facts, schema::keys::service_status, |cluster, name| {
                let spec = cluster.services.get(name);
                let deleting = spec.is_none();
                if deleting && cluster.instances_of(name).next().is_none() {
                    return None; // gone for good
                }
                let restart = spec.map(|s| s.restart).unwrap_or_default();
                let effective = cluster.effective.get(name);
                let version = effective.map(|e| e.version.as_str());
                let current: Vec<_> = cluster
                    .instances_of(name)
                    .filter(|i| Some(i.desired.version.as_str()) == version)
                    .filter(|i| {
                        matches!(i.standing(restart), Standing::Active | Standing::Finished)
                    })
                    .collect();
                Some(schema::encode(&ServiceStatus {
                    desired: if deleting {
                        0
                    } else {
                        effective.map_or(0, |e| e.instances)
                    },
                    present: current.len() as u32,
                    running: current.iter().filter(|i| i.is_running()).count() as u32,
                    ready: current.iter().filter(|i| i.is_ready()).count() as u32,
                    deleting,
                }))
            })
    }
}
