//! [`Simulation`]: the whole cluster in one process on virtual time, built from one seed.
//!
//! A simulation runs the real parts: the real [`ControllerLoop`](ccattler_core::runner::ControllerLoop)
//! of every standard controller (and of any controller you add), the real
//! [`AgentLoop`](ccattler_runtime::agent::AgentLoop) of every node over a
//! [`SimulatorRuntime`](ccattler_runtime::simulator::SimulatorRuntime), on a
//! [`MemoryStore`](ccattler_store::MemoryStore) whose leases expire on the simulation's clock.
//! Only the drivers differ from production: instead of tokio tasks, one agenda of events
//! ordered by virtual time performs every action.
//!
//! ```
//! use std::time::Duration;
//! use ccattler_controllers::lang::{self, SourceFile};
//! use ccattler_core::schema::{Cpu, Memory};
//! use ccattler_testkit::sim::{FaultRates, Simulation};
//!
//! let file = SourceFile::new("web.cca", "service web {\n  image nginx\n  instances 4\n}\n");
//! let desired = lang::check(&file).expect("valid").to_facts();
//! let report = Simulation::builder(desired)
//!     .seed(7)
//!     .nodes(2, Cpu::from_millis(4_000), Memory::from_bytes(8 << 30))
//!     .faults(FaultRates::default())
//!     .duration(Duration::from_secs(20))
//!     .run();
//! assert!(report.passed(), "{}", report.explain());
//! ```
//!
//! # Determinism
//!
//! One generator, seeded once, decides every delay (and so every interleaving), every id, every
//! fault and its target; one clock is the only time. Nothing reads the wall clock, entropy, a
//! hash order or a thread. The same seed and inputs give the same [`Trace`], byte for byte.
//!
//! # The model
//!
//! - **Messages.** A request to the store (a list, a commit, an agent's registration, fetch,
//!   renewal or report) takes 1 to 5 ms to arrive, is executed on arrival, and its answer takes
//!   1 to 5 ms back. A watch's events of one revision travel together, as one message (as
//!   etcd sends them), in 1 to 5 ms, never overtaking the message before them; the watcher
//!   takes them all in before it acts. A watch is opened at once. An agent's lease is renewed
//!   every third of its TTL on a schedule of its own (as its keeper does), whatever the agent
//!   is doing.
//! - **Work.** Work costs virtual time in proportion to what it handles ([`WorkModel`]): a
//!   reconcile 1 ms plus 200 ns per fact of the view it reads and 5 us per change it proposes,
//!   on one of its server's two cores (it waits while both are busy, so a long pass delays the
//!   others); an agent's action 20 us plus 2 us per key, one action at a time per agent. The
//!   run's [`Compute`] holds what was charged beside the real time the same work took, and how
//!   long reconciles waited for a core. A runtime operation takes 1 to 5 ms; a start, as long as
//!   [`start_delay`](SimulationBuilder::start_delay) or
//!   [`slow_image`](SimulationBuilder::slow_image) says (none by default), during which the
//!   agent's start of that instance is in flight and its other instances go on.
//! - **Start.** The user's apply happens within the first second; nodes boot within the first
//!   two seconds, in an order the seed decides, so a node may register after the apply. Each
//!   document is the whole desired state: applying a later one deletes what it no longer
//!   declares. The workload can be drawn from the seed as well
//!   ([`Workload`](crate::workload::Workload), [`Chaos::generated`]).
//! - **Faults.** Drawn from [`FaultRates`] into a [`Schedule`] over
//!   [`duration`](SimulationBuilder::duration); each kind's model is documented on
//!   [`FaultKind`].
//! - **Invariants.** After every step, as [`Invariant`]'s docs list them, each with the bound
//!   it allows derived on its constant ([`EXCESS_GRACE`], [`ENDPOINT_GRACE`],
//!   [`SILENT_LOSS_GRACE`], [`STOP_BOUND`], [`SECRET_RESTART_WINDOW`]); every service is judged exactly, however large.
//!   The first one broken stops the run and fails it, with the seed, the step and the trace's
//!   last lines.
//! - **Convergence.** Once the last fault's effects end, the run goes on without faults for at
//!   most [`settle`](SimulationBuilder::settle) (default 120 s: four resyncs, twelve default lease
//!   TTLs) and passes when the store is converged
//!   ([`Snapshot::is_converged`](crate::cluster::Snapshot::is_converged)): every service has
//!   exactly its count of current instances, running and ready on live nodes (but those its
//!   restart policy leaves ended), with status and endpoints saying so, spread as the scheduler
//!   controller's rule asks. A document that cannot converge (a requirement no node meets)
//!   never passes; a report that did not converge lists the gaps.
//!
//! | file | what it holds |
//! |---|---|
//! | `simulation.rs`, `report.rs` | [`Simulation`] (set up, stepped, run to its end) and its [`Report`] |
//! | `world.rs` | the agenda, the store, messages and their delays, watches' deliveries |
//! | `requests.rs` | requests reaching the store, an outage and the control plane's return |
//! | `actors.rs` | the drivers of the controller loops and agent loops |
//! | `net.rs` | watches, polled only when the store wakes them |
//! | `faults.rs`, `inject.rs` | [`FaultKind`], [`FaultRates`], [`Schedule`]; injecting a fault |
//! | `surge.rs` | a load surge on an autoscaled service, and its end |
//! | `replicas.rs` | runner replicas under leader election, their fences, a paused leader |
//! | `stops.rs` | what each agent heard it must stop, checked against the simulators |
//! | `check.rs`, `tally.rs` | the [`Invariant`]s checked after every step, and the first [`Violation`]; each service's counts, kept one instance at a time |
//! | `trace.rs` | [`Trace`] |
//! | `chaos.rs` | [`Chaos`]: many seeds on several threads, and their [`Summary`] |
//! | `shrink.rs` | [`shrink`]: a failing run reduced to the faults and the workload it needs |
//! | `script.rs` | scripted runs: a document applied or a node crashed while it runs, and what it cost |
//! | `work.rs` | [`WorkModel`]: what work costs in virtual time, and the cores it waits for |
//! | `queue.rs` | the agenda |

mod actors;
mod chaos;
mod check;
mod faults;
mod inject;
mod net;
mod queue;
mod replicas;
mod report;
mod requests;
mod script;
mod shrink;
mod simulation;
mod stops;
mod surge;
mod tally;
mod trace;
mod work;
mod world;

pub use actors::EPOCH;
pub use chaos::{Chaos, Run, Summary};
pub use check::{
    ENDPOINT_GRACE, EXCESS_GRACE, Invariant, SECRET_RESTART_WINDOW, SILENT_LOSS_GRACE, STOP_BOUND,
    Violation,
};
pub use faults::{Fault, FaultKind, FaultRates, FaultSpecError, Schedule};
pub use replicas::LEADER_KEY;
pub use report::{Compute, Report};
pub use shrink::shrink;
pub use simulation::Simulation;
pub use trace::{Keep, Trace};
pub use work::WorkModel;

use std::sync::Arc;
use std::time::Duration;

use ccattler_controllers::apply::DesiredFacts;
use ccattler_core::Controller;
use ccattler_core::runner::LoopConfig;
use ccattler_core::schema::{Cpu, Memory};
use rand::SeedableRng;
use rand::rngs::SmallRng;

use crate::cluster::NodeSpec;

/// Makes a fresh controller object (on start, and again on each restart).
pub(crate) type MakeController = Arc<dyn Fn() -> Arc<dyn Controller> + Send + Sync>;

/// How a builder makes one of its controllers, for each run it builds.
#[derive(Clone)]
pub(crate) enum Recipe {
    /// The standard controller of this index in
    /// [`standard::all`](ccattler_controllers::standard::all), sharing its run's decoded
    /// cluster with the other standard ones (as the controllers of one process do). Never
    /// shared between runs: two simulations are two clusters.
    Standard(usize),
    /// One of the user's.
    Custom(MakeController),
}

impl Recipe {
    /// The maker of this controller in the run whose standard controllers share `shared`.
    pub(crate) fn for_run(
        &self,
        shared: &Arc<ccattler_controllers::standard::SharedCluster>,
    ) -> MakeController {
        match self {
            Recipe::Standard(i) => {
                let (shared, i) = (Arc::clone(shared), *i);
                Arc::new(move || {
                    ccattler_controllers::standard::all_sharing(Arc::clone(&shared))[i].clone()
                })
            }
            Recipe::Custom(make) => Arc::clone(make),
        }
    }
}

/// Builds a [`Simulation`]; start with [`Simulation::builder`].
///
/// | setting | default |
/// |---|---|
/// | [`seed`](Self::seed) | 0 |
/// | nodes | none: add them with [`nodes`](Self::nodes) or [`node`](Self::node) |
/// | controllers | every standard controller; add your own with [`controller`](Self::controller) |
/// | [`faults`](Self::faults) | none |
/// | [`schedule`](Self::schedule) | drawn from the faults' rates and the seed |
/// | [`duration`](Self::duration) | 60 s of virtual time during which faults fire |
/// | [`settle`](Self::settle) | 120 s: the convergence bound after the last fault |
/// | [`lease_ttl`](Self::lease_ttl) | 10 s |
/// | [`keep`](Self::keep) | the last 200 trace lines |
/// | [`work`](Self::work) | [`WorkModel::default`]: work costs its time, two cores a server |
#[derive(Clone)]
#[must_use]
pub struct SimulationBuilder {
    desired: DesiredFacts,
    later: Vec<(Duration, DesiredFacts)>,
    facts: Vec<(Duration, ccattler_core::Key, ccattler_core::Value)>,
    failing_images: Vec<String>,
    outages: Vec<(Duration, Duration)>,
    start_delay: Duration,
    slow_images: Vec<(String, Duration)>,
    replicas: usize,
    fenced: bool,
    seed: u64,
    nodes: Vec<(NodeSpec, Option<Duration>)>,
    controllers: Vec<Recipe>,
    faults: FaultRates,
    schedule: Option<Schedule>,
    duration: Duration,
    settle: Duration,
    lease_ttl: Duration,
    loop_config: LoopConfig,
    keep: Keep,
    work: WorkModel,
    /// The caller's load model, if given (else each run has one of its own).
    load: Option<ccattler_runtime::simulator::Load>,
}

impl std::fmt::Debug for SimulationBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimulationBuilder")
            .field("seed", &self.seed)
            .field("nodes", &self.nodes.len())
            .field("controllers", &self.controllers.len())
            .field("faults", &self.faults)
            .field("duration", &self.duration)
            .finish_non_exhaustive()
    }
}

impl SimulationBuilder {
    /// Sets the seed.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Adds `count` nodes `n1`, `n2`, ... with `cpu` and `memory` each.
    pub fn nodes(mut self, count: usize, cpu: Cpu, memory: Memory) -> Self {
        let first = self.nodes.len() + 1;
        for i in first..first + count {
            self.nodes
                .push((NodeSpec::new(format!("n{i}"), cpu, memory), None));
        }
        self
    }

    /// Adds one node (it boots within the first two seconds).
    pub fn node(mut self, node: NodeSpec) -> Self {
        self.nodes.push((node, None));
        self
    }

    /// Adds a node that boots at `at` (for one that joins after the apply).
    pub fn late_node(mut self, node: NodeSpec, at: Duration) -> Self {
        self.nodes.push((node, Some(at)));
        self
    }

    /// Applies another document at `at` (a new version, a scale change).
    pub fn then_apply(mut self, at: Duration, desired: DesiredFacts) -> Self {
        self.later.push((at, desired));
        self
    }

    /// Writes `value` at `key` at `at`, as a user would (a secret, `secret/NAME`, set or
    /// changed): at time zero, before the first apply; later, while the cluster runs.
    pub fn fact(
        mut self,
        at: Duration,
        key: ccattler_core::Key,
        value: impl Into<ccattler_core::Value>,
    ) -> Self {
        self.facts.push((at, key, value.into()));
        self
    }

    /// Makes every network probe of instances of `image` fail, on every node: a build that runs
    /// but never serves.
    pub fn failing_probes(mut self, image: impl Into<String>) -> Self {
        self.failing_images.push(image.into());
        self
    }

    /// Makes every start take `delay` on every node: the instance stays starting that long (an
    /// image pull, a slow boot), and the agent's start of it is in flight all that time.
    /// Default: none, an instance runs at once.
    pub fn start_delay(mut self, delay: Duration) -> Self {
        self.start_delay = delay;
        self
    }

    /// Makes every start of instances of `image` take `delay`, on every node (a large image to
    /// pull), as [`start_delay`](Self::start_delay) does for all.
    pub fn slow_image(mut self, image: impl Into<String>, delay: Duration) -> Self {
        self.slow_images.push((image.into(), delay));
        self
    }

    /// Makes the control plane unreachable from `at` for `length`: every request to the store
    /// is refused and every watch breaks, while time (and the store's leases) goes on; when it
    /// is back, every controller starts over, as a restarted server's would.
    pub fn outage(mut self, at: Duration, length: Duration) -> Self {
        self.outages.push((at, length));
        self
    }

    /// Adds a controller of your own beside the standard ones; `make` builds a fresh object on
    /// start and on each of its restarts.
    pub fn controller<F>(mut self, make: F) -> Self
    where
        F: Fn() -> Arc<dyn Controller> + Send + Sync + 'static,
    {
        self.controllers.push(Recipe::Custom(Arc::new(make)));
        self
    }

    /// Sets which faults fire and how often.
    pub fn faults(mut self, rates: FaultRates) -> Self {
        self.faults = rates;
        self
    }

    /// Injects exactly these faults instead of drawing them (to replay or shrink a schedule).
    pub fn schedule(mut self, schedule: Schedule) -> Self {
        self.schedule = Some(schedule);
        self
    }

    /// Sets how long faults may fire.
    pub fn duration(mut self, duration: Duration) -> Self {
        self.duration = duration;
        self
    }

    /// Sets how long the cluster has to converge after the last fault.
    pub fn settle(mut self, settle: Duration) -> Self {
        self.settle = settle;
        self
    }

    /// Raises the convergence bound to `settle` if it is lower.
    pub fn settle_at_least(mut self, settle: Duration) -> Self {
        self.settle = self.settle.max(settle);
        self
    }

    /// What the nodes' instances use: a model the caller keeps a clone of and changes between
    /// steps of the run ([`Simulation::run_until`]). Without it, every instance idles (and
    /// each run has a model of its own, which only load surges change). Every run built from
    /// this builder shares the model given here: drive one run at a time with it.
    pub fn load(mut self, load: &ccattler_runtime::simulator::Load) -> Self {
        self.load = Some(load.clone());
        self
    }

    /// Sets the nodes' lease TTL.
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.lease_ttl = ttl;
        self
    }

    /// Sets the controller loops' timing.
    pub fn loop_config(mut self, config: LoopConfig) -> Self {
        self.loop_config = config;
        self
    }

    /// Sets what work costs in virtual time and how many cores each server has
    /// ([`WorkModel::free`] for work that costs nothing).
    pub fn work(mut self, work: WorkModel) -> Self {
        self.work = work;
        self
    }

    /// Sets how much of the trace to keep.
    pub fn keep(mut self, keep: Keep) -> Self {
        self.keep = keep;
        self
    }

    /// The schedule this builder's run injects.
    pub fn planned_schedule(&self) -> Schedule {
        match &self.schedule {
            Some(schedule) => schedule.clone(),
            None => self.faults.schedule(
                &mut SmallRng::seed_from_u64(self.seed ^ SCHEDULE_SALT),
                self.duration,
            ),
        }
    }

    /// Runs `count` runner replicas under leader election (the leader key is [`LEADER_KEY`],
    /// the lease TTL that of the nodes); only the leader's controllers run. One (the default)
    /// runs a single runner that always leads.
    pub fn replicas(mut self, count: usize) -> Self {
        self.replicas = count.max(1);
        self
    }

    /// Leaves the leader's fence off its commits. Only for proving that the checker catches a
    /// deposed leader's write ([`Invariant::DeposedWrite`]); a real runner always fences.
    pub fn unfenced(mut self) -> Self {
        self.fenced = false;
        self
    }

    /// Runs the simulation to its end.
    pub fn run(self) -> Report {
        Simulation::new(self).run()
    }

    /// The simulation, ready to step with [`Simulation::run_until`].
    pub fn build(self) -> Simulation {
        Simulation::new(self)
    }
}

/// Keeps the fault schedule's draws apart from the run's, so that adding a fault does not
/// change every delay of the run.
const SCHEDULE_SALT: u64 = 0x5eed_fa17_5eed_fa17;
