//! [`Nftables`]: a [`Firewall`] that applies a node's rules with the `nft` program.

use std::path::PathBuf;
use std::process::Stdio;

use ccattler_core::schema::NodeRules;
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use super::render::{removal, render, table_name};
use super::{Firewall, FirewallError};

/// Applies a node's rules as one nftables table of its own (`inet ccattler_{node}`), through
/// `nft -f -`: each rule set replaces the table in one transaction, so a rule set the kernel
/// refuses leaves the previous table in force. Tables of anyone else are never touched.
///
/// Needs the `nft` program (Debian: `nftables`) and the right to change the network
/// namespace's rules (root, or `CAP_NET_ADMIN`).
#[derive(Clone, Debug)]
pub struct Nftables {
    program: PathBuf,
    table: String,
}

impl Nftables {
    /// Node `node`'s table, applied with `nft` from the `PATH`.
    pub fn new(node: &str) -> Self {
        Nftables {
            program: PathBuf::from("nft"),
            table: table_name(node),
        }
    }

    /// Uses `program` instead of `nft` from the `PATH`.
    #[must_use]
    pub fn program(mut self, program: impl Into<PathBuf>) -> Self {
        self.program = program.into();
        self
    }

    /// The table's name.
    pub fn table(&self) -> &str {
        &self.table
    }

    async fn run(&self, script: String) -> Result<(), FirewallError> {
        let program = self.program.display().to_string();
        let mut child = Command::new(&self.program)
            .args(["-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| FirewallError::Missing {
                program: program.clone(),
                source,
            })?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin
                .write_all(script.as_bytes())
                .await
                .map_err(|source| FirewallError::Io {
                    program: program.clone(),
                    source,
                })?;
        }
        let output = child
            .wait_with_output()
            .await
            .map_err(|source| FirewallError::Io {
                program: program.clone(),
                source,
            })?;
        if output.status.success() {
            Ok(())
        } else {
            Err(FirewallError::Refused {
                program,
                status: output.status.to_string(),
                stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
            })
        }
    }
}

impl Firewall for Nftables {
    async fn apply(&self, rules: &NodeRules) -> Result<(), FirewallError> {
        self.run(render(&self.table, rules)).await
    }

    async fn remove(&self) -> Result<(), FirewallError> {
        self.run(removal(&self.table)).await
    }
}
