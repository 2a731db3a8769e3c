//! Injecting a fault into the world, as [`FaultKind`]'s docs model each kind.

use ccattler_core::InstanceState;
use ccattler_runtime::agent::Desired;
use ccattler_runtime::simulator::SimulatorRuntime;
use futures_util::FutureExt;
use rand::Rng;

use super::actors::Actor;
use super::faults::{Fault, FaultKind};
use super::world::{Event, Window, World};

impl World {
    /// A fault begins now.
    pub(crate) fn inject(&mut self, fault: Fault) {
        let now = self.now;
        let struck = match fault.kind {
            FaultKind::NodeCrash => self.crash_node(&fault),
            FaultKind::ProcessCrash => self.crash_process(&fault),
            FaultKind::StaleObservation => {
                let node = self.pick(
                    fault.target,
                    |a| matches!(a, Actor::Node(n) if n.machine.is_some()),
                );
                if let Some(Actor::Node(n)) = node.map(|i| &mut self.actors[i]) {
                    n.runtime.faults().stale_observation();
                    n.stale_until = n.stale_until.max(fault.end());
                    self.windows.push(Window {
                        kind: fault.kind,
                        actor: node,
                        until: fault.end(),
                    });
                    // The runtime answers truly again when the window ends.
                    if let Some(index) = node {
                        self.agenda
                            .push(fault.end(), Event::FreshObservation(index));
                    }
                }
                node.map(|i| self.actors[i].name().to_owned())
            }
            FaultKind::ControllerRestart => {
                let target = self.pick(fault.target, |a| matches!(a, Actor::Controller(_)));
                let seed = self.rng.random();
                match target {
                    Some(index) => {
                        self.subs.close_actor(index);
                        if let Actor::Controller(c) = &mut self.actors[index] {
                            c.restart(seed);
                        }
                        self.step_actor(index);
                        Some(self.actors[index].name().to_owned())
                    }
                    None => None,
                }
            }
            FaultKind::NetworkDelay | FaultKind::LostMessages => {
                let target = self.pick(fault.target, |_| true);
                self.windows.push(Window {
                    kind: fault.kind,
                    actor: target,
                    until: fault.end(),
                });
                target.map(|i| self.actors[i].name().to_owned())
            }
            FaultKind::LeaderLoss => {
                // Frozen: its wakes, answers and watch events, and its controllers', wait for
                // the end of the pause (`World::paused`); its election's, 2 to 10 ms more
                // (about a store round trip).
                let leader = self.leading_replica();
                let lag = leader.map(|_| self.rng.random_range(2..=10)).unwrap_or(0);
                match leader.map(|i| &mut self.actors[i]) {
                    Some(Actor::Replica(replica)) => {
                        replica.paused_until = replica.paused_until.max(fault.end());
                        replica.election_lag = std::time::Duration::from_millis(lag);
                        Some(replica.name.clone())
                    }
                    _ => None,
                }
            }
            FaultKind::LoadSurge => self.surge(&fault),
            FaultKind::DuplicateEvents | FaultKind::SlowStorage => {
                self.windows.push(Window {
                    kind: fault.kind,
                    actor: None,
                    until: fault.end(),
                });
                Some("every actor".to_owned())
            }
        };
        match struck {
            Some(who) => {
                self.count(fault.kind);
                self.trace
                    .line(now, "chaos", format!("{fault} strikes {who}"));
            }
            None => self
                .trace
                .line(now, "chaos", format!("{fault} found nothing to strike")),
        }
    }

    fn crash_node(&mut self, fault: &Fault) -> Option<String> {
        let index = self.pick(
            fault.target,
            |a| matches!(a, Actor::Node(n) if n.machine.is_some()),
        )?;
        self.subs.close_actor(index);
        let Actor::Node(node) = &mut self.actors[index] else {
            return None;
        };
        node.machine = None;
        node.wake = None;
        self.agenda.push(
            fault.end(),
            Event::NodeReturns {
                node: index,
                wipe: fault.wipe,
            },
        );
        Some(node.name.clone())
    }

    fn crash_process(&mut self, fault: &Fault) -> Option<String> {
        let mut running = Vec::new();
        for actor in &self.actors {
            if let Actor::Node(node) = actor
                && node.machine.is_some()
                && let Some(Ok(seen)) = node.runtime.observe_now()
            {
                for instance in seen {
                    if instance.state == InstanceState::Running {
                        running.push((node.runtime.clone(), instance.id));
                    }
                }
            }
        }
        if running.is_empty() {
            return None;
        }
        let (runtime, id) = running.swap_remove(fault.target as usize % running.len());
        runtime.faults().crash(&id, 137);
        Some(id)
    }

    /// A crashed node's machine is back: empty (new runtime, no cache) or as it was.
    pub(crate) fn node_returns(&mut self, index: usize, wipe: bool) {
        let now = self.now;
        let Actor::Node(node) = &mut self.actors[index] else {
            return;
        };
        if wipe {
            node.runtime =
                SimulatorRuntime::on_host(node.config.address.clone()).with_load(&node.load);
            node.apply_failing_images();
            node.disk = Desired::default();
        }
        node.boot(now);
        let what = if wipe {
            "returns empty"
        } else {
            "returns with its instances"
        };
        let name = node.name.clone();
        self.trace.line(now, &name, what);
        self.step_actor(index);
    }

    /// A node's machine boots for the first time.
    pub(crate) fn boot(&mut self, index: usize) {
        let now = self.now;
        if let Actor::Node(node) = &mut self.actors[index] {
            node.boot(now);
            let name = node.name.clone();
            self.trace.line(now, &name, "boots");
            self.step_actor(index);
        }
    }

    /// A stale observation window ends.
    pub(crate) fn fresh_observation(&mut self, index: usize) {
        if let Actor::Node(node) = &self.actors[index] {
            node.runtime.faults().fresh_observation();
        }
    }
}

/// What the simulator reports now: its futures are ready at once.
trait ObserveNow {
    fn observe_now(
        &self,
    ) -> Option<Result<Vec<ccattler_core::ObservedInstance>, ccattler_core::RuntimeError>>;
}

impl ObserveNow for SimulatorRuntime {
    fn observe_now(
        &self,
    ) -> Option<Result<Vec<ccattler_core::ObservedInstance>, ccattler_core::RuntimeError>> {
        ccattler_core::Runtime::observe(self).now_or_never()
    }
}
