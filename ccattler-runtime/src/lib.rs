//! # ccattler-runtime
//!
//! Runtimes a node agent drives, each implementing [`ccattler_core::Runtime`]: the in-memory
//! simulator, Linux processes, and containerd (feature `containerd`), plus the node agent itself.
//!
//! ## Where to start
//!
//! - Running a node: [`agent::NodeAgent`] over any store and runtime; [`agent::AgentConfig`]
//!   describes the node.
//! - Choosing a runtime: [`simulator::SimulatorRuntime`] for tests and simulations,
//!   [`process::ProcessRuntime`] for real processes without root.
//!
//! ## Layout
//!
//! | module | what it holds |
//! |---|---|
//! | [`agent`] | [`agent::NodeAgent`]: registers the node, follows its placements, starts, restarts and stops instances, probes them, reports them |
//! | [`simulator`] | [`simulator::SimulatorRuntime`]: in memory, deterministic, faults injected through [`simulator::Faults`] |
//! | [`process`] | [`process::ProcessRuntime`]: real Linux processes with state on disk, adopted after an agent restart |
//! | `containerd` (feature `containerd`) | `containerd::ContainerdRuntime`: containers through containerd's gRPC API, OCI tarball import, a busybox test image |
//! | [`cni`] | [`cni::Cni`]: a network namespace per container through the standard CNI plugins (bridge, host-local, portmap, loopback) |
//! | [`firewall`] | [`firewall::FirewallKeeper`]: applies the node's network rules as one nftables table and reports them |
//! | `dns` (feature `dns`) | `dns::DnsServer`: answers `web.service.cca` (A, AAAA, SRV) with service `web`'s ready endpoints, followed from the store |
//!
//! ## Feature flags
//!
//! | feature | what it adds |
//! |---|---|
//! | `containerd` | the `containerd` module; building it needs `protoc` (Debian `protobuf-compiler`), which `scripts/containerd-up` installs |
//! | `dns` | the `dns` module, over the `hickory-server` DNS library |

#![deny(missing_docs)]

mod address;
pub mod agent;
pub mod cni;
#[cfg(feature = "containerd")]
pub mod containerd;
#[cfg(feature = "dns")]
pub mod dns;
pub mod firewall;
mod mounts;
mod names;
pub mod process;
pub mod simulator;
