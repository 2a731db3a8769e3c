//! [`DevCluster`]: a whole cluster in one process, as `cca dev` runs it.
//!
//! # Expected flow
//!
//! [`DevCluster::start`] creates an embedded [`MemoryStore`], runs the standard controllers
//! ([`standard::all`]) on a [`TokioRunner`], and one [`NodeAgent`] per local node (`n1`..`nN`),
//! each over its own runtime: a [`ProcessRuntime`] rooted in the node's own directory, or a
//! [`SimulatorRuntime`]. [`wait_for_nodes`](DevCluster::wait_for_nodes) waits until every node
//! has registered; [`apply`](DevCluster::apply) applies a `.cca` file;
//! [`shutdown`](DevCluster::shutdown) stops everything.
//!
//! # Guarantees
//!
//! - **Nothing is left behind.** Unlike a production agent, whose workloads outlive it, the dev
//!   cluster owns its workloads: `shutdown` stops the runner and the agents, then stops every
//!   instance (SIGTERM, then SIGKILL after the grace period, to its whole process group), removes
//!   its directory, and removes the temporary state directory.
//! - A part that fails while the cluster runs (the runner, an agent) is reported by
//!   [`failure`](DevCluster::failure); the others keep running until `shutdown`.
//!
//! # Layout of the state directory
//!
//! ```text
//! {state}/n1/runtime/   the ProcessRuntime's root: instances/{id}/{work,stdout.log,state.json}
//! {state}/n1/agent/     the agent's cache (last desired state, lease id)
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ccattler_controllers::apply::{self, ApplyError, ApplyOptions, ApplyReport};
use ccattler_controllers::lang::SourceFile;
use ccattler_controllers::standard;
use ccattler_core::runner::TokioRunner;
use ccattler_core::schema::{Cpu, Memory};
use ccattler_core::{Runner, Runtime};
use ccattler_runtime::agent::{AgentConfig, NodeAgent};
use ccattler_runtime::process::ProcessRuntime;
use ccattler_runtime::simulator::SimulatorRuntime;
use ccattler_store::MemoryStore;
use tokio::sync::{mpsc, oneshot};
use tokio::task::{JoinHandle, JoinSet};

use super::CliError;
use super::dev_ports::DevPorts;
use super::progress::StatusFollower;

/// Which runtime the local agents use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum RuntimeKind {
    /// Real processes: each instance runs its `command` (the image is ignored).
    #[default]
    Process,
    /// The in-memory simulator: nothing runs; instances run until stopped (`exit N` ends one).
    Sim,
}

/// How to set up a [`DevCluster`].
#[derive(Clone, Debug)]
pub struct DevConfig {
    /// The runtime of every node.
    pub runtime: RuntimeKind,
    /// Number of nodes, named `n1`..`nN`.
    pub nodes: u32,
    /// Allocatable CPU of each node.
    pub cpu: Cpu,
    /// Allocatable memory of each node.
    pub memory: Memory,
    /// Storage each node offers to volumes.
    pub storage: Memory,
    /// Zones, given to the nodes round-robin; none when empty.
    pub zones: Vec<String>,
    /// Labels of every node.
    pub labels: Vec<(String, String)>,
    /// Where the nodes keep their state; a temporary directory (removed at shutdown) when `None`.
    pub state_dir: Option<PathBuf>,
    /// How long each instance gets between SIGTERM and SIGKILL at shutdown.
    pub stop_grace: Duration,
}

impl Default for DevConfig {
    /// Three process nodes of 2 cores, 2 GiB and 20 GiB of storage for volumes, no zones or
    /// labels, a temporary state directory, 2 s grace.
    fn default() -> Self {
        DevConfig {
            runtime: RuntimeKind::Process,
            nodes: 3,
            cpu: Cpu::from_millis(2_000),
            memory: Memory::from_bytes(2 << 30),
            storage: Memory::from_bytes(20 << 30),
            zones: Vec::new(),
            labels: Vec::new(),
            state_dir: None,
            stop_grace: Duration::from_secs(2),
        }
    }
}

/// The agents' timings: a dev cluster notices a dead node within seconds and reacts fast.
const LEASE_TTL: Duration = Duration::from_secs(3);
/// Each agent looks at its runtime every second, as a standalone agent does: every look costs
/// work in proportion to the node's instances, and all of a dev cluster's agents share this
/// process (at 100,000 instances, looking four times a second took a core and doubled the time
/// of a rolling update).
const SYNC_INTERVAL: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// A running dev cluster; see the [module docs](self).
#[derive(Debug)]
pub struct DevCluster {
    store: MemoryStore,
    nodes: u32,
    stop_grace: Duration,
    runner: Option<(oneshot::Sender<()>, JoinHandle<()>)>,
    agents: Vec<(oneshot::Sender<()>, JoinHandle<()>)>,
    workloads: Workloads,
    state: State,
    failures: mpsc::UnboundedReceiver<String>,
    /// The host ports of its nodes, held while the cluster runs.
    ports: DevPorts,
}

/// The runtimes, kept to stop their workloads at shutdown.
#[derive(Debug)]
enum Workloads {
    Process(Vec<Arc<ProcessRuntime>>),
    Sim,
}

#[derive(Debug)]
enum State {
    Temporary(tempfile::TempDir),
    Kept(PathBuf),
}

impl State {
    fn path(&self) -> &Path {
        match self {
            State::Temporary(dir) => dir.path(),
            State::Kept(dir) => dir,
        }
    }
}

impl DevCluster {
    /// Starts the store, the controllers and the agents.
    ///
    /// # Errors
    ///
    /// [`CliError::Write`] when the state directory cannot be created, [`CliError::Start`] when
    /// a runtime or an agent cannot be set up.
    pub async fn start(config: DevConfig) -> Result<Self, CliError> {
        let state = match &config.state_dir {
            Some(dir) => {
                std::fs::create_dir_all(dir).map_err(|source| CliError::Write {
                    path: dir.clone(),
                    source,
                })?;
                State::Kept(dir.clone())
            }
            None => State::Temporary(
                tempfile::Builder::new()
                    .prefix("cca-dev-")
                    .tempdir()
                    .map_err(|source| CliError::Write {
                        path: std::env::temp_dir(),
                        source,
                    })?,
            ),
        };
        let store = MemoryStore::new();
        let (report, failures) = mpsc::unbounded_channel();

        let mut runner = TokioRunner::new(store.clone());
        for controller in standard::all() {
            runner = runner.controller_arc(controller);
        }
        let (stop, stopped) = oneshot::channel::<()>();
        let failed = report.clone();
        let runner_task = tokio::spawn(async move {
            let shutdown = async {
                let _ = stopped.await;
            };
            if let Err(err) = runner.run(shutdown).await {
                let _ = failed.send(format!("the controllers stopped: {err}"));
            }
        });

        let mut cluster = DevCluster {
            store,
            nodes: config.nodes,
            stop_grace: config.stop_grace,
            runner: Some((stop, runner_task)),
            agents: Vec::new(),
            workloads: match config.runtime {
                RuntimeKind::Process => Workloads::Process(Vec::new()),
                RuntimeKind::Sim => Workloads::Sim,
            },
            state,
            failures,
            ports: match config.runtime {
                RuntimeKind::Process => DevPorts::claim()?,
                RuntimeKind::Sim => DevPorts::simulated(),
            },
        };
        for i in 0..config.nodes {
            let name = format!("n{}", i + 1);
            let dir = cluster.state.path().join(&name);
            let mut agent = AgentConfig::new(name.clone(), dir.join("agent"))
                .capacity(config.cpu, config.memory)
                .lease_ttl(LEASE_TTL)
                .sync_interval(SYNC_INTERVAL)
                .stop_grace(config.stop_grace)
                .max_backoff(MAX_BACKOFF);
            if !config.zones.is_empty() {
                agent = agent.zone(config.zones[i as usize % config.zones.len()].clone());
            }
            for (key, value) in &config.labels {
                agent = agent.label(key.clone(), value.clone());
            }
            agent.ports = cluster.ports.of_node(i, config.nodes);
            agent.storage = config.storage;
            let handle = match &mut cluster.workloads {
                Workloads::Process(runtimes) => {
                    let runtime = ProcessRuntime::new(dir.join("runtime")).map_err(|err| {
                        CliError::Start(format!("the process runtime of {name}: {err}"))
                    })?;
                    let runtime = Arc::new(runtime);
                    runtimes.push(Arc::clone(&runtime));
                    spawn_agent(&cluster.store, runtime, agent, report.clone())?
                }
                // Simulated workloads end with the process: nothing to adopt from a cache.
                Workloads::Sim => spawn_agent(
                    &cluster.store,
                    Arc::new(SimulatorRuntime::new()),
                    agent.persist_cache(false),
                    report.clone(),
                )?,
            };
            cluster.agents.push(handle);
        }
        Ok(cluster)
    }

    /// The cluster's store.
    pub fn store(&self) -> &MemoryStore {
        &self.store
    }

    /// Where the nodes keep their state.
    pub fn state_dir(&self) -> &Path {
        self.state.path()
    }

    /// How long registering every node may take: 10 s, plus 5 ms a node (with the process
    /// runtime each agent makes its cache directory and writes its cache durably before it
    /// registers: ten thousand of them on a disk take about 20 s).
    pub fn registration_timeout(&self) -> Duration {
        Duration::from_secs(10) + Duration::from_millis(5).saturating_mul(self.nodes)
    }

    /// Waits until every node has registered (holds its lease), at most `timeout`
    /// ([`registration_timeout`](Self::registration_timeout) is what `cca dev` gives it).
    ///
    /// # Errors
    ///
    /// [`CliError::Start`] when some node has not registered in time.
    pub async fn wait_for_nodes(&self, timeout: Duration) -> Result<(), CliError> {
        let wait = async {
            let mut follower = StatusFollower::new(&self.store).await?;
            loop {
                if follower.next().await?.nodes >= self.nodes as usize {
                    return Ok::<_, ccattler_core::StoreError>(());
                }
            }
        };
        match tokio::time::timeout(timeout, wait).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(err)) => Err(CliError::Start(format!("reading the store: {err}"))),
            Err(_) => Err(CliError::Start(format!(
                "the {} local nodes did not register within {timeout:?}",
                self.nodes
            ))),
        }
    }

    /// Applies a `.cca` file in one transaction.
    ///
    /// # Errors
    ///
    /// [`ApplyError`]; nothing is applied then.
    pub async fn apply(&self, file: &SourceFile) -> Result<ApplyReport, ApplyError> {
        apply::apply_file(&self.store, file, ApplyOptions::default()).await
    }

    /// Crashes the agent of node `nN` (1-based `n`), as if its machine died: it stops where it
    /// stands, without deregistering, and its lease lapses after the TTL (3 s), so the
    /// controllers replace its instances elsewhere. With the process runtime its workloads keep
    /// running until [`shutdown`](Self::shutdown) stops them. Returns false when there is no
    /// such node or it has crashed already.
    pub fn crash_node(&mut self, n: u32) -> bool {
        let Some(index) = n.checked_sub(1).map(|i| i as usize) else {
            return false;
        };
        match self.agents.get(index) {
            Some((_, task)) if !task.is_finished() => {
                task.abort();
                true
            }
            _ => false,
        }
    }

    /// Waits until a part of the cluster fails, and says which and why.
    pub async fn failure(&mut self) -> String {
        match self.failures.recv().await {
            Some(reason) => reason,
            // Every sender is held by a task that runs until shutdown.
            None => std::future::pending().await,
        }
    }

    /// Stops the controllers and the agents, then every workload (see the module docs); returns
    /// how many instances were stopped.
    ///
    /// The controllers and the agents get [`STOP_BUDGET`] together to stop by themselves
    /// (whatever the size of the cluster); those still running then are aborted where they
    /// stand, which loses nothing the store or the workloads need: the workloads are stopped
    /// next in any case.
    pub async fn shutdown(mut self) -> usize {
        let mut tasks: Vec<JoinHandle<()>> = Vec::new();
        if let Some((stop, task)) = self.runner.take() {
            let _ = stop.send(());
            tasks.push(task);
        }
        for (stop, task) in self.agents.drain(..) {
            let _ = stop.send(());
            tasks.push(task);
        }
        let aborts: Vec<_> = tasks.iter().map(JoinHandle::abort_handle).collect();
        let stopped = tokio::time::timeout(STOP_BUDGET, async {
            for task in tasks {
                let _ = task.await;
            }
        })
        .await;
        if stopped.is_err() {
            for abort in aborts {
                abort.abort();
            }
        }
        let stopped = match &self.workloads {
            Workloads::Process(runtimes) => stop_all(runtimes, self.stop_grace).await,
            Workloads::Sim => 0,
        };
        if let State::Temporary(dir) =
            std::mem::replace(&mut self.state, State::Kept(PathBuf::new()))
        {
            let _ = dir.close();
        }
        stopped
    }
}

/// How long the controllers and the agents get to stop by themselves at shutdown.
pub const STOP_BUDGET: Duration = Duration::from_secs(2);

fn spawn_agent<R: Runtime>(
    store: &MemoryStore,
    runtime: Arc<R>,
    config: AgentConfig,
    report: mpsc::UnboundedSender<String>,
) -> Result<(oneshot::Sender<()>, JoinHandle<()>), CliError> {
    let node = config.node.clone();
    let agent = NodeAgent::new(store.clone(), runtime, config)
        .map_err(|err| CliError::Start(format!("the agent of {node}: {err}")))?;
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let shutdown = async {
            let _ = stopped.await;
        };
        if let Err(err) = agent.run(shutdown).await {
            let _ = report.send(format!("the agent of {node} stopped: {err}"));
        }
    });
    Ok((stop, task))
}

/// Stops and removes every instance of every runtime, all at once, each with `grace` between
/// SIGTERM and SIGKILL; then kills whatever is left. Returns how many were running.
async fn stop_all(runtimes: &[Arc<ProcessRuntime>], grace: Duration) -> usize {
    let mut stops = JoinSet::new();
    let mut running = 0;
    for runtime in runtimes {
        let Ok(instances) = runtime.observe().await else {
            continue;
        };
        for instance in instances {
            if !instance.state.has_ended() {
                running += 1;
            }
            let runtime = Arc::clone(runtime);
            stops.spawn(async move {
                let _ = runtime.ensure_stopped(&instance.id, grace).await;
                let _ = runtime.remove(&instance.id).await;
            });
        }
    }
    while stops.join_next().await.is_some() {}
    for runtime in runtimes {
        runtime.kill_all();
    }
    running
}

impl Drop for DevCluster {
    /// A cluster dropped without [`shutdown`](DevCluster::shutdown) (a panic, an early return)
    /// still kills its workloads: nothing outlives `cca dev`.
    fn drop(&mut self) {
        if let Workloads::Process(runtimes) = &self.workloads {
            for runtime in runtimes {
                runtime.kill_all();
            }
        }
    }
}
