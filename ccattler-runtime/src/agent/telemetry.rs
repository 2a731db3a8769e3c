//! What the agent writes of its instances' resource use: one `telemetry/node/{node}` record
//! (see [`NodeTelemetry`] for the update rule), apart from the instances' observations.

use ccattler_core::schema::{self, InstanceUsage, Memory, NodeTelemetry};
use ccattler_core::{InstanceState, LeaseId, StoreError};

use super::VolumeDisk;
use super::action::Action;
use super::machine::{AgentLoop, Link, StoreOp};

/// Where a telemetry round's measurement of the node's volumes stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Measuring {
    /// To be taken when the round is due (if there is anything to measure).
    Due,
    /// Asked for: the round waits for it.
    InFlight,
    /// Taken for this round.
    Taken,
}

impl AgentLoop {
    /// When the node's telemetry is due to be looked at again, while there is something to
    /// look at: registered, the runtime seen, and telemetry not turned off.
    pub(super) fn telemetry_due(&self) -> Option<std::time::Duration> {
        let live = matches!(self.link, Link::Live { .. });
        let on = !self.config.telemetry_interval.is_zero();
        (live && on && self.runtime_seen).then_some(self.telemetry_at)
    }

    /// The measurement of the node's volumes due now: once a telemetry round is due, if the
    /// node may hold volume data (the first round, data found before, or placements that
    /// mount volumes).
    pub(super) fn measure_work(&mut self) -> Option<Action> {
        if self.measuring != Measuring::Due || self.telemetry_due().is_none_or(|at| self.now < at) {
            return None;
        }
        let mounted = || {
            self.desired
                .placements
                .values()
                .any(|a| !a.volumes.is_empty())
        };
        if self.disk.as_ref().is_some_and(VolumeDisk::is_empty) && !mounted() {
            return None;
        }
        self.measuring = Measuring::InFlight;
        Some(Action::MeasureVolumes {
            dir: self.volumes.clone(),
        })
    }

    /// The result of [`Action::MeasureVolumes`].
    pub fn volumes_measured(&mut self, disk: VolumeDisk) {
        self.disk = Some(disk);
        if self.measuring == Measuring::InFlight {
            self.measuring = Measuring::Taken;
        }
    }

    /// The telemetry write due now, if the record the store holds is out of date (see the
    /// update rule on [`NodeTelemetry`]). Looking again waits a whole interval either way.
    pub(super) fn telemetry_work(&mut self, lease: LeaseId) -> Option<Action> {
        let waiting = self.measuring == Measuring::InFlight;
        if waiting || self.telemetry_due().is_none_or(|at| self.now < at) {
            return None;
        }
        self.telemetry_at = self.now.saturating_add(self.config.telemetry_interval);
        self.measuring = Measuring::Due;
        let now = self.telemetry_now();
        if !out_of_date(self.telemetry_written.as_ref(), &now) {
            return None;
        }
        let key = schema::keys::telemetry(&self.config.node).ok()?;
        let value = schema::encode(&now);
        self.store_busy = Some(StoreOp::Telemetry(Box::new(now)));
        Some(Action::WriteTelemetry { key, value, lease })
    }

    /// The use of every placed instance that runs, as the runtime's last samples show it.
    fn telemetry_now(&self) -> NodeTelemetry {
        let mut telemetry = NodeTelemetry::default();
        let disk = self.disk.as_ref();
        if let Some(disk) = disk {
            telemetry.volumes.clone_from(&disk.persistent);
        }
        for (id, sample) in &self.observed {
            let Some(assignment) = self.desired.placements.get(id) else {
                continue; // an init step, or what no placement names
            };
            let Some(stats) = sample
                .stats
                .filter(|_| sample.instance.state == InstanceState::Running)
            else {
                continue;
            };
            telemetry.cpu = telemetry
                .cpu
                .checked_add(stats.cpu)
                .unwrap_or(telemetry.cpu);
            telemetry.memory = telemetry
                .memory
                .checked_add(stats.memory)
                .unwrap_or(telemetry.memory);
            telemetry.usage.insert(
                id.clone(),
                InstanceUsage {
                    service: assignment.service.clone(),
                    cpu: stats.cpu,
                    memory: stats.memory,
                    disk: disk
                        .and_then(|d| d.instances.get(id))
                        .copied()
                        .unwrap_or(Memory::ZERO),
                },
            );
        }
        telemetry.instances = u32::try_from(telemetry.usage.len()).unwrap_or(u32::MAX);
        telemetry
    }

    /// The result of [`Action::WriteTelemetry`].
    pub fn telemetry_written(&mut self, result: Result<(), StoreError>) {
        let Some(StoreOp::Telemetry(written)) =
            self.store_done(|op| matches!(op, StoreOp::Telemetry(_)))
        else {
            return;
        };
        if !self.is_connected() {
            return;
        }
        match result {
            Ok(()) => self.telemetry_written = Some(*written),
            Err(err) => self.disconnect(format!("writing telemetry failed: {err}")),
        }
    }
}

/// Whether `now` must be written over `written`: nothing written yet (under this lease), an
/// instance started or stopped running, or one's use moved enough.
fn out_of_date(written: Option<&NodeTelemetry>, now: &NodeTelemetry) -> bool {
    let Some(written) = written else {
        return true;
    };
    written.volumes_worth_writing(now)
        || written.usage.len() != now.usage.len()
        || written
            .usage
            .iter()
            .zip(&now.usage)
            .any(|((id, before), (now_id, usage))| id != now_id || before.worth_writing(usage))
}
