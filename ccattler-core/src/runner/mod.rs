//! Running controllers: list, watch, reconcile, commit, retry.
//!
//! The loop logic is a pure state machine, [`ControllerLoop`], stepped by inputs (list results,
//! watch events, reconcile results, commit results, clock ticks) and drained of [`Action`]s. It
//! reads no clock and does no I/O, so the tokio runner (feature `tokio`) and the simulated runner
//! in `ccattler-testkit` share it, and tests step it on virtual time.

mod backoff;

pub use backoff::{Backoff, LoopConfig};
// machine: pending

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
