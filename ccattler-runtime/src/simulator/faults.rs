//! [`Faults`]: the handle tests use to make things go wrong in a [`SimulatorRuntime`].
//!
//! [`SimulatorRuntime`]: super::SimulatorRuntime

use std::sync::Arc;

use ccattler_core::InstanceState;
use parking_lot::Mutex;

use super::is_live;
use super::table::Table;

/// Injects faults into a [`SimulatorRuntime`](super::SimulatorRuntime).
///
/// Every fault takes effect at once and deterministically: no timers, no randomness. Faults that
/// wait for a start (`fail_next_start`, `slow_start`) are used up by that start.
#[derive(Clone, Debug)]
pub struct Faults {
    table: Arc<Mutex<Table>>,
}

impl Faults {
    pub(super) fn new(table: Arc<Mutex<Table>>) -> Self {
        Faults { table }
    }

    /// Crashes a running (or starting) instance: it ends with exit `code`. Returns whether there
    /// was such an instance.
    pub fn crash(&self, id: &str, code: i32) -> bool {
        let mut table = self.table.lock();
        match table.instances.get_mut(id) {
            Some(instance) if is_live(&instance.state) => {
                instance.state = InstanceState::Exited { code };
                true
            }
            _ => false,
        }
    }

    /// Makes the next start of an instance fail with `reason` ([`StartFailed`] from
    /// `ensure_running` and an observed [`InstanceState::Failed`]). `target` is an instance id or
    /// an image; the first start that matches uses the fault up.
    ///
    /// [`StartFailed`]: ccattler_core::RuntimeError::StartFailed
    pub fn fail_next_start(&self, target: impl Into<String>, reason: impl Into<String>) {
        self.table
            .lock()
            .fail_next
            .insert(target.into(), reason.into());
    }

    /// Makes every start of `image` fail with [`ImageNotFound`] until [`Faults::clear`].
    ///
    /// [`ImageNotFound`]: ccattler_core::RuntimeError::ImageNotFound
    pub fn missing_image(&self, image: impl Into<String>) {
        self.table.lock().missing_images.insert(image.into());
    }

    /// Makes every start (and exec) whose program is `program` fail with [`CommandNotFound`]
    /// until [`Faults::clear`].
    ///
    /// [`CommandNotFound`]: ccattler_core::RuntimeError::CommandNotFound
    pub fn missing_command(&self, program: impl Into<String>) {
        self.table.lock().missing_commands.insert(program.into());
    }

    /// Makes the next start of instance `id` stay [`InstanceState::Starting`] until
    /// [`Faults::release`].
    pub fn slow_start(&self, id: impl Into<String>) {
        self.table.lock().slow.insert(id.into());
    }

    /// Lets a slow start finish: the instance runs (or exits, if its program is `exit`). Returns
    /// whether the instance was starting.
    pub fn release(&self, id: &str) -> bool {
        let mut table = self.table.lock();
        table.slow.remove(id);
        match table.instances.get_mut(id) {
            Some(instance) if instance.state == InstanceState::Starting => {
                instance.settle();
                true
            }
            _ => false,
        }
    }

    /// Makes `observe` return what it returns now, whatever happens next, until
    /// [`Faults::fresh_observation`].
    pub fn stale_observation(&self) {
        let mut table = self.table.lock();
        table.frozen = Some(table.snapshot());
    }

    /// Ends a stale observation: `observe` tells the truth again.
    pub fn fresh_observation(&self) {
        self.table.lock().frozen = None;
    }

    /// Makes every call fail with [`Unreachable`] until [`Faults::reachable`].
    ///
    /// [`Unreachable`]: ccattler_core::RuntimeError::Unreachable
    pub fn unreachable(&self, message: impl Into<String>) {
        self.table.lock().unreachable = Some(message.into());
    }

    /// Ends [`Faults::unreachable`].
    pub fn reachable(&self) {
        self.table.lock().unreachable = None;
    }

    /// Adds a line to an instance's output. Returns whether the instance exists.
    pub fn print(&self, id: &str, line: impl Into<String>) -> bool {
        match self.table.lock().instances.get_mut(id) {
            Some(instance) => {
                instance.output.push(line.into());
                true
            }
            None => false,
        }
    }

    /// Makes network probes of instance `target` (an id or an image) fail until
    /// [`Faults::clear`] (see [`SimulatorRuntime::check_network_probe`](super::SimulatorRuntime::check_network_probe)).
    pub fn fail_probes(&self, target: impl Into<String>) {
        self.table.lock().failing_probes.insert(target.into());
    }

    /// Removes every pending and standing fault (instances keep their states).
    pub fn clear(&self) {
        let mut table = self.table.lock();
        table.fail_next.clear();
        table.missing_images.clear();
        table.missing_commands.clear();
        table.slow.clear();
        table.frozen = None;
        table.unreachable = None;
        table.failing_probes.clear();
    }
}

#[cfg(test)]
mod tests {
    use ccattler_core::{InstanceSpec, InstanceState, Runtime, RuntimeError};

    use super::super::SimulatorRuntime;

    fn state(sim: &SimulatorRuntime, id: &str) -> Option<InstanceState> {
        let seen = futures_now(sim.observe()).expect("observe");
        seen.into_iter().find(|i| i.id == id).map(|i| i.state)
    }

    /// The simulator never waits: its futures finish on their first poll.
    fn futures_now<F: std::future::Future>(f: F) -> F::Output {
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        match std::pin::pin!(f).poll(&mut cx) {
            std::task::Poll::Ready(out) => out,
            std::task::Poll::Pending => panic!("the simulator waited"),
        }
    }

    #[test]
    fn slow_start_failing_start_and_stale_observation() {
        let sim = SimulatorRuntime::new();
        let faults = sim.faults();
        faults.slow_start("a");
        futures_now(sim.ensure_running(&InstanceSpec::new("a", "img"))).expect("start");
        assert_eq!(state(&sim, "a"), Some(InstanceState::Starting));
        assert!(faults.release("a"));
        assert_eq!(state(&sim, "a"), Some(InstanceState::Running));

        faults.fail_next_start("img", "boom");
        let e = futures_now(sim.ensure_running(&InstanceSpec::new("b", "img")));
        assert!(matches!(e, Err(RuntimeError::StartFailed { .. })), "{e:?}");
        assert!(matches!(
            state(&sim, "b"),
            Some(InstanceState::Failed { .. })
        ));
        futures_now(sim.ensure_running(&InstanceSpec::new("b", "img"))).expect("used up");

        faults.stale_observation();
        assert!(faults.crash("a", 137));
        assert_eq!(state(&sim, "a"), Some(InstanceState::Running));
        faults.fresh_observation();
        assert_eq!(state(&sim, "a"), Some(InstanceState::Exited { code: 137 }));

        faults.unreachable("down");
        let e = futures_now(sim.observe());
        assert!(matches!(e, Err(RuntimeError::Unreachable { .. })), "{e:?}");
    }
}
