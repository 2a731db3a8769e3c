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
/// by at least a tenth (and by at least 10m of CPU or 1Mi of memory), or a volume appeared,
/// went, or its disk use moved by at least a tenth (and 1Mi). A node whose instances idle
/// writes nothing. So the record may lag what runs by up to one interval, and hold a value up
/// to a tenth away from the last sample.
///
/// Volumes' disk use is measured (a walk of their directories, counting the blocks their files
/// hold) at each telemetry interval while the node holds volume data or its placements mount
/// volumes, just before the record is judged.
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
    /// The disk used by each persistent volume's data on the node, by the volume's claim
    /// ([`volume_claim`](super::volume_claim): `data`, or `data@0` for a stateful identity),
    /// whether or not an instance mounts it now: data no attachment points here is data an
    /// operator may want back, or to delete (nothing deletes it on its own).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub volumes: BTreeMap<String, Memory>,
}

impl NodeTelemetry {
    /// Whether `now`'s volumes differ enough from `self`'s (what the record holds) to be
    /// written: one appeared or went, or one's use moved by a tenth and at least 1Mi.
    pub fn volumes_worth_writing(&self, now: &NodeTelemetry) -> bool {
        self.volumes.len() != now.volumes.len()
            || self
                .volumes
                .iter()
                .zip(&now.volumes)
                .any(|((name, before), (now_name, used))| {
                    name != now_name || moved(before.bytes(), used.bytes(), 1 << 20)
                })
    }
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
    /// The disk used by the instance's volumes that are not persistent (deleted with it).
    #[serde(skip_serializing_if = "Memory::is_zero")]
    pub disk: Memory,
}

impl InstanceUsage {
    /// Whether `now` differs enough from `self` (what the record holds) to be written: by at
    /// least a tenth and at least 10m of CPU, or a tenth and 1Mi of memory or of disk, or
    /// another service.
    pub fn worth_writing(&self, now: &InstanceUsage) -> bool {
        self.service != now.service
            || moved(self.cpu.millis(), now.cpu.millis(), 10)
            || moved(self.memory.bytes(), now.memory.bytes(), 1 << 20)
            || moved(self.disk.bytes(), now.disk.bytes(), 1 << 20)
    }
}

/// Whether a value moved from `before` to `now` by at least a tenth and at least `floor`.
fn moved(before: u64, now: u64, floor: u64) -> bool {
    before.abs_diff(now) >= floor.max(before / 10).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(cpu: u64, memory: u64) -> InstanceUsage {
        InstanceUsage {
            service: "web".into(),
            cpu: Cpu::from_millis(cpu),
            memory: Memory::from_bytes(memory),
            disk: Memory::ZERO,
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
        let filled = InstanceUsage {
            disk: Memory::from_bytes(2 << 20),
            ..held.clone()
        };
        assert!(held.worth_writing(&filled), "2Mi written to its volumes");
    }

    #[test]
    fn volumes_are_written_when_they_come_go_or_grow() {
        let node = |volumes: &[(&str, u64)]| NodeTelemetry {
            volumes: volumes
                .iter()
                .map(|(name, bytes)| ((*name).to_owned(), Memory::from_bytes(*bytes)))
                .collect(),
            ..NodeTelemetry::default()
        };
        let held = node(&[("data", 100 << 20)]);
        assert!(!held.volumes_worth_writing(&node(&[("data", 105 << 20)])));
        assert!(held.volumes_worth_writing(&node(&[("data", 110 << 20)])));
        assert!(held.volumes_worth_writing(&node(&[])), "gone");
        assert!(
            held.volumes_worth_writing(&node(&[("logs", 100 << 20)])),
            "another"
        );
        assert!(!node(&[("data", 0)]).volumes_worth_writing(&node(&[("data", 512 << 10)])));
    }
}
