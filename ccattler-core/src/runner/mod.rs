//! Running controllers: list, watch, reconcile, commit, retry.
//!
//! The loop logic is a pure state machine, [`ControllerLoop`], stepped by inputs (list results,
//! watch events, reconcile results, commit results, clock ticks) and drained of [`Action`]s. It
//! reads no clock and does no I/O, so the tokio runner (feature `tokio`) and the simulated runner
//! in `ccattler-testkit` share it, and tests step it on virtual time.
//!
//! | item | role |
//! |---|---|
//! | [`ControllerLoop`], [`Action`] | the deterministic loop of one controller: guards, commit marker, fences |
//! | [`reconcile`], [`check_changes`] | the reconcile step every driver performs (panics caught, events collected); the runner's rule for a reconcile's changes (write domain, one change per key) |
//! | [`LoopConfig`], [`Backoff`] | timing: resync, restart and conflict backoff |
//! | [`LeaderElection`], [`Leadership`], [`NoElection`] | who may commit, and the fencing compares |
//! | [`ElectionLoop`], [`ElectionAction`], [`perform_election`] | the deterministic leader election on a store lease, and its store calls |
//! | `TokioRunner` (feature `tokio`) | runs controllers on tokio |
//! | `LeaseElection` (feature `tokio`) | leader election on store leases: [`ElectionLoop`] on tokio |
//!
//! Leader election follows the same pattern: [`ElectionLoop`] is the protocol (campaign, renew,
//! watch the leader key, step down), `LeaseElection` its tokio driver, and the testkit's
//! simulated replicas step the same machine.
//!
//! # Metrics
//!
//! With the `tokio` feature the runner records, by controller, reconciles and their duration,
//! committed changes, commit conflicts, loop failures and queue depth, and whether this replica
//! leads (`ccattler_reconciles_total`, `ccattler_leader`, ...) through the `metrics` facade; an
//! application installs whatever exporter it likes. Their names, types and labels are in the
//! table of every metric, [`telemetry`](crate::telemetry).

mod backoff;
mod batches;
mod election;
mod election_inputs;
mod election_io;
#[cfg(test)]
mod election_tests;
mod leader;
mod machine;
#[cfg(test)]
mod machine_tests;
mod step;

#[cfg(feature = "tokio")]
mod commit_trace;
#[cfg(feature = "tokio")]
mod driver;
#[cfg(feature = "tokio")]
mod events_lease;
#[cfg(feature = "tokio")]
mod lease_election;
#[cfg(feature = "tokio")]
mod tokio_runner;

pub use backoff::{Backoff, LoopConfig};
pub use election::ElectionLoop;
pub use election_io::{
    CampaignAnswer, ElectionAction, ElectionOutcome, LeaseElectionConfig, perform_election,
};
pub use leader::{LeaderElection, Leadership, NoElection};
pub use machine::{Action, ControllerLoop, LoopStats, ReconcileFailure};
pub use step::{COMMIT_MARKERS, Reconciled, check_changes, commit_marker, reconcile};

#[cfg(feature = "tokio")]
pub use lease_election::LeaseElection;
#[cfg(feature = "tokio")]
pub use tokio_runner::{RunnerError, TokioRunner};

use std::future::Future;

/// Something that drives controllers until told to stop.
///
/// Implemented by `TokioRunner` (feature `tokio`); the testkit's simulated runner steps the same
/// [`ControllerLoop`] on virtual time.
pub trait Runner {
    /// Why the runner stopped abnormally.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Runs every registered controller until `shutdown` completes (a graceful stop, `Ok`) or a
    /// fatal error stops them all (`Err`).
    fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;
}
