//! What the [`AgentLoop`](super::AgentLoop) asks its driver to do, and what the driver reports
//! back.

use std::collections::BTreeSet;
use std::fmt;
use std::time::Duration;

use ccattler_core::schema::{Probe, RecordKey};
use ccattler_core::{
    FileSpec, InstanceSpec, InstanceStats, Key, LeaseId, ObservedInstance, Revision, Scan, Value,
};

use super::cache::Desired;
use super::probe::ProbeKind;

/// Where an action is performed. The driver performs every action the loop hands it at once,
/// each on its own, concurrently with the others: the loop itself keeps at most one store
/// action and one observation in flight, and one runtime action per instance (up to
/// [`AgentConfig::parallel_actions`](super::AgentConfig) instances at a time), so that a slow
/// start (an image pull) never holds back another instance or the reports. The lease is kept
/// alive apart from all of them, on a schedule of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    /// Talks to the store: register, list, watch, fetch, report.
    Store,
    /// Keeps the node's lease alive: a standing order, performed apart from every other action
    /// and from the loop itself, so that no work of the agent (or of anything sharing its
    /// runtime) delays a renewal.
    Lease,
    /// Talks to the runtime: observe, start, stop, remove, probe.
    Runtime,
    /// Done at once, on the local machine: save the cache, log.
    Local,
}

/// What the driver must do next. Drain them with [`AgentLoop::next_action`](super::AgentLoop::next_action)
/// and report each store or runtime action's result with the method its docs name.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Resume `lease` if it is given and still lives, else grant a new lease of the configured
    /// TTL; then write `lease/node/{node}` under it and `observed/node/{node}` (`status`) in one
    /// transaction. Report with [`registered`](super::AgentLoop::registered).
    Register {
        /// The lease to resume.
        lease: Option<LeaseId>,
        /// The node's status record.
        status: Value,
    },
    /// Scan `placements` and `observations` (this node's two prefixes). Report with
    /// [`listed`](super::AgentLoop::listed).
    List {
        /// `placement/{node}/`.
        placements: String,
        /// `observed/instance/{node}/`.
        observations: String,
    },
    /// Drop any watch and watch `prefix` from `from`. Feed its events to
    /// [`event`](super::AgentLoop::event); report a watch that cannot start, fails or ends with
    /// [`watch_failed`](super::AgentLoop::watch_failed).
    Watch {
        /// `placement/{node}/`.
        prefix: String,
        /// The first revision to deliver.
        from: Revision,
    },
    /// Get the specs of the versions the placements in hand need. Report the facts (in order)
    /// with [`fetched_specs`](super::AgentLoop::fetched_specs). One action asks for every
    /// version needed, so that a node given instances of ten services learns them in one round
    /// and judges its placements once, not once a service.
    FetchSpecs {
        /// Each service's `desired/service/{service}`, then each version's
        /// `rollout/spec/{service}/{version}`.
        keys: Vec<Key>,
    },
    /// Get each secret. Report the facts (in order) with
    /// [`fetched_secrets`](super::AgentLoop::fetched_secrets).
    FetchSecrets {
        /// `secret/{name}` keys.
        keys: Vec<Key>,
    },
    /// Keep `lease` alive from now on: renew it every `every` until the loop disconnects
    /// ([`Action::Disconnected`]) or asks to keep another lease, on a schedule of its own that
    /// does not wait for the loop (see [`RenewOn`](super::RenewOn)). Report a renewal that failed
    /// with [`renewed`](super::AgentLoop::renewed); one that succeeded needs no report.
    KeepLease {
        /// The node's lease.
        lease: LeaseId,
        /// How often to renew it: a third of its TTL.
        every: Duration,
    },
    /// Write changed observations and delete those of instances no longer placed here, in
    /// transactions of at most the store's op limit. Report with
    /// [`reported`](super::AgentLoop::reported).
    Report {
        /// Observations to put.
        puts: Vec<(Key, Value)>,
        /// Observations to delete.
        deletes: Vec<Key>,
        /// Events to put, attached to `lease` (see [`ccattler_core::event`]).
        events: Vec<(Key, Value)>,
        /// Event keys to delete (the rings of instances no longer placed here).
        event_deletes: Vec<Key>,
        /// The node's lease.
        lease: LeaseId,
    },
    /// Put the node's telemetry (`telemetry/node/{node}`) under `lease`. Report with
    /// [`telemetry_written`](super::AgentLoop::telemetry_written).
    WriteTelemetry {
        /// `telemetry/node/{node}`.
        key: Key,
        /// The [`NodeTelemetry`](ccattler_core::schema::NodeTelemetry) record.
        value: Value,
        /// The node's lease.
        lease: LeaseId,
    },
    /// Ask the runtime what runs, and the stats of what runs: every instance, or only those of
    /// `ids` (runtime ids; an instance's init steps have their own). Report with
    /// [`observed`](super::AgentLoop::observed).
    Observe {
        /// The runtime ids to look at; `None` for every instance the runtime knows of.
        ids: Option<BTreeSet<String>>,
    },
    /// Make sure the instance runs (a runtime on the host first makes the directories of its
    /// mounts). Report with [`done`](super::AgentLoop::done).
    EnsureRunning {
        /// What to run.
        spec: Box<InstanceSpec>,
    },
    /// Make sure the instance does not run. Report with [`done`](super::AgentLoop::done).
    EnsureStopped {
        /// The instance (or init step) id.
        id: String,
        /// Time between the polite and the forced stop.
        grace: Duration,
        /// Why it stops.
        reason: StopReason,
    },
    /// Rewrite files of running instance `id` in place (a secret it mounts changed). Report
    /// with [`done`](super::AgentLoop::done).
    UpdateFiles {
        /// The instance.
        id: String,
        /// Its files with their new contents.
        files: Vec<FileSpec>,
    },
    /// Forget an ended instance, then delete `data` (with all it holds) if given. Report with
    /// [`done`](super::AgentLoop::done).
    Remove {
        /// The instance (or init step) id.
        id: String,
        /// The directory of the instance's volumes that go with it (those not persistent), on
        /// this node; `None` for an init step, whose volumes are its instance's.
        data: Option<std::path::PathBuf>,
    },
    /// Read the last `lines` lines an ended init step printed, before it is removed. Report
    /// with [`read_output`](super::AgentLoop::read_output).
    ReadOutput {
        /// The init step's id.
        id: String,
        /// How many lines, at most.
        lines: usize,
    },
    /// Run one probe of one instance. Report with [`probed`](super::AgentLoop::probed).
    Probe {
        /// The instance.
        id: String,
        /// Which probe.
        kind: ProbeKind,
        /// The check.
        probe: Box<Probe>,
        /// Where the instance serves, if it does.
        address: Option<String>,
    },
    /// Measure the disk the node's volumes use under `dir` ([`measure_volumes`](super::measure_volumes):
    /// a walk of their directories, on a thread of its own). Report with
    /// [`volumes_measured`](super::AgentLoop::volumes_measured).
    MeasureVolumes {
        /// The node's volumes directory (`{cache_dir}/volumes`).
        dir: std::path::PathBuf,
    },
    /// Write the cache file (private, synced, renamed into place). Nothing to report; a failure
    /// is the driver's to log. Never asked for when
    /// [`AgentConfig::persist_cache`](super::AgentConfig::persist_cache) is off.
    SaveCache {
        /// What to write.
        desired: Box<Desired>,
    },
    /// The store could not be reached: drop the watch and log `reason`. Workloads keep running;
    /// the loop registers again after `retry_in`.
    Disconnected {
        /// What failed, for people.
        reason: String,
        /// When the loop tries again.
        retry_in: Duration,
    },
    /// The runtime refused an operation; log it. The loop's bookkeeping already accounts for it
    /// (a failed start is retried with backoff and reported).
    RuntimeFailed {
        /// What failed, for people.
        reason: String,
    },
}

impl Action {
    /// The lane the action belongs to.
    pub fn lane(&self) -> Lane {
        match self {
            Action::Register { .. }
            | Action::List { .. }
            | Action::Watch { .. }
            | Action::FetchSpecs { .. }
            | Action::FetchSecrets { .. }
            | Action::Report { .. }
            | Action::WriteTelemetry { .. } => Lane::Store,
            Action::KeepLease { .. } => Lane::Lease,
            Action::Observe { .. }
            | Action::EnsureRunning { .. }
            | Action::EnsureStopped { .. }
            | Action::UpdateFiles { .. }
            | Action::Remove { .. }
            | Action::ReadOutput { .. }
            | Action::Probe { .. } => Lane::Runtime,
            Action::SaveCache { .. }
            | Action::MeasureVolumes { .. }
            | Action::Disconnected { .. }
            | Action::RuntimeFailed { .. } => Lane::Local,
        }
    }
}

/// One line per action, as the simulation's trace shows it: stable, with no addresses or
/// timings that differ between runs.
impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Register { lease, .. } => match lease {
                Some(lease) => write!(f, "register (resume lease {lease})"),
                None => f.write_str("register (new lease)"),
            },
            Action::List { .. } => f.write_str("list placements"),
            Action::Watch { from, .. } => write!(f, "watch placements from {from}"),
            Action::FetchSpecs { keys } => write!(f, "fetch {} specs", keys.len()),
            Action::FetchSecrets { keys } => write!(f, "fetch {} secrets", keys.len()),
            Action::KeepLease { lease, every } => {
                write!(f, "keep lease {lease} alive every {} ms", every.as_millis())
            }
            Action::Report { puts, deletes, .. } => {
                write!(f, "report")?;
                let id = |key: &Key| {
                    RecordKey::parse(key)
                        .and_then(|r| r.instance())
                        .map_or_else(|| key.as_str().to_owned(), str::to_owned)
                };
                for (key, _) in puts {
                    write!(f, " +{}", id(key))?;
                }
                for key in deletes {
                    write!(f, " -{}", id(key))?;
                }
                Ok(())
            }
            Action::WriteTelemetry { .. } => f.write_str("write telemetry"),
            Action::Observe { ids: None } => f.write_str("observe"),
            Action::Observe { ids: Some(ids) } => write!(f, "observe {} ids", ids.len()),
            Action::EnsureRunning { spec } => write!(f, "ensure_running {}", spec.id),
            Action::EnsureStopped { id, reason, .. } => {
                write!(f, "ensure_stopped {id} ({})", reason.name())
            }
            Action::UpdateFiles { id, files } => {
                write!(f, "update_files {id} ({} files)", files.len())
            }
            Action::Remove { id, .. } => write!(f, "remove {id}"),
            Action::ReadOutput { id, lines } => write!(f, "read_output {id} ({lines} lines)"),
            Action::Probe { id, kind, .. } => write!(f, "probe {} {id}", kind.name()),
            Action::MeasureVolumes { .. } => f.write_str("measure volumes"),
            Action::SaveCache { desired } => {
                write!(f, "save cache ({} placements)", desired.placements.len())
            }
            Action::Disconnected { reason, retry_in } => {
                write!(f, "disconnected, retry in {retry_in:?}: {reason}")
            }
            Action::RuntimeFailed { reason } => write!(f, "runtime: {reason}"),
        }
    }
}

/// Why the agent stops an instance. Only the first two come from the control plane; the agent
/// stops nothing else, and never because the control plane cannot be reached. (A restart for a
/// changed secret, [`StopReason::SecretChanged`], starts the instance again at once.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// Its placement asks it to stop.
    Asked,
    /// No placement names it (checked only after a successful list of the placements).
    Unplaced,
    /// Its liveness probe failed: it stops so that its restart policy can restart it.
    Liveness,
    /// It is an init step that ran past its timeout.
    InitTimeout,
    /// A secret it reads from its environment changed (or a file could not be rewritten in
    /// place): it is started again at once with the new value.
    SecretChanged,
    /// Its id was placed here anew (a stateful identity created again): this is the previous
    /// incarnation, removed before the new one starts.
    PlacedAnew,
}

impl StopReason {
    /// The reason's name in the trace and the logs.
    pub fn name(self) -> &'static str {
        match self {
            StopReason::Asked => "asked",
            StopReason::Unplaced => "unplaced",
            StopReason::Liveness => "liveness failed",
            StopReason::InitTimeout => "init step timed out",
            StopReason::SecretChanged => "secret changed",
            StopReason::PlacedAnew => "placed anew",
        }
    }
}

/// What [`Action::List`] read.
#[derive(Clone, Debug, PartialEq)]
pub struct Listing {
    /// The node's placements.
    pub placements: Scan,
    /// The node's observations as the store holds them.
    pub observations: Scan,
}

/// One instance as [`Action::Observe`] saw it: the runtime's observation and, when it runs, its
/// resource use (`None` when the runtime could not tell).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sample {
    /// What the runtime reports.
    pub instance: ObservedInstance,
    /// CPU and memory in use.
    pub stats: Option<InstanceStats>,
}
