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

    /// Removes every pending and standing fault (instances keep their states).
    pub fn clear(&self) {
        let mut table = self.table.lock();
        table.fail_next.clear();
        table.missing_images.clear();
        table.missing_commands.clear();
        table.slow.clear();
        table.frozen = None;
        table.unreachable = None;
    }
}
