//! [`Node`]: one node of a [`TestCluster`](super::TestCluster): its spec, the cache directory and
//! the simulator that outlive its agent processes, and the agent process now running, if any.

use std::sync::Arc;
use std::time::Duration;

use ccattler_runtime::agent::{AgentConfig, AgentError, NodeAgent, RenewOn};
use ccattler_runtime::simulator::SimulatorRuntime;
use ccattler_store::MemoryStore;
use tempfile::TempDir;
use tokio::task::JoinHandle;

use super::builder::NodeSpec;
use super::runtime::{NodeRuntime, Pacing};

/// How the cluster runs its agents: the knobs of [`AgentConfig`] it sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AgentSettings {
    /// The TTL of node leases.
    pub(crate) lease_ttl: Duration,
    /// How often an agent compares desired and observed state when nothing happens.
    pub(crate) sync_interval: Duration,
    /// How long instances take to start and to stop.
    pub(crate) pacing: Pacing,
    /// Whether agents record events.
    pub(crate) events: bool,
}

/// One node: what survives its agent (the cache directory, the workloads) and the agent.
#[derive(Debug)]
pub(crate) struct Node {
    pub(crate) spec: NodeSpec,
    /// The agent's cache directory, kept across agent restarts; removed when the node is
    /// dropped.
    cache: TempDir,
    /// The node's workloads, kept across agent restarts.
    runtime: Arc<NodeRuntime>,
    agent: Option<JoinHandle<Result<(), AgentError>>>,
}

impl Node {
    /// A node with a fresh cache directory and an empty simulator serving on its address; no
    /// agent runs yet.
    ///
    /// # Panics
    ///
    /// When no temporary directory can be created.
    pub(crate) fn new(spec: NodeSpec, pacing: Pacing) -> Self {
        let cache = tempfile::Builder::new()
            .prefix("ccattler-test-node-")
            .tempdir()
            .unwrap_or_else(|err| panic!("a cache directory for node {}: {err}", spec.name()));
        let sim = SimulatorRuntime::on_host(spec.status.address.clone());
        Node {
            spec,
            cache,
            runtime: Arc::new(NodeRuntime::new(sim, pacing)),
            agent: None,
        }
    }

    /// The node's workloads.
    pub(crate) fn simulator(&self) -> &SimulatorRuntime {
        self.runtime.simulator()
    }

    /// Whether an agent process runs (or ended with an error not yet collected).
    pub(crate) fn has_agent(&self) -> bool {
        self.agent.is_some()
    }

    /// Starts a new agent process, over the cache and the workloads the node kept, unless one
    /// runs.
    ///
    /// # Panics
    ///
    /// When the node's name is not a single key segment.
    pub(crate) fn start_agent(&mut self, store: &MemoryStore, settings: AgentSettings) {
        if self.agent.is_some() {
            return;
        }
        // The store's leases expire by tokio's clock, which a test may pause: the lease is
        // renewed by that clock too, on the cluster's runtime.
        let config = AgentConfig::for_status(self.spec.status.clone(), self.cache.path())
            .renew_on(RenewOn::AgentRuntime)
            .lease_ttl(settings.lease_ttl)
            .sync_interval(settings.sync_interval)
            .events(settings.events);
        let agent = NodeAgent::new(store.clone(), Arc::clone(&self.runtime), config)
            .unwrap_or_else(|err| panic!("{err}"));
        self.agent = Some(tokio::spawn(agent.run(std::future::pending())));
    }

    /// Kills the agent process, if one runs, and waits until it is gone. Its workloads, cache
    /// and lease stay.
    ///
    /// # Panics
    ///
    /// When the agent had stopped on its own with an error (its cache could not be written), or
    /// panicked.
    pub(crate) async fn kill_agent(&mut self) {
        let Some(task) = self.agent.take() else {
            return;
        };
        task.abort();
        match task.await {
            Ok(Ok(())) => {}
            Ok(Err(err)) => panic!("the agent of {} stopped: {err}", self.spec.name()),
            Err(err) if err.is_cancelled() => {}
            Err(err) => panic!("the agent of {} panicked: {err}", self.spec.name()),
        }
    }
}

impl Drop for Node {
    /// Aborts the agent process, without waiting for it.
    fn drop(&mut self) {
        if let Some(task) = self.agent.take() {
            task.abort();
        }
    }
}
