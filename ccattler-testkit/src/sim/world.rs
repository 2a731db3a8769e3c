//! The simulation's state and its event loop: one clock, one generator, one agenda; requests to
//! the store travel, are executed when they arrive, and their answers travel back.

use std::sync::Arc;
use std::time::Duration;

use ccattler_controllers::apply::DesiredFacts;
use ccattler_core::runner::{ElectionAction, ElectionOutcome, Reconciled};
use ccattler_core::{FactStore, ManualClock, Scan, StoreError, Txn, TxnResponse, WatchEvent};
use ccattler_runtime::agent::{Action as AgentAction, Outcome};
use ccattler_store::{MemoryConfig, MemoryStore};
use futures_util::FutureExt;
use rand::Rng;
use rand::rngs::SmallRng;

use super::actors::{Actor, ControllerActor, NodeActor};
use super::check::{Checker, Invariant, Violation};
use super::faults::{Fault, FaultKind, Schedule};
use super::net::Subs;
use super::queue::Agenda;
use super::replicas::ReplicaActor;
use super::report::Compute;
use super::trace::Trace;

/// A request on its way to the store.
#[derive(Debug)]
pub(crate) enum Request {
    /// A controller lists its prefixes.
    List(Vec<String>),
    /// A controller commits what it planned on the view `read`.
    Commit {
        txn: Txn,
        read: ccattler_core::FactView,
    },
    /// A controller checks its fences after a conflict.
    CheckFences(Txn),
    /// An agent's store action.
    Agent(AgentAction),
    /// One renewal of the lease an agent's keeper keeps.
    Renew(ccattler_core::LeaseId),
    /// A replica's election request.
    Election(ElectionAction),
}

/// A result on its way back to an actor.
#[derive(Debug)]
pub(crate) enum Input {
    Listed(Result<Vec<Scan>, StoreError>),
    Reconciled(Reconciled),
    Committed(Result<TxnResponse, StoreError>),
    FencesChecked(Result<TxnResponse, StoreError>),
    Agent(Outcome),
    Election(ElectionOutcome),
}

#[derive(Debug)]
pub(crate) enum Event {
    /// An actor's deadline: `due` is the time it was scheduled for. One the actor no longer
    /// waits for (it scheduled another since) is dropped: stepping on it would schedule
    /// another wake, so stale wakes would never end and pile up with every deadline that
    /// moved earlier.
    Wake { actor: usize, due: Duration },
    /// A request reaches the store.
    Request {
        actor: usize,
        incarnation: u64,
        request: Request,
    },
    /// A result reaches its actor.
    Input {
        actor: usize,
        incarnation: u64,
        input: Input,
    },
    /// Watch events of one revision (one message, as etcd sends them), or the watch's end,
    /// reach their actor: it takes them all in before it acts.
    Deliver {
        actor: usize,
        generation: u64,
        items: Vec<Option<Result<WatchEvent, StoreError>>>,
    },
    /// The user applies a document (an index into the world's documents).
    Apply(usize),
    /// The user writes a fact (a secret).
    Put(ccattler_core::Key, ccattler_core::Value),
    /// The control plane cannot be reached until the given time.
    Outage(Duration),
    /// The control plane is back after an outage: its controllers start over (a restarted
    /// server lists at once).
    ControlPlaneBack,
    /// A fault begins.
    Fault(Fault),
    /// A node's machine boots for the first time.
    Boot(usize),
    /// A crashed node comes back.
    NodeReturns { node: usize, wipe: bool },
    /// A node's runtime tells the truth again after a stale observation.
    FreshObservation(usize),
    /// A node's lease keeper renews (a standing order of its agent, kept on a schedule of its
    /// own: the agent's work never delays it), if `keeper` is still the one its agent runs.
    Renew {
        node: usize,
        incarnation: u64,
        keeper: u64,
    },
    /// A load surge on a service ends.
    SurgeEnds(String),
    /// A slow start on a node is over: the instance runs (or exits), and the agent of that
    /// incarnation hears of it.
    Started {
        node: usize,
        incarnation: u64,
        id: String,
    },
}

/// Watch events on their way to an actor together.
struct Message {
    sub: usize,
    actor: usize,
    generation: u64,
    /// The revision its events are of (`None` for a watch's end).
    revision: Option<ccattler_core::Revision>,
    at: Duration,
    items: Vec<Option<Result<WatchEvent, StoreError>>>,
}

impl Message {
    fn new(
        item: &super::net::Item,
        revision: Option<ccattler_core::Revision>,
        at: Duration,
        first: Option<Result<WatchEvent, StoreError>>,
    ) -> Self {
        Message {
            sub: item.sub,
            actor: item.actor,
            generation: item.generation,
            revision,
            at,
            items: first.map(|f| vec![Some(f)]).unwrap_or_default(),
        }
    }
}

/// A window during which a fault is in force.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Window {
    pub kind: FaultKind,
    /// The actor it strikes, for the kinds that strike one.
    pub actor: Option<usize>,
    pub until: Duration,
}

/// Everything a run holds.
pub(crate) struct World {
    pub now: Duration,
    pub rng: SmallRng,
    pub clock: ManualClock,
    pub store: MemoryStore,
    pub agenda: Agenda<Event>,
    pub subs: Subs,
    pub actors: Vec<Actor>,
    pub trace: Trace,
    pub windows: Vec<Window>,
    /// The documents the user applies, in order.
    pub documents: Vec<DesiredFacts>,
    /// The control plane is unreachable until then.
    pub outage_until: Duration,
    /// How often each fault kind fired.
    pub fired: Vec<(FaultKind, u64)>,
    /// Messages to and from the store take this long at least.
    pub base_latency: (u64, u64),
    pub steps: u64,
    /// What work costs in virtual time.
    pub work: super::WorkModel,
    /// Watch events delivered to actors.
    pub delivered: u64,
    /// The cores of each control-plane server (the one runner, or each replica).
    pub servers: Vec<super::work::Cores>,
    /// What work cost: charged in virtual time, and taken in real time.
    pub compute: Compute,
    pub fatal: Option<String>,
    pub checker: Checker,
    /// The stops agents heard of, checked once their bound passes.
    pub stops: super::stops::Stops,
    /// The actors of the runner replicas under election (empty: one runner that always leads).
    pub replicas: Vec<usize>,
    /// The nodes each instance id was ever handed to a runtime to start on, in actor order: a
    /// start is checked against those alone, not against every node.
    pub started_on: std::collections::HashMap<String, std::collections::BTreeSet<usize>>,
    /// The last instance started with each persistent volume: the node actor it started on,
    /// the instance, and the create revision of the volume's attachment then. A start with the
    /// volume is checked against it.
    pub mounted: std::collections::HashMap<String, (usize, String, ccattler_core::Revision)>,
    /// The first invariant broken: the run stops there.
    pub violation: Option<Violation>,
    /// What the nodes' instances use (shared with every node's simulator).
    pub load: ccattler_runtime::simulator::Load,
}

impl World {
    pub(crate) fn new(
        rng: SmallRng,
        trace: Trace,
        documents: Vec<DesiredFacts>,
        work: super::WorkModel,
    ) -> Self {
        let clock = ManualClock::new();
        let store =
            MemoryStore::with_config(MemoryConfig::default().clock(Arc::new(clock.clone())));
        World {
            checker: Checker::new(&store),
            stops: super::stops::Stops::default(),
            replicas: Vec::new(),
            started_on: std::collections::HashMap::new(),
            mounted: std::collections::HashMap::new(),
            violation: None,
            load: ccattler_runtime::simulator::Load::new(),
            now: Duration::ZERO,
            rng,
            clock,
            store,
            agenda: Agenda::new(),
            subs: Subs::new(),
            actors: Vec::new(),
            trace,
            windows: Vec::new(),
            documents,
            outage_until: Duration::ZERO,
            fired: FaultKind::ALL.iter().map(|k| (*k, 0)).collect(),
            base_latency: (1, 5),
            steps: 0,
            work,
            delivered: 0,
            servers: Vec::new(),
            compute: Compute::default(),
            fatal: None,
        }
    }

    /// Schedules every fault of `schedule`.
    pub(crate) fn schedule(&mut self, schedule: &Schedule) {
        for fault in &schedule.faults {
            self.agenda.push(fault.at, Event::Fault(fault.clone()));
        }
    }

    /// Handles events due by `until`. Returns false when none was left.
    pub(crate) fn step(&mut self, until: Duration) -> bool {
        let Some((at, event)) = self.agenda.pop_until(until) else {
            return false;
        };
        self.now = self.now.max(at);
        self.clock.set(self.now);
        self.store.expire_leases();
        self.windows.retain(|w| w.until > at);
        self.steps += 1;
        self.handle(event);
        self.pump();
        self.check_stops();
        let calm = self.fired.iter().all(|(_, n)| *n == 0) && self.outage_until.is_zero();
        let reachable = self.now >= self.outage_until;
        if let Some(broken) = self.checker.after_step(self.now, calm, reachable) {
            self.violate(broken);
        }
        true
    }

    /// Records a broken invariant (the first one only: the run stops there).
    pub(crate) fn violate(&mut self, (invariant, detail): (Invariant, String)) {
        if self.violation.is_some() {
            return;
        }
        self.trace.line(
            self.now,
            "check",
            format!("invariant {invariant} broken: {detail}"),
        );
        self.violation = Some(Violation {
            invariant,
            at: self.now,
            step: self.steps,
            detail,
        });
    }

    /// The replica or controller actor an event is for, when it is or belongs to a paused
    /// replica: the time it must wait until.
    fn held_until(&self, event: &Event) -> Option<Duration> {
        match event {
            Event::Wake { actor, .. }
            | Event::Input { actor, .. }
            | Event::Deliver { actor, .. } => self.paused(*actor),
            _ => None,
        }
    }

    fn handle(&mut self, event: Event) {
        if let Some(until) = self.held_until(&event) {
            self.agenda.push(until, event);
            return;
        }
        match event {
            Event::Wake { actor, due } => {
                if self.actors[actor].wake().is_some_and(|w| w != due) {
                    return; // stale: the actor waits for another
                }
                self.actors[actor].clear_wake();
                self.step_actor(actor);
            }
            Event::Request {
                actor,
                incarnation,
                request,
            } => self.execute(actor, incarnation, request),
            Event::Input {
                actor,
                incarnation,
                input,
            } => {
                if self.actors[actor].incarnation() == Some(incarnation) {
                    self.feed(actor, input);
                    self.step_actor(actor);
                }
            }
            Event::Deliver {
                actor,
                generation,
                items,
            } => {
                if self.actors[actor].watch_generation() == Some(generation) {
                    for item in items {
                        self.deliver(actor, item);
                    }
                    self.step_actor(actor);
                }
            }
            Event::Apply(index) => self.apply(index),
            Event::Put(key, value) => self.put(&key, value),
            Event::Outage(until) => self.outage(until),
            Event::ControlPlaneBack => self.control_plane_back(),
            Event::Fault(fault) => self.inject(fault),
            Event::Boot(node) => self.boot(node),
            Event::NodeReturns { node, wipe } => self.node_returns(node, wipe),
            Event::FreshObservation(node) => self.fresh_observation(node),
            Event::SurgeEnds(service) => self.surge_ends(&service),
            Event::Renew {
                node,
                incarnation,
                keeper,
            } => self.renew(node, incarnation, keeper),
            Event::Started {
                node,
                incarnation,
                id,
            } => {
                self.started(node, incarnation, &id);
                self.step_actor(node);
            }
        }
    }

    /// The user writes `value` at `key`.
    pub(crate) fn put(&mut self, key: &ccattler_core::Key, value: ccattler_core::Value) {
        let line = match ready(self.store.put(key, value)) {
            Ok(revision) => format!("put {key} at {revision}"),
            Err(err) => format!("put {key} failed: {err}"),
        };
        self.trace.line(self.now, "user", line);
    }

    /// The user applies a whole document: what it declares is desired, what it no longer
    /// declares is deleted (`apply` with prune).
    fn apply(&mut self, index: usize) {
        let Some(desired) = self.documents.get(index) else {
            return;
        };
        let result = ccattler_controllers::apply::apply(
            &self.store,
            desired,
            ccattler_controllers::apply::ApplyOptions::default().prune(true),
        )
        .now_or_never();
        let line = match result {
            Some(Ok(report)) => match report.revision {
                Some(revision) => format!("apply committed at {revision}"),
                None => "apply: nothing to change".to_owned(),
            },
            Some(Err(err)) => format!("apply failed: {err}"),
            None => "apply did not complete at once".to_owned(),
        };
        self.trace.line(self.now, "user", line);
    }

    /// How long a message between the store and `actor` takes now.
    pub(crate) fn latency(&mut self, actor: usize) -> Duration {
        let (lo, hi) = self.base_latency;
        let mut ms = self.rng.random_range(lo..=hi);
        let delayed = self
            .windows
            .iter()
            .any(|w| w.kind == FaultKind::NetworkDelay && w.actor == Some(actor));
        if delayed {
            ms += self.rng.random_range(200..=3_000);
        }
        Duration::from_millis(ms)
    }

    pub(crate) fn window(&self, kind: FaultKind) -> Option<Window> {
        self.windows.iter().copied().find(|w| w.kind == kind)
    }

    /// Sends a request from `actor` to the store.
    pub(crate) fn send(&mut self, actor: usize, request: Request) {
        self.send_after(actor, Duration::ZERO, request);
    }

    /// Sends a request from `actor` to the store once `busy` has passed (the work of making
    /// it).
    pub(crate) fn send_after(&mut self, actor: usize, busy: Duration, request: Request) {
        let Some(incarnation) = self.actors[actor].incarnation() else {
            return;
        };
        let mut delay = busy + self.latency(actor);
        if self.window(FaultKind::SlowStorage).is_some() {
            delay += Duration::from_millis(self.rng.random_range(50..=500));
        }
        self.agenda.push(
            self.now + delay,
            Event::Request {
                actor,
                incarnation,
                request,
            },
        );
    }

    /// Returns a result to `actor` after `delay`.
    pub(crate) fn answer(&mut self, actor: usize, incarnation: u64, delay: Duration, input: Input) {
        self.agenda.push(
            self.now + delay,
            Event::Input {
                actor,
                incarnation,
                input,
            },
        );
    }

    /// Opens a watch of `actor` (it fails during an outage).
    pub(crate) fn open_watch(
        &mut self,
        actor: usize,
        generation: u64,
        prefix: &str,
        from: ccattler_core::Revision,
    ) -> Result<(), StoreError> {
        if self.now < self.outage_until {
            return Err(StoreError::unavailable("the control plane is unreachable"));
        }
        let stream = ready(self.store.watch(prefix, from))?;
        self.subs.open(actor, generation, stream);
        Ok(())
    }

    /// Polls the woken watches and schedules their deliveries: the events of one revision to
    /// one watch travel together, in one message.
    fn pump(&mut self) {
        let mut message: Option<Message> = None;
        for item in self.subs.poll_ready() {
            let Some(actor) = self.actors.get(item.actor) else {
                continue;
            };
            if actor.watch_generation() != Some(item.generation) {
                continue;
            }
            let revision = match &item.item {
                Some(Ok(event)) => Some(event.revision()),
                _ => None,
            };
            let lost = self
                .windows
                .iter()
                .any(|w| w.kind == FaultKind::LostMessages && w.actor == Some(item.actor));
            if lost && revision.is_some() && self.rng.random_bool(0.2) {
                let name = actor.name().to_owned();
                if self.rng.random_bool(0.5) {
                    self.trace
                        .line(self.now, &name, "watch event lost; the watch breaks");
                    self.subs.close(item.sub);
                    self.send_message(message.take());
                    let broken = Some(Err(StoreError::unavailable("connection lost (simulated)")));
                    let at = self.delivery(item.sub, item.actor);
                    message = Some(Message::new(&item, None, at, broken));
                } else {
                    if matches!(actor, Actor::Controller(_)) {
                        self.checker.silently_lost(self.now);
                    }
                    self.trace
                        .line(self.now, &name, "watch event lost silently");
                }
                continue;
            }
            let twice = self.window(FaultKind::DuplicateEvents).is_some()
                && revision.is_some()
                && self.rng.random_bool(0.33);
            let joins = message.as_ref().is_some_and(|m| {
                m.sub == item.sub && m.revision.is_some() && m.revision == revision
            });
            if !joins {
                self.send_message(message.take());
                let at = self.delivery(item.sub, item.actor);
                message = Some(Message::new(&item, revision, at, None));
            }
            if let Some(m) = message.as_mut() {
                if twice && let Some(Ok(event)) = &item.item {
                    m.items.push(Some(Ok(event.clone())));
                }
                m.items.push(item.item);
            }
        }
        self.send_message(message);
    }

    /// When a message sent now to `actor` on watch `sub` arrives: after the network's delay,
    /// never before the watch's previous one.
    fn delivery(&mut self, sub: usize, actor: usize) -> Duration {
        let at = self.now + self.latency(actor);
        self.subs.delivery_time(sub, at)
    }

    fn send_message(&mut self, message: Option<Message>) {
        if let Some(m) = message {
            self.agenda.push(
                m.at,
                Event::Deliver {
                    actor: m.actor,
                    generation: m.generation,
                    items: m.items,
                },
            );
        }
    }

    /// Counts a fault of `kind` as fired.
    pub(crate) fn count(&mut self, kind: FaultKind) {
        if let Some((_, n)) = self.fired.iter_mut().find(|(k, _)| *k == kind) {
            *n += 1;
        }
    }

    /// The index of the `target`-th actor among those `pick` accepts, if any.
    pub(crate) fn pick(&self, target: u32, pick: impl Fn(&Actor) -> bool) -> Option<usize> {
        let candidates: Vec<usize> = (0..self.actors.len())
            .filter(|i| pick(&self.actors[*i]))
            .collect();
        if candidates.is_empty() {
            return None;
        }
        Some(candidates[target as usize % candidates.len()])
    }

    pub(crate) fn add_controller(&mut self, actor: ControllerActor) -> usize {
        while self.servers.len() <= actor.server {
            self.servers.push(super::work::Cores::new(self.work.cores));
        }
        self.actors.push(Actor::Controller(Box::new(actor)));
        self.actors.len() - 1
    }

    pub(crate) fn add_node(&mut self, actor: NodeActor) -> usize {
        self.actors.push(Actor::Node(Box::new(actor)));
        self.actors.len() - 1
    }

    pub(crate) fn add_replica(&mut self, actor: ReplicaActor) -> usize {
        self.actors.push(Actor::Replica(Box::new(actor)));
        let index = self.actors.len() - 1;
        self.replicas.push(index);
        index
    }
}

/// The output of a store future that is ready at once, as every `MemoryStore` future is.
pub(crate) fn ready<T>(
    future: impl std::future::Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    future.now_or_never().unwrap_or_else(|| {
        Err(StoreError::unavailable(
            "a store call did not complete at once",
        ))
    })
}
