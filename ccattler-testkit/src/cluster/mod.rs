//! [`TestCluster`]: a whole cluster in one process, for end-to-end tests and benchmarks.
//!
//! A [`MemoryStore`], a [`TokioRunner`] with every standard controller
//! ([`standard::all`]), and one [`FakeAgent`] per node: a minimal stand-in for the node agent
//! that reports instances running as soon as they are placed (the real agent comes later).
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
//! waits, so a test never sleeps in real time, and lease TTLs, resyncs, start and stop delays
//! and [`wait_until`](TestCluster::wait_until) timeouts are all measured in virtual time. The
//! benchmark runs the same cluster on a normal multi-threaded runtime, in real time.
//!
//! # Node failures
//!
//! - [`kill_node`](TestCluster::kill_node): the agent stops and its lease is revoked at once (a
//!   crashed machine whose death is noticed); its observed facts stay.
//! - [`partition_node`](TestCluster::partition_node): the agent stops and its lease expires after
//!   its TTL (a machine that stopped answering).
//! - [`restart_node`](TestCluster::restart_node): a new agent registers again and re-adopts what
//!   the node reported before.
//!
//! | file | what it holds |
//! |---|---|
//! | `builder.rs` | [`ClusterBuilder`], [`NodeSpec`] |
//! | `agent.rs` | [`FakeAgent`], [`AgentControl`], [`AgentTiming`] |
//! | `world.rs` | what one stand-in node knows and runs, and the observations it reports |
//! | `snapshot.rs` | [`Snapshot`], [`WaitTimeout`], [`Recording`] |
//! | `time.rs` | [`TokioClock`] and the lease reaper |

mod agent;
mod builder;
mod snapshot;
mod time;
mod world;

pub use agent::{AgentControl, AgentTiming, FakeAgent};
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
use ccattler_store::MemoryStore;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use snapshot::Follower;

/// An in-process cluster: store, runner with the standard controllers, one stand-in agent per
/// node. See the [module docs](self) for how time works.
///
/// Dropping it aborts every task; [`shutdown`](Self::shutdown) stops the runner gracefully first.
#[derive(Debug)]
pub struct TestCluster {
    store: MemoryStore,
    reaper: JoinHandle<()>,
    lease_ttl: Duration,
    timing: AgentTiming,
    loop_config: LoopConfig,
    seed: u64,
    runs: u64,
    runner: Option<RunnerHandle>,
    nodes: BTreeMap<String, NodeHandle>,
}

#[derive(Debug)]
struct RunnerHandle {
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<(), RunnerError>>,
}

#[derive(Debug)]
struct NodeHandle {
    spec: NodeSpec,
    agent: Option<(JoinHandle<()>, AgentControl)>,
}

impl TestCluster {
    /// A builder with no nodes and the default settings.
    pub fn builder() -> ClusterBuilder {
        ClusterBuilder::default()
    }

    pub(crate) fn assemble(
        store: MemoryStore,
        reaper: JoinHandle<()>,
        lease_ttl: Duration,
        timing: AgentTiming,
        loop_config: LoopConfig,
        seed: u64,
    ) -> Self {
        TestCluster {
            store,
            reaper,
            lease_ttl,
            timing,
            loop_config,
            seed,
            runs: 0,
            runner: None,
            nodes: BTreeMap::new(),
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

    /// Adds a node and starts its agent; it registers asynchronously.
    pub fn add_node(&mut self, spec: NodeSpec) {
        let name = spec.name().to_owned();
        let mut handle = NodeHandle { spec, agent: None };
        self.start_agent(&mut handle);
        if let Some(old) = self.nodes.insert(name, handle) {
            abort_agent(old);
        }
    }

    fn start_agent(&self, node: &mut NodeHandle) {
        let (agent, control) = FakeAgent::new(
            self.store.clone(),
            node.spec.status.clone(),
            self.lease_ttl,
            self.timing,
        );
        node.agent = Some((tokio::spawn(agent.run()), control));
    }

    fn node_mut(&mut self, name: &str) -> &mut NodeHandle {
        self.nodes
            .get_mut(name)
            .unwrap_or_else(|| panic!("no node named {name}"))
    }

    /// Stops a node's agent and revokes its lease at once: like a crashed machine, its
    /// observed facts stay, and the controllers see the node dead.
    ///
    /// # Panics
    ///
    /// When there is no such node.
    pub async fn kill_node(&mut self, name: &str) {
        if let Some((task, _)) = self.node_mut(name).agent.take() {
            task.abort();
            let _ = task.await;
        }
        let key = schema::keys::node_lease(name).expect("node names are valid key segments");
        let fact = self.store.get(&key).await.expect("memory store get");
        if let Some(lease) = fact.and_then(|f| f.lease) {
            // Already expired is fine too.
            let _ = self.store.revoke_lease(lease).await;
        }
    }

    /// Stops a node's agent without revoking its lease: the node is seen dead once the lease
    /// expires, one TTL later (virtual time in tests).
    ///
    /// # Panics
    ///
    /// When there is no such node.
    pub async fn partition_node(&mut self, name: &str) {
        if let Some((task, _)) = self.node_mut(name).agent.take() {
            task.abort();
            let _ = task.await;
        }
    }

    /// Starts a stopped node's agent again (nothing happens if it runs): it registers with a new
    /// lease and re-adopts the instances it reported.
    ///
    /// # Panics
    ///
    /// When there is no such node.
    pub fn restart_node(&mut self, name: &str) {
        let mut node = self
            .nodes
            .remove(name)
            .unwrap_or_else(|| panic!("no node named {name}"));
        if node.agent.is_none() {
            self.start_agent(&mut node);
        }
        self.nodes.insert(name.to_owned(), node);
    }

    /// Makes the agent of the node instance `id` is placed on report it in `state` from now on
    /// (`failed`: it crashed). Returns false when the instance is not placed on a running agent.
    pub async fn set_instance_state(&self, id: &str, state: ObservedState) -> bool {
        let snapshot = self.snapshot().await;
        let node = snapshot
            .cluster()
            .instances
            .get(id)
            .and_then(|i| i.node.clone());
        let control = node
            .and_then(|n| self.nodes.get(&n))
            .and_then(|n| n.agent.as_ref());
        match control {
            Some((_, control)) => {
                control.set_instance_state(id, state);
                true
            }
            None => false,
        }
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
        for controller in standard::all() {
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

    /// Stops the runner gracefully, then every agent and the lease reaper.
    pub async fn shutdown(mut self) {
        self.stop_runner().await;
        for (_, node) in std::mem::take(&mut self.nodes) {
            abort_agent(node);
        }
    }
}

fn abort_agent(node: NodeHandle) {
    if let Some((task, _)) = node.agent {
        task.abort();
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        if let Some(runner) = self.runner.take() {
            runner.task.abort();
        }
        for (_, node) in std::mem::take(&mut self.nodes) {
            abort_agent(node);
        }
        self.reaper.abort();
    }
}
