//! The [`Runtime`] implementation of [`ProcessRuntime`].

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::time::{Duration, Instant};

use ccattler_core::schema::{Cpu, Memory};
use ccattler_core::{
    ExecOutput, FileSpec, InstanceSpec, InstanceStats, ObservedInstance, Runtime, RuntimeError,
};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use super::record::{Record, Status};
use super::{Entry, ProcessRuntime, disk, host, spawn};

/// How often a stop looks whether the process ended.
pub(super) const STOP_POLL: Duration = Duration::from_millis(5);

/// How long a SIGKILLed process may take to be seen gone before a stop reports a timeout.
pub(super) const KILL_WAIT: Duration = Duration::from_secs(5);

/// Signals a process group; a group that is already gone is not an error.
pub(super) fn signal_group(pid: u32, signal: Signal) {
    if let Ok(pid) = i32::try_from(pid) {
        let _ = killpg(Pid::from_raw(pid), signal);
    }
}

/// Waits until process group `group` has no live member, up to `limit`. Returns whether it
/// has none.
async fn wait_group_end(group: u32, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while host::group_has_live_members(group) {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        tokio::time::sleep(left.min(STOP_POLL)).await;
    }
    true
}

impl ProcessRuntime {
    /// Looks whether instance `id` ended; `None` when it is unknown, else whether it still runs.
    fn still_running(&self, id: &str) -> Option<bool> {
        let mut entries = self.inner.entries.lock();
        let entry = entries.get_mut(id)?;
        entry.refresh(&self.inner.layout);
        Some(entry.running_pid().is_some())
    }

    /// Waits until `id` no longer runs, up to `limit`. Returns whether it ended.
    async fn wait_end(&self, id: &str, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            if self.still_running(id) != Some(true) {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            tokio::time::sleep(left.min(STOP_POLL)).await;
        }
    }

    fn start(&self, spec: &InstanceSpec) -> Result<(), RuntimeError> {
        let layout = &self.inner.layout;
        let mut entries = self.inner.entries.lock();
        let restarts = match entries.get_mut(&spec.id) {
            Some(entry) => {
                entry.refresh(layout);
                if entry.running_pid().is_some() {
                    return Ok(());
                }
                entry.record.restarts + 1
            }
            None => 0,
        };
        let mut record = Record {
            id: spec.id.clone(),
            command: spec.command.clone(),
            env: BTreeMap::new(),
            port: spec.served_port(),
            pid: None,
            start_time: None,
            restarts,
            stopping: false,
            status: Status::Running,
        };
        let started = match spawn::start(layout, spec) {
            Ok(started) => started,
            Err(e) => {
                record.status = Status::Failed {
                    reason: e.to_string(),
                };
                if spawn::check_id(&spec.id).is_ok() {
                    let _ = record.write(&layout.state(&spec.id));
                }
                entries.insert(spec.id.clone(), Entry::new(record, None));
                return Err(e);
            }
        };
        let pid = started.child.id();
        record.pid = Some(pid);
        record.start_time = host::stat(pid).map(|s| s.start_time);
        record.env = started.env;
        let mut entry = Entry::new(record, Some(started.child));
        if let Err(e) = entry.record.write(&layout.state(&spec.id)) {
            // Without state.json the process could never be adopted: do not leave it running.
            signal_group(pid, Signal::SIGKILL);
            if let Some(mut child) = entry.child.take() {
                let _ = child.wait();
            }
            let error = RuntimeError::StartFailed {
                id: spec.id.clone(),
                reason: format!("cannot write state.json: {e}"),
            };
            entry.record.status = Status::Failed {
                reason: error.to_string(),
            };
            entries.insert(spec.id.clone(), entry);
            return Err(error);
        }
        if let Some(parent) = &self.inner.config.cgroup_parent {
            entry.cgroup = host::apply_limits(parent, &spec.id, pid, spec.cpu, spec.memory);
        }
        entries.insert(spec.id.clone(), entry);
        Ok(())
    }

    /// Instance `id` as it is now, its log kept under the cap while it runs.
    fn observe_entry(&self, id: &str, entry: &mut Entry) -> ObservedInstance {
        let layout = &self.inner.layout;
        entry.refresh(layout);
        if entry.running_pid().is_some() {
            let cap = self.inner.config.log_cap;
            let _ = disk::enforce_cap(&layout.log(id), &layout.old_log(id), cap);
        }
        entry.observed(&self.inner.config.host)
    }
}

impl Runtime for ProcessRuntime {
    async fn ensure_running(&self, spec: &InstanceSpec) -> Result<(), RuntimeError> {
        crate::mounts::prepare(spec)?;
        self.start(spec)
    }

    async fn ensure_stopped(&self, id: &str, grace: Duration) -> Result<(), RuntimeError> {
        let pid = {
            let mut entries = self.inner.entries.lock();
            let Some(entry) = entries.get_mut(id) else {
                return Ok(());
            };
            entry.refresh(&self.inner.layout);
            let Some(pid) = entry.running_pid() else {
                return Ok(());
            };
            entry.record.stopping = true;
            let _ = entry.record.write(&self.inner.layout.state(id));
            pid
        };
        signal_group(pid, Signal::SIGTERM);
        let ended = self.wait_end(id, grace).await;
        // Kill what is left: the leader if it ignored SIGTERM, or its children if it did not.
        signal_group(pid, Signal::SIGKILL);
        if !(ended || self.wait_end(id, KILL_WAIT).await) {
            return Err(RuntimeError::Timeout {
                what: format!("stopping {id} (pid {pid})"),
                after: grace + KILL_WAIT,
            });
        }
        // The leader is gone; the instance is stopped once the rest of its group is too.
        if wait_group_end(pid, KILL_WAIT).await {
            Ok(())
        } else {
            Err(RuntimeError::Timeout {
                what: format!("stopping the processes {id} started (process group {pid})"),
                after: grace + KILL_WAIT + KILL_WAIT,
            })
        }
    }

    async fn remove(&self, id: &str) -> Result<(), RuntimeError> {
        if self.still_running(id) == Some(true) {
            self.ensure_stopped(id, Duration::ZERO).await?;
        }
        let Some(entry) = self.inner.entries.lock().remove(id) else {
            return Ok(());
        };
        if let (Some(parent), Some(_)) = (&self.inner.config.cgroup_parent, &entry.cgroup) {
            host::release_limits(parent, id);
        }
        if spawn::check_id(id).is_err() {
            return Ok(());
        }
        let dir = self.inner.layout.dir(id);
        let removed = match fs::symlink_metadata(&dir) {
            Ok(meta) if meta.is_dir() => fs::remove_dir_all(&dir),
            Ok(_) => fs::remove_file(&dir),
            Err(e) => Err(e),
        };
        match removed {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(RuntimeError::Unreachable {
                message: format!("cannot remove the directory of {id}"),
                source: Some(Box::new(e)),
            }),
            _ => Ok(()),
        }
    }

    async fn observe(&self) -> Result<Vec<ObservedInstance>, RuntimeError> {
        let mut entries = self.inner.entries.lock();
        let seen = entries
            .iter_mut()
            .map(|(id, entry)| self.observe_entry(id, entry));
        Ok(seen.collect())
    }

    async fn observe_some(
        &self,
        ids: &BTreeSet<String>,
    ) -> Result<Vec<ObservedInstance>, RuntimeError> {
        let mut entries = self.inner.entries.lock();
        let mut seen = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(entry) = entries.get_mut(id) {
                seen.push(self.observe_entry(id, entry));
            }
        }
        Ok(seen)
    }

    async fn stats(&self, id: &str) -> Result<InstanceStats, RuntimeError> {
        let mut entries = self.inner.entries.lock();
        let entry = entries
            .get_mut(id)
            .ok_or_else(|| RuntimeError::NotFound(id.to_owned()))?;
        entry.refresh(&self.inner.layout);
        let Some(pid) = entry.running_pid() else {
            return Ok(InstanceStats::default());
        };
        let (ticks, bytes) = host::usage(pid);
        let now = Instant::now();
        let per_second = host::ticks_per_second() as f64;
        let (used, elapsed) = match entry.last_sample {
            Some((before, at)) => (ticks.saturating_sub(before), (now - at).as_secs_f64()),
            None => {
                let started = entry.record.start_time.unwrap_or(0) as f64 / per_second;
                let up = host::uptime_seconds().unwrap_or(started);
                (ticks, up - started)
            }
        };
        entry.last_sample = Some((ticks, now));
        let millis = if elapsed > 0.0 {
            (used as f64 / per_second / elapsed * 1000.0) as u64
        } else {
            0
        };
        Ok(InstanceStats {
            cpu: Cpu::from_millis(millis),
            memory: Memory::from_bytes(bytes),
        })
    }

    async fn logs(&self, id: &str, lines: usize) -> Result<String, RuntimeError> {
        if !self.inner.entries.lock().contains_key(id) {
            return Err(RuntimeError::NotFound(id.to_owned()));
        }
        let layout = &self.inner.layout;
        let (log, old) = (layout.log(id), layout.old_log(id));
        let _ = disk::enforce_cap(&log, &old, self.inner.config.log_cap);
        disk::tail(&log, &old, lines).map_err(|e| RuntimeError::Unreachable {
            message: format!("cannot read the log of {id}"),
            source: Some(Box::new(e)),
        })
    }

    async fn exec(
        &self,
        id: &str,
        command: &[String],
        timeout: Duration,
    ) -> Result<ExecOutput, RuntimeError> {
        let env = match self.inner.entries.lock().get(id) {
            Some(entry) => entry.record.env.clone(),
            None => return Err(RuntimeError::NotFound(id.to_owned())),
        };
        spawn::exec(id, &self.inner.layout.work(id), &env, command, timeout).await
    }

    async fn update_files(&self, id: &str, files: &[FileSpec]) -> Result<(), RuntimeError> {
        if !self.inner.entries.lock().contains_key(id) {
            return Err(RuntimeError::NotFound(id.to_owned()));
        }
        spawn::rewrite_files(&self.inner.layout, id, files)
    }
}
