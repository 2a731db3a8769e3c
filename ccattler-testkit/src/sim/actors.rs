//! The kinds of actor a simulation steps: a controller's real [`ControllerLoop`], a node's real
//! [`AgentLoop`] over a [`SimulatorRuntime`], and a runner replica's real election loop
//! (`replicas.rs`). This is their driver: it performs their actions through the world instead
//! of tokio.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use ccattler_core::runner::{Action, ControllerLoop, LoopConfig};
use ccattler_core::{
    Compare, Controller, LeaseId, RandomIds, ReconcileContext, StoreError, WatchEvent,
};
use ccattler_runtime::agent::{
    self, Action as AgentAction, AgentConfig, AgentLoop, Desired, Lane, StopReason,
};
use ccattler_runtime::simulator::{Load, SimulatorRuntime};
use futures_util::FutureExt;
use rand::Rng;

use super::MakeController;
use super::check::{self, Invariant};
use super::replicas::ReplicaActor;
use super::world::{Event, Input, Request, World};

/// The wall-clock time virtual time zero stands for, as controllers see it.
pub const EPOCH: Duration = Duration::from_secs(1_700_000_000);

/// The least the runtime takes to answer.
const COMPUTE: Duration = Duration::from_millis(1);

/// One controller under its loop.
pub(crate) struct ControllerActor {
    pub name: String,
    pub make: MakeController,
    pub controller: Arc<dyn Controller>,
    pub config: LoopConfig,
    pub machine: ControllerLoop,
    pub ids: RandomIds,
    pub max_changes: usize,
    /// The lease its events are attached to.
    pub events_lease: Option<LeaseId>,
    /// The fences of the replica it runs under while that replica leads (none with one runner,
    /// or with a replica built unfenced).
    pub fences: Vec<Compare>,
    /// Whether it runs: always with one runner; only on the leading replica with several.
    pub active: bool,
    pub incarnation: u64,
    pub watch_generation: u64,
    pub wake: Option<Duration>,
    /// The view its last reconcile read (its commit was planned on it).
    pub read: ccattler_core::FactView,
    /// The control-plane server whose cores its reconciles run on.
    pub server: usize,
}

impl ControllerActor {
    /// `max_changes`: the store's transaction op limit, as the tokio runner sets it.
    pub(crate) fn new(
        make: MakeController,
        config: LoopConfig,
        seed: u64,
        max_changes: usize,
        events_lease: Option<LeaseId>,
    ) -> Self {
        let controller = make();
        let machine = new_loop(&*controller, &config, seed, max_changes, events_lease, &[]);
        ControllerActor {
            name: controller.name().to_owned(),
            make,
            controller,
            config,
            machine,
            ids: RandomIds::seeded(seed),
            max_changes,
            events_lease,
            fences: Vec::new(),
            active: true,
            incarnation: 0,
            watch_generation: 0,
            wake: None,
            read: ccattler_core::FactView::new(),
            server: 0,
        }
    }

    /// A new controller object under a new loop: what a restarted process has.
    pub(crate) fn restart(&mut self, seed: u64) {
        self.controller = (self.make)();
        self.machine = new_loop(
            &*self.controller,
            &self.config,
            seed,
            self.max_changes,
            self.events_lease,
            &self.fences,
        );
        self.incarnation += 1;
        self.watch_generation += 1;
        self.wake = None;
    }
}

/// A controller's loop as the tokio runner sets it up ([`ControllerLoop::for_controller`]): its
/// commit marker, the store's op limit, its fences, and its events under `events_lease`.
fn new_loop(
    controller: &dyn Controller,
    config: &LoopConfig,
    seed: u64,
    max_changes: usize,
    events_lease: Option<LeaseId>,
    fences: &[Compare],
) -> ControllerLoop {
    let mut machine = ControllerLoop::for_controller(controller, config.clone(), seed)
        .unwrap_or_else(|_| {
            // A name that cannot name a marker key: the loop runs without one (a tokio runner
            // refuses such a controller at setup).
            ControllerLoop::new(
                controller.watches(),
                controller.write_domain(),
                config.clone(),
                seed,
            )
        });
    machine.set_max_changes(max_changes);
    machine.set_fences(fences.to_vec());
    machine.set_events_lease(events_lease);
    machine
}

/// One node: its agent (absent while the machine is down), its runtime, its disk.
pub(crate) struct NodeActor {
    pub name: String,
    pub config: AgentConfig,
    pub machine: Option<AgentLoop>,
    pub runtime: SimulatorRuntime,
    /// What its instances use (shared by every node of the run); kept for a runtime made anew.
    pub load: Load,
    /// What the agent's cache file holds.
    pub disk: Desired,
    /// Images whose network probes fail on this node (kept across a wipe).
    pub failing_images: Vec<String>,
    /// How long a start takes (an image pull, a slow boot): every start's, and per image.
    pub start_delay: Duration,
    pub slow_images: Vec<(String, Duration)>,
    /// Starts in flight: the runtime shows the instance starting, and the agent gets the answer
    /// when the start is over (`Event::Started`).
    pub starting: std::collections::BTreeMap<String, agent::Outcome>,
    pub incarnation: u64,
    pub watch_generation: u64,
    /// The lease its agent's keeper renews, and how often; `keeper` counts the keepers its
    /// agents started, so that a renewal of an ended one is dropped.
    pub kept: Option<(ccattler_core::LeaseId, Duration)>,
    pub keeper: u64,
    pub wake: Option<Duration>,
    /// The newest store revision of its placements the agent has heard of (listed, or
    /// delivered by its watch): what it can know of the control plane's wishes.
    pub heard: ccattler_core::Revision,
    /// Instances its agent heard it must stop (placement stopped or gone), since when.
    pub told_to_stop: std::collections::BTreeMap<String, Duration>,
    /// Until when its runtime answers with a stale observation (the stale-observation fault).
    pub stale_until: Duration,
    /// Until when its agent is busy with the actions it handed out (each leaves once the ones
    /// before it are done).
    pub busy_until: Duration,
}

impl NodeActor {
    pub(crate) fn new(config: AgentConfig, load: &Load) -> Self {
        NodeActor {
            name: config.node.clone(),
            runtime: SimulatorRuntime::on_host(config.address.clone()).with_load(load),
            load: load.clone(),
            config,
            machine: None,
            disk: Desired::default(),
            failing_images: Vec::new(),
            start_delay: Duration::ZERO,
            slow_images: Vec::new(),
            starting: std::collections::BTreeMap::new(),
            incarnation: 0,
            watch_generation: 0,
            kept: None,
            keeper: 0,
            wake: None,
            heard: ccattler_core::Revision::ZERO,
            told_to_stop: std::collections::BTreeMap::new(),
            stale_until: Duration::ZERO,
            busy_until: Duration::ZERO,
        }
    }

    /// Makes the runtime fail the probes of [`failing_images`](Self::failing_images).
    pub(crate) fn apply_failing_images(&self) {
        for image in &self.failing_images {
            self.runtime.faults().fail_probes(image.clone());
        }
    }

    /// How long starting `spec` takes on this node.
    pub(crate) fn start_delay_of(&self, spec: &ccattler_core::InstanceSpec) -> Duration {
        self.slow_images
            .iter()
            .filter(|(image, _)| *image == spec.image)
            .map(|(_, delay)| *delay)
            .fold(self.start_delay, Duration::max)
    }

    /// Starts a new agent from what the disk holds (the starts the old one had in flight are
    /// over for it: their answers are lost with it).
    pub(crate) fn boot(&mut self, now: Duration) {
        self.starting.clear();
        self.told_to_stop.clear();
        let mut machine = AgentLoop::new(self.config.clone(), self.disk.clone());
        machine.tick(now);
        self.machine = Some(machine);
        self.incarnation += 1;
        self.watch_generation += 1;
        self.wake = None;
    }
}

/// The keys an agent's action writes, deletes or names: what its cost grows with.
fn keys_named(action: &AgentAction) -> usize {
    match action {
        AgentAction::Report {
            puts,
            deletes,
            events,
            event_deletes,
            ..
        } => puts.len() + deletes.len() + events.len() + event_deletes.len(),
        AgentAction::FetchSpecs { keys } | AgentAction::FetchSecrets { keys } => keys.len(),
        _ => 1,
    }
}

/// A controller, a node or a runner replica.
pub(crate) enum Actor {
    Controller(Box<ControllerActor>),
    Node(Box<NodeActor>),
    Replica(Box<ReplicaActor>),
}

impl Actor {
    pub(crate) fn name(&self) -> &str {
        match self {
            Actor::Controller(c) => &c.name,
            Actor::Node(n) => &n.name,
            Actor::Replica(r) => &r.name,
        }
    }

    /// The incarnation results must carry to be taken; `None` while the actor is down. A
    /// replica is never restarted: its incarnation stays 0.
    pub(crate) fn incarnation(&self) -> Option<u64> {
        match self {
            Actor::Controller(c) => Some(c.incarnation),
            Actor::Node(n) => n.machine.as_ref().map(|_| n.incarnation),
            Actor::Replica(_) => Some(0),
        }
    }

    /// The watch generation events must carry to be delivered; `None` while the actor is down.
    pub(crate) fn watch_generation(&self) -> Option<u64> {
        match self {
            Actor::Controller(c) => Some(c.watch_generation),
            Actor::Node(n) => n.machine.as_ref().map(|_| n.watch_generation),
            Actor::Replica(r) => Some(r.watch_generation),
        }
    }

    /// The wake scheduled for it, if any.
    pub(crate) fn wake(&self) -> Option<Duration> {
        match self {
            Actor::Controller(c) => c.wake,
            Actor::Node(n) => n.wake,
            Actor::Replica(r) => r.wake,
        }
    }

    pub(crate) fn clear_wake(&mut self) {
        match self {
            Actor::Controller(c) => c.wake = None,
            Actor::Node(n) => n.wake = None,
            Actor::Replica(r) => r.wake = None,
        }
    }
}

impl World {
    /// Drains the actor's actions and schedules its next wake.
    pub(crate) fn step_actor(&mut self, actor: usize) {
        match &self.actors[actor] {
            Actor::Controller(_) => self.step_controller(actor),
            Actor::Node(_) => self.step_node(actor),
            Actor::Replica(_) => self.step_replica(actor),
        }
        self.schedule_wake(actor);
    }

    fn schedule_wake(&mut self, actor: usize) {
        let now = self.now;
        let (deadline, wake) = match &mut self.actors[actor] {
            Actor::Controller(c) if !c.active => return,
            Actor::Controller(c) => (c.machine.deadline(), &mut c.wake),
            Actor::Node(n) => match n.machine.as_ref() {
                Some(machine) => (machine.deadline(), &mut n.wake),
                None => return,
            },
            Actor::Replica(r) => (r.machine.deadline(), &mut r.wake),
        };
        // Whatever was due by now was done in this step: only a later deadline needs a wake.
        let Some(deadline) = deadline.filter(|d| *d > now) else {
            return;
        };
        if wake.is_some_and(|w| w <= deadline) {
            return; // an earlier wake is already scheduled, and it steps the actor anyway
        }
        *wake = Some(deadline);
        let event = super::world::Event::Wake {
            actor,
            due: deadline,
        };
        self.agenda.push(deadline, event);
    }

    fn step_controller(&mut self, actor: usize) {
        loop {
            let now = self.now;
            let Actor::Controller(c) = &mut self.actors[actor] else {
                return;
            };
            if !c.active {
                return;
            }
            c.machine.tick(now);
            let Some(action) = c.machine.next_action() else {
                return;
            };
            match action {
                Action::List { prefixes } => self.send(actor, Request::List(prefixes)),
                Action::Watch { starts } => {
                    self.subs.close_actor(actor);
                    c.watch_generation += 1;
                    let generation = c.watch_generation;
                    for (prefix, from) in starts {
                        if let Err(err) = self.open_watch(actor, generation, &prefix, from) {
                            if let Actor::Controller(c) = &mut self.actors[actor] {
                                c.machine.watch_failed(err);
                            }
                            break;
                        }
                    }
                }
                Action::Reconcile { view } => {
                    c.read = view.clone();
                    let at = SystemTime::UNIX_EPOCH + EPOCH + now;
                    let controller = Arc::clone(&c.controller);
                    let mut ctx = ReconcileContext::new(at, &mut c.ids);
                    let started = std::time::Instant::now();
                    let step = ccattler_core::runner::reconcile(&*controller, &view, &mut ctx);
                    let measured = started.elapsed();
                    let changes = step.result.as_ref().map_or(0, Vec::len);
                    let cost = self.work.reconcile_cost(view.len(), changes);
                    let (incarnation, server) = (c.incarnation, c.server);
                    // It runs once one of its server's cores is free, and is heard of when done.
                    let (start, done) = match self.servers.get_mut(server) {
                        Some(cores) => cores.run(now, cost),
                        None => (now, now + cost),
                    };
                    self.compute
                        .reconciled(view.len(), cost, start - now, measured);
                    self.answer(actor, incarnation, done - now, Input::Reconciled(step));
                }
                Action::Commit { txn } => {
                    let read = c.read.clone();
                    self.send(actor, Request::Commit { txn, read });
                }
                Action::CheckFences { txn } => self.send(actor, Request::CheckFences(txn)),
                Action::Deposed => {
                    let name = c.name.clone();
                    self.trace
                        .line(now, &name, "commit rejected by the leader fence: deposed");
                    self.deposed(actor);
                    return;
                }
                Action::Failed { reason, retry_in } => {
                    let name = c.name.clone();
                    self.trace.line(
                        now,
                        &name,
                        format!("failed, retry in {retry_in:?}: {reason}"),
                    );
                }
                Action::Fatal { message } => {
                    let name = c.name.clone();
                    self.trace.line(now, &name, format!("fatal: {message}"));
                    self.fatal = Some(format!("controller {name} failed fatally: {message}"));
                }
            }
        }
    }

    fn step_node(&mut self, actor: usize) {
        loop {
            let now = self.now;
            let Actor::Node(n) = &mut self.actors[actor] else {
                return;
            };
            let Some(machine) = n.machine.as_mut() else {
                return;
            };
            let started = std::time::Instant::now();
            machine.tick(now);
            let Some(action) = machine.next_action() else {
                return;
            };
            if !matches!(action, AgentAction::SaveCache { .. }) {
                self.trace.line(now, &n.name, &action);
            }
            // The agent hands its actions out one after the other: this one leaves once the
            // ones before it are done. Saving the cache and keeping the lease happen apart
            // from the loop (on a writer thread, on the keeper's), so they cost it nothing.
            let cost = match action.lane() {
                Lane::Local | Lane::Lease => Duration::ZERO,
                Lane::Store | Lane::Runtime => self.work.agent_cost(keys_named(&action)),
            };
            n.busy_until = n.busy_until.max(now) + cost;
            let busy = n.busy_until - now;
            self.compute.agent_acted(cost, started.elapsed());
            match action {
                AgentAction::Watch { prefix, from } => {
                    self.subs.close_actor(actor);
                    n.watch_generation += 1;
                    let generation = n.watch_generation;
                    if let Err(err) = self.open_watch(actor, generation, &prefix, from)
                        && let Actor::Node(n) = &mut self.actors[actor]
                        && let Some(machine) = n.machine.as_mut()
                    {
                        machine.watch_failed(err);
                    }
                }
                AgentAction::SaveCache { desired } => n.disk = *desired,
                AgentAction::MeasureVolumes { dir } => {
                    // Simulated instances write no data: what the walk finds is nothing.
                    let measured = agent::measure_volumes(&dir);
                    let incarnation = n.incarnation;
                    let outcome = agent::Outcome::VolumesMeasured(measured);
                    self.answer(actor, incarnation, COMPUTE, Input::Agent(outcome));
                }
                AgentAction::Disconnected { .. } => {
                    self.subs.close_actor(actor);
                    n.watch_generation += 1;
                    n.kept = None;
                    n.keeper += 1;
                }
                AgentAction::KeepLease { lease, every } => {
                    n.kept = Some((lease, every));
                    n.keeper += 1;
                    let renew = Event::Renew {
                        node: actor,
                        incarnation: n.incarnation,
                        keeper: n.keeper,
                    };
                    self.agenda.push(now + every, renew);
                }
                AgentAction::RuntimeFailed { .. } => {}
                action if action.lane() == Lane::Store => {
                    self.send_after(actor, busy, Request::Agent(action));
                }
                AgentAction::EnsureStopped { id, grace, reason } => {
                    if matches!(reason, StopReason::Asked | StopReason::Unplaced)
                        && let Err(detail) =
                            check::stop_is_asked(&self.store, &n.name, &id, n.heard)
                    {
                        let broken = (Invariant::NoStopForOutage, detail);
                        self.violate(broken);
                    }
                    let action = AgentAction::EnsureStopped { id, grace, reason };
                    self.run_on_node(actor, busy, action);
                }
                AgentAction::EnsureRunning { spec } => {
                    let here = n.name.clone();
                    let delay = n.start_delay_of(&spec);
                    // Instances run only where an agent started them: the nodes that ever
                    // started this id are the only ones that can run it elsewhere.
                    let started_on = self.started_on.entry(spec.id.clone()).or_default();
                    let elsewhere =
                        started_on
                            .iter()
                            .find_map(|&other| match self.actors.get(other) {
                                Some(Actor::Node(o)) if other != actor && o.machine.is_some() => o
                                    .runtime
                                    .state(&spec.id)
                                    .filter(|s| !s.has_ended())
                                    .map(|_| o.name.clone()),
                                _ => None,
                            });
                    started_on.insert(actor);
                    if let Some(other) = elsewhere {
                        let detail =
                            format!("{} starts on {here} while it runs on {other}", spec.id);
                        self.violate((Invariant::RunsOnce, detail));
                    }
                    if !spec.mounts.is_empty() {
                        self.check_volumes(actor, &here, &spec);
                    }
                    if delay.is_zero() {
                        self.run_on_node(actor, busy, AgentAction::EnsureRunning { spec });
                    } else {
                        self.start_slowly(actor, spec, busy + delay);
                    }
                }
                action => self.run_on_node(actor, busy, action),
            }
        }
    }

    /// Checks a start of `spec` on node `actor` (`here`) against [`Invariant::VolumeAttached`]:
    /// its persistent volumes are attached to this node, and the instance that last started
    /// with each, if another, no longer runs.
    fn check_volumes(&mut self, actor: usize, here: &str, spec: &ccattler_core::InstanceSpec) {
        // An init step mounts its instance's volumes: it is judged as its instance.
        let owner = spec
            .env
            .get("CCATTLER_INSTANCE")
            .unwrap_or(&spec.id)
            .clone();
        let volumes = match check::persistent_volumes(&self.store, here, &owner) {
            Ok(volumes) => volumes,
            Err(broken) => return self.violate(broken),
        };
        for (volume, attached) in volumes {
            let before = self.mounted.get(&volume).filter(|(.., a)| *a == attached);
            if let Some((node, ..)) = before.filter(|(node, ..)| *node != actor) {
                let there = match self.actors.get(*node) {
                    Some(Actor::Node(n)) => n.name.clone(),
                    _ => format!("actor {node}"),
                };
                let detail = format!(
                    "{owner} starts on {here} with volume {volume}, whose data is on {there}"
                );
                return self.violate((Invariant::VolumeAttached, detail));
            }
            let holder = before.filter(|(_, o, _)| *o != owner);
            let running = holder.and_then(|(node, other, _)| match self.actors.get(*node) {
                Some(Actor::Node(n)) if n.machine.is_some() => {
                    let alive = n.runtime.state(other).is_some_and(|s| !s.has_ended());
                    alive.then(|| format!("{other} on {}", n.name))
                }
                _ => None,
            });
            if let Some(running) = running {
                let detail = format!(
                    "{owner} starts on {here} with volume {volume} while {running} runs with it"
                );
                return self.violate((Invariant::VolumeAttached, detail));
            }
            self.mounted
                .insert(volume, (actor, owner.clone(), attached));
        }
    }

    /// Performs a runtime action on the node's simulator; its result returns in 1 to 5 ms after
    /// the agent's `busy` time.
    fn run_on_node(&mut self, actor: usize, busy: Duration, action: AgentAction) {
        let Actor::Node(n) = &self.actors[actor] else {
            return;
        };
        let outcome = agent::perform::runtime_action(&n.runtime, action)
            .now_or_never()
            .flatten();
        let incarnation = n.incarnation;
        let delay = busy + COMPUTE + Duration::from_millis(self.rng.random_range(0..=4));
        if let Some(outcome) = outcome {
            self.answer(actor, incarnation, delay, Input::Agent(outcome));
        }
    }

    /// A start that takes `delay`: the runtime shows the instance starting at once, and the
    /// agent hears the start's answer only when it is over.
    fn start_slowly(
        &mut self,
        actor: usize,
        spec: Box<ccattler_core::InstanceSpec>,
        delay: Duration,
    ) {
        let Actor::Node(n) = &mut self.actors[actor] else {
            return;
        };
        n.runtime.faults().slow_start(spec.id.clone());
        let id = spec.id.clone();
        let outcome =
            agent::perform::runtime_action(&n.runtime, AgentAction::EnsureRunning { spec })
                .now_or_never()
                .flatten();
        if let Some(outcome) = outcome {
            n.starting.insert(id.clone(), outcome);
        }
        let incarnation = n.incarnation;
        self.agenda.push(
            self.now + delay,
            Event::Started {
                node: actor,
                incarnation,
                id,
            },
        );
    }

    /// A node's lease keeper is due: it sends one renewal (facing the network's delays and the
    /// store's faults like any request) and is due again a period later, whatever its agent is
    /// doing. A keeper its agent replaced or ended, or one of an earlier incarnation, is gone.
    pub(crate) fn renew(&mut self, actor: usize, incarnation: u64, keeper: u64) {
        let now = self.now;
        let Actor::Node(n) = &mut self.actors[actor] else {
            return;
        };
        let current = n.machine.is_some() && n.incarnation == incarnation && n.keeper == keeper;
        let Some((lease, every)) = n.kept.filter(|_| current) else {
            return;
        };
        let name = n.name.clone();
        self.trace.line(now, &name, format!("renew lease {lease}"));
        let next = Event::Renew {
            node: actor,
            incarnation,
            keeper,
        };
        self.agenda.push(now + every, next);
        self.send(actor, Request::Renew(lease));
    }

    /// A slow start is over: the instance runs (or exits), and its agent hears of it.
    pub(crate) fn started(&mut self, actor: usize, incarnation: u64, id: &str) {
        let Actor::Node(n) = &mut self.actors[actor] else {
            return;
        };
        n.runtime.faults().release(id);
        if n.incarnation != incarnation {
            return;
        }
        if let Some(outcome) = n.starting.remove(id) {
            let delay = COMPUTE + Duration::from_millis(self.rng.random_range(0..=4));
            self.answer(actor, incarnation, delay, Input::Agent(outcome));
        }
    }

    /// Hands a result to its actor's loop.
    pub(crate) fn feed(&mut self, actor: usize, input: Input) {
        match (&mut self.actors[actor], input) {
            (Actor::Controller(c), Input::Listed(result)) => c.machine.listed(result),
            (Actor::Controller(c), Input::Reconciled(step)) => c.machine.reconciled_step(step),
            (Actor::Controller(c), Input::Committed(result)) => c.machine.committed(result),
            (Actor::Controller(c), Input::FencesChecked(result)) => {
                c.machine.fences_checked(result)
            }
            (Actor::Node(n), Input::Agent(outcome)) => {
                if let agent::Outcome::Listed(Ok(listing)) = &outcome
                    && n.machine.is_some()
                {
                    n.heard = n.heard.max(listing.placements.revision);
                    let told = super::stops::heard_in_list(&n.runtime, listing);
                    self.stops.told(actor, &mut n.told_to_stop, told, self.now);
                }
                if let Some(machine) = n.machine.as_mut() {
                    outcome.feed(machine);
                }
            }
            (Actor::Replica(r), Input::Election(outcome)) => outcome.feed(&mut r.machine),
            _ => {}
        }
    }

    /// Hands a watch event, or the watch's end, to its actor's loop.
    pub(crate) fn deliver(&mut self, actor: usize, item: Option<Result<WatchEvent, StoreError>>) {
        let name = self.actors[actor].name().to_owned();
        match &item {
            Some(Ok(event)) => {
                self.delivered += 1;
                self.trace.line(
                    self.now,
                    &name,
                    format!(
                        "event {:?} {} at {}",
                        event.kind,
                        event.key(),
                        event.revision()
                    ),
                );
            }
            Some(Err(err)) => self
                .trace
                .line(self.now, &name, format!("watch failed: {err}")),
            None => self.trace.line(self.now, &name, "watch ended"),
        }
        let item = match item {
            Some(item) => item,
            None => Err(StoreError::unavailable("the watch ended")),
        };
        match &mut self.actors[actor] {
            Actor::Controller(c) => match item {
                Ok(event) => c.machine.event(event),
                Err(err) => c.machine.watch_failed(err),
            },
            Actor::Node(n) => {
                if let Some(machine) = n.machine.as_mut() {
                    match item {
                        // An agent that is not connected (registering, or listing again)
                        // drops the event, which the list it waits for supersedes: it has not
                        // heard it.
                        Ok(event) if !machine.is_connected() => machine.event(event),
                        Ok(event) => {
                            n.heard = n.heard.max(event.revision());
                            let told = super::stops::heard_in_event(&event);
                            self.stops.told(actor, &mut n.told_to_stop, told, self.now);
                            machine.event(event)
                        }
                        Err(err) => machine.watch_failed(err),
                    }
                }
            }
            Actor::Replica(r) => match item {
                Ok(event) => r.machine.event(event),
                Err(err) => r.machine.watch_failed(err),
            },
        }
    }
}
