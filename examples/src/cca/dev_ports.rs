//! [`DevPorts`]: the host ports a `cca dev` cluster gives its nodes, kept apart from those of
//! any other `cca dev` running on the same host.
//!
//! All of a dev cluster's nodes run on this one host, and so do the workloads of every other
//! `cca dev` started beside it (another terminal, or tests run in parallel). Two clusters that
//! gave out the same host ports would have their instances fail to bind, and worse, each
//! cluster's readiness probes would reach the other's servers. So the range 20000-59999 is cut
//! into [`SLOTS`] slots, and a cluster of the process runtime holds one, claimed by a lock on a
//! file in the temporary directory (released when the process ends, however it ends).

use std::fs::File;
use std::path::PathBuf;

use ccattler_core::schema::PortRange;
use nix::fcntl::{Flock, FlockArg};

use super::CliError;

/// How many dev clusters of the process runtime can run on one host at once.
pub const SLOTS: u32 = 8;

/// The host ports of one slot.
const SLOT_PORTS: u32 = 5_000;

/// The first port of the first slot.
const FIRST_PORT: u32 = 20_000;

/// A slot of host ports, held for as long as this value lives.
#[derive(Debug)]
pub struct DevPorts {
    first: u32,
    _lock: Option<Flock<File>>,
}

impl DevPorts {
    /// The first slot no other `cca dev` on this host holds.
    ///
    /// # Errors
    ///
    /// [`CliError::Start`] when every slot is held, or no lock file can be made.
    pub fn claim() -> Result<Self, CliError> {
        for slot in 0..SLOTS {
            let path = lock_path(slot);
            let file = File::options()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)
                .map_err(|err| {
                    CliError::Start(format!(
                        "cannot open {} to claim host ports: {err}",
                        path.display()
                    ))
                })?;
            if let Ok(lock) = Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                return Ok(DevPorts {
                    first: FIRST_PORT + slot * SLOT_PORTS,
                    _lock: Some(lock),
                });
            }
        }
        Err(CliError::Start(format!(
            "{SLOTS} other `cca dev` clusters with real processes run on this host and hold \
             every range of host ports; stop one and start again"
        )))
    }

    /// The first slot, unclaimed: for simulated workloads, whose ports are never bound.
    pub fn simulated() -> Self {
        DevPorts {
            first: FIRST_PORT,
            _lock: None,
        }
    }

    /// The host ports of node `i` of `nodes`: its own part of the slot (at most 1,000 ports),
    /// so that the nodes of one cluster never give a port twice.
    pub fn of_node(&self, i: u32, nodes: u32) -> PortRange {
        let each = (SLOT_PORTS / nodes.max(1)).clamp(1, 1_000);
        let first = self.first + i.min(SLOT_PORTS - 1) * each;
        let last = (first + each - 1).min(self.first + SLOT_PORTS - 1);
        PortRange {
            first: u16::try_from(first).unwrap_or(u16::MAX),
            last: u16::try_from(last).unwrap_or(u16::MAX),
        }
    }
}

fn lock_path(slot: u32) -> PathBuf {
    std::env::temp_dir().join(format!("cca-dev-ports-{slot}.lock"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_share_a_slot_without_overlap() {
        let ports = DevPorts::simulated();
        let a = ports.of_node(0, 3);
        let b = ports.of_node(1, 3);
        assert_eq!((a.first, a.last), (20_000, 20_999));
        assert_eq!((b.first, b.last), (21_000, 21_999));
        let last = ports.of_node(9_999, 10_000);
        assert!(last.last <= 24_999, "{last:?}");
    }

    #[test]
    fn two_clusters_claim_two_slots() {
        let one = DevPorts::claim().expect("a slot");
        let two = DevPorts::claim().expect("another slot");
        assert_ne!(one.of_node(0, 1).first, two.of_node(0, 1).first);
    }
}
