//! The desired service: what a `service NAME { ... }` block of a `.cca` file declares.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::duration::{deserialize_duration, serialize_duration};
use super::{Cpu, Memory};

/// One service as declared: `desired/service/{name}`, written by the user's apply.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ServiceSpec {
    /// The service name, a path such as `web` or `team/web`.
    pub name: String,
    /// The image to run.
    pub image: String,
    /// What to run: the argument vector (empty: the image's default).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// How many instances should exist.
    pub instances: u32,
    /// What to do when an instance ends.
    pub restart: RestartPolicy,
    /// Ports the service listens on.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub expose: Vec<Expose>,
    /// CPU and memory each instance needs.
    pub resources: Resources,
    /// Probe that must pass before the other probes start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub startup: Option<Probe>,
    /// Probe whose failure restarts the instance (`health` in a `.cca` file means this).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub liveness: Option<Probe>,
    /// Probe that gates traffic: endpoints list only instances that pass it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub readiness: Option<Probe>,
    /// Where instances may and should run.
    pub placement: Placement,
    /// How a new version replaces the old.
    pub update: UpdatePolicy,
    /// Automatic scaling bounds, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scale: Option<HorizontalScale>,
    /// Environment variables.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Files written into each instance before it starts.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<ConfigFile>,
    /// Secrets made available to each instance (values live under `secret/{name}`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<SecretRef>,
    /// Steps run in order before the main process starts.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub init: Vec<InitStep>,
    /// Declared volumes mounted into each instance.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<VolumeMount>,
    /// Whether instances have stable ordinal identities `svc-0`, `svc-1`, ...
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub stateful: bool,
}

/// What happens when an instance ends.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RestartPolicy {
    /// Replace it, whatever its exit status (the default).
    #[default]
    Always,
    /// Replace it only when it failed.
    OnFailure,
    /// Never replace it; a failed instance still counts as present.
    Never,
}

impl RestartPolicy {
    /// Whether a failed instance is replaced.
    pub fn replaces_failed(self) -> bool {
        !matches!(self, RestartPolicy::Never)
    }
}

/// The protocol a port speaks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    /// HTTP (the default).
    #[default]
    Http,
    /// Plain TCP.
    Tcp,
}

/// One exposed port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Expose {
    /// The port, 1 to 65535.
    pub port: u16,
    /// Its protocol.
    #[serde(default)]
    pub protocol: Protocol,
    /// Whether it is reachable from outside the cluster.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub external: bool,
    /// Whether the instance needs this very port on its host (`expose 80 static`), for clients
    /// that cannot be told another: it is placed only on nodes where no other instance holds
    /// that host port. Otherwise the scheduler gives it a free port of the node's range.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fixed: bool,
}

/// What each instance needs; the scheduler places it only where this fits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default)]
pub struct Resources {
    /// CPU.
    pub cpu: Cpu,
    /// Memory.
    pub memory: Memory,
}

/// How a probe checks an instance.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeCheck {
    /// An HTTP GET of this path answers 2xx or 3xx.
    Http {
        /// The path, such as `/health/ready`.
        path: String,
    },
    /// A TCP connection opens.
    Tcp,
    /// A command exits with 0.
    Exec {
        /// The command line.
        command: String,
    },
}

/// A startup, liveness or readiness probe.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Probe {
    /// What to check.
    pub check: ProbeCheck,
    /// The port to probe, on the instance's host address (workloads run in their host's
    /// network); default: the port the instance serves at (its first exposed port). Exec probes
    /// ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// Time between checks. Default 10 s.
    #[serde(
        serialize_with = "serialize_duration",
        deserialize_with = "deserialize_duration"
    )]
    pub every: Duration,
    /// How long one check may take. Default 2 s.
    #[serde(
        serialize_with = "serialize_duration",
        deserialize_with = "deserialize_duration"
    )]
    pub timeout: Duration,
    /// Consecutive failures that make the instance unhealthy. Default 3.
    pub failure_threshold: u32,
    /// Consecutive successes that make it healthy again. Default 1.
    pub success_threshold: u32,
    /// Wait before the first check. Default 0 s.
    #[serde(
        serialize_with = "serialize_duration",
        deserialize_with = "deserialize_duration"
    )]
    pub initial_delay: Duration,
}

impl Probe {
    /// A probe with the default timings.
    pub fn new(check: ProbeCheck) -> Self {
        Probe {
            check,
            port: None,
            every: Duration::from_secs(10),
            timeout: Duration::from_secs(2),
            failure_threshold: 3,
            success_threshold: 1,
            initial_delay: Duration::ZERO,
        }
    }
}

/// Where a service's instances may run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Placement {
    /// Required CPU architecture (`amd64`, `arm64`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,
    /// Zone policy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zone: Option<ZonePolicy>,
    /// Labels a node must have (hard: never relaxed).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub require: BTreeMap<String, String>,
    /// Labels that rank a node higher (soft).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub prefer: BTreeMap<String, String>,
    /// Taints of restricted nodes this service may use.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub accept: Vec<String>,
}

/// How instances are spread over zones.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ZonePolicy {
    /// Spread evenly over every zone.
    Spread,
    /// Only in this zone.
    Only(String),
}

/// How a new version replaces the old: the rolling update's bounds, and when the rollout
/// controller judges a version failed and rolls back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default)]
pub struct UpdatePolicy {
    /// Most instances below the desired count during an update. Default 1.
    pub max_unavailable: u32,
    /// Most instances above the desired count during an update. Default 1.
    pub max_extra: u32,
    /// How long a rollout may go without progress (one more instance of the new version ready
    /// than ever before) before it is rolled back. Default 10 min.
    #[serde(
        serialize_with = "serialize_duration",
        deserialize_with = "deserialize_duration"
    )]
    pub progress_deadline: Duration,
    /// How long every instance of the new version must stay ready before the rollout is
    /// complete (and the version becomes the one to roll back to). Default 0 s.
    #[serde(
        serialize_with = "serialize_duration",
        deserialize_with = "deserialize_duration"
    )]
    pub min_ready: Duration,
    /// How many failures of the new version's instances (restarts, and instances reported
    /// failed) roll it back. Default 3.
    pub failure_threshold: u32,
}

impl Default for UpdatePolicy {
    fn default() -> Self {
        UpdatePolicy {
            max_unavailable: 1,
            max_extra: 1,
            progress_deadline: Duration::from_secs(600),
            min_ready: Duration::ZERO,
            failure_threshold: 3,
        }
    }
}

/// Horizontal autoscaling: bounds and targets.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HorizontalScale {
    /// Fewest instances.
    pub min: u32,
    /// Most instances.
    pub max: u32,
    /// Metric targets.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<ScaleTarget>,
    /// How long a higher recommendation must hold before scaling up. Default 0 s.
    #[serde(
        default,
        serialize_with = "serialize_duration",
        deserialize_with = "deserialize_duration"
    )]
    pub scale_up_stabilization: Duration,
    /// How long a lower recommendation must hold before scaling down. Default 5 m.
    #[serde(
        default = "five_minutes",
        serialize_with = "serialize_duration",
        deserialize_with = "deserialize_duration"
    )]
    pub scale_down_stabilization: Duration,
}

fn five_minutes() -> Duration {
    Duration::from_secs(300)
}

impl HorizontalScale {
    /// Bounds `min..=max` with no targets and default stabilization.
    pub fn new(min: u32, max: u32) -> Self {
        HorizontalScale {
            min,
            max,
            targets: Vec::new(),
            scale_up_stabilization: Duration::ZERO,
            scale_down_stabilization: five_minutes(),
        }
    }
}

/// `target METRIC = VALUE[%]`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ScaleTarget {
    /// The metric, such as `cpu` or `payments.pending`.
    pub metric: String,
    /// The target value.
    pub value: u64,
    /// Whether the value is a percentage (`60%`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub percent: bool,
}

/// `file /PATH CONTENT`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ConfigFile {
    /// Absolute path inside the instance.
    pub path: String,
    /// The file's content.
    pub content: String,
}

/// `secret NAME [/mount/path]`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SecretRef {
    /// The secret's name (its value is the fact `secret/{name}`).
    pub name: String,
    /// Where to mount it as a file; `None` exposes it as an environment variable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mount: Option<String>,
}

/// One `init { exec "CMD" timeout D retry N }` step.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct InitStep {
    /// The command line.
    pub exec: String,
    /// How long one attempt may take. Default 60 s.
    #[serde(
        serialize_with = "serialize_duration",
        deserialize_with = "deserialize_duration"
    )]
    pub timeout: Duration,
    /// Attempts made at once after a failure, before the agent backs off on its restart
    /// schedule (under restart `never`, before the instance gives up and stays failed).
    /// Default 0.
    #[serde(default)]
    pub retry: u32,
}

impl InitStep {
    /// A step with the default timeout and no retries.
    pub fn new(exec: impl Into<String>) -> Self {
        InitStep {
            exec: exec.into(),
            timeout: Duration::from_secs(60),
            retry: 0,
        }
    }
}

/// `volume VOLNAME /mount/path`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct VolumeMount {
    /// A volume declared at top level.
    pub volume: String,
    /// Where it is mounted inside the instance.
    pub path: String,
}
