//! Runner replicas in the simulation: leader election on a store lease, the fence every
//! leader's commit carries, and the leader that pauses and wakes deposed.
//!
//! The protocol is the one `LeaseElection` runs: a candidate grants a lease and creates the
//! leader key with it, guarded by "the key is absent"; the leader renews the lease every third
//! of its TTL and steps down when a renewal fails; the fence is "the leader key's create
//! revision is the one this leader created". Only the leader's controllers run: they start
//! over (fresh loops) on winning, and stop on stepping down.

use std::time::Duration;

use ccattler_core::{CmpOp, Compare, CompareTarget, Key, LeaseId, Op, Revision, StoreError, Txn};
use rand::Rng;

use super::actors::Actor;
use super::world::{Event, World, ready};

/// The leader key the simulated replicas campaign for.
pub const LEADER_KEY: &str = "runner/leader";

/// Where one replica stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Standing {
    /// Campaigns at the time given.
    Candidate(Duration),
    /// A campaign request is in flight.
    Campaigning,
    /// Leads under `lease` since the leader key's creation at `term`; renews at `renew_at`.
    Leader {
        lease: LeaseId,
        term: Revision,
        renew_at: Duration,
    },
    /// A renewal is in flight.
    Renewing { lease: LeaseId, term: Revision },
}

/// One runner replica.
pub(crate) struct Replica {
    pub name: String,
    pub standing: Standing,
    /// The replica's controller actors.
    pub controllers: Vec<usize>,
    /// Whether its commits carry the fence (false only to prove the checker catches it).
    pub fenced: bool,
    /// The process is frozen until then (a long pause: garbage collection, a stopped VM).
    pub paused_until: Duration,
    pub ttl: Duration,
}

impl Replica {
    /// The term this replica believes it leads, if it does.
    pub(crate) fn term(&self) -> Option<Revision> {
        match self.standing {
            Standing::Leader { term, .. } | Standing::Renewing { term, .. } => Some(term),
            _ => None,
        }
    }

    /// The compare a leader's commit carries.
    pub(crate) fn fence(&self) -> Option<Compare> {
        let term = self.term()?;
        let key = Key::new(LEADER_KEY).ok()?;
        Some(Compare::new(
            key,
            CmpOp::Equal,
            CompareTarget::CreateRevision(term),
        ))
    }
}

/// What a replica's election request found.
#[derive(Debug)]
pub(crate) enum ElectionAnswer {
    /// Won at this revision under this lease; `None`: someone else leads.
    Campaigned(Result<Option<(LeaseId, Revision)>, StoreError>),
    /// The lease was renewed (or not).
    Renewed(Result<(), StoreError>),
}

impl World {
    /// Steps a replica's election: campaign or renew when due.
    pub(crate) fn step_replica(&mut self, index: usize) {
        let now = self.now;
        let replica = &mut self.replicas[index];
        if now < replica.paused_until {
            return;
        }
        match replica.standing {
            Standing::Candidate(at) if now >= at => {
                replica.standing = Standing::Campaigning;
                let delay = self.latency_of_replica();
                self.agenda.push(now + delay, Event::Campaign(index));
            }
            Standing::Candidate(at) => self.agenda.push(at, Event::ReplicaWake(index)),
            Standing::Leader {
                lease,
                term,
                renew_at,
            } if now >= renew_at => {
                replica.standing = Standing::Renewing { lease, term };
                let delay = self.latency_of_replica();
                self.agenda.push(now + delay, Event::Renew(index, lease));
            }
            Standing::Leader { renew_at, .. } => {
                self.agenda.push(renew_at, Event::ReplicaWake(index));
            }
            Standing::Campaigning | Standing::Renewing { .. } => {}
        }
    }

    fn latency_of_replica(&mut self) -> Duration {
        Duration::from_millis(self.rng.random_range(1..=5))
    }

    /// A campaign reaches the store: grant a lease, create the key if absent.
    pub(crate) fn campaign(&mut self, index: usize) {
        let ttl = self.replicas[index].ttl;
        let name = self.replicas[index].name.clone();
        let answer = if self.now < self.outage_until {
            Err(StoreError::unavailable(
                "the control plane is unreachable (simulated)",
            ))
        } else {
            self.try_lead(&name, ttl)
        };
        let delay = self.latency_of_replica();
        self.agenda.push(
            self.now + delay,
            Event::Elected(index, ElectionAnswer::Campaigned(answer)),
        );
    }

    fn try_lead(
        &mut self,
        name: &str,
        ttl: Duration,
    ) -> Result<Option<(LeaseId, Revision)>, StoreError> {
        use ccattler_core::FactStore;
        let key = Key::new(LEADER_KEY).map_err(StoreError::from)?;
        let lease = ready(self.store.grant_lease(ttl))?.id;
        let txn = Txn::new().when(Compare::absent(key.clone())).then(Op::Put {
            key,
            value: name.to_owned().into(),
            lease: Some(lease),
        });
        let response = ready(self.store.txn(txn))?;
        if response.succeeded {
            Ok(Some((lease, response.revision)))
        } else {
            let _ = ready(self.store.revoke_lease(lease));
            Ok(None)
        }
    }

    /// A renewal reaches the store.
    pub(crate) fn renew(&mut self, index: usize, lease: LeaseId) {
        use ccattler_core::FactStore;
        let answer = if self.now < self.outage_until {
            Err(StoreError::unavailable(
                "the control plane is unreachable (simulated)",
            ))
        } else {
            ready(self.store.keep_alive(lease)).map(|_| ())
        };
        let delay = self.latency_of_replica();
        self.agenda.push(
            self.now + delay,
            Event::Elected(index, ElectionAnswer::Renewed(answer)),
        );
    }

    /// An election answer reaches its replica.
    pub(crate) fn elected(&mut self, index: usize, answer: ElectionAnswer) {
        let now = self.now;
        let retry = Duration::from_millis(500);
        let name = self.replicas[index].name.clone();
        match (self.replicas[index].standing, answer) {
            (Standing::Campaigning, ElectionAnswer::Campaigned(Ok(Some((lease, term))))) => {
                let ttl = self.replicas[index].ttl;
                self.replicas[index].standing = Standing::Leader {
                    lease,
                    term,
                    renew_at: now + ttl / 3,
                };
                self.trace.line(now, &name, format!("leads (term {term})"));
                for actor in self.replicas[index].controllers.clone() {
                    let seed = self.rng.random();
                    if let Actor::Controller(c) = &mut self.actors[actor] {
                        c.restart(seed);
                        c.active = true;
                    }
                    self.step_actor(actor);
                }
            }
            (Standing::Campaigning, ElectionAnswer::Campaigned(_)) => {
                self.replicas[index].standing = Standing::Candidate(now + retry);
            }
            (Standing::Renewing { lease, term }, ElectionAnswer::Renewed(Ok(()))) => {
                let ttl = self.replicas[index].ttl;
                self.replicas[index].standing = Standing::Leader {
                    lease,
                    term,
                    renew_at: now + ttl / 3,
                };
            }
            (Standing::Renewing { .. }, ElectionAnswer::Renewed(Err(err))) => {
                self.trace.line(now, &name, format!("steps down: {err}"));
                self.step_down(index);
                self.replicas[index].standing = Standing::Candidate(now + retry);
            }
            _ => {}
        }
        self.step_replica(index);
    }

    /// Stops a replica's controllers: whatever they had in flight is dropped on return.
    fn step_down(&mut self, index: usize) {
        for actor in self.replicas[index].controllers.clone() {
            self.subs.close_actor(actor);
            if let Actor::Controller(c) = &mut self.actors[actor] {
                c.active = false;
                c.incarnation += 1;
                c.watch_generation += 1;
            }
        }
    }

    /// The replica a controller actor belongs to, if replicas run.
    pub(crate) fn replica_of(&self, actor: usize) -> Option<usize> {
        self.replicas
            .iter()
            .position(|r| r.controllers.contains(&actor))
    }

    /// Whether events for `actor` must wait: its replica is paused. Returns the time to wait to.
    pub(crate) fn paused(&self, actor: usize) -> Option<Duration> {
        let replica = &self.replicas[self.replica_of(actor)?];
        (self.now < replica.paused_until).then_some(replica.paused_until)
    }

    /// After a commit of `actor` landed: a replica that does not hold the current term wrote.
    pub(crate) fn deposed_write(&self, actor: usize, revision: Revision) -> Option<String> {
        let replica = &self.replicas[self.replica_of(actor)?];
        let key = Key::new(LEADER_KEY).ok()?;
        let current = ready(ccattler_core::FactStore::get(&self.store, &key)).ok()?;
        let current_term = current.as_ref().map(|f| f.create_revision);
        if current_term.is_some() && current_term == replica.term() {
            return None;
        }
        let holder = current
            .and_then(|f| f.value_str().map(str::to_owned))
            .unwrap_or_else(|| "nobody".to_owned());
        Some(format!(
            "{} (term {:?}) committed at revision {revision} while {holder} leads (term {current_term:?})",
            replica.name,
            replica.term()
        ))
    }
}
