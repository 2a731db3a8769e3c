//! The node agent: makes the placements of one node real through a [`Runtime`], and reports
//! what is.
//!
//! The agent is a pure state machine, [`AgentLoop`], and a thin tokio driver, [`NodeAgent`]: the
//! loop decides (register, keep the lease alive, list and watch placements, fetch specs and secrets,
//! observe, start, stop, remove, probe, report, save the cache) and the driver performs each
//! [`Action`] through [`perform`] and feeds the [`Outcome`] back. The loop reads no clock and does
//! no I/O, so tests step it on virtual time and the testkit's simulation runs the real agent.
//!
//! # Expected flow
//!
//! [`NodeAgent::run`] registers the node (a store lease held by keep-alives, `lease/node/{node}`
//! and `observed/node/{node}`), lists and then watches only `placement/{node}/`, fetches the
//! spec of each placed version and the secrets it names, observes every instance the runtime
//! holds every [`AgentConfig::sync_interval`], and after every change (a placement, a runtime
//! sample, a spec, a secret) compares desired and observed state of what changed and of what
//! is still pending (starting, retrying, waiting, stopping; a running instance with nothing
//! pending is not looked at again until something about it changes, and every resync looks at
//! all of them): it starts what should run (init steps first, each a short-lived instance of the same image, in
//! order, with timeout and retry), restarts what ended according to the restart policy, stops
//! what should stop, runs probes and reports `observed/instance/{node}/{id}`.
//!
//! # Guarantees
//!
//! Those of [`AgentLoop`], and:
//!
//! - **The data plane outlives the control plane.** The last desired state is cached on disk
//!   ([`Cache`]). When the store is unreachable the agent keeps every workload running (and
//!   restarts crashed ones per policy) and retries; when the agent restarts it adopts what runs
//!   (through [`Runtime::observe`]) and restarts nothing.
//! - **Shutdown leaves workloads running.** Stopping the agent stops nothing; its lease is kept
//!   in the cache and resumed by the next agent if it still lives.
//! - **Instances are independent.** Each instance's runtime actions run one at a time, in
//!   order, and those of different instances at once (up to
//!   [`AgentConfig::parallel_actions`]), so a pull or a slow start of one never delays another
//!   instance's stop, start or probe. Reports and observations go on while starts are in
//!   flight; an observation is an action like the others, never made inline by the driver.
//! - **The lease is not starved by work.** Once registered, the loop hands out a standing order,
//!   [`Action::KeepLease`]; the driver renews the lease every third of its TTL from the
//!   process's liveness thread ([`RenewOn`]), where no work of this agent, of other agents or of
//!   controllers in the same process runs, and the loop hears only of a renewal that failed.
//!   While the process lives and its store answers, the node's lease does not lapse.
//!
//! | file | what it holds |
//! |---|---|
//! | `machine.rs` | [`AgentLoop`]: connection, lanes, what to do next |
//! | `work.rs` | the runtime actions: one lane per instance, several lanes at once, the observation |
//! | `inputs.rs` | its inputs: each action's result and the placement watch's events |
//! | `plan.rs` | one pass decided: starts, init steps, restarts, stops, orphans, probes |
//! | `report.rs` | the observations to write |
//! | `action.rs` | [`Action`], [`Lane`], [`StopReason`], [`Listing`], [`Sample`] |
//! | `perform.rs` | performing an action against a store or a runtime: [`Outcome`] |
//! | `keeper.rs` | the lease's keeper and the liveness thread: [`RenewOn`] |
//! | `driver.rs` | [`NodeAgent::run`], the tokio driver |
//! | `local.rs` | [`NodeSnapshot`], the node's observed state read on the node, and the agent's metrics |
//! | `probe.rs` | [`ProbeState`] (thresholds) and [`probe::check`] (the I/O) |
//! | `spec.rs` | from a service spec to the runtime's instance spec |
//! | `cache.rs`, `config.rs` | [`Cache`] and [`Desired`]; [`AgentConfig`] |

mod action;
mod cache;
mod cache_writer;
mod config;
mod disk;
mod driver;
mod events;
mod inputs;
mod keeper;
mod local;
mod machine;
#[cfg(test)]
mod machine_tests;
pub mod perform;
mod plan;
pub mod probe;
mod report;
mod scope;
#[cfg(test)]
mod secret_tests;
mod settle;
mod spec;
mod telemetry;
#[cfg(test)]
mod telemetry_tests;
mod trace;
mod work;

pub use action::{Action, Lane, Listing, Sample, StopReason};
pub use cache::{Cache, Desired};
pub use config::AgentConfig;
pub use disk::{VolumeDisk, measure as measure_volumes};
pub use keeper::RenewOn;
pub use local::{NodeSnapshot, OBSERVED_STATES, state_name};
pub use machine::{AgentLoop, AgentStats};
pub use perform::Outcome;
pub use probe::{ProbeKind, ProbeState};

use std::sync::Arc;

use ccattler_core::{FactStore, Runtime};

/// The environment variable an init step runs with: its index among its service's init steps
/// (`0` for the first). Beside it, like every instance, the step has `CCATTLER_INSTANCE` (the
/// id of the instance it prepares) and `CCATTLER_SERVICE`. A runtime may read it to know the
/// program is meant to end (the simulator does).
pub const INIT_STEP_ENV: &str = "CCATTLER_INIT_STEP";

/// Why the agent stopped abnormally. Store and runtime failures are not among them: the agent
/// outlives both.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    /// The node name is not a single key segment.
    #[error("node name {0:?} is not valid: use a single key segment such as `n1`")]
    InvalidNode(String),
    /// The cache directory cannot be written.
    #[error("cannot write the agent's cache in {dir}")]
    Cache {
        /// The directory.
        dir: std::path::PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// One node's agent over a store `S` and a runtime `R`: the tokio driver of an [`AgentLoop`].
#[derive(Debug)]
pub struct NodeAgent<S, R> {
    store: S,
    runtime: Arc<R>,
    config: AgentConfig,
}

impl<S: FactStore + Clone, R: Runtime> NodeAgent<S, R> {
    /// An agent for the node `config` describes.
    ///
    /// # Errors
    ///
    /// [`AgentError::InvalidNode`] when the node name is not a single key segment.
    pub fn new(store: S, runtime: Arc<R>, config: AgentConfig) -> Result<Self, AgentError> {
        if ccattler_core::schema::keys::node(&config.node).is_err() {
            return Err(AgentError::InvalidNode(config.node));
        }
        Ok(NodeAgent {
            store,
            runtime,
            config,
        })
    }
}
