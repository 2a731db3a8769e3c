//! The standard controllers: from desired services to placed, running, reachable instances.
//!
//! Each is a [`ccattler_core::Controller`] with its own write domain, and a pure function of
//! the view and the context it is handed: the caches they keep across calls only save work
//! (three of them may share one decoded cluster, [`SharedCluster`], and still each read only
//! its own view).
//! One exception, on purpose: the scheduler judges every service's spread at most every 5 s
//! of the context's time, remembering when it last did, so a rebalancing suggestion for room
//! freed by another service can wait for that sweep (see `spread.rs`). They meet
//! only in the store (see the key table in [`ccattler_core::schema`]).
//!
//! | controller | reads | writes |
//! |---|---|---|
//! | [`Autoscaler`] | services, effective, instances, placements, observations, node leases, telemetry, pushed metrics | `intent/autoscaler/` |
//! | [`RolloutController`] | services, effective, instances, placements, observations, node leases, rollout requests, its own records | `rollout/service/`, `rollout/spec/` |
//! | [`IntentResolver`] | services, autoscaler intents, rollouts | `effective/service/` |
//! | [`InstanceController`] | effective, services, placements, observations, node leases, rebalance moves | `desired/instance/` |
//! | [`SchedulerController`] | instances, services, volumes, nodes, node leases | `placement/`, `volume/attachment/`, `status/unschedulable/`, `status/rebalance/` |
//! | [`EndpointController`] | services, instances, placements, observations, node leases | `endpoint/service/` |
//! | [`NetworkController`] | network policy, placements, nodes | `network/node/` |
//! | [`StatusController`] | services, effective, instances, placements, observations, node leases | `status/service/` |
//! | [`InitController`] | services, effective, instances, placements, observations, node leases | `status/init/` |
//!
//! [`all`] returns one of each, ready to register with a runner.
//!
//! Node failure is not a controller of its own: a node that lost its lease is "not alive" for
//! every controller that reads `lease/node/`. The instance controller replaces its instances and,
//! when it returns and has reported anew (its old reports are stale: see [`Cluster`]), stops the
//! surplus; the scheduler places nothing on it. A separate controller would have to write
//! `desired/instance/`, which already has a writer.

mod autoscale;
mod autoscaler;
mod cache;
mod cluster;
mod endpoints;
mod events;
mod host_ports;
mod init;
mod instances;
mod intent;
mod network;
mod network_rules;
mod placement;
mod rollout;
mod rollout_step;
mod room;
mod schedule_cache;
mod shared;
mod spread;
mod status;
mod stop_order;
mod volumes;

pub use autoscaler::Autoscaler;
pub use cache::{ClusterCache, PlanCache};
pub use cluster::{Cluster, Instance, Standing, Usage};
pub use endpoints::EndpointController;
pub use init::InitController;
pub use instances::InstanceController;
pub use intent::IntentResolver;
pub use network::NetworkController;
pub use network_rules::{NetworkInputs, Touched};
pub use placement::SchedulerController;
pub use rollout::RolloutController;
pub use rollout_step::KEPT_VERSIONS;
pub use shared::SharedCluster;
pub use status::StatusController;

use std::sync::Arc;

use ccattler_core::Controller;

/// One of each standard controller. The autoscaler and the rollout, instance, endpoint, status
/// and init controllers share one [`SharedCluster`], so the records they all read are decoded
/// and indexed once.
pub fn all() -> Vec<Arc<dyn Controller>> {
    all_sharing(Arc::new(SharedCluster::new()))
}

/// One of each standard controller, the autoscaler and the rollout, instance, endpoint,
/// status and init controllers sharing
/// `shared`: with the controllers of an earlier call, for instance when one of them is made
/// again after it stopped. Any number of controllers may share one; each reads its own view.
pub fn all_sharing(shared: Arc<SharedCluster>) -> Vec<Arc<dyn Controller>> {
    vec![
        Arc::new(Autoscaler::sharing(Arc::clone(&shared))),
        Arc::new(RolloutController::sharing(Arc::clone(&shared))),
        Arc::new(IntentResolver),
        Arc::new(InstanceController::sharing(Arc::clone(&shared))),
        Arc::new(SchedulerController::new()),
        Arc::new(EndpointController::sharing(Arc::clone(&shared))),
        Arc::new(NetworkController::new()),
        Arc::new(StatusController::sharing(Arc::clone(&shared))),
        Arc::new(InitController::sharing(shared)),
    ]
}
