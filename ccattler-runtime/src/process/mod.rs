//! [`ProcessRuntime`]: instances as real Linux processes, no root needed.
//!
//! # Expected flow
//!
//! A node agent makes one `ProcessRuntime` over a root directory it owns and drives it through
//! [`Runtime`](ccattler_core::Runtime). Each instance runs its `command` (the image is ignored) in
//! a process group of its own, in its own working directory, with `PATH` (the agent's unless the
//! spec sets one), the spec's environment, and its ports: `PORT` (the first host port) and
//! `PORT_{declared}` for each ([`InstanceSpec::port_env`](ccattler_core::InstanceSpec::port_env)).
//! The host ports are the spec's (the node agent passes those the scheduler gave); the runtime
//! never picks one. An instance with a port is reported at `{host}:{PORT}`, `host` being
//! [`ProcessConfig::host`] (the node's address); to be reached from other hosts it must listen
//! on that address or on `0.0.0.0`.
//!
//! # On-disk layout
//!
//! ```text
//! {root}/instances/{id}/
//!     work/          the process's cwd; spec file /etc/app.conf is written to work/etc/app.conf
//!                    with the spec's mode (0600 for secrets); mounts are symlinks at their
//!                    targets under work/ pointing to their sources
//!     stdout.log     stdout and stderr, appended by the process itself
//!     stdout.log.1   the previous log, once stdout.log outgrew ProcessConfig::log_cap
//!     state.json     pid, process start time, port, restarts, environment, last known state
//!                    (mode 0600: the environment may hold secrets)
//! ```
//!
//! # Guarantees
//!
//! - Stop: SIGTERM to the process group, up to `grace` to end, then SIGKILL to the group; what
//!   is left of the group once the leader ended is killed too. A stop returns once no process of
//!   the group is left (a process that left the group with `setsid` is not followed). The result
//!   is `Stopped`.
//! - Exit codes: a process this runtime object started is reaped, and its code (128 plus the
//!   signal when killed) is reported as [`InstanceState::Exited`](ccattler_core::InstanceState).
//! - Adoption: [`ProcessRuntime::new`] reads every `state.json` under the root. A process whose
//!   pid is alive *and* whose start time (`/proc/<pid>/stat` field 22) matches the recorded one
//!   is adopted and reported running; a pid now held by another process is never mistaken for
//!   the instance. An adopted process is not our child: when it ends, its exit code is unknown
//!   and reported as `Exited { code: -1 }`.
//! - Failures: a program that does not exist is [`CommandNotFound`] from `ensure_running`, an
//!   unwritable directory or bad file path is [`StartFailed`] with the cause; both are also
//!   observed as `Failed { reason }`.
//!
//! # Caveats
//!
//! - Calls do their file and `/proc` work inline (it is small) instead of on a blocking pool.
//! - The log cap is enforced when `observe` or `logs` runs (see the `disk` module); between two
//!   calls a log can grow past it.
//! - Mounts are symlinks: `read_only` is not enforced.
//! - CPU and memory limits apply only as root with cgroup v2, and are skipped silently otherwise
//!   (see [`ProcessConfig::cgroup_parent`]).
//! - Ended children are reaped when `observe`, `stats` or a stop looks at them; until then they
//!   are zombies.
//!
//! [`CommandNotFound`]: ccattler_core::RuntimeError::CommandNotFound
//! [`StartFailed`]: ccattler_core::RuntimeError::StartFailed

mod disk;
mod host;
mod record;
mod runtime;
mod spawn;

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use ccattler_core::RuntimeError;
use parking_lot::Mutex;

use disk::Layout;
use record::{Entry, Record, exit_code};

/// How a [`ProcessRuntime`] behaves; the defaults are documented on each field.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProcessConfig {
    /// Bytes `stdout.log` may reach before it is rotated. Default: 1 MiB.
    pub log_cap: u64,
    /// The cgroup v2 directory under which limited instances get their cgroup; `None` never
    /// applies limits. Default: `/sys/fs/cgroup/ccattler` (used only when running as root).
    pub cgroup_parent: Option<PathBuf>,
    /// The address other hosts reach this node at: an instance with a port is reported at
    /// `{host}:{port}`. Default: `127.0.0.1`, reachable from this host only. For other hosts
    /// to connect, the instance must listen on that address (or on every address, `0.0.0.0`).
    pub host: String,
}

impl Default for ProcessConfig {
    fn default() -> Self {
        ProcessConfig {
            log_cap: 1024 * 1024,
            cgroup_parent: Some(PathBuf::from("/sys/fs/cgroup/ccattler")),
            host: "127.0.0.1".to_owned(),
        }
    }
}

impl ProcessConfig {
    /// Sets [`ProcessConfig::log_cap`].
    #[must_use]
    pub fn log_cap(mut self, bytes: u64) -> Self {
        self.log_cap = bytes;
        self
    }

    /// Sets [`ProcessConfig::cgroup_parent`].
    #[must_use]
    pub fn cgroup_parent(mut self, parent: Option<PathBuf>) -> Self {
        self.cgroup_parent = parent;
        self
    }

    /// Sets [`ProcessConfig::host`]: the node's address, as its agent advertises it.
    #[must_use]
    pub fn host(mut self, host: impl Into<String>) -> Self {
        self.host = host.into();
        self
    }
}

/// Instances as Linux processes, with state under a root directory. Cheap to clone; clones
/// share their state.
#[derive(Clone, Debug)]
pub struct ProcessRuntime {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    layout: Layout,
    config: ProcessConfig,
    /// Every known instance. One lock: each call holds it briefly (never across a sleep).
    entries: Mutex<BTreeMap<String, Entry>>,
}

impl ProcessRuntime {
    /// A runtime over `root` with the default [`ProcessConfig`], adopting what still runs.
    ///
    /// # Errors
    ///
    /// [`RuntimeError::Unreachable`] when `root` exists but its instances cannot be listed. A
    /// missing root is fine (it is created at the first start); an unreadable `state.json` is
    /// skipped.
    pub fn new(root: impl Into<PathBuf>) -> Result<Self, RuntimeError> {
        ProcessRuntime::with_config(root, ProcessConfig::default())
    }

    /// A runtime over `root` with `config`, adopting what still runs. Errors as [`Self::new`].
    pub fn with_config(
        root: impl Into<PathBuf>,
        config: ProcessConfig,
    ) -> Result<Self, RuntimeError> {
        let layout = Layout::new(root.into());
        let entries = load(&layout)?;
        Ok(ProcessRuntime {
            inner: Arc::new(Inner {
                layout,
                config,
                entries: Mutex::new(entries),
            }),
        })
    }

    /// The root directory.
    pub fn root(&self) -> &std::path::Path {
        self.inner.layout.root()
    }

    /// The working directory of instance `id` (whether or not it exists).
    pub fn work_dir(&self, id: &str) -> PathBuf {
        self.inner.layout.work(id)
    }

    /// The pid (also process group id) of instance `id`, while it runs.
    pub fn pid(&self, id: &str) -> Option<u32> {
        self.inner.entries.lock().get(id)?.running_pid()
    }

    /// Kills every running instance at once (SIGKILL to each process group, no grace) and
    /// records them `Stopped`. For tests, benches and throwaway runtimes: an agent stops
    /// instances one by one with [`Runtime::ensure_stopped`](ccattler_core::Runtime).
    ///
    /// Returns once every killed process group is gone, or after a few seconds at most.
    pub fn kill_all(&self) {
        let mut entries = self.inner.entries.lock();
        let mut groups = Vec::new();
        for entry in entries.values_mut() {
            if let Some(pid) = entry.running_pid() {
                entry.record.stopping = true;
                runtime::signal_group(pid, nix::sys::signal::Signal::SIGKILL);
                groups.push(pid);
            }
        }
        for entry in entries.values_mut() {
            if let Some(child) = entry.child.as_mut() {
                // Killed just above: the wait is short.
                let _ = child.wait();
            }
            entry.refresh(&self.inner.layout);
        }
        let deadline = std::time::Instant::now() + runtime::KILL_WAIT;
        groups.retain(|group| host::group_has_live_members(*group));
        while !groups.is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(runtime::STOP_POLL);
            groups.retain(|group| host::group_has_live_members(*group));
        }
    }
}

/// Reads every `state.json` under the root and checks which recorded processes still run.
fn load(layout: &Layout) -> Result<BTreeMap<String, Entry>, RuntimeError> {
    let dirs = match fs::read_dir(layout.instances()) {
        Ok(dirs) => dirs,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(e) => {
            return Err(RuntimeError::Unreachable {
                message: format!("cannot list {}", layout.instances().display()),
                source: Some(Box::new(e)),
            });
        }
    };
    let mut entries = BTreeMap::new();
    for dir in dirs.flatten() {
        let Ok(record) = Record::read(&dir.path().join("state.json")) else {
            continue;
        };
        if dir.file_name().to_str() != Some(record.id.as_str()) {
            continue;
        }
        let mut entry = Entry::new(record, None);
        entry.refresh(layout);
        entries.insert(entry.record.id.clone(), entry);
    }
    Ok(entries)
}
