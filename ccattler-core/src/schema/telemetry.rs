//! `telemetry/node/{node}`: what a node's instances use, apart from what they are.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::quantity::{Cpu, Memory};

/// `telemetry/node/{node}`: the resources a node's running instances use, written by its agent
/// under the node's lease (it goes when the node does).
///
/// Usage changes all the time, so it has a fact of its own, one per node: a change of usage
/// never rewrites an [`InstanceObservation`](super::InstanceObservation), so it wakes no
/// controller that watches those, and the writes it costs grow with the nodes, not the
/// instances.
///
/// # Update rule
///
/// The agent samples every running instance at each look at its runtime (every second), and
/// writes this record at most once per telemetry interval (10 s by default): only when an
/// instance started or stopped running, or one's CPU or memory moved from what the record holds
/// by at least a tenth (and by at least 10m of CPU or 1Mi of memory). A node whose instances
/// idle writes nothing. So the record may lag what runs by up to one interval, and hold a value
/// up to a tenth away from the last sample.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeTelemetry {
    /// CPU in use by the node's running instances, summed.
    pub cpu: Cpu,
    /// Memory in use by the node's running instances, summed.
    pub memory: Memory,
    /// The instances running on the node.
    pub instances: u32,
    /// Each running instance's use, by instance id.
    pub usage: BTreeMap<String, InstanceUsage>,
}

/// What one running instance uses, as its node's agent last wrote it in [`NodeTelemetry`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct InstanceUsage {
    /// Its service.
    pub service: String,
    /// CPU in use, averaged over the time since the sample before.
    pub cpu: Cpu,
    /// Resident memory.
    pub memory: Memory,
}

impl InstanceUsage {
    /// Whether `now` differs enough from `self` (what the record holds) to be written: by at
    /// least a tenth and at least 10m of CPU, or a tenth and 1Mi of memory, or another service.
    pub fn worth_writing(&self, now: &InstanceUsage) -> bool {
        let moved = |before: u64, now: u64, floor: u64| {
            before.abs_diff(now) >= floor.max(before / 10).max(1)
        };
        self.service != now.service
            || moved(self.cpu.millis(), now.cpu.millis(), 10)
            || moved(self.memory.bytes(), now.memory.bytes(), 1 << 20)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(cpu: u64, memory: u64) -> InstanceUsage {
        InstanceUsage {
            service: "web".into(),
            cpu: Cpu::from_millis(cpu),
            memory: Memory::from_bytes(memory),
        }
    }

    #[test]
    fn small_moves_are_not_worth_a_write() {
        let held = usage(500, 100 << 20);
        assert!(!held.worth_writing(&usage(540, 100 << 20)), "8 % of cpu");
        assert!(held.worth_writing(&usage(550, 100 << 20)), "10 % of cpu");
        assert!(!held.worth_writing(&usage(500, 105 << 20)), "5 % of memory");
        assert!(
            held.worth_writing(&usage(500, 90 << 20)),
            "10 % less memory"
        );
        // Near zero, the absolute floors decide: 0 to 9m is noise, 10m is not.
        assert!(!usage(0, 0).worth_writing(&usage(9, 512 << 10)));
        assert!(usage(0, 0).worth_writing(&usage(10, 0)));
        assert!(usage(0, 0).worth_writing(&usage(0, 1 << 20)));
        let other = InstanceUsage {
            service: "api".into(),
            ..held.clone()
        };
        assert!(held.worth_writing(&other));
    }
}
