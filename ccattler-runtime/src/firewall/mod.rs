//! A node's firewall: the network controller's rule set for the node (`network/node/{node}`),
//! applied as one nftables table of the node's own, and reported (`observed/network/{node}`).
//!
//! [`FirewallKeeper`] runs beside the node's agent: it follows the node's rule set in the
//! store and hands each version to a [`Firewall`] ([`Nftables`] on a real host), deciding with
//! the pure [`FirewallLoop`]. The table lets the node itself and the addresses each guard
//! allows reach the guarded host ports, and refuses every other source; ports no guard names
//! are left alone (see [`render`]).
//!
//! # Guarantees
//!
//! - **Atomic.** Each rule set replaces the table in one nftables transaction: the kernel holds
//!   the old rules or the new ones, never a mix, and a rule set it refuses leaves the old one.
//! - **Kept while the control plane is away.** The table is removed only when the store says
//!   the node has no rule set; an unreachable store, a stopped keeper or a stopped agent leave
//!   it in force.
//! - **Its own table only.** The table is `inet ccattler_{node}` ([`render::table_name`]);
//!   nothing else in the ruleset is read or changed.
//! - **Reported.** The node's [`NetworkReport`](ccattler_core::schema::NetworkReport) names the
//!   revision of the rule set in force and why a newer one is not (nft missing, the kernel
//!   refusing it, a rule set that does not decode).

mod keeper;
mod machine;
mod nft;
pub mod render;

pub use keeper::FirewallKeeper;
pub use machine::{FirewallAction, FirewallLoop};
pub use nft::Nftables;

use ccattler_core::schema::NodeRules;

/// Where a node's rules are put in force.
pub trait Firewall: Send + Sync + 'static {
    /// Replaces the node's rules by `rules`, all at once.
    ///
    /// # Errors
    ///
    /// [`FirewallError`] when they were not applied; the previous rules must then still be in
    /// force.
    fn apply(&self, rules: &NodeRules) -> impl Future<Output = Result<(), FirewallError>> + Send;

    /// Removes the node's rules, if it holds any.
    ///
    /// # Errors
    ///
    /// [`FirewallError`] when they could not be removed.
    fn remove(&self) -> impl Future<Output = Result<(), FirewallError>> + Send;
}

/// Why a node's rules were not put in force.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FirewallError {
    /// The firewall program could not be started.
    #[error(
        "cannot run `{program}`: {source}; install nftables (Debian: `apt install nftables`) \
         or run the agent with --firewall off"
    )]
    Missing {
        /// The program.
        program: String,
        /// Why it did not start.
        #[source]
        source: std::io::Error,
    },
    /// Talking to the firewall program failed.
    #[error("`{program}` failed: {source}")]
    Io {
        /// The program.
        program: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The firewall refused the rules (the previous ones stay in force).
    #[error(
        "`{program} -f` refused the rule set ({status}): {stderr}; the previous rules stay in \
         force (it needs root or CAP_NET_ADMIN)"
    )]
    Refused {
        /// The program.
        program: String,
        /// How it exited.
        status: String,
        /// What it said.
        stderr: String,
    },
    /// The node's name makes no key.
    #[error("invalid node name for network rules: {0}")]
    Node(String),
}
