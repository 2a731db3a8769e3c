//! [`SimulatorHarness`]: the suite's harness for the simulator, in its program vocabulary, also
//! behind any wrapper of it (an `Arc<dyn DynRuntime>`, a test's forwarding runtime).

use ccattler_core::{InstanceSpec, Runtime};
use ccattler_runtime::simulator::SimulatorRuntime;

use super::RuntimeHarness;

/// Fresh simulators (with `no-such-command` marked missing), handed to the suite as `R`.
///
/// Adoption is checked on a clone of the runtime under test (clones share the simulator's
/// table); stops take no time.
#[derive(Clone, Copy, Debug)]
pub struct SimulatorHarness<R = SimulatorRuntime> {
    wrap: fn(SimulatorRuntime) -> R,
}

impl SimulatorHarness {
    /// The simulator itself.
    pub fn new() -> Self {
        SimulatorHarness { wrap: |sim| sim }
    }
}

impl Default for SimulatorHarness {
    fn default() -> Self {
        SimulatorHarness::new()
    }
}

impl<R> SimulatorHarness<R> {
    /// The simulator behind `wrap`, to check that a wrapper forwards every guarantee.
    pub fn wrapping(wrap: fn(SimulatorRuntime) -> R) -> Self {
        SimulatorHarness { wrap }
    }
}

impl<R: Runtime + Clone + Send + Sync> RuntimeHarness for SimulatorHarness<R> {
    type Runtime = R;

    async fn fresh(&self) -> R {
        let sim = SimulatorRuntime::new();
        sim.faults().missing_command("no-such-command");
        (self.wrap)(sim)
    }

    async fn reopen(&self, runtime: &R) -> Option<R> {
        Some(runtime.clone())
    }

    fn takes_real_time(&self) -> bool {
        false
    }

    fn long_running(&self, id: &str) -> InstanceSpec {
        InstanceSpec::new(id, "sim").command(["sleep", "1000"])
    }

    fn exiting(&self, id: &str, code: i32) -> InstanceSpec {
        InstanceSpec::new(id, "sim").command(["exit".to_owned(), code.to_string()])
    }

    fn printing(&self, id: &str, lines: &[&str]) -> InstanceSpec {
        let argv = std::iter::once("print").chain(lines.iter().copied());
        InstanceSpec::new(id, "sim").command(argv)
    }

    fn ignoring_term(&self, id: &str) -> InstanceSpec {
        InstanceSpec::new(id, "sim").command(["print", "ready"])
    }

    fn missing_command(&self, id: &str) -> InstanceSpec {
        InstanceSpec::new(id, "sim").command(["no-such-command"])
    }

    fn exec_command(&self, stdout: &str, code: i32) -> Vec<String> {
        vec!["exit".to_owned(), code.to_string(), stdout.to_owned()]
    }
}
