//! # ccattler-runtime
//!
//! Runtimes a node agent drives, each implementing [`ccattler_core::Runtime`]: the in-memory
//! simulator, Linux processes, and containerd (feature `containerd`), plus the node agent itself.
//!
//! ## Layout
//!
//! | module | what it holds |
//! |---|---|
//! | [`simulator`] | [`simulator::SimulatorRuntime`]: in memory, deterministic, faults injected through [`simulator::Faults`] |
//! | [`process`] | [`process::ProcessRuntime`]: real Linux processes with state on disk, adopted after an agent restart |

#![deny(missing_docs)]

pub mod process;
pub mod simulator;
