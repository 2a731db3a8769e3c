//! # ccattler-runtime
//!
//! Runtimes a node agent drives, each implementing [`ccattler_core::Runtime`]: the in-memory
//! simulator, Linux processes, and containerd (feature `containerd`), plus the node agent itself.
//!
//! This crate is still empty: the runtimes and the agent are being built (see the project's
//! issue on the node agent). Nothing here is usable yet.
