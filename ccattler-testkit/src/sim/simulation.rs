//! [`Simulation`]: a run being set up, stepped, and brought to its end.

use std::sync::Arc;
use std::time::Duration;

use ccattler_controllers::apply::DesiredFacts;
use ccattler_controllers::standard;
use ccattler_core::FactView;
use ccattler_core::runner::LoopConfig;
use ccattler_runtime::agent::AgentConfig;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::actors::{Actor, ControllerActor, NodeActor};
use super::faults::Schedule;
use super::world::{self, Event, World};
use super::{FaultRates, Keep, Recipe, Report, SimulationBuilder, Trace, Violation, replicas};
use crate::cluster::Snapshot;

/// A seeded run of the whole cluster. See the [module docs](super).
pub struct Simulation {
    pub(super) world: World,
    seed: u64,
    schedule: Schedule,
    /// When the last fault, outage or scripted step is over.
    quiet: Duration,
    settle: Duration,
}

impl std::fmt::Debug for Simulation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Simulation")
            .field("seed", &self.seed)
            .field("now", &self.world.now)
            .field("actors", &self.world.actors.len())
            .finish_non_exhaustive()
    }
}

impl Simulation {
    /// A builder for a run that applies `desired` (the facts of a checked `.cca` document).
    pub fn builder(desired: DesiredFacts) -> SimulationBuilder {
        let controllers = (0..standard::all().len()).map(Recipe::Standard).collect();
        SimulationBuilder {
            desired,
            later: Vec::new(),
            facts: Vec::new(),
            failing_images: Vec::new(),
            outages: Vec::new(),
            start_delay: Duration::ZERO,
            slow_images: Vec::new(),
            replicas: 1,
            fenced: true,
            seed: 0,
            nodes: Vec::new(),
            controllers,
            faults: FaultRates::none(),
            schedule: None,
            duration: Duration::from_secs(60),
            settle: Duration::from_secs(120),
            lease_ttl: Duration::from_secs(10),
            loop_config: LoopConfig::default(),
            keep: Keep::Last(200),
            work: super::WorkModel::default(),
            load: None,
        }
    }

    pub(super) fn new(builder: SimulationBuilder) -> Self {
        let schedule = builder.planned_schedule();
        let mut rng = SmallRng::seed_from_u64(builder.seed);
        let trace = Trace::new(builder.keep);
        let documents = std::iter::once(builder.desired.clone())
            .chain(builder.later.iter().map(|(_, d)| d.clone()))
            .collect();
        let mut world = World::new(
            SmallRng::seed_from_u64(rng.random()),
            trace,
            documents,
            builder.work.clone(),
        );
        // A run's own model unless the caller drives one: runs of one builder never share
        // what a surge set.
        let load = builder.load.clone().unwrap_or_default();
        world.load = load.clone();
        world.trace.line(
            world.now,
            "sim",
            format!(
                "seed {}, {} nodes, {} controllers, {} faults",
                builder.seed,
                builder.nodes.len(),
                builder.controllers.len(),
                schedule.faults.len()
            ),
        );
        let limit = ccattler_core::FactStore::limits(&world.store).max_txn_ops;
        // One lease for the controllers' events, outliving any run.
        let events_lease = world::ready(ccattler_core::FactStore::grant_lease(
            &world.store,
            Duration::from_secs(365 * 24 * 3600),
        ))
        .ok()
        .map(|lease| lease.id);
        let elected = builder.replicas > 1;
        // One cluster shared by every standard controller of this run, made, restarted and
        // replicated, as the controllers of one process share it: each reads its own view, so
        // sharing across replicas and restarts holds too, and puts the shared path to the
        // hardest test. (Never across runs: each run is a cluster of its own.)
        let shared = Arc::new(standard::SharedCluster::new());
        for r in 0..builder.replicas {
            let mut controllers = Vec::new();
            for recipe in &builder.controllers {
                let mut actor = ControllerActor::new(
                    recipe.for_run(&shared),
                    builder.loop_config.clone(),
                    rng.random(),
                    limit,
                    events_lease,
                );
                actor.server = r;
                if elected {
                    actor.name = format!("runner-{}/{}", r + 1, actor.name);
                    actor.active = false;
                }
                let index = world.add_controller(actor);
                controllers.push(index);
                let wake = Event::Wake {
                    actor: index,
                    due: Duration::ZERO,
                };
                world.agenda.push(Duration::ZERO, wake);
            }
            if !elected {
                continue;
            }
            let name = format!("runner-{}", r + 1);
            let replica =
                replicas::ReplicaActor::new(name, controllers, builder.fenced, builder.lease_ttl);
            if let Some(replica) = replica {
                let campaign = Duration::from_millis(rng.random_range(0..100));
                let index = world.add_replica(replica);
                let wake = Event::Wake {
                    actor: index,
                    due: campaign,
                };
                world.agenda.push(campaign, wake);
            }
        }
        for (node, boot) in &builder.nodes {
            let config =
                AgentConfig::for_status(node.status.clone(), format!("/sim/{}", node.name()))
                    .lease_ttl(builder.lease_ttl);
            let mut actor = NodeActor::new(config, &load);
            actor.failing_images = builder.failing_images.clone();
            actor.start_delay = builder.start_delay;
            actor.slow_images = builder.slow_images.clone();
            actor.apply_failing_images();
            let index = world.add_node(actor);
            let at = boot.unwrap_or_else(|| Duration::from_millis(rng.random_range(0..2_000)));
            world.agenda.push(at, Event::Boot(index));
        }
        world.agenda.push(
            Duration::from_millis(rng.random_range(0..1_000)),
            Event::Apply(0),
        );
        for (index, (at, _)) in builder.later.iter().enumerate() {
            world.agenda.push(*at, Event::Apply(index + 1));
        }
        for (at, key, value) in &builder.facts {
            if at.is_zero() {
                world.put(key, value.clone());
            } else {
                world
                    .agenda
                    .push(*at, Event::Put(key.clone(), value.clone()));
            }
        }
        for (at, length) in &builder.outages {
            world.agenda.push(*at, Event::Outage(*at + *length));
        }
        world.schedule(&schedule);
        let scripted = builder
            .later
            .iter()
            .map(|(at, _)| *at)
            .chain(builder.outages.iter().map(|(at, length)| *at + *length))
            .chain(builder.facts.iter().map(|(at, _, _)| *at))
            .chain(builder.nodes.iter().filter_map(|(_, boot)| *boot))
            .max()
            .unwrap_or_default();
        let quiet = schedule.quiet_after().max(builder.duration).max(scripted);
        Simulation {
            world,
            seed: builder.seed,
            schedule,
            quiet,
            settle: builder.settle,
        }
    }

    /// The virtual time the simulation has reached.
    pub fn now(&self) -> Duration {
        self.world.now
    }

    /// The first invariant broken so far, if any.
    pub fn violation(&self) -> Option<&Violation> {
        self.world.violation.as_ref()
    }

    /// Handles every event due by `at` and moves the clock there. An invariant that breaks stops
    /// the simulation where it broke: the clock stays there, so a loop stepping to a later time
    /// must also stop on [`violation`](Self::violation).
    pub fn run_until(&mut self, at: Duration) {
        while self.world.fatal.is_none() && self.world.violation.is_none() && self.world.step(at) {}
        if self.world.violation.is_none() {
            self.world.now = self.world.now.max(at);
        }
    }

    /// Runs until the cluster converged after the last fault, or the settle bound passed.
    pub fn run(mut self) -> Report {
        let deadline = self.quiet + self.settle;
        let mut next_check = self.quiet;
        let mut converged_at = None;
        while self.world.now <= deadline
            && self.world.fatal.is_none()
            && self.world.violation.is_none()
        {
            if self.world.step(next_check) {
                continue;
            }
            // Nothing is due before the next check: time jumps to it.
            self.world.now = self.world.now.max(next_check);
            if self.converged() {
                converged_at = Some(next_check);
                break;
            }
            next_check += Duration::from_secs(1);
        }
        let state = self
            .snapshot()
            .map(|s| {
                let mut text = s.summary();
                for gap in s.gaps().iter().take(10) {
                    text.push_str(&format!("\n  not converged: {gap}"));
                }
                text
            })
            .unwrap_or_default();
        Report {
            state,
            seed: self.seed,
            fired: self.world.fired.clone(),
            quiet_after: self.quiet,
            converged_at,
            settle: self.settle,
            fatal: self.world.fatal.take(),
            violation: self.world.violation.take(),
            steps: self.world.steps,
            compute: self.world.compute,
            schedule: self.schedule,
            trace: self.world.trace,
        }
    }

    fn converged(&self) -> bool {
        self.snapshot().is_some_and(|s| s.is_converged())
    }

    /// How many instances of `service` really run now on nodes whose machine is up: the
    /// simulators' truth, not what the store says.
    pub fn running(&self, service: &str) -> usize {
        self.world
            .actors
            .iter()
            .filter_map(|actor| match actor {
                Actor::Node(node) if node.machine.is_some() => {
                    Some(node.runtime.running_of(service).len())
                }
                _ => None,
            })
            .sum()
    }

    /// Writes one fact now, as a user or the API would (a rollout request, a pushed metric):
    /// the controllers and agents see it as any other write.
    ///
    /// # Errors
    ///
    /// What the store answers: [`StoreError`](ccattler_core::StoreError).
    pub fn put(
        &mut self,
        key: &ccattler_core::Key,
        value: impl Into<ccattler_core::Value>,
    ) -> Result<(), ccattler_core::StoreError> {
        world::ready(ccattler_core::FactStore::put(
            &self.world.store,
            key,
            value.into(),
        ))
        .map(|_| ())
    }

    /// The whole store now.
    pub fn snapshot(&self) -> Option<Snapshot> {
        let scan = world::ready(ccattler_core::FactStore::scan(&self.world.store, "")).ok()?;
        Some(Snapshot::new(FactView::from_facts(
            scan.revision,
            scan.facts,
        )))
    }
}
