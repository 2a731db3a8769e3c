//! Scripted runs: acting on a simulation while it runs (a new document, a node lost) and
//! reading what it cost (store writes, watch deliveries, work), for programs that measure the
//! whole loop in virtual time rather than test it.

use std::time::Duration;

use ccattler_controllers::apply::DesiredFacts;

use super::actors::Actor;
use super::faults::{Fault, FaultKind};
use super::world::{self, Event};
use super::{Compute, Simulation};

impl Simulation {
    /// Applies `desired` now, as the user's apply does: the whole desired state, deleting what
    /// it no longer declares.
    pub fn apply(&mut self, desired: DesiredFacts) {
        self.world.documents.push(desired);
        let index = self.world.documents.len() - 1;
        self.world.agenda.push(self.world.now, Event::Apply(index));
    }

    /// Crashes the machine of the node named `node` now, as [`FaultKind::NodeCrash`] does: its
    /// agent and instances are gone, its lease lapses after its TTL, and it comes back after
    /// `down_for` (empty if `wipe`). Returns false, doing nothing, when no node of that name
    /// is up.
    pub fn crash_node(&mut self, node: &str, down_for: Duration, wipe: bool) -> bool {
        let up = |actor: &Actor| matches!(actor, Actor::Node(n) if n.machine.is_some());
        let Some(target) = self
            .world
            .actors
            .iter()
            .filter(|a| up(a))
            .position(|a| a.name() == node)
        else {
            return false;
        };
        let fault = Fault {
            at: self.world.now,
            kind: FaultKind::NodeCrash,
            target: u32::try_from(target).unwrap_or(u32::MAX),
            length: down_for,
            wipe,
        };
        self.world.agenda.push(self.world.now, Event::Fault(fault));
        true
    }

    /// Whether every declared service has its effective count of instances of the version in
    /// force, wanted and ready on live nodes, as the checker counts them after each step
    /// (costs the number of services, not of instances).
    pub fn all_ready(&self) -> bool {
        self.world.checker.all_ready()
    }

    /// Steps until [`all_ready`](Self::all_ready) is `want`, or until `limit` passes or an
    /// invariant breaks; returns the virtual time it became so, if it did.
    pub fn run_until_ready_is(&mut self, want: bool, limit: Duration) -> Option<Duration> {
        loop {
            if self.all_ready() == want {
                return Some(self.world.now);
            }
            let stepped = self.world.fatal.is_none()
                && self.world.violation.is_none()
                && self.world.step(limit);
            if !stepped {
                return None;
            }
        }
    }

    /// The store's revision now: one per committed write, since the run began.
    pub fn store_revision(&self) -> u64 {
        world::ready(ccattler_core::FactStore::revision(&self.world.store)).map_or(0, |r| r.0)
    }

    /// Watch events delivered to the controllers, agents and replicas so far.
    pub fn deliveries(&self) -> u64 {
        self.world.delivered
    }

    /// What the run's work cost so far.
    pub fn compute(&self) -> Compute {
        self.world.compute
    }
}
