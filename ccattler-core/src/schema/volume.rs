//! `volume` declarations.

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
