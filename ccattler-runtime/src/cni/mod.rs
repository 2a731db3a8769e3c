//! Container networking through CNI: each container gets a network namespace of its own, set
//! up by the standard plugins (`bridge` with `host-local` addresses, `portmap`, `loopback`,
//! from Debian's `containernetworking-plugins`), invoked as the CNI specification says (`ADD`,
//! `CHECK`, `DEL` over a network configuration list, each plugin handed the previous result).
//!
//! [`Cni::attach`] makes the namespace (`/run/netns/cca-...`), brings its `lo` up and gives it
//! an `eth0` on the node's bridge with an address of the subnet, maps each host port to the
//! container's declared port (TCP and UDP), and keeps the plugins' results on disk;
//! [`Cni::detach`] asks every plugin to `DEL` with those results (releasing the address and
//! the port mappings) and deletes the namespace. Both are idempotent, and a runtime started
//! again finds an attachment through [`Cni::attached`] and [`Cni::check`]: the results on disk
//! outlive the agent, as the containers do.
//!
//! # Errors
//!
//! A plugin that is not installed, one that fails (with its message), or a namespace that
//! cannot be made: [`CniError`], and nothing is left half set up ([`Cni::attach`] undoes what
//! it did).
//!
//! # Caveats
//!
//! Needs root (or `CAP_NET_ADMIN` and `CAP_SYS_ADMIN`), iproute2 (`ip netns`), and iptables
//! for `portmap` and `bridge`'s masquerading. Every node uses the same subnet by default:
//! containers are reached from other hosts at their node's address and host ports.

mod config;
mod invoke;
mod netns;

pub use config::{CNI_VERSION, CniConfig};

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use ccattler_core::schema::PortBinding;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use invoke::Target;

/// Why a container's network could not be set up, checked or removed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CniError {
    /// A plugin program is not installed.
    #[error(
        "the CNI plugin `{plugin}` is not installed in {}; install the standard plugins \
         (Debian: `apt install containernetworking-plugins`)", dirs.join(" or ")
    )]
    PluginMissing {
        /// The plugin's type.
        plugin: String,
        /// Where it was looked for.
        dirs: Vec<String>,
    },
    /// A plugin could not be run.
    #[error("running the CNI plugin `{plugin}` failed: {source}")]
    Io {
        /// The plugin's type.
        plugin: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A plugin failed.
    #[error("the CNI plugin `{plugin}` failed {command}: {message}")]
    Plugin {
        /// The plugin's type.
        plugin: String,
        /// `ADD`, `CHECK` or `DEL`.
        command: String,
        /// What it said.
        message: String,
    },
    /// A network namespace could not be made or deleted.
    #[error("{what} failed: {reason}")]
    Netns {
        /// The command.
        what: String,
        /// Why.
        reason: String,
    },
    /// The results kept on disk could not be written or read.
    #[error("the CNI state {}: {source}", path.display())]
    State {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// A container's network, as set up.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attachment {
    /// Its network namespace.
    pub netns: PathBuf,
    /// The address of its `eth0`, if the plugins gave one.
    pub address: Option<IpAddr>,
    /// The host ports mapped to its ports.
    pub ports: Vec<PortBinding>,
    /// What the plugins returned: the `lo` list's result, then `eth0`'s.
    results: [Value; 2],
}

/// Sets up and removes containers' networks; see the [module docs](self).
#[derive(Clone, Debug)]
pub struct Cni {
    config: CniConfig,
}

impl Cni {
    /// Networking as `config` says.
    pub fn new(config: CniConfig) -> Self {
        Cni { config }
    }

    /// The name of container `id`'s network namespace: `cca-` and a hash of the id (ids may
    /// hold any character, and namespace names are file names).
    pub fn netns_name(id: &str) -> String {
        format!("cca-{:016x}", crate::names::stable_hash(id))
    }

    /// Gives container `id` its network: a namespace, `lo` up, `eth0` on the bridge, `ports`
    /// mapped. An attachment already made is returned as it is.
    ///
    /// # Errors
    ///
    /// [`CniError`]; what was set up is removed again.
    pub async fn attach(&self, id: &str, ports: &[PortBinding]) -> Result<Attachment, CniError> {
        if let Some(attached) = self.attached(id)? {
            return Ok(attached);
        }
        let name = Cni::netns_name(id);
        // A namespace without results is what an attach cut short left: made afresh.
        if netns::path(&name).exists() {
            let _ = self.del(id, &netns::path(&name), ports, None).await;
            netns::delete(&name).await?;
        }
        let netns = netns::create(&name).await?;
        match self.add(id, &netns, ports).await {
            Ok(attachment) => {
                self.save(id, &attachment)?;
                Ok(attachment)
            }
            Err(error) => {
                // Undone with what the plugins can release without results.
                let _ = self.del(id, &netns, ports, None).await;
                let _ = netns::delete(&name).await;
                Err(error)
            }
        }
    }

    /// Asks every plugin whether container `id`'s network is still as set up.
    ///
    /// # Errors
    ///
    /// [`CniError`] when it is not, or was never attached.
    pub async fn check(&self, id: &str) -> Result<Attachment, CniError> {
        let attached = self.attached(id)?.ok_or_else(|| CniError::Plugin {
            plugin: "bridge".to_owned(),
            command: "CHECK".to_owned(),
            message: format!("container {id} has no network"),
        })?;
        let runtime = config::runtime_config(&attached.ports);
        let lists = [self.config.loopback(), self.config.network()];
        for ((list, result), ifname) in lists.iter().zip(&attached.results).zip(["lo", "eth0"]) {
            let target = self.target(id, &attached.netns, ifname);
            match invoke::check(list, &target, &runtime, result).await {
                // portmap before 1.2 checks IPv6 rules that its ADD made only for an IPv6
                // address (containernetworking/plugins#819); portmap is the list's last plugin,
                // so everything else was checked.
                Err(CniError::Plugin {
                    plugin, message, ..
                }) if plugin == "portmap"
                    && message.contains("ipv6")
                    && !attached.address.is_some_and(|a| a.is_ipv6()) => {}
                other => other?,
            }
        }
        Ok(attached)
    }

    /// Removes container `id`'s network: every plugin's `DEL`, then its namespace. Nothing to
    /// remove is no error.
    ///
    /// # Errors
    ///
    /// [`CniError`] when a plugin fails or the namespace cannot be deleted. The namespace is
    /// deleted even when a plugin fails; the results are then kept, so that detaching again
    /// asks the plugins again.
    pub async fn detach(&self, id: &str) -> Result<(), CniError> {
        let name = Cni::netns_name(id);
        let removed = match self.attached(id)? {
            Some(attached) => {
                let results = Some(&attached.results);
                self.del(id, &attached.netns, &attached.ports, results)
                    .await
            }
            None if netns::path(&name).exists() => {
                self.del(id, &netns::path(&name), &[], None).await
            }
            None => Ok(()),
        };
        // The namespace goes whatever the plugins said: a DEL retried later needs none.
        netns::delete(&name).await?;
        removed?;
        let path = self.result_path(id);
        match std::fs::remove_file(&path) {
            Err(source) if source.kind() != std::io::ErrorKind::NotFound => {
                Err(CniError::State { path, source })
            }
            _ => Ok(()),
        }
    }

    /// Container `id`'s network as set up, read back from disk (`None`: not attached).
    ///
    /// # Errors
    ///
    /// [`CniError::State`] when the kept results cannot be read.
    pub fn attached(&self, id: &str) -> Result<Option<Attachment>, CniError> {
        let path = self.result_path(id);
        match std::fs::read(&path) {
            Ok(bytes) => Ok(serde_json::from_slice(&bytes).ok()),
            Err(source) if source.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(CniError::State { path, source }),
        }
    }

    async fn add(
        &self,
        id: &str,
        netns: &Path,
        ports: &[PortBinding],
    ) -> Result<Attachment, CniError> {
        let runtime = config::runtime_config(ports);
        let lo = invoke::add(
            &self.config.loopback(),
            &self.target(id, netns, "lo"),
            &runtime,
        )
        .await?;
        let eth0 = invoke::add(
            &self.config.network(),
            &self.target(id, netns, "eth0"),
            &runtime,
        )
        .await?;
        let address = eth0["ips"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|ip| ip["address"].as_str())
            .find_map(|cidr| cidr.split('/').next()?.parse().ok());
        Ok(Attachment {
            netns: netns.to_owned(),
            address,
            ports: ports.to_vec(),
            results: [lo, eth0],
        })
    }

    async fn del(
        &self,
        id: &str,
        netns: &Path,
        ports: &[PortBinding],
        results: Option<&[Value; 2]>,
    ) -> Result<(), CniError> {
        let runtime = config::runtime_config(ports);
        let network = self.config.network();
        let eth0 = self.target(id, netns, "eth0");
        let removed = invoke::del(&network, &eth0, &runtime, results.map(|r| &r[1])).await;
        let lo = self.target(id, netns, "lo");
        let loopback = self.config.loopback();
        invoke::del(&loopback, &lo, &runtime, results.map(|r| &r[0])).await?;
        removed
    }

    fn target<'a>(&'a self, id: &'a str, netns: &'a Path, ifname: &'a str) -> Target<'a> {
        Target {
            container: id,
            netns,
            ifname,
            dirs: &self.config.plugin_dirs,
        }
    }

    fn result_path(&self, id: &str) -> PathBuf {
        self.config
            .state_dir
            .join("results")
            .join(format!("{}.json", Cni::netns_name(id)))
    }

    /// Writes the attachment next to its final place, then renames it there: a crash leaves
    /// the old file or the new one.
    fn save(&self, id: &str, attachment: &Attachment) -> Result<(), CniError> {
        let path = self.result_path(id);
        let state = |source| CniError::State {
            path: path.clone(),
            source,
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(state)?;
        }
        let partial = path.with_extension("json.partial");
        let bytes = serde_json::to_vec(attachment).unwrap_or_default();
        std::fs::write(&partial, bytes).map_err(state)?;
        std::fs::rename(&partial, &path).map_err(state)
    }
}
