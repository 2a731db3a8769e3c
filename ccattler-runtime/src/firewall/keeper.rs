//! [`FirewallKeeper`]: the tokio driver of [`FirewallLoop`] over a store and a [`Firewall`].

use std::time::Duration;

use ccattler_core::schema::{self, NetworkReport};
use ccattler_core::{FactStore, Key};
use futures_util::StreamExt;

use super::machine::{FirewallAction, FirewallLoop};
use super::{Firewall, FirewallError};

/// How long a failed read, watch, apply or report waits before it is tried again.
const RETRY: Duration = Duration::from_secs(1);

/// Keeps node `node`'s firewall in step with its rule set (`network/node/{node}`) and reports
/// what is in force (`observed/network/{node}`).
///
/// # Expected flow
///
/// [`run`](Self::run) reads the node's rule set, applies it, reports, then follows the store's
/// watch of that one key and applies each change as it comes. When the store cannot be
/// reached (or the watch ends), it keeps the rules in force and reads again every second;
/// a rule set the firewall refuses is tried again every second too, the previous one staying
/// in force meanwhile, and the report says why.
///
/// # Guarantees
///
/// Those of [`FirewallLoop`]. Stopping the keeper leaves the node's table in place, as
/// stopping the agent leaves its workloads running.
#[derive(Debug)]
pub struct FirewallKeeper<S, F> {
    store: S,
    firewall: F,
    rules: Key,
    report: Key,
}

impl<S: FactStore, F: Firewall> FirewallKeeper<S, F> {
    /// A keeper of `node`'s rules through `firewall`.
    ///
    /// # Errors
    ///
    /// [`FirewallError::Node`] when `node` is not a single valid key segment.
    pub fn new(store: S, node: &str, firewall: F) -> Result<Self, FirewallError> {
        let key = |build: fn(&str) -> Result<Key, ccattler_core::KeyError>| {
            build(node).map_err(|err| FirewallError::Node(err.to_string()))
        };
        Ok(FirewallKeeper {
            store,
            firewall,
            rules: key(schema::keys::node_rules)?,
            report: key(schema::keys::network_report)?,
        })
    }

    /// Runs until `shutdown` completes.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) {
        let mut machine = FirewallLoop::new();
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => return,
                () = self.follow(&mut machine) => {}
            }
            tokio::select! {
                () = &mut shutdown => return,
                () = tokio::time::sleep(RETRY) => machine.tick(),
            }
        }
    }

    /// Reads the rule set, then follows it until the store fails.
    async fn follow(&self, machine: &mut FirewallLoop) {
        let from = match self.store.scan(self.rules.as_str()).await {
            Ok(scan) => {
                let fact = scan.facts.iter().find(|f| f.key == self.rules);
                machine.rules(fact);
                scan.revision
            }
            Err(error) => {
                tracing::warn!(%error, key = %self.rules, "cannot read the node's network rules");
                return;
            }
        };
        self.drain(machine).await;
        let mut watch = match self.store.watch(self.rules.as_str(), from.next()).await {
            Ok(watch) => watch,
            Err(error) => {
                tracing::warn!(%error, key = %self.rules, "cannot watch the node's network rules");
                return;
            }
        };
        let mut ticks = tokio::time::interval(RETRY);
        loop {
            tokio::select! {
                event = watch.next() => match event {
                    Some(Ok(event)) if event.fact.key == self.rules => {
                        let fact = match event.kind {
                            ccattler_core::EventKind::Delete => None,
                            _ => Some(&event.fact),
                        };
                        machine.rules(fact);
                    }
                    Some(Ok(_)) => continue, // another node's key sharing the prefix
                    Some(Err(error)) => {
                        tracing::warn!(%error, "the watch of the node's network rules failed");
                        return;
                    }
                    None => return,
                },
                _ = ticks.tick() => machine.tick(),
            }
            self.drain(machine).await;
        }
    }

    /// Performs every action due, one at a time.
    async fn drain(&self, machine: &mut FirewallLoop) {
        while let Some(action) = machine.next_action() {
            match action {
                FirewallAction::Apply { revision, rules } => {
                    let result = self.firewall.apply(&rules).await;
                    if let Err(error) = &result {
                        tracing::warn!(%error, revision, "the node's network rules were not applied");
                    }
                    machine.applied(result.map_err(|e| e.to_string()));
                }
                FirewallAction::Remove => {
                    let result = self.firewall.remove().await;
                    if let Err(error) = &result {
                        tracing::warn!(%error, "the node's network rules were not removed");
                    }
                    machine.applied(result.map_err(|e| e.to_string()));
                }
                FirewallAction::Report(report) => {
                    let result = self.write(&report).await;
                    if let Err(error) = &result {
                        tracing::warn!(%error, "the node's network report was not written");
                    }
                    machine.reported(report, result.map_err(|e| e.to_string()));
                }
            }
        }
    }

    async fn write(&self, report: &NetworkReport) -> Result<(), ccattler_core::StoreError> {
        self.store
            .put(&self.report, schema::encode(report))
            .await
            .map(|_| ())
    }
}
