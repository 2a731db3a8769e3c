//! Network policy: the user's rules, the rule set the network controller derives for each
//! node, and what each node's firewall reports it applied.

use serde::{Deserialize, Serialize};

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
    /// The port (as the called service declares it), or every port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
}

/// `desired/network/policy`: every rule of the `network` block, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkPolicy {
    /// The rules, first match wins.
    pub rules: Vec<NetworkRule>,
}

/// `network/node/{node}`: what the node's firewall lets reach the host ports of the guarded
/// instances placed on it (the network controller's output, applied by the node's agent).
///
/// Every host port named by a guard accepts traffic from the node itself and from the
/// addresses of its guard's set, and refuses the rest; every other port is left alone.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRules {
    /// Sets of source addresses (IPv4 or IPv6, each set sorted), referred to by index from
    /// [`PortGuard::allow`]: guards of one service and declared port share one set.
    pub sets: Vec<Vec<String>>,
    /// One guard per guarded host port, by port.
    pub guards: Vec<PortGuard>,
}

/// One guarded host port of a node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortGuard {
    /// The host port (TCP and UDP).
    pub port: u16,
    /// The instance that was given it.
    pub instance: String,
    /// Its service.
    pub service: String,
    /// The port the service declares, which the policy's `port N` names.
    pub declared: u16,
    /// Index in [`NodeRules::sets`] of the addresses let through.
    pub allow: usize,
}

/// `observed/network/{node}`: the rule set the node's firewall holds, as its agent last
/// applied it (or failed to).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkReport {
    /// The mod revision of the `network/node/{node}` fact in force on the node; 0 when the
    /// node holds no rules of the cluster (none were ever applied, or they were removed).
    pub revision: u64,
    /// Why the newest rule set is not in force (the previous one, `revision`, still is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// How many host ports the rules in force guard.
    pub guarded: usize,
}
