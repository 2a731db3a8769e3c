//! What the runtime knows of one instance: its [`Record`] (`state.json`, on disk so that a new
//! runtime object after an agent restart can adopt what still runs) and its [`Entry`] in memory
//! (the record, plus the child handle when this runtime object spawned the process).

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus};
use std::time::Instant;

use ccattler_core::{InstanceState, ObservedInstance};
use serde::{Deserialize, Serialize};

use super::disk::Layout;
use super::host;

/// The last known state of an instance, as stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(super) enum Status {
    /// Started and not seen to end.
    Running,
    /// Ended on its own; `-1` when it ended while adopted (its exit code is unknown).
    Exited { code: i32 },
    /// Ended after a stop.
    Stopped,
    /// Could not start.
    Failed { reason: String },
}

impl Status {
    pub(super) fn to_state(&self) -> InstanceState {
        match self {
            Status::Running => InstanceState::Running,
            Status::Exited { code } => InstanceState::Exited { code: *code },
            Status::Stopped => InstanceState::Stopped,
            Status::Failed { reason } => InstanceState::Failed {
                reason: reason.clone(),
            },
        }
    }
}

/// One instance's `state.json`. It holds the environment (which may hold secrets), so it is
/// written with mode 0600.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Record {
    /// The instance id.
    pub(super) id: String,
    /// The argument vector (for diagnostics).
    pub(super) command: Vec<String>,
    /// The environment given to the process, `PORT` included; `exec` reuses it.
    pub(super) env: BTreeMap<String, String>,
    /// The host port given to the instance, if it asked for one.
    pub(super) port: Option<u16>,
    /// The process id (also its process group id) of the last start.
    pub(super) pid: Option<u32>,
    /// The start time of that process, in clock ticks since boot (`/proc/<pid>/stat` field 22).
    pub(super) start_time: Option<u64>,
    /// How many times the instance was started again after ending.
    pub(super) restarts: u32,
    /// Whether a stop was asked for: if the process ends now, it was stopped, not exited.
    pub(super) stopping: bool,
    /// The last known state.
    pub(super) status: Status,
}

impl Record {
    /// Reads a `state.json`.
    pub(super) fn read(path: &Path) -> io::Result<Record> {
        let bytes = fs::read(path)?;
        serde_json::from_slice(&bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }

    /// Writes `state.json` atomically (a temporary file renamed over it).
    pub(super) fn write(&self, path: &Path) -> io::Result<()> {
        let bytes = serde_json::to_vec_pretty(self).map_err(io::Error::other)?;
        let tmp = path.with_extension("json.tmp");
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        file.write_all(&bytes)?;
        drop(file);
        fs::rename(&tmp, path)
    }
}

/// The exit code of a status: its code, or 128 plus the signal that killed it.
pub(super) fn exit_code(status: ExitStatus) -> i32 {
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

/// An instance the runtime knows of.
#[derive(Debug)]
pub(super) struct Entry {
    pub(super) record: Record,
    /// The process, when this runtime object spawned it (so it can be waited on and its exit
    /// code read); `None` for an adopted process.
    pub(super) child: Option<Child>,
    /// The instance's cgroup, when limits were applied.
    pub(super) cgroup: Option<PathBuf>,
    /// The previous CPU sample: ticks used and when.
    pub(super) last_sample: Option<(u64, Instant)>,
}

impl Entry {
    pub(super) fn new(record: Record, child: Option<Child>) -> Self {
        Entry {
            record,
            child,
            cgroup: None,
            last_sample: None,
        }
    }

    /// The pid of the running process, when it runs.
    pub(super) fn running_pid(&self) -> Option<u32> {
        match self.record.status {
            Status::Running => self.record.pid,
            _ => None,
        }
    }

    /// Whether the recorded process is still ours and alive, without reaping it.
    fn still_ours(&self) -> bool {
        match (self.record.pid, self.record.start_time) {
            (Some(pid), Some(start)) => host::is_same_process(pid, start),
            _ => false,
        }
    }

    /// Notices whether a running instance ended, records how and saves `state.json`. Returns
    /// whether it ended just now.
    ///
    /// A spawned child is reaped and its exit code kept. An adopted process is not our child:
    /// when it is gone (or its pid now belongs to another process), its exit code is unknown and
    /// recorded as `-1`.
    pub(super) fn refresh(&mut self, layout: &Layout) -> bool {
        if self.record.status != Status::Running {
            return false;
        }
        let code = match self.child.as_mut().map(Child::try_wait) {
            Some(Ok(Some(status))) => exit_code(status),
            Some(Ok(None)) => return false,
            Some(Err(_)) | None if self.still_ours() => return false,
            Some(Err(_)) | None => -1,
        };
        self.child = None;
        self.record.status = if self.record.stopping {
            Status::Stopped
        } else {
            Status::Exited { code }
        };
        self.record.stopping = false;
        // The memory copy is the truth while this object lives; a failed write only costs the
        // exit code after an agent restart (it then reads as unknown).
        let _ = self.record.write(&layout.state(&self.record.id));
        true
    }

    /// What `observe` reports for this instance, served at `host` (the node's address).
    pub(super) fn observed(&self, host: &str) -> ObservedInstance {
        let mut seen = ObservedInstance::new(self.record.id.clone(), self.record.status.to_state());
        seen.address = self
            .record
            .port
            .map(|port| crate::address::served_at(host, port));
        seen.restarts = self.record.restarts;
        seen
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("state.json");
        let record = Record {
            id: "a".into(),
            command: vec!["sleep".into(), "1".into()],
            env: BTreeMap::from([("PORT".into(), "8080".into())]),
            port: Some(8080),
            pid: Some(42),
            start_time: Some(7),
            restarts: 2,
            stopping: false,
            status: Status::Exited { code: 3 },
        };
        record.write(&path).expect("write");
        assert_eq!(Record::read(&path).expect("read"), record);
        assert_eq!(record.status.to_state(), InstanceState::Exited { code: 3 });
    }
}
