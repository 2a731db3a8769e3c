//! Requests reaching the store: executed on arrival (or refused by an outage or a slow store),
//! with their answers sent back; and the control plane going away and coming back.

use std::time::Duration;

use ccattler_core::runner::{ElectionOutcome, perform_election};
use ccattler_core::schema;
use ccattler_core::{FactStore, Scan, StoreError, TxnResponse};
use ccattler_runtime::agent::{self, Action as AgentAction};
use futures_util::FutureExt;
use rand::Rng;

use super::actors::Actor;
use super::check::{self, Invariant};
use super::faults::FaultKind;
use super::world::{Event, Input, Request, World, ready};

impl World {
    /// The control plane goes away until `until`: every request is refused, every watch breaks.
    pub(crate) fn outage(&mut self, until: Duration) {
        self.outage_until = self.outage_until.max(until);
        self.agenda.push(until, Event::ControlPlaneBack);
        self.trace.line(
            self.now,
            "chaos",
            format!("the control plane is unreachable until {until:?}"),
        );
        for actor in 0..self.actors.len() {
            let Some(generation) = self.actors[actor].watch_generation() else {
                continue;
            };
            self.subs.close_actor(actor);
            self.agenda.push(
                self.now,
                Event::Deliver {
                    actor,
                    generation,
                    items: vec![Some(Err(StoreError::unavailable(
                        "the control plane is unreachable",
                    )))],
                },
            );
        }
    }

    /// The outage is over: every controller starts over, as in a restarted server.
    pub(crate) fn control_plane_back(&mut self) {
        if self.now < self.outage_until {
            return; // a longer outage overlaps this one
        }
        self.trace.line(
            self.now,
            "chaos",
            "the control plane is back; its controllers restart",
        );
        for actor in 0..self.actors.len() {
            let seed = self.rng.random();
            if let Actor::Controller(c) = &mut self.actors[actor] {
                c.restart(seed);
                self.subs.close_actor(actor);
                self.step_actor(actor);
            }
        }
    }

    /// A request reaches the store: executed now (or refused by slow storage or an outage),
    /// answered later.
    pub(crate) fn execute(&mut self, actor: usize, incarnation: u64, request: Request) {
        let refused = self.now < self.outage_until
            || (self.window(FaultKind::SlowStorage).is_some() && self.rng.random_bool(0.1));
        let name = self.actors[actor].name().to_owned();
        let input = if refused {
            let error = StoreError::unavailable(if self.now < self.outage_until {
                "the control plane is unreachable (simulated)"
            } else {
                "the store is overloaded (simulated)"
            });
            self.trace
                .line(self.now, &name, "store request refused (slow storage)");
            match request {
                Request::List(_) => Input::Listed(Err(error)),
                Request::Commit { .. } => Input::Committed(Err(error)),
                Request::CheckFences(_) => Input::FencesChecked(Err(error)),
                Request::Agent(action) => match agent::perform::store_failure(&action, error) {
                    Some(outcome) => Input::Agent(outcome),
                    None => return,
                },
                Request::Renew(lease) => Input::Agent(agent::Outcome::Renewed {
                    lease,
                    result: Err(error),
                }),
                Request::Election(action) => match ElectionOutcome::failed(&action, error) {
                    Some(outcome) => Input::Election(outcome),
                    None => return,
                },
            }
        } else {
            match request {
                Request::List(prefixes) => Input::Listed(self.list(&prefixes)),
                Request::Commit { txn, read } => {
                    if let Some(broken) = check::commit_writes(&name, &txn) {
                        self.violate(broken);
                    }
                    // Judged on the view it was planned on, and only if it lands: a refused
                    // commit stops nothing.
                    let budget = self.checker.stops_within_budget(&txn, &read);
                    let result = ready(self.store.txn(txn));
                    if let (Ok(response), Some(broken)) = (&result, budget)
                        && response.succeeded
                    {
                        self.violate(broken);
                    }
                    self.trace_commit(&name, &result);
                    if let Ok(response) = &result
                        && response.succeeded
                        && let Some(detail) = self.deposed_write(actor, response.revision)
                    {
                        self.violate((Invariant::DeposedWrite, detail));
                    }
                    Input::Committed(result)
                }
                Request::CheckFences(txn) => Input::FencesChecked(ready(self.store.txn(txn))),
                Request::Agent(action) => {
                    let (node, ttl) = match &self.actors[actor] {
                        Actor::Node(node) => (node.name.clone(), node.config.lease_ttl),
                        Actor::Controller(_) | Actor::Replica(_) => return,
                    };
                    if let AgentAction::Report {
                        puts,
                        deletes,
                        events,
                        event_deletes,
                        ..
                    } = &action
                    {
                        let keys: Vec<_> = puts
                            .iter()
                            .chain(events)
                            .map(|(k, _)| k)
                            .chain(deletes)
                            .chain(event_deletes)
                            .collect();
                        if let Some(broken) = check::report_writes(&node, &keys)
                            .or_else(|| check::reports_after_init(&node, puts))
                        {
                            self.violate(broken);
                        }
                    }
                    if let AgentAction::WriteTelemetry { key, .. } = &action
                        && schema::keys::telemetry(&node).ok().as_ref() != Some(key)
                    {
                        let wrote = format!("the agent of {node} wrote {key} as its telemetry");
                        self.violate((Invariant::SingleWriter, wrote));
                    }
                    match agent::perform::store_action(&self.store, &node, ttl, action)
                        .now_or_never()
                        .flatten()
                    {
                        Some(outcome) => Input::Agent(outcome),
                        None => return,
                    }
                }
                Request::Renew(lease) => {
                    match agent::perform::renew(&self.store, lease).now_or_never() {
                        Some(outcome) => Input::Agent(outcome),
                        None => return,
                    }
                }
                Request::Election(action) => {
                    match perform_election(&self.store, action)
                        .now_or_never()
                        .flatten()
                    {
                        Some(outcome) => Input::Election(outcome),
                        None => return,
                    }
                }
            }
        };
        let delay = self.latency(actor);
        self.answer(actor, incarnation, delay, input);
    }

    fn list(&self, prefixes: &[String]) -> Result<Vec<Scan>, StoreError> {
        prefixes
            .iter()
            .map(|prefix| ready(self.store.scan(prefix)))
            .collect()
    }

    fn trace_commit(&mut self, who: &str, result: &Result<TxnResponse, StoreError>) {
        let line = match result {
            Ok(r) if r.succeeded => format!("commit at {}", r.revision),
            Ok(_) => "commit lost a race (conflict)".to_owned(),
            Err(err) => format!("commit failed: {err}"),
        };
        self.trace.line(self.now, who, line);
    }
}
