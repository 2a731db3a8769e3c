//! [`CniConfig`] and the network configuration lists it gives the plugins.

use std::path::PathBuf;

use ccattler_core::schema::PortBinding;
use serde_json::{Value, json};

/// The CNI specification version of the configuration lists.
pub const CNI_VERSION: &str = "1.0.0";

/// How containers are networked: the standard plugins (`bridge` with `host-local` addresses,
/// `portmap`, `loopback`) from `plugin_dirs`, on one bridge of the node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CniConfig {
    /// Where the plugin programs are looked for, in order. Default: `/usr/lib/cni` (Debian's
    /// `containernetworking-plugins`), then `/opt/cni/bin`.
    pub plugin_dirs: Vec<PathBuf>,
    /// The node's bridge. Default `cca0`.
    pub bridge: String,
    /// The containers' addresses, handed out by `host-local`. Default `10.88.0.0/16`: each node
    /// has its own bridge and its own copy of the range (containers are reached from other
    /// hosts at the node's address and their host ports, not at their own addresses).
    pub subnet: String,
    /// Where the results of the plugins (needed to remove and check a container's network)
    /// and the addresses handed out are kept. Default `/var/lib/ccattler/cni`.
    pub state_dir: PathBuf,
}

impl Default for CniConfig {
    fn default() -> Self {
        CniConfig {
            plugin_dirs: vec![PathBuf::from("/usr/lib/cni"), PathBuf::from("/opt/cni/bin")],
            bridge: "cca0".to_owned(),
            subnet: "10.88.0.0/16".to_owned(),
            state_dir: PathBuf::from("/var/lib/ccattler/cni"),
        }
    }
}

impl CniConfig {
    /// Sets the state directory.
    #[must_use]
    pub fn state_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.state_dir = dir.into();
        self
    }

    /// Sets the bridge's name.
    #[must_use]
    pub fn bridge(mut self, bridge: impl Into<String>) -> Self {
        self.bridge = bridge.into();
        self
    }

    /// Sets the containers' subnet.
    #[must_use]
    pub fn subnet(mut self, subnet: impl Into<String>) -> Self {
        self.subnet = subnet.into();
        self
    }

    /// The list that gives a container its interface (`eth0`): a veth on the bridge with an
    /// address of the subnet, a default route through the bridge, masquerading out, and the
    /// host ports mapped to the container's ports.
    pub(super) fn network(&self) -> Value {
        json!({
            "cniVersion": CNI_VERSION,
            "name": "ccattler",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": self.bridge,
                    "isGateway": true,
                    "ipMasq": true,
                    "hairpinMode": true,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": self.subnet}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": self.state_dir.join("ipam"),
                    },
                },
                {"type": "portmap", "capabilities": {"portMappings": true}, "snat": true},
            ],
        })
    }

    /// The list that brings the container's `lo` up.
    pub(super) fn loopback(&self) -> Value {
        json!({
            "cniVersion": CNI_VERSION,
            "name": "ccattler-loopback",
            "plugins": [{"type": "loopback"}],
        })
    }
}

/// The `runtimeConfig` of a container: each host port mapped to its declared port, TCP and UDP.
pub(super) fn runtime_config(ports: &[PortBinding]) -> Value {
    let mappings: Vec<Value> = ports
        .iter()
        .flat_map(|binding| {
            ["tcp", "udp"].map(|protocol| {
                json!({
                    "hostPort": binding.host,
                    "containerPort": binding.port,
                    "protocol": protocol,
                })
            })
        })
        .collect();
    json!({ "portMappings": mappings })
}
