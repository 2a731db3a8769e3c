//! Volumes in placement: a request that mounts a volume attached to a node goes to that node or
//! nowhere, and one that mounts a volume not attached yet needs its size of a node's storage.

use ccattler_core::schema::Memory;

/// A volume a request mounts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct VolumeNeed<'a> {
    /// The volume's name.
    pub name: &'a str,
    /// Its size: what it takes of the storage of the node it first goes to.
    pub size: Memory,
    /// The node it is attached to (its data is there), if any: the request goes to that node
    /// or nowhere, and the volume's size is reserved there already.
    pub node: Option<&'a str>,
}

/// Why a node cannot take a request's volumes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum VolumeMiss<'a> {
    /// A volume is attached to another node (the first such volume the request names).
    Elsewhere {
        /// The volume.
        volume: &'a str,
        /// The node it is attached to.
        node: &'a str,
    },
    /// The node's storage left is smaller than the sizes of the volumes not attached yet.
    Storage {
        /// Their sizes added up.
        needs: Memory,
    },
}

/// A node's storage for volumes: what it offers and what the volumes attached there (and this
/// call's placements) reserve of it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Storage {
    /// What the node offers, in bytes.
    pub cap: u64,
    /// What is reserved of it, in bytes.
    pub used: u64,
}

impl Storage {
    /// Whether node `node` with this storage can take a request mounting `volumes`.
    pub(crate) fn check<'a>(
        &self,
        node: &str,
        volumes: &[VolumeNeed<'a>],
    ) -> Result<(), VolumeMiss<'a>> {
        if volumes.is_empty() {
            return Ok(());
        }
        if let Some(v) = volumes.iter().find(|v| v.node.is_some_and(|n| n != node)) {
            return Err(VolumeMiss::Elsewhere {
                volume: v.name,
                node: v.node.unwrap_or_default(),
            });
        }
        let needs = unattached(volumes);
        let fits = self
            .used
            .checked_add(needs.bytes())
            .is_some_and(|used| used <= self.cap);
        if fits || needs.is_zero() {
            Ok(())
        } else {
            Err(VolumeMiss::Storage { needs })
        }
    }

    /// Reserves the sizes of `volumes` not attached yet (call only when they fit).
    pub(crate) fn take(&mut self, volumes: &[VolumeNeed<'_>]) {
        self.used = self.used.saturating_add(unattached(volumes).bytes());
    }
}

/// The sizes of the volumes of `volumes` not attached to any node yet, added up (saturating: a
/// sum that overflows fits nowhere).
fn unattached(volumes: &[VolumeNeed<'_>]) -> Memory {
    let bytes = volumes
        .iter()
        .filter(|v| v.node.is_none())
        .fold(0u64, |sum, v| sum.saturating_add(v.size.bytes()));
    Memory::from_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn need<'a>(name: &'a str, size: u64, node: Option<&'a str>) -> VolumeNeed<'a> {
        VolumeNeed {
            name,
            size: Memory::from_bytes(size),
            node,
        }
    }

    #[test]
    fn an_attached_volume_pins_the_request_to_its_node_whatever_the_storage() {
        let full = Storage { cap: 10, used: 10 };
        let volumes = [need("data", 5, Some("n1"))];
        assert_eq!(full.check("n1", &volumes), Ok(()));
        assert_eq!(
            full.check("n2", &volumes),
            Err(VolumeMiss::Elsewhere {
                volume: "data",
                node: "n1"
            })
        );
    }

    #[test]
    fn volumes_not_attached_yet_need_their_sizes_together() {
        let storage = Storage { cap: 10, used: 4 };
        let two = [need("a", 3, None), need("b", 3, None)];
        assert_eq!(storage.check("n1", &two), Ok(()));
        let three = [need("a", 3, None), need("b", 3, None), need("c", 1, None)];
        assert_eq!(
            storage.check("n1", &three),
            Err(VolumeMiss::Storage {
                needs: Memory::from_bytes(7)
            })
        );
        let mut taken = storage;
        taken.take(&two);
        assert_eq!(taken.used, 10);
        taken.take(&[need("a", 3, Some("n1"))]);
        assert_eq!(taken.used, 10, "an attached volume is reserved already");
    }

    #[test]
    fn no_volume_fits_anywhere_and_an_overflowing_size_nowhere() {
        let none = Storage::default();
        assert_eq!(none.check("n1", &[]), Ok(()));
        let huge = [need("a", u64::MAX, None), need("b", 1, None)];
        assert!(none.check("n1", &huge).is_err());
        assert!(
            Storage {
                cap: u64::MAX,
                used: 1
            }
            .check("n1", &huge)
            .is_err()
        );
    }
}
