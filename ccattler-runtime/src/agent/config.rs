//! [`AgentConfig`]: who the node is and how the agent behaves.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use ccattler_core::runner::{Backoff, LoopConfig};
use ccattler_core::schema::{Cpu, Memory, NodeStatus, PortRange};

use super::RenewOn;

/// Settings of a [`NodeAgent`](super::NodeAgent). `AgentConfig::new` reads the machine's
/// capacity; every field can be overridden.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct AgentConfig {
    /// The node's name: a single key segment (no `/`).
    pub node: String,
    /// Allocatable CPU. Default: the machine's cores (from the OS).
    pub cpu: Cpu,
    /// Allocatable memory. Default: `MemTotal` of `/proc/meminfo`.
    pub memory: Memory,
    /// Labels (`disk = ssd`).
    pub labels: BTreeMap<String, String>,
    /// Taints.
    pub taints: Vec<String>,
    /// The zone.
    pub zone: Option<String>,
    /// CPU architecture. Default: this machine's, in the names images use (`amd64`, `arm64`).
    pub architecture: String,
    /// Address others reach the node at. Default `127.0.0.1`.
    pub address: String,
    /// The host ports the scheduler gives to instances placed here, for their declared ports.
    /// Default 20000-29999. Nothing else on the node should listen in it.
    pub ports: PortRange,
    /// The storage offered to volumes, whose data the agent keeps under
    /// `{cache_dir}/volumes`: the scheduler attaches no more volumes here than their sizes add
    /// up to. Default: the space free, when the config is made, on the filesystem that holds
    /// `cache_dir` (zero when it cannot be read: no volume then comes here). Sizes are
    /// reservations; the agent sets no quota on a volume's directory.
    pub storage: Memory,
    /// Where the agent keeps the last desired state it saw (and its lease id). Required for
    /// the agent to keep workloads running when it restarts while the store is unreachable.
    pub cache_dir: PathBuf,
    /// Whether the agent writes that cache to disk (synced, on every change of its placements,
    /// specs or lease). Default true. Turn it off only where nothing could be adopted after a
    /// restart: a runtime whose workloads end with the process (the simulator), as in a
    /// cluster of many simulated nodes in one process, where each save would create a file
    /// and sync a disk every node shares. Without it a restarted agent starts from nothing.
    pub persist_cache: bool,
    /// TTL of the node's liveness lease. Default 10 s.
    pub lease_ttl: Duration,
    /// Where the lease is renewed (every third of its TTL). Default
    /// [`RenewOn::LivenessThread`]: a thread no other work runs on.
    pub renew_on: RenewOn,
    /// How often the agent observes every instance the runtime holds when nothing happens, so
    /// that what changes on its own (a crash, an exit) is seen within it; it then decides for
    /// the instances whose observation changed and those still pending (starting, retrying,
    /// waiting, stopping). Default 1 s.
    pub sync_interval: Duration,
    /// How often the agent lists its placements again, as a safety net against missed watch
    /// events: the longest wait between two lists. Each wait is shortened by up to a tenth, by a
    /// fraction drawn from the node's name and the time (the runner's rule,
    /// [`Backoff::resync_delay`](ccattler_core::runner::Backoff::resync_delay)), so a fleet of
    /// agents started together does not list at one moment. Default 30 s.
    pub resync_interval: Duration,
    /// How often the agent fetches again the secrets its instances use, to see changes (no watch
    /// shows secrets). A changed secret reaches running instances within about this long: a
    /// mounted file is rewritten in place, an environment variable restarts the instance.
    /// Default 10 s.
    pub secret_refresh_interval: Duration,
    /// How often, at most, the agent writes its node's telemetry (`telemetry/node/{node}`: what
    /// its running instances use), and only when it changed enough (see
    /// [`NodeTelemetry`](ccattler_core::schema::NodeTelemetry)). Zero: never. Default 10 s.
    pub telemetry_interval: Duration,
    /// Whether the agent records [events](ccattler_core::event) about its instances (started,
    /// ready, failed, restarted...) with its reports. Default true.
    pub events: bool,
    /// How long a stopping instance gets between SIGTERM and SIGKILL. Default 10 s.
    pub stop_grace: Duration,
    /// Delays between retries, one per consecutive failure, the last repeating: of a start that
    /// failed, and of reaching an unreachable store. Default: the runner's restart schedule,
    /// 100 ms, 500 ms, 1 s, 2 s, 5 s, then every 30 s.
    pub retry_delays: Vec<Duration>,
    /// Longest pause between attempts to reach an unreachable store. Whatever it is set to, the
    /// agent tries at least every third of [`lease_ttl`](Self::lease_ttl), so that a control
    /// plane that comes back sees the node again within seconds, not after a grown backoff.
    /// Default 30 s (so the lease TTL decides: every 3.3 s at the default 10 s).
    pub max_backoff: Duration,
    /// How many instances may have a runtime action (a start, a stop, a probe...) in flight at
    /// once. Each instance's own actions run one at a time, in order; a slow one holds back only
    /// that instance. Default 8.
    pub parallel_actions: usize,
}

impl AgentConfig {
    /// A config for `node`, caching under `cache_dir`, with this machine's capacity.
    pub fn new(node: impl Into<String>, cache_dir: impl Into<PathBuf>) -> Self {
        let cache_dir = cache_dir.into();
        AgentConfig {
            storage: free_space(&cache_dir),
            node: node.into(),
            cpu: machine_cpu(),
            memory: machine_memory(),
            labels: BTreeMap::new(),
            taints: Vec::new(),
            zone: None,
            architecture: machine_architecture().to_owned(),
            address: "127.0.0.1".to_owned(),
            ports: PortRange::DEFAULT,
            cache_dir,
            persist_cache: true,
            lease_ttl: Duration::from_secs(10),
            renew_on: RenewOn::default(),
            sync_interval: Duration::from_secs(1),
            resync_interval: Duration::from_secs(30),
            secret_refresh_interval: Duration::from_secs(10),
            telemetry_interval: Duration::from_secs(10),
            events: true,
            stop_grace: Duration::from_secs(10),
            retry_delays: LoopConfig::default().restart_delays,
            max_backoff: Duration::from_secs(30),
            parallel_actions: 8,
        }
    }

    /// A config for the node `status` describes (its name, capacity, labels, taints, zone,
    /// architecture and address), caching under `cache_dir`: the inverse of
    /// [`status`](Self::status).
    pub fn for_status(status: NodeStatus, cache_dir: impl Into<PathBuf>) -> Self {
        let mut config = AgentConfig::new(status.name, cache_dir);
        config.cpu = status.cpu;
        config.memory = status.memory;
        config.labels = status.labels;
        config.taints = status.taints;
        config.zone = status.zone;
        config.architecture = status.architecture;
        config.address = status.address;
        config.storage = status.storage;
        config
    }

    /// Sets the capacity.
    #[must_use]
    pub fn capacity(mut self, cpu: Cpu, memory: Memory) -> Self {
        self.cpu = cpu;
        self.memory = memory;
        self
    }

    /// Adds a label.
    #[must_use]
    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }

    /// Sets the zone.
    #[must_use]
    pub fn zone(mut self, zone: impl Into<String>) -> Self {
        self.zone = Some(zone.into());
        self
    }

    /// Sets the lease TTL.
    #[must_use]
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.lease_ttl = ttl;
        self
    }

    /// Sets the sync interval.
    #[must_use]
    pub fn sync_interval(mut self, every: Duration) -> Self {
        self.sync_interval = every;
        self
    }

    /// Sets the resync interval.
    #[must_use]
    pub fn resync_interval(mut self, every: Duration) -> Self {
        self.resync_interval = every;
        self
    }

    /// Sets the secret refresh interval.
    #[must_use]
    pub fn secret_refresh_interval(mut self, every: Duration) -> Self {
        self.secret_refresh_interval = every;
        self
    }

    /// Sets how often, at most, the node's telemetry is written (zero: never).
    #[must_use]
    pub fn telemetry_interval(mut self, every: Duration) -> Self {
        self.telemetry_interval = every;
        self
    }

    /// Sets where the lease is renewed.
    #[must_use]
    pub fn renew_on(mut self, on: RenewOn) -> Self {
        self.renew_on = on;
        self
    }

    /// Writes the cache to disk or not (see [`persist_cache`](Self::persist_cache)).
    #[must_use]
    pub fn persist_cache(mut self, on: bool) -> Self {
        self.persist_cache = on;
        self
    }

    /// Records events or not.
    #[must_use]
    pub fn events(mut self, on: bool) -> Self {
        self.events = on;
        self
    }

    /// Sets the stop grace period.
    #[must_use]
    pub fn stop_grace(mut self, grace: Duration) -> Self {
        self.stop_grace = grace;
        self
    }

    /// Sets the longest backoff towards an unreachable store.
    #[must_use]
    pub fn max_backoff(mut self, max: Duration) -> Self {
        self.max_backoff = max;
        self
    }

    /// Sets how many instances may have a runtime action in flight at once (at least one).
    #[must_use]
    pub fn parallel_actions(mut self, instances: usize) -> Self {
        self.parallel_actions = instances.max(1);
        self
    }

    /// Sets the retry schedule.
    #[must_use]
    pub fn retry_delays(mut self, delays: Vec<Duration>) -> Self {
        self.retry_delays = delays;
        self
    }

    /// The pause before the `failures`-th consecutive attempt to reach the store (1-based): the
    /// retry schedule, capped by [`max_backoff`](Self::max_backoff) and a third of the lease TTL.
    pub fn reconnect_delay(&self, failures: u32) -> Duration {
        Backoff::nth(&self.retry_delays, failures)
            .min(self.max_backoff)
            .min(self.lease_ttl / 3)
    }

    /// The node status this config reports.
    pub fn status(&self) -> NodeStatus {
        NodeStatus {
            name: self.node.clone(),
            cpu: self.cpu,
            memory: self.memory,
            labels: self.labels.clone(),
            taints: self.taints.clone(),
            zone: self.zone.clone(),
            architecture: self.architecture.clone(),
            address: self.address.clone(),
            ports: self.ports,
            storage: self.storage,
        }
    }
}

/// The space free to unprivileged users on the filesystem holding `dir` (or its nearest
/// existing ancestor: the cache directory may not exist yet); zero when it cannot be read.
fn free_space(dir: &std::path::Path) -> Memory {
    let existing = dir.ancestors().find(|d| d.exists());
    let free = existing
        .and_then(|d| nix::sys::statvfs::statvfs(d).ok())
        .map_or(0, |s| {
            s.blocks_available().saturating_mul(s.fragment_size())
        });
    Memory::from_bytes(free)
}

fn machine_cpu() -> Cpu {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    Cpu::from_millis(cores as u64 * 1000)
}

fn machine_memory() -> Memory {
    let kib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        });
    Memory::from_bytes(kib.unwrap_or(0).saturating_mul(1024))
}

fn machine_architecture() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}
