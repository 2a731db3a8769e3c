//! The [`Runtime`] conformance suite: every guarantee the trait documents, checked against one
//! runtime (the simulator, Linux processes, containerd).
//!
//! # Expected flow
//!
//! A runtime's integration test implements [`RuntimeHarness`] (how to get a fresh runtime, and
//! what a long-running command, an exiting one, a printing one... are in that runtime's world:
//! `sleep` and `sh -c` for processes, busybox for containerd, the simulator's vocabulary for the
//! simulator) and awaits [`run_runtime_conformance`] inside a tokio runtime:
//!
//! ```ignore
//! #[tokio::test(flavor = "multi_thread")]
//! async fn process_runtime_conforms() {
//!     run_runtime_conformance(&ProcessHarness::new()).await;
//! }
//! ```
//!
//! Each check is also a public async fn of its topic module ([`lifecycle`], [`stop`],
//! [`inspect`], [`files`]), so a runtime can run one check alone while debugging it.
//!
//! # Guarantees
//!
//! Every check fails (panics) when the feature it covers is broken, with a message naming the
//! check and what differed; [`run_runtime_conformance`] prints the name of each check to stderr
//! before it runs it. Waits for a state poll `observe` and give up after
//! [`support::STATE_TIMEOUT`] instead of hanging. Each check stops and removes the instances it
//! started before it returns (not when it panics: the harness should clean up on drop).
//!
//! # Assumptions
//!
//! - The tokio runtime runs on real time (not a paused clock): waits sleep between polls.
//! - Each check gets its own runtime from [`RuntimeHarness::fresh`], with no instances in it.
//! - Optional guarantees are harness capabilities: adoption after a restart is checked only when
//!   [`RuntimeHarness::reopen`] gives a second runtime object, and stop timing only when
//!   [`RuntimeHarness::takes_real_time`] says a stop spends real time.

use std::future::Future;

use ccattler_core::{InstanceSpec, Runtime};

pub mod files;
pub mod inspect;
pub mod lifecycle;
mod simulator;
pub mod stop;
pub mod support;

pub use simulator::SimulatorHarness;

/// How the suite gets runtimes and specs; implemented by each runtime's test.
pub trait RuntimeHarness: Send + Sync {
    /// The runtime under test.
    type Runtime: Runtime;

    /// A fresh runtime with no instances. Called once per check.
    fn fresh(&self) -> impl Future<Output = Self::Runtime> + Send;

    /// A second runtime object over the same state as `runtime`, as after an agent restart, or
    /// `None` when the runtime cannot adopt (then the adoption check is skipped).
    fn reopen(&self, runtime: &Self::Runtime)
    -> impl Future<Output = Option<Self::Runtime>> + Send;

    /// Whether stops spend real time: a SIGTERM-ignoring instance then takes at least `grace`
    /// to stop. False for the simulator, which has no clock.
    fn takes_real_time(&self) -> bool;

    /// An instance that runs until stopped and honours SIGTERM (`sleep 1000`).
    fn long_running(&self, id: &str) -> InstanceSpec;

    /// An instance that ends on its own soon after its start with exit `code`.
    fn exiting(&self, id: &str, code: i32) -> InstanceSpec;

    /// An instance that writes `lines` to its output, one per line, then runs until stopped.
    fn printing(&self, id: &str, lines: &[&str]) -> InstanceSpec;

    /// An instance that ignores SIGTERM, prints the line `ready` once it does, then runs.
    fn ignoring_term(&self, id: &str) -> InstanceSpec;

    /// An instance whose command does not exist.
    fn missing_command(&self, id: &str) -> InstanceSpec;

    /// A command for `exec` that prints `stdout` (followed by a newline) and exits with `code`.
    fn exec_command(&self, stdout: &str, code: i32) -> Vec<String>;

    /// A command for `exec` that prints the file the instance's spec puts at `path`, as the
    /// instance sees it. `None`, the default, when `exec` cannot read files (a simulator): the
    /// file checks then check the runtime's answers only.
    fn read_file_command(&self, path: &str) -> Option<Vec<String>> {
        let _ = path;
        None
    }
}

/// Runs each named check against `$harness`, printing its name first.
macro_rules! run_checks {
    ($harness:expr, $($check:path),+ $(,)?) => {
        $(
            eprintln!("runtime conformance: {}", stringify!($check));
            $check($harness).await;
        )+
    };
}

/// Runs every check of the suite against `harness`, one after another.
///
/// # Errors
///
/// Panics on the first check that fails, with a message naming it and what differed.
pub async fn run_runtime_conformance<H: RuntimeHarness>(harness: &H) {
    run_checks!(
        harness,
        lifecycle::ensure_running_is_idempotent,
        lifecycle::observe_shows_running,
        lifecycle::exit_code_is_captured,
        lifecycle::restart_after_exit_is_counted,
        lifecycle::remove_forgets,
        lifecycle::adoption_keeps_identity,
        stop::stop_honours_term,
        stop::stop_forces_after_grace,
        stop::stop_is_idempotent,
        inspect::logs_tail,
        inspect::exec_returns_code_and_output,
        inspect::stats_report_memory,
        inspect::missing_command_is_reported,
        inspect::unknown_ids_are_not_found,
        files::files_are_rewritten_in_place,
    );
}
