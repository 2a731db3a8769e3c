//! The [`Runtime`] contract: what a node agent asks of the thing that runs workloads.
//!
//! Implementations (simulator, Linux processes, containerd) live in `ccattler-runtime`.

use std::collections::BTreeMap;
use std::future::Future;

/// Everything a runtime needs to start one instance.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct InstanceSpec {
    /// The instance id; unique in the cluster, stable across restarts of the instance.
    pub id: String,
    /// The image to run (a container image reference; ignored by the process runtime).
    pub image: String,
    /// The argument vector; empty means the image's default.
    pub command: Vec<String>,
    /// Environment variables.
    pub env: BTreeMap<String, String>,
}

impl InstanceSpec {
    /// A spec with an id and image and nothing else.
    pub fn new(id: impl Into<String>, image: impl Into<String>) -> Self {
        InstanceSpec {
            id: id.into(),
            image: image.into(),
            ..InstanceSpec::default()
        }
    }
}

/// What a runtime reports about one instance.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum InstanceState {
    /// Being prepared (image pull, working directory); not yet started.
    Starting,
    /// Running.
    Running,
    /// Ended on its own with an exit code.
    Exited {
        /// The exit code (128 + signal number when killed by a signal).
        code: i32,
    },
    /// Could not be started; the reason says why.
    Failed {
        /// What went wrong, for people.
        reason: String,
    },
}

/// One instance as the runtime sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObservedInstance {
    /// The instance id.
    pub id: String,
    /// Its state.
    pub state: InstanceState,
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
    /// The workload could not be started (missing command, bad spec, crash at start).
    #[error("instance {id} failed to start: {reason}")]
    StartFailed {
        /// The instance id.
        id: String,
        /// What went wrong.
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
///   already in that state does nothing and succeeds.
/// - `observe` is the only truth about what runs; it includes instances started before the
///   runtime object was created (adopted after an agent restart).
pub trait Runtime: Send + Sync + 'static {
    /// Makes sure the instance runs, starting it if it does not.
    fn ensure_running(
        &self,
        spec: &InstanceSpec,
    ) -> impl Future<Output = Result<(), RuntimeError>> + Send;

    /// Makes sure the instance does not run, stopping it if it does.
    fn ensure_stopped(&self, id: &str) -> impl Future<Output = Result<(), RuntimeError>> + Send;

    /// Every instance the runtime knows of, running or ended.
    fn observe(&self) -> impl Future<Output = Result<Vec<ObservedInstance>, RuntimeError>> + Send;
}
