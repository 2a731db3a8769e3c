//! [`EndpointController`]: where each service's ready instances can be reached.

use ccattler_core::schema::{self, DesiredState, Endpoint, Endpoints, Health};
use ccattler_core::{Change, Controller, FactView, ReconcileContext, ReconcileError};

use std::sync::Arc;

use super::cache::PlanCache;
use super::shared::SharedCluster;

/// Writes `endpoint/service/{svc}`: the service's instances that serve, each with its address
/// and node, sorted by address, then instance. Instances are never merged: two that report one
/// address are two entries.
///
/// An instance serves when it should run, its node is alive, its agent reports it running with
/// an address in a fresh report (one written during the node's current registration, see
/// [`Instance::fresh`](super::Instance::fresh): what a crashed node reported before it came back
/// does not count), ready (its startup probe passed and its readiness probe passes, for the
/// probes it has; an instance without probes is ready while it runs), and not unhealthy (its
/// liveness probe does not fail). A deleted service loses its endpoints at once.
#[derive(Debug, Default)]
pub struct EndpointController {
    cache: PlanCache,
}

impl EndpointController {
    /// A new controller (with an empty cache of the cluster it reads).
    pub fn new() -> Self {
        Self::default()
    }

    /// A new controller whose cache of the cluster is `shared` with other controllers in this
    /// process: the same plans, each record decoded once between them.
    pub fn sharing(shared: Arc<SharedCluster>) -> Self {
        EndpointController {
            cache: PlanCache::sharing(shared),
        }
    }
}

impl Controller for EndpointController {
    fn name(&self) -> &str {
        "endpoints"
    }

    fn watches(&self) -> Vec<String> {
        vec![
            schema::DESIRED_SERVICES.into(),
            schema::DESIRED_INSTANCES.into(),
            schema::PLACEMENTS.into(),
            schema::OBSERVED_INSTANCES.into(),
            schema::NODE_LEASES.into(),
        ]
    }

    fn write_domain(&self) -> Vec<String> {
        vec![schema::SERVICE_ENDPOINTS.into()]
    }

    fn reconcile(
        &self,
        facts: &FactView,
        _ctx: &mut ReconcileContext<'_>,
    ) -> Result<Vec<Change>, ReconcileError> {
        self.cache
            .sync_per_service(facts, schema::keys::endpoints, |cluster, name| {
                // A deleted service loses its endpoints.
                cluster.services.get(name)?;
                let mut endpoints: Vec<Endpoint> = cluster
                    .instances_of(name)
                    .filter(|i| i.desired.state == DesiredState::Running && i.node_alive)
                    .filter_map(|i| {
                        let observed = i.report()?;
                        // Ready: running, past its startup probe and passing its readiness
                        // probe (when it has them); and not failing its liveness probe.
                        let serves = i.is_ready() && observed.health != Health::Unhealthy;
                        Some(Endpoint {
                            address: observed.address.clone().filter(|_| serves)?,
                            instance: i.id.clone(),
                            node: i.node.clone()?,
                        })
                    })
                    .collect();
                endpoints.sort();
                Some(schema::encode(&Endpoints { endpoints }))
            })
    }
}
