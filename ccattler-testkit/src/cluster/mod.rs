//! [`TestCluster`]: a whole cluster in one process, for end-to-end tests and benchmarks.
//!
//! A [`MemoryStore`], a [`TokioRunner`] with every standard controller
//! ([`standard::all`]), and per node the real node agent
//! ([`NodeAgent`](ccattler_runtime::agent::NodeAgent)) over a
//! [`SimulatorRuntime`] serving on the node's address ([`SimulatorRuntime::on_host`]): the same
//! agent `cca agent` runs, registering, watching its placements, starting, probing, restarting
//! per policy and reporting, with workloads that are entries in a table instead of processes.
//!
//! ```no_run
//! # async fn demo() {
//! use std::time::Duration;
//! use ccattler_core::schema::{Cpu, Memory};
//! use ccattler_testkit::cluster::TestCluster;
//!
//! let mut cluster = TestCluster::builder()
//!     .nodes(2, Cpu::from_millis(4_000), Memory::from_bytes(8 << 30))
//!     .build()
//!     .await;
//! cluster.apply("service web {\n  image nginx\n  instances 4\n}\n").await.expect("valid");
//! let state = cluster.wait_converged(Duration::from_secs(10)).await.expect("converges");
//! assert_eq!(state.spread("web").values().sum::<usize>(), 4);
//! cluster.kill_node("n2").await;
//! cluster.shutdown().await;
//! # }
//! ```
//!
//! # Time
//!
//! Everything runs on tokio's clock, the store's leases included (see [`TokioClock`]). Tests use
//! `#[tokio::test(start_paused = true)]`: time is virtual, it jumps ahead whenever every task
//! waits, so a test never sleeps in real time, and lease TTLs, the agents' sync passes and
//! resyncs, start and stop delays and [`wait_until`](TestCluster::wait_until) timeouts are all
//! measured in virtual time. The benchmark runs the same cluster on a normal multi-threaded
//! runtime, in real time.
//!
//! # Nodes: a machine, its workloads, its agent process
//!
//! Each node owns two things that outlive its agent: a cache directory (a temporary directory,
//! removed with the cluster) where the agent keeps the last desired state it saw and its lease,
//! and a [`SimulatorRuntime`] holding its workloads. The agent is a task: killing it is killing
//! the agent process, not the machine's workloads.
//!
//! - [`kill_node`](TestCluster::kill_node): the agent process is gone, aborted where it stood
//!   (an action in flight, such as a stop still in its stop delay, is abandoned), and the node's
//!   lease is revoked at once, so the controllers see the node dead and replace its instances
//!   elsewhere. Its workloads still run in its simulator (with no agent, a crashed one stays
//!   down), and the observations it reported stay in the store (stale from then on).
//! - [`partition_node`](TestCluster::partition_node): the agent process is gone and the lease is
//!   left to expire, one TTL later (a machine that stopped answering). Workloads still run.
//! - [`restart_node`](TestCluster::restart_node): a new agent process over the same cache and
//!   simulator. It resumes its lease if it still lives (else registers under a new one), adopts
//!   what the simulator runs without restarting it, lists its placements, and from then on
//!   stops what is no longer placed there.
//!
//! A workload can fail by itself: [`set_instance_state`](TestCluster::set_instance_state) crashes
//! it in its node's simulator, and the agent applies the service's restart policy as it would
//! to a real crash. [`simulator`](TestCluster::simulator) gives the rest of the simulator's
//! faults (failing probes, failing starts, an unreachable runtime).
//!
//! # Start and stop delays
//!
//! The builder's [`start_delay`](ClusterBuilder::start_delay) and
//! [`stop_delay`](ClusterBuilder::stop_delay) are the simulator's slow starts, released on
//! tokio's clock, and stops that take time; `runtime.rs` says exactly how the agent sees them.
//!
//! | file | what it holds |
//! |---|---|
//! | `builder.rs` | [`ClusterBuilder`], [`NodeSpec`] |
//! | `node.rs` | one node: its cache directory, its simulator, its agent task |
//! | `runtime.rs` | the runtime the agents run on: the simulator with start and stop delays |
//! | `snapshot.rs` | [`Snapshot`], [`WaitTimeout`], [`Recording`] |
//! | `time.rs` | [`TokioClock`] and the lease reaper |

mod builder;
mod node;
mod runtime;
mod snapshot;
mod time;

use builder::Controllers;
pub use builder::{ClusterBuilder, NodeSpec};
pub use snapshot::{Recording, Snapshot, WaitTimeout};
pub use time::{REAPER_INTERVAL, TokioClock};

use std::collections::BTreeMap;
use std::time::Duration;

use ccattler_controllers::apply::{self, ApplyError, ApplyOptions, ApplyReport};
use ccattler_controllers::lang::SourceFile;
use ccattler_controllers::standard;
use ccattler_core::runner::{LoopConfig, RunnerError, TokioRunner};
use ccattler_core::schema::{self, Endpoints, ObservedState, ServiceStatus};
use ccattler_core::{FactStore, Runner};
use ccattler_runtime::simulator::SimulatorRuntime;
use ccattler_store::MemoryStore;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use node::{AgentSettings, Node};
use snapshot::Follower;

/// An in-process cluster: store, runner with the standard controllers, one real node agent per
/// node over a simulator. See the [module docs](self) for how time and node failures work.
///
/// Dropping it aborts every task and removes the nodes' cache directories;
/// [`shutdown`](Self::shutdown) stops the runner gracefully first.
#[derive(Debug)]
pub struct TestCluster {
    store: MemoryStore,
    reaper: JoinHandle<()>,
    agents: AgentSettings,
    loop_config: LoopConfig,
    seed: u64,
    runs: u64,
    runner: Option<RunnerHandle>,
    nodes: BTreeMap<String, Node>,
    controllers: Controllers,
}

#[derive(Debug)]
struct RunnerHandle {
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<(), RunnerError>>,
}

impl TestCluster {
    /// A builder with no nodes and the default settings.
    pub fn builder() -> ClusterBuilder {
        ClusterBuilder::default()
    }

    pub(crate) fn assemble(
        store: MemoryStore,
        reaper: JoinHandle<()>,
        agents: AgentSettings,
        loop_config: LoopConfig,
        seed: u64,
    ) -> Self {
        TestCluster {
            store,
            reaper,
            agents,
            loop_config,
            seed,
            runs: 0,
            runner: None,
            nodes: BTreeMap::new(),
            controllers: Controllers::default(),
        }
    }

    /// The store every part shares.
    pub fn store(&self) -> &MemoryStore {
        &self.store
    }

    /// The names of every node, live or not, in order.
    pub fn node_names(&self) -> Vec<String> {
        self.nodes.keys().cloned().collect()
    }

    /// Adds a node (a fresh cache directory, an empty simulator) and starts its agent; it
    /// registers asynchronously. A node of the same name is replaced: its agent is aborted and
    /// its workloads and cache are dropped.
    ///
    /// # Panics
    ///
    /// When the node's name is not a single key segment, or no temporary directory can be
    /// created for its cache.
    pub fn add_node(&mut self, spec: NodeSpec) {
        let name = spec.name().to_owned();
        let mut node = Node::new(spec, self.agents.pacing);
        node.start_agent(&self.store, self.agents);
        self.nodes.insert(name, node);
    }

    fn node_mut(&mut self, name: &str) -> &mut Node {
        self.nodes
            .get_mut(name)
            .unwrap_or_else(|| panic!("no node named {name}"))
    }

    /// The simulator holding a node's workloads (shared with its agent, kept across agent
    /// restarts), to read the truth or inject faults ([`SimulatorRuntime::faults`]). `None`
    /// when there is no such node.
    pub fn simulator(&self, node: &str) -> Option<&SimulatorRuntime> {
        self.nodes.get(node).map(Node::simulator)
    }

    /// Whether a node's agent process runs (not killed or partitioned). False when there is no
    /// such node.
    pub fn agent_running(&self, node: &str) -> bool {
        self.nodes.get(node).is_some_and(Node::has_agent)
    }

    /// Kills a node's agent process and revokes its lease at once: the controllers see the node
    /// dead. Its workloads keep running in its simulator, and its observed facts stay.
    ///
    /// # Panics
    ///
    /// When there is no such node, or its agent had stopped with an error or panicked.
    pub async fn kill_node(&mut self, name: &str) {
        self.node_mut(name).kill_agent().await;
        let key = schema::keys::node_lease(name).expect("node names are valid key segments");
        let fact = self.store.get(&key).await.expect("memory store get");
        if let Some(lease) = fact.and_then(|f| f.lease) {
            // Already expired is fine too.
            let _ = self.store.revoke_lease(lease).await;
        }
    }

    /// Kills a node's agent process without revoking its lease: the node is seen dead once the
    /// lease expires, one TTL later (virtual time in tests). Its workloads keep running.
    ///
    /// # Panics
    ///
    /// As [`kill_node`](Self::kill_node).
    pub async fn partition_node(&mut self, name: &str) {
        self.node_mut(name).kill_agent().await;
    }

    /// Starts a new agent process on a node whose agent was killed or partitioned (nothing
    /// happens if one runs). It keeps the node's cache and simulator: it resumes its lease if
    /// that still lives, or registers under a new one, and adopts the workloads that still run.
    ///
    /// # Panics
    ///
    /// When there is no such node.
    pub fn restart_node(&mut self, name: &str) {
        let (store, agents) = (self.store.clone(), self.agents);
        self.node_mut(name).start_agent(&store, agents);
    }

    /// Makes instance `id` end by itself in its node's simulator, as a crash (`failed`: exit
    /// code 1) or a clean end (`exited`: exit code 0) would; its node's agent then applies the
    /// service's restart policy (`always` starts it again in place, `on_failure` only after a
    /// failure, `never` leaves it ended and reports it so). This happens whether or not the
    /// node's agent runs: the agent sees it when it observes next.
    ///
    /// Returns false, and does nothing, when `state` is neither `failed` nor `exited`, when the
    /// instance is not placed, or when it is not starting or running in its node's simulator.
    pub async fn set_instance_state(&self, id: &str, state: ObservedState) -> bool {
        let code = match state {
            ObservedState::Failed => 1,
            ObservedState::Exited => 0,
            _ => return false,
        };
        let snapshot = self.snapshot().await;
        let node = snapshot
            .cluster()
            .instances
            .get(id)
            .and_then(|i| i.node.clone());
        node.and_then(|n| self.nodes.get(&n))
            .is_some_and(|n| n.simulator().faults().crash(id, code))
    }

    /// Starts a runner with every standard controller, if none runs.
    pub fn start_runner(&mut self) {
        if self.runner.is_some() {
            return;
        }
        self.runs += 1;
        let mut runner = TokioRunner::new(self.store.clone())
            .config(self.loop_config.clone())
            .seed(self.seed.wrapping_add(self.runs));
        for controller in standard::all()
            .into_iter()
            .chain(self.controllers.0.clone())
        {
            runner = runner.controller_arc(controller);
        }
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(runner.run(async move {
            let _ = stopped.await;
        }));
        self.runner = Some(RunnerHandle { stop, task });
    }

    /// Stops the runner gracefully, if one runs.
    ///
    /// # Panics
    ///
    /// When the runner failed, or did not stop within its shutdown timeout.
    pub async fn stop_runner(&mut self) {
        let Some(RunnerHandle { stop, task }) = self.runner.take() else {
            return;
        };
        let _ = stop.send(());
        let limit = self.loop_config.shutdown_timeout + Duration::from_secs(5);
        tokio::time::timeout(limit, task)
            .await
            .expect("the runner stops within its shutdown timeout")
            .expect("the runner task does not panic")
            .expect("the runner stops without error");
    }

    /// Stops the runner and starts a new one over the same store.
    pub async fn restart_runner(&mut self) {
        self.stop_runner().await;
        self.start_runner();
    }

    /// Applies a `.cca` document (see [`apply::apply_file`]).
    ///
    /// # Errors
    ///
    /// [`ApplyError`]: the document is invalid (nothing is written), or too large.
    pub async fn apply(&self, text: &str) -> Result<ApplyReport, ApplyError> {
        self.apply_with(text, ApplyOptions::default()).await
    }

    /// Applies a `.cca` document with options (`prune` to delete what it no longer declares).
    ///
    /// # Errors
    ///
    /// As [`apply`](Self::apply).
    pub async fn apply_with(
        &self,
        text: &str,
        options: ApplyOptions,
    ) -> Result<ApplyReport, ApplyError> {
        let file = SourceFile::new("test.cca", text);
        apply::apply_file(&self.store, &file, options).await
    }

    /// The whole store now.
    pub async fn snapshot(&self) -> Snapshot {
        Follower::start(&self.store).await.snapshot().clone()
    }

    /// Waits until `predicate` holds for the store, checking it at once and after every burst of
    /// changes (a watch, no polling). Returns the snapshot it held on.
    ///
    /// # Errors
    ///
    /// [`WaitTimeout`] with the last snapshot when `timeout` passes first.
    pub async fn wait_until(
        &self,
        timeout: Duration,
        mut predicate: impl FnMut(&Snapshot) -> bool,
    ) -> Result<Snapshot, WaitTimeout> {
        let mut follower = Follower::start(&self.store).await;
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if predicate(follower.snapshot()) {
                return Ok(follower.snapshot().clone());
            }
            tokio::select! {
                biased;
                () = follower.next(false) => {}
                () = tokio::time::sleep_until(deadline) => {
                    return Err(WaitTimeout { waited: timeout, last: follower.snapshot().clone() });
                }
            }
        }
    }

    /// Waits until [`Snapshot::is_converged`].
    ///
    /// # Errors
    ///
    /// [`WaitTimeout`] when `timeout` passes first.
    pub async fn wait_converged(&self, timeout: Duration) -> Result<Snapshot, WaitTimeout> {
        self.wait_until(timeout, Snapshot::is_converged).await
    }

    /// Records `f` of every revision from now on, until [`Recording::finish`].
    pub async fn record<T, F>(&self, f: F) -> Recording<T>
    where
        T: PartialEq + Send + 'static,
        F: FnMut(&Snapshot) -> T + Send + 'static,
    {
        Recording::start(&self.store, f).await
    }

    /// `status/service/{svc}` now.
    pub async fn status(&self, service: &str) -> Option<ServiceStatus> {
        self.snapshot().await.status(service)
    }

    /// `endpoint/service/{svc}` now.
    pub async fn endpoints(&self, service: &str) -> Option<Endpoints> {
        self.snapshot().await.endpoints(service)
    }

    /// How many placements each node holds now.
    pub async fn placements(&self) -> BTreeMap<String, usize> {
        self.snapshot().await.placements()
    }

    /// Stops the runner gracefully, then kills every agent (waiting until each is gone) and the
    /// lease reaper, and removes the nodes' cache directories.
    ///
    /// # Panics
    ///
    /// As [`stop_runner`](Self::stop_runner), and when an agent had stopped with an error or
    /// panicked.
    pub async fn shutdown(mut self) {
        self.stop_runner().await;
        for node in self.nodes.values_mut() {
            node.kill_agent().await;
        }
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        if let Some(runner) = self.runner.take() {
            runner.task.abort();
        }
        // Dropping a node aborts its agent.
        self.nodes.clear();
        self.reaper.abort();
    }
}
