//! Runner replicas in the simulation: each steps the real [`ElectionLoop`] of ccattler-core
//! (the protocol `LeaseElection` runs on tokio), performing its store requests through the world
//! (latency, outages, a slow store) and its watch of the leader key through the world's watches.
//! Only the leader's controllers run: they start over (fresh loops) on winning, and stop on
//! stepping down. A replica can be paused (the leader-loss fault): it is frozen while what it
//! sent before goes on.

use std::time::Duration;

use ccattler_core::runner::{ElectionAction, ElectionLoop, LeaseElectionConfig};
use ccattler_core::{Compare, Key, Revision};
use rand::Rng;

use super::actors::Actor;
use super::world::{Request, World, ready};

/// The leader key the simulated replicas campaign for.
pub const LEADER_KEY: &str = "runner/leader";

/// One runner replica: its election and the controller actors it runs while leading.
pub(crate) struct ReplicaActor {
    pub name: String,
    pub machine: ElectionLoop,
    /// The replica's controller actors.
    pub controllers: Vec<usize>,
    /// Whether its commits carry the fence (false only to prove the checker catches it).
    pub fenced: bool,
    /// The process is frozen until then (a long pause: garbage collection, a stopped VM).
    pub paused_until: Duration,
    /// How much later than its controllers its election resumes after a pause: a resumed
    /// process's threads run in no set order, so the controllers may act on what they held
    /// before the election notices that the lease could have expired.
    pub election_lag: Duration,
    /// The term its controllers last ran under, kept after stepping down: their commits still in
    /// flight were sent under it.
    pub last_term: Option<Revision>,
    pub watch_generation: u64,
    pub wake: Option<Duration>,
}

impl ReplicaActor {
    /// A candidate named `name` for [`LEADER_KEY`] with leases of `ttl`; `None` only if the
    /// leader key were invalid.
    pub(crate) fn new(
        name: String,
        controllers: Vec<usize>,
        fenced: bool,
        ttl: Duration,
    ) -> Option<Self> {
        let key = Key::new(LEADER_KEY).ok()?;
        let config = LeaseElectionConfig::new(key, name.clone()).ttl(ttl);
        Some(ReplicaActor {
            name,
            machine: ElectionLoop::new(config),
            controllers,
            fenced,
            paused_until: Duration::ZERO,
            election_lag: Duration::ZERO,
            last_term: None,
            watch_generation: 0,
            wake: None,
        })
    }

    /// The term this replica believes it leads, if it does.
    pub(crate) fn term(&self) -> Option<Revision> {
        self.machine.term()
    }

    /// The compare a leader's commit carries.
    pub(crate) fn fence(&self) -> Option<Compare> {
        self.machine.fence()
    }
}

impl World {
    /// Drains a replica's election actions: store requests travel to the store, watches open,
    /// and winning or losing starts or stops its controllers.
    pub(crate) fn step_replica(&mut self, actor: usize) {
        loop {
            let now = self.now;
            let Actor::Replica(r) = &mut self.actors[actor] else {
                return;
            };
            r.machine.tick(now);
            let Some(action) = r.machine.next_action() else {
                return;
            };
            let name = r.name.clone();
            match action {
                ElectionAction::Watch { key, from } => {
                    self.subs.close_actor(actor);
                    r.watch_generation += 1;
                    let generation = r.watch_generation;
                    if let Err(err) = self.open_watch(actor, generation, key.as_str(), from)
                        && let Actor::Replica(r) = &mut self.actors[actor]
                    {
                        r.machine.watch_failed(err);
                    }
                }
                ElectionAction::Won { term, .. } => {
                    r.last_term = Some(term);
                    self.trace.line(now, &name, format!("leads (term {term})"));
                    self.start_controllers(actor);
                }
                ElectionAction::Lost { reason, .. } => {
                    self.trace.line(now, &name, format!("steps down: {reason}"));
                    self.stop_controllers(actor);
                }
                ElectionAction::Failed { reason, retry_in } => {
                    let line = format!("election: {reason}; retry in {retry_in:?}");
                    self.trace.line(now, &name, line);
                }
                ElectionAction::Fatal { error } => {
                    self.trace
                        .line(now, &name, format!("election fatal: {error}"));
                    self.fatal = Some(format!("replica {name}'s election failed: {error}"));
                }
                action => {
                    let line = match &action {
                        ElectionAction::Campaign { .. } => "campaigns".to_owned(),
                        ElectionAction::Renew { lease } => format!("renews lease {lease}"),
                        ElectionAction::Check { .. } => "reads the leader key".to_owned(),
                        ElectionAction::Resign { lease } => format!("revokes lease {lease}"),
                        other => format!("{other:?}"),
                    };
                    self.trace.line(now, &name, line);
                    self.send(actor, Request::Election(action));
                }
            }
        }
    }

    /// The replica won: its controllers start over under its fence, as in a process that just
    /// became leader.
    fn start_controllers(&mut self, replica: usize) {
        let Actor::Replica(r) = &self.actors[replica] else {
            return;
        };
        let fences: Vec<Compare> = r.fence().filter(|_| r.fenced).into_iter().collect();
        for actor in r.controllers.clone() {
            let seed = self.rng.random();
            if let Actor::Controller(c) = &mut self.actors[actor] {
                c.fences = fences.clone();
                c.restart(seed);
                c.active = true;
            }
            self.step_actor(actor);
        }
    }

    /// Stops a replica's controllers: whatever they had in flight is dropped on return.
    fn stop_controllers(&mut self, replica: usize) {
        let Actor::Replica(r) = &self.actors[replica] else {
            return;
        };
        for actor in r.controllers.clone() {
            self.subs.close_actor(actor);
            if let Actor::Controller(c) = &mut self.actors[actor] {
                c.active = false;
                c.incarnation += 1;
                c.watch_generation += 1;
            }
        }
    }

    /// The replica actor a controller actor belongs to, if replicas run.
    pub(crate) fn replica_of(&self, actor: usize) -> Option<usize> {
        self.replicas.iter().copied().find(
            |&r| matches!(&self.actors[r], Actor::Replica(r) if r.controllers.contains(&actor)),
        )
    }

    /// The replica `actor` is or belongs to.
    fn replica(&self, actor: usize) -> Option<&ReplicaActor> {
        let index = match &self.actors[actor] {
            Actor::Replica(_) => actor,
            _ => self.replica_of(actor)?,
        };
        match &self.actors[index] {
            Actor::Replica(r) => Some(r),
            _ => None,
        }
    }

    /// Whether events for `actor` (a replica, or a controller of one) must wait: its replica is
    /// paused. Returns the time to wait to: the end of the pause for a controller, and
    /// [`election_lag`](ReplicaActor::election_lag) later for the replica's own election.
    pub(crate) fn paused(&self, actor: usize) -> Option<Duration> {
        let replica = self.replica(actor)?;
        let until = match self.actors[actor] {
            Actor::Replica(_) => replica.paused_until + replica.election_lag,
            _ => replica.paused_until,
        };
        (self.now < until).then_some(until)
    }

    /// A controller's loop found its fences broken ([`Action::Deposed`]): as the tokio runner
    /// does, the replica stops its controllers, resigns the term it believed it held and
    /// campaigns again with a fresh election. (With one runner there are no fences, so no loop
    /// is deposed.)
    ///
    /// [`Action::Deposed`]: ccattler_core::runner::Action::Deposed
    pub(crate) fn deposed(&mut self, actor: usize) {
        let Some(replica) = self.replica_of(actor) else {
            if let Actor::Controller(c) = &mut self.actors[actor] {
                c.active = false;
            }
            return;
        };
        self.stop_controllers(replica);
        let Actor::Replica(r) = &mut self.actors[replica] else {
            return;
        };
        let config = r.machine.config().clone();
        r.machine.resign();
        let mut resignations = Vec::new();
        while let Some(action) = r.machine.next_action() {
            resignations.push(action);
        }
        r.machine = ElectionLoop::new(config);
        r.machine.tick(self.now);
        r.watch_generation += 1;
        self.subs.close_actor(replica);
        for action in resignations {
            self.send(replica, Request::Election(action));
        }
        self.step_actor(replica);
    }

    /// The replica that believes it leads, if any.
    pub(crate) fn leading_replica(&self) -> Option<usize> {
        self.replicas
            .iter()
            .copied()
            .find(|&r| matches!(&self.actors[r], Actor::Replica(r) if r.term().is_some()))
    }

    /// After a commit of `actor` landed: the store's current term is not the one its replica's
    /// controllers ran under.
    pub(crate) fn deposed_write(&self, actor: usize, revision: Revision) -> Option<String> {
        let replica = self.replica(actor)?;
        let key = Key::new(LEADER_KEY).ok()?;
        let current = ready(ccattler_core::FactStore::get(&self.store, &key)).ok()?;
        let current_term = current.as_ref().map(|f| f.create_revision);
        if current_term.is_some() && current_term == replica.last_term {
            return None;
        }
        let holder = current
            .and_then(|f| f.value_str().map(str::to_owned))
            .unwrap_or_else(|| "nobody".to_owned());
        Some(format!(
            "{} (term {:?}) committed at revision {revision} while {holder} leads (term {current_term:?})",
            replica.name, replica.last_term
        ))
    }
}
