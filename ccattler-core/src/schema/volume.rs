//! `volume` declarations, and where each volume is attached.

use serde::{Deserialize, Serialize};

use super::Memory;

/// `desired/volume/{name}`: a volume services mount.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeSpec {
    /// The volume's name.
    pub name: String,
    /// Its size.
    pub size: Memory,
    /// Whether its data outlives the instances that use it.
    #[serde(default)]
    pub persistent: bool,
}

/// The name volume `volume` goes by for one instance: for the instance of `ordinal` of a
/// stateful service, a volume of its own, `{volume}@{ordinal}` (`data@0`, `data@1`: each
/// identity keeps its data); for any other instance, `volume` itself. `@` is in no declared
/// name, so the two kinds of names never meet.
///
/// ```
/// use ccattler_core::schema::{claimed_volume, volume_claim};
///
/// assert_eq!(volume_claim("data", Some(2)), "data@2");
/// assert_eq!(volume_claim("data", None), "data");
/// assert_eq!(claimed_volume("data@2"), "data");
/// ```
pub fn volume_claim(volume: &str, ordinal: Option<u32>) -> String {
    match ordinal {
        Some(ordinal) => format!("{volume}@{ordinal}"),
        None => volume.to_owned(),
    }
}

/// The declared volume a name of [`volume_claim`] is of.
pub fn claimed_volume(claim: &str) -> &str {
    claim.split_once('@').map_or(claim, |(volume, _)| volume)
}

/// `volume/attachment/{vol}`: the node a volume's data lives on, and the instance using it.
///
/// `{vol}` is the volume's name for its instance ([`volume_claim`]): the declared name, or
/// `{volume}@{ordinal}` for each instance of a stateful service.
///
/// Written by the scheduler in the same commit as the placement that first mounts the volume,
/// so no second placement can put the volume's data anywhere else. A volume is attached to one
/// instance at a time: an instance that mounts it is placed only on `node` (while the record
/// exists) and only once `instance` is `None` or itself.
///
/// A persistent volume keeps its record, and so its node, when its instance goes (`instance`
/// becomes `None`): the data stays on that node for the next instance, and the volume's `size`
/// stays reserved of the node's storage. A volume that is not persistent loses its record with
/// its instance, and its data with it (the node's agent deletes the instance's directories when
/// it removes the instance). The record of a volume no longer declared goes once no instance
/// uses it; the data of a persistent volume stays on its node's disk until an operator deletes
/// it (nothing deletes a persistent volume's data on its own).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeAttachment {
    /// The volume's name for its instance (see [`volume_claim`]).
    pub volume: String,
    /// The node its data is on.
    pub node: String,
    /// The instance it is attached to, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    /// The size reserved for it of the node's storage.
    pub size: Memory,
    /// Whether its data outlives its instance (copied from its declaration when first attached).
    #[serde(default)]
    pub persistent: bool,
}
