//! [`NetworkController`]: network policy turned into a rule set per node.

use parking_lot::Mutex;

use ccattler_core::schema::{self, RecordKey};
use ccattler_core::{Change, Controller, FactView, ReconcileContext, ReconcileError};

use super::network_rules::NetworkInputs;

/// Writes `network/node/{node}`: the [`NodeRules`](schema::NodeRules) of each node that holds a
/// host port of a guarded service, from the policy (`desired/network/policy`), the placements
/// (their service and host ports) and the nodes' addresses (`observed/node/`). Each node's
/// agent applies its own rule set as a firewall table.
///
/// # Rules
///
/// - A service is **guarded** when a rule names it as the called side (`allow web -> db`
///   guards `db`). A guarded service's host ports refuse traffic from other hosts unless the
///   policy allows it; services no rule calls are left open.
/// - A caller `S` may reach a guarded `B` on its declared port `p` when the first rule that
///   matches (`S -> B`, with no port or with `port p`) allows it; with no matching rule, only
///   `B` itself may. Each host port given to an instance of `B` for `p` lets through the
///   addresses of the nodes where an allowed caller is placed.
/// - Callers are known by their node's address. On the host network (the process runtime)
///   services placed on one node share its address, so a node is let through when any service
///   placed there is allowed, and traffic between instances of one node is not filtered. A
///   node whose address is a name rather than an IP address lends none.
/// - Without a policy, no node has rules, and the agents remove the tables they applied.
///
/// The rules follow the placements, not readiness: an instance's port is guarded as soon as it
/// is placed, and a caller is let through as soon as it is placed.
#[derive(Debug, Default)]
pub struct NetworkController {
    last: Mutex<Option<(FactView, NetworkInputs)>>,
}

impl NetworkController {
    /// A new controller (with an empty cache of what it reads).
    pub fn new() -> Self {
        Self::default()
    }

    /// The inputs of `view`, patched from the previous view's.
    fn read(&self, view: &FactView) -> NetworkInputs {
        // Taken out while patching: if anything panics, the next call starts afresh.
        let previous = self.last.lock().take();
        let inputs = match previous {
            Some((old_view, mut inputs)) => {
                for (key, _, new) in view.changes_since(&old_view) {
                    inputs.apply(key, new);
                }
                inputs
            }
            None => {
                let mut inputs = NetworkInputs::default();
                for prefix in INPUTS {
                    for fact in view.scan(prefix) {
                        inputs.apply(&fact.key, Some(fact));
                    }
                }
                inputs
            }
        };
        *self.last.lock() = Some((view.clone(), inputs.clone()));
        inputs
    }
}

/// What the rules are derived from.
const INPUTS: [&str; 3] = [
    schema::DESIRED_NETWORK_POLICY,
    schema::PLACEMENTS,
    schema::OBSERVED_NODES,
];

impl Controller for NetworkController {
    fn name(&self) -> &str {
        "network"
    }

    fn watches(&self) -> Vec<String> {
        let mut watches: Vec<String> = INPUTS.iter().map(|p| (*p).to_owned()).collect();
        watches.push(schema::NODE_RULES.into());
        watches
    }

    fn write_domain(&self) -> Vec<String> {
        vec![schema::NODE_RULES.into()]
    }

    fn reconcile(
        &self,
        facts: &FactView,
        _ctx: &mut ReconcileContext<'_>,
    ) -> Result<Vec<Change>, ReconcileError> {
        let mut held = facts.scan(schema::NODE_RULES).peekable();
        // No policy and no rules left: nothing to read (the common case costs nothing).
        if facts.get(schema::DESIRED_NETWORK_POLICY).is_none() && held.peek().is_none() {
            *self.last.lock() = None;
            return Ok(Vec::new());
        }
        let wanted = self.read(facts).rules();
        let mut changes = Vec::new();
        for fact in held {
            let stale = match RecordKey::parse(&fact.key) {
                Some(RecordKey::NodeRules(node)) => !wanted.contains_key(node),
                _ => true,
            };
            if stale {
                changes.push(Change::delete(fact.key.clone()));
            }
        }
        for (node, rules) in wanted {
            let key = schema::keys::node_rules(&node)?;
            let value = schema::encode(&rules);
            if facts.get(key.as_str()).map(|f| &f.value) != Some(&value) {
                changes.push(Change::put(key, value));
            }
        }
        Ok(changes)
    }
}
