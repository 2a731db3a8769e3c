//! [`InstanceController`]: keeps the right number of current-version instances of each service.

use std::collections::BTreeSet;
use std::sync::Arc;

use ccattler_core::schema::{
    self, DesiredInstance, DesiredState, EffectiveService, RebalanceMove, RestartPolicy,
    ServiceSpec, UpdatePolicy,
};
use ccattler_core::{Change, Controller, FactView, ReconcileContext, ReconcileError};

use super::cache::PlanCache;
use super::cluster::{Cluster, Instance, Standing};
use super::events::instance_events;
use super::shared::SharedCluster;
use super::stop_order::stop_order;

/// Creates, stops and forgets `desired/instance/{id}` records.
///
/// # Counting
///
/// - Current-version instances that are pending, placed, pulling, starting or running are
///   present work: a slow image pull never causes more creations.
/// - A failed instance under restart `never` (or one that exited cleanly under `on_failure` or
///   `never`) still counts, so it is not recreated endlessly. Under `always` / `on_failure` a
///   failed one is asked to stop and replaced once; from then on the replacement counts.
/// - An instance placed on a node whose lease expired does not count and is replaced. If the node
///   comes back, the extra instances are stopped in the order below once the node has reported
///   (see "Returning nodes").
/// - A report written before its node's current registration (the node crashed and registered
///   again; see [`Instance::fresh`]) is stale: the instance counts as present but of unknown
///   state, neither running nor ready, and a rollout does not count it as available.
/// - A service with no effective record (deleted) has all its instances stopped.
///
/// # When most nodes look dead at once
///
/// While fewer than half of the known nodes hold their lease ([`Cluster::most_nodes_dead`](super::Cluster::most_nodes_dead)),
/// instances on dead nodes are not replaced: they count as present work, as if their nodes were
/// alive. A control-plane outage longer than the lease TTL makes every node look dead at once;
/// replacing everything then would start a second copy of every workload the moment the agents
/// reconnect (within a third of their lease TTL). Replacement resumes as soon as half the
/// nodes hold their lease again. The price: if more than half the nodes really fail together,
/// their instances wait for them (or for the rest to register) instead of moving.
///
/// # Returning nodes
///
/// A node that registers again keeps its old reports, stale until its agent writes them anew
/// (the node agent does so within one pass). Until then the real surplus is unknown: the stale
/// instances may serve, or the node may run nothing. So while any present instance of a service
/// is stale ([`Instance::is_stale`]), the surplus stop takes its picks in the stop order below
/// as usual, but stops only those known not to serve: ended, unplaced, or on a live node with
/// a fresh report (or none yet) that is not running and ready. A stale pick waits, and so does
/// a ready one unless stopping it leaves at least the count ready. Once the node has
/// reported, the surplus goes in the stop order, crowded nodes first, which evens the spread
/// out. Example (measured): 5 instances of 1 cpu on two 4-cpu nodes, 3/2; n2's lease lapses,
/// n1 runs 4 and one fits nowhere; when n2 registers again only the unplaced one is stopped,
/// and once n2 reports its two running, the newest on n1: 3/2 again, and never fewer than 4
/// served. Trusting the old reports stopped an instance on n1 at once while n2 ran nothing.
///
/// The wait writes nothing, so controllers cannot loop on it, and it is bounded. It keeps at
/// most one instance above the count per stale instance: a ready pick waits only while at most
/// the count are ready, so an unrelated scale-down still stops every ready instance above the
/// count. It ends for each stale instance once its node reports it, or loses its lease again
/// (then the instance is lost, stale or not): a node that registers and never reports holds it
/// only while it keeps its lease.
///
/// # Rolling updates
///
/// Instances of an older spec version are replaced, paced by the service's update policy, and
/// availability is counted in *ready* instances ([`Instance::is_ready`]: running and passing
/// the readiness probe), never merely running ones:
///
/// - replacements are created while the current-version instances are fewer than the count and
///   all instances that still run or will run (current and old) stay at most `max_extra` above
///   the count;
/// - an old instance that still runs or will run but is not ready (pending, starting, or
///   running and failing its readiness probe) is stopped at once: it serves nothing;
/// - an old instance that does not count (on a node that lost its lease, failed, or ended) is
///   stopped at once too: it serves nothing, its replacement is created like any other, and its
///   record is forgotten once it is gone (a lost one once its node reports it stopped);
/// - an old ready instance is stopped only while the ready instances, current and old together,
///   stay above `count - max_unavailable`, so that stopping it leaves at least that many ready.
///
/// Instances of the new version that ended for good (restart `never`, or a clean exit under
/// `on_failure`) will never be ready: the floor is `count - max_unavailable` less those, so a
/// rollout does not wait forever for them.
///
/// So a new version that runs but never becomes ready stops no more than `max_unavailable`
/// ready old instances: with `max_unavailable 0` every old ready instance keeps running, and the
/// rollout waits (at most `max_extra` new instances exist) until new instances become ready.
///
/// A service that mounts volumes is updated with `max_extra` 0 whatever its policy says: its
/// volume is attached to one instance at a time, so an old instance is stopped before its
/// replacement can start (and such a service is never rebalanced).
///
/// While the rollout is paused ([`EffectiveService::paused`]), old instances that still run or
/// will run count toward the count and are not stopped for their version; a deficit is made up
/// with the version in force.
///
/// # Rebalancing
///
/// The scheduler suggests one move per skewed service (`status/rebalance/{svc}`, a
/// [`RebalanceMove`]: an instance on a node holding at least two more than the node a new
/// instance would go to). A move starts only when the service is settled: no old version left,
/// exactly the count present, all ready on live nodes, the suggested instance still on the
/// suggested node, that node still holding two more than the target, no other move in progress,
/// `max_extra` at least 1, and not a stateful service (its instances have identities). Then:
///
/// The scheduler also suggests moves that make room on a node for an instance that can run
/// there only, pinned by its volume or by a static host port ([`RebalanceMove::room_for`]);
/// those start under the same conditions, the node's count aside.
///
/// 1. one new instance is created that [`replaces`](DesiredInstance::replaces) the suggested one;
///    the scheduler places it like any new instance, hence on the target or a node as good;
/// 2. while it is not ready it is not surplus: nothing is stopped, and ready stays at the count;
/// 3. once it is ready, the instance it replaces is stopped (never before), if that leaves at
///    least the count ready. If a fault took an instance meanwhile, it does not: the new one
///    stands in for the lost one and the old one stays, both ordinary instances (the scheduler
///    may suggest the move again). Should the new one fail or end first, it is an ordinary
///    instance again: the surplus stop removes it, and the scheduler may suggest the move again.
///
/// So a move never lowers the ready instances below the count and runs at most one above it.
/// A late node thus fills up one instance at a time (5 instances on two nodes: 4/1 becomes 3/2),
/// and with `max_extra 0` a service is never rebalanced.
///
/// # Stop order (stable and documented)
///
/// Ended instances first, then unplaced, then not yet running (or of unknown state: stale),
/// then running but not ready, then ready; within each group, instances on the node holding the
/// most instances of the service first, counted again after each pick (so stopping several
/// also evens out the spread), then the highest ordinal, then the highest id. Taking the first
/// k of n costs O((n + k) log n).
///
/// # Guarantees
///
/// Stopping is a change of desired state (`state: stopped`), guarded like every commit; a second
/// pass issues nothing new. A stopped instance's record is deleted once it is gone: unplaced, or
/// reported ended by its node's agent. Ids are `{service}-{16 hex digits}` from the context's id
/// source (`/` in service names becomes `.`), or `{service}-{ordinal}` for stateful services.
/// A stateful identity is created again only once the record and the placement of its previous
/// incarnation are both deleted, so the new record never inherits the old placement (nor the
/// agent's report of the old instance). A service whose effective record is in the view but
/// whose spec is not (watches of different prefixes lag apart) is left as it is until the spec
/// is read: its instances are never planned without knowing whether it is stateful.
#[derive(Debug, Default)]
pub struct InstanceController {
    cache: PlanCache,
}

impl InstanceController {
    /// A new controller (with an empty cache of the cluster it reads).
    pub fn new() -> Self {
        Self::default()
    }

    /// A new controller whose cache of the cluster is `shared` with other controllers in this
    /// process: the same plans, each record decoded once between them.
    pub fn sharing(shared: Arc<SharedCluster>) -> Self {
        InstanceController {
            cache: PlanCache::sharing(shared),
        }
    }
}

impl Controller for InstanceController {
    fn name(&self) -> &str {
        "instances"
    }

    fn watches(&self) -> Vec<String> {
        vec![
            schema::EFFECTIVE_SERVICES.into(),
            schema::DESIRED_SERVICES.into(),
            schema::PLACEMENTS.into(),
            schema::OBSERVED_INSTANCES.into(),
            schema::NODE_LEASES.into(),
            schema::REBALANCE_MOVES.into(),
        ]
    }

    fn write_domain(&self) -> Vec<String> {
        vec![schema::DESIRED_INSTANCES.into()]
    }

    fn reconcile(
        &self,
        facts: &FactView,
        ctx: &mut ReconcileContext<'_>,
    ) -> Result<Vec<Change>, ReconcileError> {
        let (cluster, to_plan) = self.cache.begin(facts);
        let mut changes = Vec::new();
        let mut with_changes = BTreeSet::new();
        for service in &to_plan {
            let service = service.as_str();
            let before = changes.len();
            let instances: Vec<&Instance> = cluster.instances_of(service).collect();
            let spec = cluster.services.get(service);
            let plan = ServicePlan {
                hold_lost: cluster.most_nodes_dead(),
                suggested: cluster.moves.get(service),
                service,
                restart: spec.map(|s| s.restart).unwrap_or_default(),
                update: spec.map(update_policy).unwrap_or_default(),
                stateful: spec.is_some_and(|s| s.stateful),
                instances: &instances,
                cluster: &cluster,
            };
            let effective = cluster.effective.get(service);
            match (effective, spec) {
                (Some(effective), Some(_)) => plan.converge(effective, ctx, &mut changes)?,
                // The effective record without the spec: a view whose watch of the specs lags
                // (or a service being deleted, whose effective record goes next). Whether it
                // is stateful, its update and restart policies are unknown: nothing is done
                // until the spec is read (which plans the service again).
                (Some(_), None) => continue,
                (None, _) => plan.stop_all(&mut changes)?,
            }
            if changes.len() > before {
                with_changes.insert(service.to_owned());
                let restart = plan.restart;
                for event in
                    instance_events(service, effective, &instances, restart, &changes[before..])
                {
                    ctx.record(event);
                }
            }
        }
        self.cache.finish(with_changes);
        Ok(changes)
    }
}

/// The update policy the controller follows for `spec`: its own, except that a service that
/// mounts volumes never runs an instance above its count (`max_extra` 0). A volume is attached
/// to one instance at a time, so a replacement could not start before the instance it replaces
/// is gone: it is stopped first.
fn update_policy(spec: &ServiceSpec) -> UpdatePolicy {
    if spec.volumes.is_empty() {
        spec.update
    } else {
        UpdatePolicy {
            max_extra: 0,
            ..spec.update
        }
    }
}

struct ServicePlan<'a> {
    /// Most nodes look dead at once: their instances are held, not replaced.
    hold_lost: bool,
    /// The scheduler's suggested move for the service, if any.
    suggested: Option<&'a RebalanceMove>,
    service: &'a str,
    restart: RestartPolicy,
    update: UpdatePolicy,
    stateful: bool,
    instances: &'a [&'a Instance],
    /// The whole cluster, for the placements left of deleted records.
    cluster: &'a Cluster,
}

impl ServicePlan<'_> {
    fn converge(
        &self,
        effective: &EffectiveService,
        ctx: &mut ReconcileContext<'_>,
        changes: &mut Vec<Change>,
    ) -> Result<(), ReconcileError> {
        self.forget_gone(changes);
        let target = effective.instances as usize;
        let (current, outdated): (Vec<&Instance>, Vec<&Instance>) = self
            .instances
            .iter()
            .partition(|i| i.desired.version == effective.version);
        let standing = |i: &&Instance| match i.standing(self.restart) {
            Standing::Lost if self.hold_lost => Standing::Active,
            standing => standing,
        };

        // Failed instances whose policy replaces them: stop them; the deficit replaces them.
        for instance in current
            .iter()
            .filter(|i| standing(i) == Standing::Replaceable)
        {
            stop(instance, changes);
        }
        let present: Vec<&Instance> = current
            .iter()
            .copied()
            .filter(|i| matches!(standing(i), Standing::Active | Standing::Finished))
            .collect();
        let old_active: Vec<&Instance> = outdated
            .iter()
            .copied()
            .filter(|i| standing(i) == Standing::Active)
            .collect();

        // Create the deficit, at most max_extra above the count while old instances remain.
        // While the rollout is paused, old instances count as present: none is replaced for
        // its version.
        let held_old = if effective.paused {
            old_active.len()
        } else {
            0
        };
        let deficit = target.saturating_sub(present.len() + held_old);
        let room = (target + self.update.max_extra as usize)
            .saturating_sub(present.len() + old_active.len());
        let create = deficit.min(room);
        if self.stateful {
            self.create_ordinals(effective, target, create, changes)?;
        } else {
            for _ in 0..create {
                changes.push(self.new_instance(effective, ctx, None)?);
            }
        }

        // Rebalancing moves in progress: a new instance not ready yet is not surplus; once it
        // is, the instance it replaces is stopped.
        let moving = self.moves_in_progress(&present, target, changes);
        let counted: Vec<&Instance> = present
            .iter()
            .copied()
            .filter(|i| !moving.contains(i.id.as_str()))
            .collect();

        // Stop the surplus of current instances. While some are stale (their node registered
        // again and has not reported yet) the real surplus is unknown: of the picks, the stale
        // ones wait, and so do ready ones unless more than `target` stay ready.
        let ready = |list: &[&Instance]| list.iter().filter(|i| i.is_ready()).count();
        if counted.len() > target {
            let surplus = counted.len() - target;
            let waiting = counted.iter().any(|i| i.is_stale());
            let mut ready_left = ready(&counted);
            for instance in stop_order(&counted, self.restart).take(surplus) {
                if waiting && instance.is_stale() {
                    continue;
                }
                if waiting && instance.is_ready() {
                    if ready_left <= target {
                        continue;
                    }
                    ready_left -= 1;
                }
                stop(instance, changes);
            }
        }

        // Start a suggested move once the service is settled.
        if create == 0 && moving.is_empty() && outdated.is_empty() {
            self.start_move(effective, &present, target, ctx, changes)?;
        }

        // Old instances that do not count (lost, failed or ended) serve nothing: stop them.
        for instance in outdated.iter().filter(|i| {
            matches!(
                standing(i),
                Standing::Lost | Standing::Replaceable | Standing::Finished
            )
        }) {
            stop(instance, changes);
        }

        // Stop old instances: those not ready freely, ready ones while enough stay ready. An
        // instance that ended for good (its restart policy leaves it ended) will never be
        // ready again: the floor counts only what can be, or the rollout would wait forever.
        let finished = present
            .iter()
            .filter(|i| standing(i) == Standing::Finished)
            .count();
        let min_available = target
            .saturating_sub(finished)
            .saturating_sub(self.update.max_unavailable as usize);
        let mut available = ready(&present) + ready(&old_active);
        if effective.paused {
            return Ok(());
        }
        for instance in stop_order(&old_active, self.restart) {
            if instance.is_ready() {
                if available <= min_available {
                    continue;
                }
                available -= 1;
            }
            stop(instance, changes);
        }
        Ok(())
    }

    /// A new running instance of the effective version (taking over from `replaces`, if set).
    fn new_instance(
        &self,
        effective: &EffectiveService,
        ctx: &mut ReconcileContext<'_>,
        replaces: Option<String>,
    ) -> Result<Change, ReconcileError> {
        let id = format!("{}-{}", id_base(self.service), ctx.new_id());
        Ok(Change::put(
            schema::keys::instance(&id)?,
            schema::encode(&DesiredInstance {
                service: self.service.to_owned(),
                version: effective.version.clone(),
                ordinal: None,
                state: DesiredState::Running,
                replaces,
            }),
        ))
    }

    /// The instances of moves in progress, which the surplus stop must leave alone: each new
    /// instance not ready yet (placed, or still the suggested move's), and each old one whose
    /// replacement is ready (stopped here, but
    /// only while at least `target` others stay ready: if a fault took an instance meanwhile,
    /// the move's new instance stands in for it and the old one stays, an ordinary instance
    /// again). A new instance that ended, or whose old one is gone, is an ordinary instance.
    fn moves_in_progress<'a>(
        &self,
        present: &[&'a Instance],
        target: usize,
        changes: &mut Vec<Change>,
    ) -> BTreeSet<&'a str> {
        let mut ready_left = present.iter().filter(|i| i.is_ready()).count();
        let mut moving = BTreeSet::new();
        for new in present {
            let Some(old_id) = new.desired.replaces.as_deref() else {
                continue;
            };
            let Some(old) = present.iter().find(|i| i.id == old_id) else {
                continue;
            };
            if new.standing(self.restart) != Standing::Active {
                continue;
            }
            // Not placed, and no longer suggested: nowhere had room for it (the cluster
            // filled meanwhile, or the room it was to make was made otherwise). An ordinary
            // instance again, which the surplus stop removes first.
            let suggested = self.suggested.is_some_and(|m| m.instance == old.id);
            if new.node.is_none() && !suggested {
                continue;
            }
            // Several new instances may name one old one (a move started twice across a
            // restart): it is stopped once, and one that is itself moving is left alone.
            if new.is_ready() {
                let leaves = ready_left - usize::from(old.is_ready());
                if leaves >= target && moving.insert(old.id.as_str()) {
                    ready_left = leaves;
                    stop(old, changes);
                }
            } else {
                moving.insert(new.id.as_str());
            }
        }
        moving
    }

    /// Starts the scheduler's suggested move, if the service is settled: exactly the count
    /// present, every one ready on a live node, the move's instance among them on the node it
    /// names, that node still holding two more than the target, and room for one extra.
    fn start_move(
        &self,
        effective: &EffectiveService,
        present: &[&Instance],
        target: usize,
        ctx: &mut ReconcileContext<'_>,
        changes: &mut Vec<Change>,
    ) -> Result<(), ReconcileError> {
        let Some(suggested) = self.suggested else {
            return Ok(());
        };
        if self.stateful
            || self.hold_lost
            || self.update.max_extra == 0
            || present.len() != target
            || !present.iter().all(|i| i.is_ready() && i.node_alive)
        {
            return Ok(());
        }
        let on = |node: &str| {
            present
                .iter()
                .filter(|i| i.node.as_deref() == Some(node))
                .count()
        };
        let old = present
            .iter()
            .find(|i| i.id == suggested.instance && i.node.as_deref() == Some(&suggested.from));
        // A move that makes room for an instance pinned to `from` is not about the spread.
        let skewed = || on(&suggested.from) >= on(&suggested.to) + 2;
        if let Some(old) = old
            && (suggested.room_for.is_some() || skewed())
        {
            changes.push(self.new_instance(effective, ctx, Some(old.id.clone()))?);
        }
        Ok(())
    }

    /// The service is gone: stop what still runs, forget what is gone.
    fn stop_all(&self, changes: &mut Vec<Change>) -> Result<(), ReconcileError> {
        self.forget_gone(changes);
        for instance in self.instances {
            if instance.desired.state == DesiredState::Running {
                stop(instance, changes);
            }
        }
        Ok(())
    }

    /// Deletes the records of stopped instances that are gone.
    fn forget_gone(&self, changes: &mut Vec<Change>) {
        for instance in self.instances {
            if instance.desired.state == DesiredState::Stopped && instance.is_gone() {
                changes.push(Change::delete(instance.key.clone()));
            }
        }
    }

    fn create_ordinals(
        &self,
        effective: &EffectiveService,
        target: usize,
        mut create: usize,
        changes: &mut Vec<Change>,
    ) -> Result<(), ReconcileError> {
        let taken: BTreeSet<u32> = self
            .instances
            .iter()
            .filter_map(|i| i.desired.ordinal)
            .collect();
        for ordinal in 0..target as u32 {
            if create == 0 {
                break;
            }
            if taken.contains(&ordinal) {
                continue; // in use, or still stopping: the same identity waits for it
            }
            let id = format!("{}-{ordinal}", id_base(self.service));
            if self.cluster.placement(&id).is_some() {
                // The previous incarnation's placement is not deleted yet: a new record now
                // would take it over, with the agent's report of the old one.
                continue;
            }
            changes.push(Change::put(
                schema::keys::instance(&id)?,
                schema::encode(&DesiredInstance {
                    service: self.service.to_owned(),
                    version: effective.version.clone(),
                    ordinal: Some(ordinal),
                    state: DesiredState::Running,
                    replaces: None,
                }),
            ));
            create -= 1;
        }
        Ok(())
    }
}

/// Asks an instance to stop (a guarded change of its desired state).
fn stop(instance: &Instance, changes: &mut Vec<Change>) {
    if instance.desired.state == DesiredState::Stopped {
        return;
    }
    let stopped = DesiredInstance {
        state: DesiredState::Stopped,
        ..(*instance.desired).clone()
    };
    changes.push(Change::put(instance.key.clone(), schema::encode(&stopped)));
}

/// The id prefix for a service: its name with `/` replaced by `.`.
fn id_base(service: &str) -> String {
    service.replace('/', ".")
}
