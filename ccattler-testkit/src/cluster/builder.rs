//! [`ClusterBuilder`] and [`NodeSpec`]: the shape of a [`TestCluster`] before it starts.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use ccattler_core::Controller;
use ccattler_core::runner::LoopConfig;
use ccattler_core::schema::{Cpu, Memory, NodeStatus};
use ccattler_store::{MemoryConfig, MemoryStore};

use super::TestCluster;
use super::node::AgentSettings;
use super::runtime::Pacing;
use super::time::{TokioClock, spawn_reaper};

/// One node of a [`TestCluster`]: what its agent reports in `observed/node/{name}` (its
/// [`AgentConfig`](ccattler_runtime::agent::AgentConfig) is made from it with
/// [`AgentConfig::for_status`](ccattler_runtime::agent::AgentConfig::for_status)). Its
/// simulated workloads serve on its address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeSpec {
    /// The status the agent reports (name, capacity, labels, zone, architecture, address).
    pub status: NodeStatus,
}

impl NodeSpec {
    /// A node called `name` with `cpu` and `memory`, 100 GiB of storage for volumes,
    /// architecture `amd64`, address `name`.
    pub fn new(name: impl Into<String>, cpu: Cpu, memory: Memory) -> Self {
        let name = name.into();
        NodeSpec {
            status: NodeStatus {
                address: name.clone(),
                name,
                cpu,
                memory,
                architecture: "amd64".into(),
                storage: Memory::from_bytes(100 << 30),
                ..NodeStatus::default()
            },
        }
    }

    /// Sets the storage it offers to volumes.
    #[must_use]
    pub fn storage(mut self, storage: Memory) -> Self {
        self.status.storage = storage;
        self
    }

    /// Sets the zone.
    #[must_use]
    pub fn zone(mut self, zone: impl Into<String>) -> Self {
        self.status.zone = Some(zone.into());
        self
    }

    /// Sets the address it reports (and its simulated workloads serve on).
    #[must_use]
    pub fn address(mut self, address: impl Into<String>) -> Self {
        self.status.address = address.into();
        self
    }

    /// Adds a label.
    #[must_use]
    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.status.labels.insert(key.into(), value.into());
        self
    }

    /// The node's name.
    pub fn name(&self) -> &str {
        &self.status.name
    }
}

/// Events a watch of the test store buffers before it reads from the history instead.
const HARNESS_WATCH_BUFFER: usize = 1 << 16;

/// Builds a [`TestCluster`]; start with [`TestCluster::builder`].
///
/// | setting | default |
/// |---|---|
/// | nodes | none: add them with [`nodes`](Self::nodes) or [`node`](Self::node) |
/// | [`lease_ttl`](Self::lease_ttl) | 10 s (node leases; agents renew every third of it) |
/// | [`sync_interval`](Self::sync_interval) | 1 s (an agent's pass when nothing happens) |
/// | [`start_delay`](Self::start_delay), [`stop_delay`](Self::stop_delay) | 0: instances start and stop at once |
/// | [`loop_config`](Self::loop_config) | [`LoopConfig::default`] |
/// | [`seed`](Self::seed) | 0 (the runner's conflict jitter) |
///
/// The store is a [`MemoryStore`] whose watches buffer up to 65,536 events each (the default is
/// 1,024), for the harness's own watch of everything.
///
/// The agents' other settings are [`AgentConfig`](ccattler_runtime::agent::AgentConfig)'s
/// defaults: a resync of the placements every 30 s, the runner's retry schedule (100 ms up to
/// 30 s) for failed starts, and reconnection to the store at least every third of the lease TTL.
#[derive(Debug, Clone)]
#[must_use]
pub struct ClusterBuilder {
    nodes: Vec<NodeSpec>,
    zones: Vec<String>,
    labels: BTreeMap<String, String>,
    agents: AgentSettings,
    loop_config: LoopConfig,
    seed: u64,
    controllers: Controllers,
}

/// Controllers a cluster runs beside the standard ones.
#[derive(Clone, Default)]
pub(super) struct Controllers(pub(super) Vec<Arc<dyn Controller>>);

impl std::fmt::Debug for Controllers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|c| c.name()))
            .finish()
    }
}

impl Default for ClusterBuilder {
    fn default() -> Self {
        ClusterBuilder {
            nodes: Vec::new(),
            zones: Vec::new(),
            labels: BTreeMap::new(),
            agents: AgentSettings {
                lease_ttl: Duration::from_secs(10),
                sync_interval: Duration::from_secs(1),
                pacing: Pacing::default(),
                events: true,
            },
            loop_config: LoopConfig::default(),
            seed: 0,
            controllers: Controllers::default(),
        }
    }
}

impl ClusterBuilder {
    /// Adds `count` nodes named `n1`, `n2`, ... (numbering continues after nodes already added),
    /// each with `cpu` and `memory`.
    pub fn nodes(mut self, count: usize, cpu: Cpu, memory: Memory) -> Self {
        let first = self.nodes.len() + 1;
        for i in first..first + count {
            self.nodes.push(NodeSpec::new(format!("n{i}"), cpu, memory));
        }
        self
    }

    /// Adds one node as specified.
    pub fn node(mut self, node: NodeSpec) -> Self {
        self.nodes.push(node);
        self
    }

    /// Spreads nodes without a zone over `zones`, round-robin in the order they were added.
    pub fn zones<I, Z>(mut self, zones: I) -> Self
    where
        I: IntoIterator<Item = Z>,
        Z: Into<String>,
    {
        self.zones = zones.into_iter().map(Into::into).collect();
        self
    }

    /// Gives every node these labels (labels set on a [`NodeSpec`] win).
    pub fn labels<I, K, V>(mut self, labels: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        self.labels = labels
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        self
    }

    /// The TTL of node leases (at least 1 s, the store's minimum).
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.agents.lease_ttl = ttl;
        self
    }

    /// How often each agent compares desired and observed state when nothing happens: about
    /// the longest it takes to notice a crash or the end of a slow start (longer while a
    /// [`stop_delay`](Self::stop_delay) holds its runtime). Changes (placements, specs) start a
    /// pass at once whatever it is.
    pub fn sync_interval(mut self, every: Duration) -> Self {
        self.agents.sync_interval = every;
        self
    }

    /// Whether the runner and the agents record [events](ccattler_core::event) (default true);
    /// off, the runner's [`LoopConfig::events_max_age`] is zero and the agents write none.
    pub fn events(mut self, on: bool) -> Self {
        self.agents.events = on;
        if !on {
            self.loop_config.events_max_age = Duration::ZERO;
        }
        self
    }

    /// How long each start of an instance stays `starting` in its node's simulator before it
    /// runs (0: at once). The agent reports `running` at its first pass after that, so within
    /// one [`sync_interval`](Self::sync_interval) of it. A start that fails fails at once.
    pub fn start_delay(mut self, delay: Duration) -> Self {
        self.agents.pacing.start_delay = delay;
        self
    }

    /// How long stopping a starting or running instance takes: it keeps running that long
    /// after the agent asks. An agent does one runtime action at a time, so the stops of one
    /// node follow each other, and that node starts and probes nothing meanwhile.
    pub fn stop_delay(mut self, delay: Duration) -> Self {
        self.agents.pacing.stop_delay = delay;
        self
    }

    /// The runner's loop timings.
    pub fn loop_config(mut self, config: LoopConfig) -> Self {
        self.loop_config = config;
        self
    }

    /// Runs `controller` too, beside the standard ones, on the same runner (and again on
    /// every runner [`start_runner`](TestCluster::start_runner) starts).
    pub fn controller(mut self, controller: impl Controller + 'static) -> Self {
        self.controllers.0.push(Arc::new(controller));
        self
    }

    /// Seeds the runner's conflict jitter.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Starts the store, the lease reaper, one agent per node and the runner, then waits until
    /// every node holds its lease and reports its status.
    ///
    /// # Panics
    ///
    /// When the nodes do not register within a minute of (virtual) time, which means a bug.
    pub async fn build(self) -> TestCluster {
        let clock = TokioClock::new();
        // The harness follows the whole store (snapshots, waits, recordings): a buffer of 64k
        // events keeps that watch on the fast path through a thousand-instance burst, so the
        // harness does not slow down the cluster it measures.
        let config = MemoryConfig::default()
            .clock(Arc::new(clock))
            .watch_buffer(HARNESS_WATCH_BUFFER);
        let store = MemoryStore::with_config(config);
        let reaper = spawn_reaper(store.clone());
        let mut nodes = self.nodes;
        for (i, node) in nodes.iter_mut().enumerate() {
            if node.status.zone.is_none() && !self.zones.is_empty() {
                node.status.zone = Some(self.zones[i % self.zones.len()].clone());
            }
            for (key, value) in &self.labels {
                node.status
                    .labels
                    .entry(key.clone())
                    .or_insert_with(|| value.clone());
            }
        }
        let mut cluster =
            TestCluster::assemble(store, reaper, self.agents, self.loop_config, self.seed);
        cluster.controllers = self.controllers;
        for node in nodes {
            cluster.add_node(node);
        }
        cluster.start_runner();
        let names: Vec<String> = cluster.node_names();
        cluster
            .wait_until(Duration::from_secs(60), |s| {
                names.iter().all(|n| s.node_alive(n) && s.node(n).is_some())
            })
            .await
            .expect("every node registers");
        cluster
    }
}
