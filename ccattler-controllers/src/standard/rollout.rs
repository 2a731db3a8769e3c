//! [`RolloutController`]: which version of each service is in force, kept specs by version,
//! and rollback of a version that fails.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

use ccattler_core::schema::{
    self, DesiredState, ObservedState, RecordKey, Rollout, RolloutRequest, ServiceSpec,
};
use ccattler_core::{Change, Controller, Event, FactView, ReconcileContext, ReconcileError};

use super::cache::PlanCache;
use super::cluster::{Cluster, Standing};
use super::rollout_step::{self, Seen};
use super::shared::SharedCluster;

/// Writes `rollout/service/{svc}` (a [`Rollout`]: the version in force and why) and keeps the
/// spec of each recent version under `rollout/spec/{svc}/{version}`, for every declared
/// service. The intent resolver puts the record's version in force; agents start each instance
/// with the kept spec of its own version.
///
/// # Rollouts
///
/// A new desired version is put in force at once (unless the rollout is paused) and the
/// instance controller replaces instances at the pace of the service's `update` block. The
/// rollout is *complete* when the count in force runs the version, every one of them has been
/// ready (or ended and left ended by its restart policy) for `min_ready` (default 0 s), and no
/// instance of another version is left; the version then becomes the *stable* one. Until then, it is rolled back to the stable version when:
///
/// - its instances failed `failure_threshold` times (default 3): every restart of one of its
///   instances counts, and an instance reported failed counts once more; or
/// - it made no progress for `progress_deadline` (default 10 min): progress is more of its
///   instances ready at once than ever before in this rollout.
///
/// A rolled-back version stays out of force until a new version is applied or the rollout is
/// resumed. A version that fails with no stable version to return to (the service's first)
/// goes on trying, with the phase `failing`. Each start, completion, rollback and refused
/// request is recorded as an event of the service.
///
/// # Requests
///
/// `intent/rollout/{svc}` (a [`RolloutRequest`], written through the API) asks once per id:
/// `pause` holds the rollout (no instance is replaced for its version, and a new desired
/// version waits), `resume` goes on with the desired version (unpaused, or tried again after a
/// rollback or an undo), `undo` puts an earlier kept version in force (the one named, or the
/// one before the version in force) as a new rollout. An undo to a version that is not kept
/// changes nothing and says so in an event.
///
/// # Kept versions
///
/// The specs of the last five versions are kept, and beyond them every version that is in
/// force, stable, desired or run by an instance. When a service is deleted, its record and
/// specs are deleted once its last instance is gone.
///
/// # Caveat
///
/// The scheduler reserves resources by the desired spec: while an earlier version is in force
/// (after a rollback or an undo) its instances are reserved at the desired version's cpu and
/// memory, as the old instances of a rolling update are.
#[derive(Debug, Default)]
pub struct RolloutController {
    plans: PlanCache,
    followed: Mutex<Option<FactView>>,
}

impl RolloutController {
    /// A new rollout controller (with an empty cache of the cluster it reads).
    pub fn new() -> Self {
        Self::default()
    }

    /// A new rollout controller whose cache of the cluster is `shared` with other
    /// controllers.
    pub fn sharing(shared: std::sync::Arc<SharedCluster>) -> Self {
        RolloutController {
            plans: PlanCache::sharing(shared),
            followed: Mutex::default(),
        }
    }

    /// Adds to `dirty` the services whose requests, rollout records or kept specs changed
    /// since the last view; on the first view, every service such a record names. Returns
    /// whether this is the first view.
    fn follow(&self, view: &FactView, dirty: &mut BTreeSet<String>) -> bool {
        let watched = [
            schema::ROLLOUT_REQUESTS,
            schema::ROLLOUTS,
            schema::SPEC_HISTORY,
        ];
        let mut followed = self.followed.lock();
        let keys: Vec<_> = match followed.as_ref() {
            Some(old) => view
                .changes_since(old)
                .filter(|(key, ..)| watched.iter().any(|p| key.as_str().starts_with(p)))
                .map(|(key, ..)| key.clone())
                .collect(),
            None => watched
                .iter()
                .flat_map(|prefix| view.scan(prefix))
                .map(|f| f.key.clone())
                .collect(),
        };
        for key in &keys {
            if let Some(
                RecordKey::RolloutRequest(name)
                | RecordKey::Rollout(name)
                | RecordKey::SpecVersion { service: name, .. },
            ) = RecordKey::parse(key)
                && !dirty.contains(name)
            {
                dirty.insert(name.to_owned());
            }
        }
        let first = followed.is_none();
        *followed = Some(view.clone());
        first
    }
}

impl Controller for RolloutController {
    fn name(&self) -> &str {
        "rollout"
    }

    fn watches(&self) -> Vec<String> {
        vec![
            schema::DESIRED_SERVICES.into(),
            schema::EFFECTIVE_SERVICES.into(),
            schema::DESIRED_INSTANCES.into(),
            schema::PLACEMENTS.into(),
            schema::OBSERVED_INSTANCES.into(),
            schema::NODE_LEASES.into(),
            schema::ROLLOUT_REQUESTS.into(),
            schema::ROLLOUTS.into(),
            schema::SPEC_HISTORY.into(),
        ]
    }

    fn write_domain(&self) -> Vec<String> {
        vec![schema::ROLLOUTS.into(), schema::SPEC_HISTORY.into()]
    }

    fn reconcile(
        &self,
        facts: &FactView,
        ctx: &mut ReconcileContext<'_>,
    ) -> Result<Vec<Change>, ReconcileError> {
        let (cluster, mut to_plan) = self.plans.begin(facts);
        self.follow(facts, &mut to_plan);
        let now = millis(ctx.now());
        let mut changes = Vec::new();
        let mut pending = BTreeSet::new();
        let mut wake: Option<Duration> = None;
        for name in &to_plan {
            let key = schema::keys::rollout(name)?;
            let held = facts
                .get(key.as_str())
                .and_then(|f| schema::decode::<Rollout>(f).ok());
            let Some(spec) = cluster.services.get(name) else {
                if cluster.instances_of(name).next().is_some() {
                    continue; // its instances may still need their specs
                }
                if facts.get(key.as_str()).is_some() {
                    changes.push(Change::delete(key));
                }
                let prefix = schema::keys::spec_versions(name)?;
                changes.extend(facts.scan(&prefix).map(|f| Change::delete(f.key.clone())));
                continue;
            };
            let before = changes.len();
            let desired = spec.version();
            let request = schema::keys::rollout_request(name)
                .ok()
                .and_then(|k| facts.get(k.as_str()))
                .and_then(|f| schema::decode::<RolloutRequest>(f).ok());
            let version = held.as_ref().map_or(desired.as_str(), |h| &h.version);
            let seen = seen(&cluster, name, spec, version);
            let step = rollout_step::step(
                held.as_ref(),
                &desired,
                &spec.update,
                request.as_ref(),
                &seen,
                now,
            );
            let history = schema::keys::spec_version(name, &desired)?;
            if facts.get(history.as_str()).is_none() {
                changes.push(Change::put(history, schema::encode(spec)));
            }
            for version in &step.dropped {
                let key = schema::keys::spec_version(name, version)?;
                if facts.get(key.as_str()).is_some() {
                    changes.push(Change::delete(key));
                }
            }
            if held.as_ref() != Some(&step.record) {
                changes.push(Change::put(key, schema::encode(&step.record)));
                for (reason, message) in step.events {
                    ctx.record(Event::new(name, reason, message).of_service(name));
                }
            }
            if let Some(after) = step.wake {
                wake = Some(wake.map_or(after, |w| w.min(after)));
                pending.insert(name.clone());
            }
            if changes.len() > before {
                pending.insert(name.clone());
            }
        }
        if let Some(after) = wake {
            ctx.requeue_after(after);
        }
        self.plans.finish(pending);
        Ok(changes)
    }
}

/// What the cluster shows of `service`'s instances of `version`, and of the others.
fn seen(cluster: &Cluster, service: &str, spec: &ServiceSpec, version: &str) -> Seen {
    let mut seen = Seen {
        count: cluster.effective.get(service).map_or(0, |e| e.instances),
        in_force: cluster.effective.get(service).map(|e| e.version.clone()),
        ..Seen::default()
    };
    let mut failures = BTreeMap::new();
    for instance in cluster.instances_of(service) {
        // Most instances share a version or two: no clone for one already counted.
        if !instance.is_gone() && !seen.in_use.contains(&instance.desired.version) {
            seen.in_use.insert(instance.desired.version.clone());
        }
        if instance.desired.version != version {
            seen.others += u32::from(!instance.is_gone());
            continue;
        }
        if let Some(report) = instance.report() {
            // Restarts, failed init attempts, and one more for an instance reported failed.
            let failed = u32::from(report.state == ObservedState::Failed);
            let count = report.restarts + report.init_failures + failed;
            if count > 0 {
                failures.insert(instance.id.clone(), count);
            }
        }
        if instance.desired.state != DesiredState::Running {
            continue;
        }
        match instance.standing(spec.restart) {
            Standing::Active => {
                seen.updated += 1;
                seen.ready += u32::from(instance.is_ready());
            }
            // Ended and left ended by its policy: settled (a failure counted above).
            Standing::Finished => {
                seen.updated += 1;
                seen.ended += 1;
            }
            _ => {}
        }
    }
    seen.failures = failures;
    seen
}

fn millis(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
