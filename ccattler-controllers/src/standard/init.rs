//! [`InitController`]: how far each service's instances are through their init steps.

use std::sync::Arc;

use ccattler_core::schema::{self, INIT_LISTED, InitPhase, InitStatus, InstanceInit};
use ccattler_core::{Change, Controller, FactView, ReconcileContext, ReconcileError};

use super::cache::PlanCache;
use super::cluster::{Cluster, Standing};
use super::shared::SharedCluster;

/// Writes `status/init/{svc}` for every service whose spec has init steps: how many of its
/// instances wait to begin, run a step, failed their current step, or are done, and the first
/// [`INIT_LISTED`] of those not done by name, with the step, the failure count, the reason and
/// the last lines the failed step printed.
///
/// # Contract
///
/// - The phase of each instance is [`InitPhase::of`] its fresh report: the agent runs the steps
///   in order before the main process, and an instance whose main process ever ran is done.
///   Nothing else is judged here: the agent never starts the main process (so never reports
///   an instance ready) before every step passed, and it retries a failing step in place on
///   its restart schedule rather than reporting the instance failed, so a failing step never
///   churns replacements.
/// - Counted: instances meant to run that are present (pending to running, or ended and left
///   so by their restart policy); not those asked to stop, lost with their node, or about to
///   be replaced.
/// - A service without init steps has no record; a deleted one loses it.
/// - Only services whose records changed are judged in a pass (see [`PlanCache`]).
#[derive(Debug, Default)]
pub struct InitController {
    cache: PlanCache,
}

impl InitController {
    /// A new controller (with an empty cache of the cluster it reads).
    pub fn new() -> Self {
        Self::default()
    }

    /// A new controller whose cache of the cluster is `shared` with other controllers in this
    /// process.
    pub fn sharing(shared: Arc<SharedCluster>) -> Self {
        InitController {
            cache: PlanCache::sharing(shared),
        }
    }
}

impl Controller for InitController {
    fn name(&self) -> &str {
        "init"
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
        vec![schema::INIT_STATUSES.into()]
    }

    fn reconcile(
        &self,
        facts: &FactView,
        _ctx: &mut ReconcileContext<'_>,
    ) -> Result<Vec<Change>, ReconcileError> {
        self.cache
            .sync_per_service(facts, schema::keys::init_status, |cluster, name| {
                init_status(cluster, name).map(|status| schema::encode(&status))
            })
    }
}

/// The init record `service` should have in `cluster`, if any.
pub(super) fn init_status(cluster: &Cluster, service: &str) -> Option<InitStatus> {
    let spec = cluster.services.get(service)?;
    if spec.init.is_empty() {
        return None;
    }
    let steps = u32::try_from(spec.init.len()).unwrap_or(u32::MAX);
    let mut status = InitStatus {
        steps,
        ..InitStatus::default()
    };
    let mut listed: Vec<(u8, InstanceInit)> = Vec::new();
    for instance in cluster.instances_of(service) {
        if !matches!(
            instance.standing(spec.restart),
            Standing::Active | Standing::Finished
        ) {
            continue;
        }
        let phase = InitPhase::of(instance.report(), steps);
        let rank = match phase {
            InitPhase::Done => {
                status.done += 1;
                continue;
            }
            InitPhase::Failed { .. } => {
                status.failed += 1;
                0
            }
            InitPhase::Running { .. } => {
                status.running += 1;
                1
            }
            InitPhase::Waiting => {
                status.waiting += 1;
                2
            }
        };
        let named = InstanceInit {
            id: instance.id.clone(),
            node: instance.node.clone(),
            phase,
        };
        listed.push((rank, named));
    }
    listed.sort_by(|(a, x), (b, y)| a.cmp(b).then_with(|| x.id.cmp(&y.id)));
    status.instances = listed
        .into_iter()
        .take(INIT_LISTED)
        .map(|(_, named)| named)
        .collect();
    Some(status)
}
