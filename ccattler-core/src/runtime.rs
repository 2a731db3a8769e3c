//! The [`Runtime`] contract: what a node agent asks of the thing that runs workloads.
//!
//! Implementations (simulator, Linux processes, containerd) live in `ccattler-runtime`, and one
//! conformance suite in `ccattler-testkit` holds each of them to this contract.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use crate::schema::{Cpu, Memory, PortBinding};

/// A file written into the instance before it starts (a config file or a secret).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileSpec {
    /// Where the instance sees it: an absolute path.
    pub path: String,
    /// The content.
    pub content: Vec<u8>,
    /// Unix permission bits: `0o644` for config, `0o600` for secrets.
    pub mode: u32,
}

/// A host directory made visible inside the instance (a volume).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountSpec {
    /// The directory on the node.
    pub source: PathBuf,
    /// Where the instance sees it.
    pub target: String,
    /// Whether the instance may only read it.
    pub read_only: bool,
}

/// Everything a runtime needs to start one instance.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct InstanceSpec {
    /// The instance id; unique in the cluster, stable across restarts of the instance.
    pub id: String,
    /// The service it belongs to (for labels and logs).
    pub service: String,
    /// The image to run (a container image reference; the process runtime ignores it).
    pub image: String,
    /// The argument vector; empty means the image's default.
    pub command: Vec<String>,
    /// Environment variables.
    pub env: BTreeMap<String, String>,
    /// Files to materialise before the start.
    pub files: Vec<FileSpec>,
    /// Volumes to mount.
    pub mounts: Vec<MountSpec>,
    /// The ports the instance serves on: each declared port with the host port it gets on the
    /// node (the node agent passes what the scheduler gave; a runtime used on its own can give
    /// each declared port itself). Runtimes put them in the instance's environment
    /// ([`port_env`](Self::port_env)) and report the instance served at the first host port.
    pub ports: Vec<PortBinding>,
    /// CPU limit (zero: none).
    pub cpu: Cpu,
    /// Memory limit (zero: none).
    pub memory: Memory,
}

impl InstanceSpec {
    /// The environment variables that tell the instance its ports: `PORT`, the first host
    /// port, and `PORT_{declared}` for each declared port (`PORT_8080=20001`).
    pub fn port_env(&self) -> Vec<(String, String)> {
        self.ports_env(|b| b.host)
    }

    /// [`port_env`](Self::port_env) for an instance in a network namespace of its own, whose
    /// host ports are mapped to its declared ports: it listens on the declared ports
    /// (`PORT_8080=8080`).
    pub fn declared_port_env(&self) -> Vec<(String, String)> {
        self.ports_env(|b| b.port)
    }

    fn ports_env(&self, listen: fn(&PortBinding) -> u16) -> Vec<(String, String)> {
        let first = self
            .ports
            .first()
            .map(|b| ("PORT".to_owned(), listen(b).to_string()));
        let each = self
            .ports
            .iter()
            .map(|b| (format!("PORT_{}", b.port), listen(b).to_string()));
        first.into_iter().chain(each).collect()
    }

    /// The host port the instance is served at: the first one.
    pub fn served_port(&self) -> Option<u16> {
        self.ports.first().map(|b| b.host)
    }

    /// A spec with an id and image and nothing else.
    pub fn new(id: impl Into<String>, image: impl Into<String>) -> Self {
        InstanceSpec {
            id: id.into(),
            image: image.into(),
            ..InstanceSpec::default()
        }
    }

    /// Sets the command.
    #[must_use]
    pub fn command<I, S>(mut self, argv: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.command = argv.into_iter().map(Into::into).collect();
        self
    }

    /// Adds an environment variable.
    #[must_use]
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(key.into(), value.into());
        self
    }
}

/// What a runtime reports about one instance.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum InstanceState {
    /// Being prepared (image, working directory, init); not yet running.
    Starting,
    /// Its image is being pulled from a registry; it starts once the pull is done.
    Pulling {
        /// The image reference.
        image: String,
        /// Bytes of the image's blobs that are in the node's store so far.
        done: u64,
        /// Bytes of all its blobs (zero until the manifest is read).
        total: u64,
    },
    /// Running.
    Running,
    /// Ended on its own with an exit code (128 + signal number when killed by a signal).
    Exited {
        /// The exit code.
        code: i32,
    },
    /// Stopped on request.
    Stopped,
    /// Could not be started; the reason says why.
    Failed {
        /// What went wrong, for people.
        reason: String,
    },
}

impl InstanceState {
    /// Whether the instance has ended (exited, stopped or failed).
    pub fn has_ended(&self) -> bool {
        matches!(
            self,
            InstanceState::Exited { .. } | InstanceState::Stopped | InstanceState::Failed { .. }
        )
    }
}

/// One instance as the runtime sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ObservedInstance {
    /// The instance id.
    pub id: String,
    /// Its state.
    pub state: InstanceState,
    /// Where it serves (`host:port`), when it exposes a port.
    pub address: Option<String>,
    /// How many times it was started again after ending.
    pub restarts: u32,
}

impl ObservedInstance {
    /// An observation with no address and no restarts.
    pub fn new(id: impl Into<String>, state: InstanceState) -> Self {
        ObservedInstance {
            id: id.into(),
            state,
            address: None,
            restarts: 0,
        }
    }
}

/// Resource use of one instance, sampled now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InstanceStats {
    /// CPU in use, averaged since the previous sample (or since the start).
    pub cpu: Cpu,
    /// Resident memory.
    pub memory: Memory,
}

/// What a command run inside an instance printed and returned.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExecOutput {
    /// The exit code.
    pub code: i32,
    /// Standard output.
    pub stdout: Vec<u8>,
    /// Standard error.
    pub stderr: Vec<u8>,
}

/// Why a runtime operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// The image does not exist where the runtime looks for it.
    #[error("image {image} not found; import or build it first")]
    ImageNotFound {
        /// The image reference.
        image: String,
    },
    /// The image could not be pulled from its registry (unreachable, credentials refused, no
    /// such image, corrupt data, no build for this node's platform); the reason says which, and
    /// what to do. Nothing half-pulled is kept or used.
    #[error("cannot pull image {image}: {reason}")]
    ImagePull {
        /// The image reference.
        image: String,
        /// What went wrong and what to do about it.
        reason: String,
    },
    /// The command to run does not exist.
    #[error("command {command:?} not found")]
    CommandNotFound {
        /// The command.
        command: String,
    },
    /// The workload could not be started (bad spec, unwritable directory, crash at start).
    #[error("instance {id} failed to start: {reason}")]
    StartFailed {
        /// The instance id.
        id: String,
        /// What went wrong.
        reason: String,
    },
    /// The runtime knows no instance with this id.
    #[error("no instance {0}")]
    NotFound(String),
    /// An operation did not finish in time.
    #[error("{what} timed out after {after:?}")]
    Timeout {
        /// What timed out.
        what: String,
        /// The limit.
        after: Duration,
    },
    /// The runtime does not offer this operation; the caller falls back (for
    /// [`Runtime::update_files`]: a restart with the new spec).
    #[error("{what} is not supported by this runtime")]
    Unsupported {
        /// The operation.
        what: String,
    },
    /// The instance was removed, but the directory holding the data of its volumes that go
    /// with it could not be deleted (the node agent's own step after a removal).
    #[error(
        "instance {id} was removed but the data of its volumes at {} was not: {reason}; \
         delete that directory by hand",
        path.display()
    )]
    DataNotRemoved {
        /// The instance id.
        id: String,
        /// The directory left.
        path: PathBuf,
        /// What the filesystem answered.
        reason: String,
    },
    /// The runtime itself cannot be reached; nothing about the instance is known.
    #[error("runtime unreachable: {message}")]
    Unreachable {
        /// What failed.
        message: String,
        /// The underlying error.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
}

/// Makes instances run or stop on one node, and tells what runs.
///
/// # Guarantees an implementation must keep
///
/// - `ensure_running` and `ensure_stopped` are idempotent: calling them again for an instance
///   already in that state does nothing and succeeds. `ensure_running` on an instance that ended
///   starts it again and counts a restart.
/// - `observe` is the only truth about what runs; it includes instances started before the
///   runtime object was created (adopted after an agent restart), and ended instances until
///   they are [`remove`](Runtime::remove)d.
/// - Failures to start are reported, not hidden: either as an error of `ensure_running` or as an
///   observed [`InstanceState::Failed`] with the reason.
///
/// # Caveats
///
/// The trait uses `async fn`, so it is used through generics (`R: Runtime`). For a runtime
/// chosen at run time, use `Arc<dyn DynRuntime>` ([`DynRuntime`](crate::DynRuntime)), which
/// implements this trait.
pub trait Runtime: Send + Sync + 'static {
    /// Makes sure the instance runs, starting it if it does not.
    fn ensure_running(
        &self,
        spec: &InstanceSpec,
    ) -> impl Future<Output = Result<(), RuntimeError>> + Send;

    /// Makes sure the instance does not run: a polite stop (SIGTERM), then a forced one after
    /// `grace`. Stopping an unknown or ended instance succeeds.
    fn ensure_stopped(
        &self,
        id: &str,
        grace: Duration,
    ) -> impl Future<Output = Result<(), RuntimeError>> + Send;

    /// Forgets an ended instance and frees what it held (working directory, container).
    fn remove(&self, id: &str) -> impl Future<Output = Result<(), RuntimeError>> + Send;

    /// Every instance the runtime knows of, running or ended.
    fn observe(&self) -> impl Future<Output = Result<Vec<ObservedInstance>, RuntimeError>> + Send;

    /// The instances among `ids` the runtime knows of, running or ended, as [`observe`] shows
    /// them; an id it does not know is left out. A node agent observes the instances it just
    /// acted on this way, so that a burst of actions on a node of many instances costs what
    /// the burst touched, not every instance once per action.
    ///
    /// The default filters [`observe`]: correct for every runtime, and as costly. A runtime
    /// that can look instances up by id should answer in time proportional to `ids`.
    ///
    /// [`observe`]: Runtime::observe
    fn observe_some(
        &self,
        ids: &BTreeSet<String>,
    ) -> impl Future<Output = Result<Vec<ObservedInstance>, RuntimeError>> + Send {
        async move {
            let mut all = self.observe().await?;
            all.retain(|instance| ids.contains(&instance.id));
            Ok(all)
        }
    }

    /// Current CPU and memory use of a running instance.
    fn stats(&self, id: &str) -> impl Future<Output = Result<InstanceStats, RuntimeError>> + Send;

    /// The last `lines` lines of the instance's output (stdout and stderr interleaved).
    fn logs(
        &self,
        id: &str,
        lines: usize,
    ) -> impl Future<Output = Result<String, RuntimeError>> + Send;

    /// Runs a command inside the instance (probes, init steps), killed after `timeout`.
    fn exec(
        &self,
        id: &str,
        command: &[String],
        timeout: Duration,
    ) -> impl Future<Output = Result<ExecOutput, RuntimeError>> + Send;

    /// Rewrites the given files of a running instance in place (same paths as in the spec it
    /// started with, new contents and modes), without restarting it: how a changed secret or
    /// config file reaches a running workload.
    ///
    /// # Errors
    ///
    /// [`RuntimeError::Unsupported`], the default, when the runtime cannot do it (the agent
    /// then restarts the instance with the new files); [`RuntimeError::NotFound`] for an unknown
    /// or ended instance; [`RuntimeError::StartFailed`] for a path the instance did not start
    /// with (refused, not created) or a file that cannot be written.
    fn update_files(
        &self,
        id: &str,
        files: &[FileSpec],
    ) -> impl Future<Output = Result<(), RuntimeError>> + Send {
        let _ = (id, files);
        std::future::ready(Err(RuntimeError::Unsupported {
            what: "rewriting the files of a running instance".to_owned(),
        }))
    }

    /// Answers a network probe (TCP or HTTP) of instance `id` itself, for a runtime whose
    /// workloads listen nowhere (a simulator). `None`, the default, means the workload is
    /// real: the agent connects to its address.
    ///
    /// # Errors
    ///
    /// `Some(Err(reason))`: the probe fails, for people.
    fn network_probe(&self, id: &str) -> impl Future<Output = Option<Result<(), String>>> + Send {
        let _ = id;
        std::future::ready(None)
    }
}
