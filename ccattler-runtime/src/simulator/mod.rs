//! [`SimulatorRuntime`]: an in-memory, deterministic [`Runtime`] with injectable faults.
//!
//! Nothing runs: the simulator keeps a table of instances and moves them between states when it is
//! asked to, or when a test injects a fault through its [`Faults`] handle. There is no clock: a
//! slow start stays [`InstanceState::Starting`] until the test releases it, and a stop returns at
//! once whatever the grace period.
//!
//! # The program vocabulary
//!
//! The simulator reads an instance's command as a tiny program, so that one spec can describe how
//! the instance behaves:
//!
//! | `command[0]` | what the instance does |
//! |---|---|
//! | `exit <code>` | ends at once on its own with `code` ([`InstanceState::Exited`]) |
//! | `print <line>...` | writes each argument as a line of output, then runs |
//! | a program marked missing with [`Faults::missing_command`] | fails: [`RuntimeError::CommandNotFound`] |
//! | `true`, `:` / `false` | ends at once with 0 / 1 |
//! | `sh -c "<program>"` | what `<program>` does (init steps and exec probes run this way) |
//! | anything else, or no command | runs until stopped |
//!
//! An init step (a spec whose environment holds `CCATTLER_INIT_STEP`, as the node agent starts
//! them) is a program that ends: one the vocabulary does not know ends with 0 at once, as a
//! step that did its work; `sleep ...` never ends, a step that hangs until its timeout.
//!
//! [`Runtime::exec`] reads `exit <code> [output...]` the same way (returns `code` and prints the
//! output words, one per line); any other command returns code 0 and no output.
//!
//! Network probes (TCP and HTTP) reach nothing: the simulator answers them itself
//! ([`SimulatorRuntime::check_network_probe`]), passing while the instance runs unless
//! [`Faults::fail_probes`] names it.
//!
//! Stats report the spec's memory limit as the memory in use (16 MiB when the spec has none) and
//! no CPU, unless a [`Load`] model shared with [`SimulatorRuntime::with_load`] gives the
//! service a [`Demand`]. An instance whose spec has ports serves at `{host}:{port}`, its first host port: the
//! host is `127.0.0.1` unless [`SimulatorRuntime::on_host`] names another.

mod faults;
mod load;
mod table;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use ccattler_core::{
    ExecOutput, FileSpec, InstanceSpec, InstanceState, InstanceStats, ObservedInstance, Runtime,
    RuntimeError,
};
use parking_lot::Mutex;

pub use faults::Faults;
pub use load::{Demand, Load};
use table::Table;

/// The in-memory runtime. Cheap to clone; clones share one table of instances.
///
/// # Example
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// use ccattler_core::{InstanceSpec, InstanceState, Runtime};
/// use ccattler_runtime::simulator::SimulatorRuntime;
///
/// let sim = SimulatorRuntime::new();
/// sim.ensure_running(&InstanceSpec::new("web-1", "web:1")).await.unwrap();
/// sim.faults().crash("web-1", 137);
/// let seen = sim.observe().await.unwrap();
/// assert_eq!(seen[0].state, InstanceState::Exited { code: 137 });
/// # });
/// ```
#[derive(Clone, Debug, Default)]
pub struct SimulatorRuntime {
    table: Arc<Mutex<Table>>,
    load: Option<Load>,
}

impl SimulatorRuntime {
    /// An empty simulator with no faults.
    pub fn new() -> Self {
        SimulatorRuntime::default()
    }

    /// An empty simulator whose instances serve on `host` (a node's address).
    pub fn on_host(host: impl Into<String>) -> Self {
        let sim = SimulatorRuntime::new();
        sim.table.lock().host = Some(host.into());
        sim
    }

    /// This simulator, its instances using what `load` says (shared with other simulators:
    /// a service's CPU demand is shared by its instances on all of them).
    #[must_use]
    pub fn with_load(mut self, load: &Load) -> Self {
        load.attach(&self.table);
        self.load = Some(load.clone());
        self
    }

    /// The handle that injects faults into this simulator (and its clones).
    pub fn faults(&self) -> Faults {
        Faults::new(Arc::clone(&self.table))
    }

    /// The state of instance `id` now (the truth, even while observations are stale).
    pub fn state(&self, id: &str) -> Option<InstanceState> {
        self.table.lock().instances.get(id).map(|i| i.state.clone())
    }

    /// The ids of the instances of `service` that run now (the truth, even while observations
    /// are stale), in id order.
    pub fn running_of(&self, service: &str) -> Vec<String> {
        self.table
            .lock()
            .instances
            .values()
            .filter(|i| i.spec.service == service && i.state == InstanceState::Running)
            .map(|i| i.spec.id.clone())
            .collect()
    }

    /// The ids of every instance the simulator knows of, in id order.
    pub fn ids(&self) -> Vec<String> {
        self.table.lock().instances.keys().cloned().collect()
    }

    /// The spec instance `id` was last started with, if the simulator knows it.
    pub fn spec(&self, id: &str) -> Option<InstanceSpec> {
        self.table.lock().instances.get(id).map(|i| i.spec.clone())
    }

    /// What a network probe (TCP or HTTP) of instance `id` finds: it passes while the
    /// instance runs, unless [`Faults::fail_probes`] names it or its image. The agent asks this
    /// through [`Runtime::network_probe`], since nothing listens at a simulated address.
    ///
    /// # Errors
    ///
    /// Why the check fails, for people.
    pub fn check_network_probe(&self, id: &str) -> Result<(), String> {
        let table = self.table.lock();
        let instance = table
            .instances
            .get(id)
            .ok_or_else(|| format!("no instance {id}"))?;
        if instance.state != InstanceState::Running {
            return Err(format!("{id} is not running"));
        }
        if table.failing_probes.contains(id) || table.failing_probes.contains(&instance.spec.image)
        {
            return Err(format!("connection refused by {id} (simulated)"));
        }
        Ok(())
    }
}

impl Runtime for SimulatorRuntime {
    async fn ensure_running(&self, spec: &InstanceSpec) -> Result<(), RuntimeError> {
        self.table.lock().ensure_running(spec)
    }

    async fn ensure_stopped(&self, id: &str, _grace: Duration) -> Result<(), RuntimeError> {
        self.table.lock().ensure_stopped(id)
    }

    async fn remove(&self, id: &str) -> Result<(), RuntimeError> {
        self.table.lock().remove(id)
    }

    async fn observe(&self) -> Result<Vec<ObservedInstance>, RuntimeError> {
        self.table.lock().observe()
    }

    async fn observe_some(
        &self,
        ids: &BTreeSet<String>,
    ) -> Result<Vec<ObservedInstance>, RuntimeError> {
        self.table.lock().observe_some(ids)
    }

    async fn stats(&self, id: &str) -> Result<InstanceStats, RuntimeError> {
        let (stats, live_service) = {
            let table = self.table.lock();
            let live = table.instances.get(id).filter(|i| is_live(&i.state));
            (table.stats(id)?, live.map(|i| i.spec.service.clone()))
        };
        // Asked of the model with no table held: it counts the instances of every table.
        let modelled = self
            .load
            .as_ref()
            .zip(live_service)
            .and_then(|(load, service)| load.usage(&service));
        Ok(modelled.unwrap_or(stats))
    }

    async fn logs(&self, id: &str, lines: usize) -> Result<String, RuntimeError> {
        self.table.lock().logs(id, lines)
    }

    async fn exec(
        &self,
        id: &str,
        command: &[String],
        _timeout: Duration,
    ) -> Result<ExecOutput, RuntimeError> {
        self.table.lock().exec(id, command)
    }

    async fn update_files(&self, id: &str, files: &[FileSpec]) -> Result<(), RuntimeError> {
        self.table.lock().update_files(id, files)
    }

    async fn network_probe(&self, id: &str) -> Option<Result<(), String>> {
        Some(self.check_network_probe(id))
    }
}

/// What the simulator makes of `exit <code>`, `true`, `:` and `false` (or the same run by
/// `sh -c`, as init steps and exec probes are run): the code it ends with, or `None` for any
/// other command.
fn exit_code(command: &[String]) -> Option<i32> {
    match command {
        [shell, flag, script] if shell == "sh" && flag == "-c" => {
            let words: Vec<String> = script.split_whitespace().map(str::to_owned).collect();
            exit_code(&words)
        }
        [program, code, ..] if program == "exit" => code.parse().ok(),
        [program] if program == "exit" || program == "true" || program == ":" => Some(0),
        [program] if program == "false" => Some(1),
        _ => None,
    }
}

/// What an init step (a spec whose environment names [`INIT_STEP_ENV`](crate::agent::INIT_STEP_ENV)) ends with: its
/// program's code when the vocabulary knows it; a `sleep` never ends (a step that hangs until
/// its timeout); anything else ends with 0 at once, as a step that did its work.
fn init_step_exit(command: &[String]) -> Option<i32> {
    let script: Vec<&str> = match command {
        [shell, flag, script] if shell == "sh" && flag == "-c" => {
            script.split_whitespace().collect()
        }
        other => other.iter().map(String::as_str).collect(),
    };
    match exit_code(command) {
        Some(code) => Some(code),
        None if script.first() == Some(&"sleep") => None,
        None => Some(0),
    }
}

/// Whether an instance in `state` counts as running for stats and stops.
fn is_live(state: &InstanceState) -> bool {
    matches!(state, InstanceState::Running | InstanceState::Starting)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| (*x).to_owned()).collect()
    }

    #[test]
    fn exit_vocabulary() {
        assert_eq!(exit_code(&s(&["exit", "3"])), Some(3));
        assert_eq!(exit_code(&s(&["exit"])), Some(0));
        assert_eq!(exit_code(&s(&["sleep", "3"])), None);
        assert_eq!(exit_code(&s(&["exit", "x"])), None);
        assert_eq!(exit_code(&s(&["sh", "-c", "exit 7"])), Some(7));
        assert_eq!(exit_code(&s(&["sh", "-c", "sleep 1"])), None);
        assert_eq!(exit_code(&s(&["sh", "-c", "true"])), Some(0));
        assert_eq!(exit_code(&s(&["false"])), Some(1));
    }

    #[test]
    fn init_steps_end_unless_they_sleep() {
        assert_eq!(
            init_step_exit(&s(&["sh", "-c", "./migrate --all"])),
            Some(0)
        );
        assert_eq!(init_step_exit(&s(&["sh", "-c", "exit 2"])), Some(2));
        assert_eq!(init_step_exit(&s(&["sh", "-c", "sleep 600"])), None);
    }

    #[test]
    fn live_states() {
        assert!(is_live(&InstanceState::Starting));
        assert!(!is_live(&InstanceState::Stopped));
    }
}
