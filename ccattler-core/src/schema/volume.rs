//! Top-level declarations besides services: volumes and the network policy.

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

/// Allow or deny.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RuleAction {
    /// Traffic is allowed.
    Allow,
    /// Traffic is denied.
    Deny,
}

/// `allow SVC -> SVC [port N]`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct NetworkRule {
    /// Allow or deny.
    pub action: RuleAction,
    /// The calling service.
    pub from: String,
    /// The called service.
    pub to: String,
    /// The port, or every port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
}

/// `desired/network/policy`: every rule of the `network` block, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkPolicy {
    /// The rules, first match wins.
    pub rules: Vec<NetworkRule>,
}
