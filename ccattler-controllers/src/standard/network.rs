//! [`NetworkController`]: network policy turned into a rule set per node.

use parking_lot::Mutex;

use std::collections::{BTreeMap, BTreeSet};

use ccattler_core::schema::{self, NodeRules, RecordKey};
use ccattler_core::{Change, Controller, Fact, FactView, ReconcileContext, ReconcileError};

use super::network_rules::{NetworkInputs, Touched};

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
    cache: Mutex<Cache>,
}

/// What a pass keeps for the next: the view it read and its inputs, and the nodes whose rule
/// sets it changed (planned again next pass, in case that commit failed).
#[derive(Debug, Default)]
struct Cache {
    last: Option<(FactView, NetworkInputs)>,
    pending: BTreeSet<String>,
}

impl NetworkController {
    /// A new controller (with an empty cache of what it reads).
    pub fn new() -> Self {
        Self::default()
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
            *self.cache.lock() = Cache::default();
            return Ok(Vec::new());
        }
        let mut cache = self.cache.lock();
        // Taken out while patching: if anything panics, the next pass starts afresh.
        let (old_view, mut inputs) = match cache.last.take() {
            Some(last) => last,
            None => (FactView::new(), NetworkInputs::default()),
        };
        for (key, _, new) in facts.changes_since(&old_view) {
            inputs.apply(key, new);
        }
        let changes = match inputs.take_touched() {
            Touched::All => {
                cache.pending.clear();
                all_changes(facts, held, inputs.rules())?
            }
            Touched::Nodes(mut nodes) => {
                nodes.append(&mut cache.pending);
                node_changes(facts, inputs.rules_of(nodes.iter().map(String::as_str)))?
            }
        };
        cache.pending = changes
            .iter()
            .filter_map(|change| match RecordKey::parse(change.key()) {
                Some(RecordKey::NodeRules(node)) => Some(node.to_owned()),
                _ => None,
            })
            .collect();
        cache.last = Some((facts.clone(), inputs));
        Ok(changes)
    }
}

/// Puts every node's rule set that differs from the view, and deletes those of nodes that
/// should have none.
fn all_changes<'v>(
    facts: &FactView,
    held: impl Iterator<Item = &'v Fact>,
    wanted: BTreeMap<String, NodeRules>,
) -> Result<Vec<Change>, ReconcileError> {
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
    changes.extend(node_changes(
        facts,
        wanted.into_iter().map(|(node, rules)| (node, Some(rules))),
    )?);
    Ok(changes)
}

/// Makes each node's rule set in the view what it should be (`None`: no fact).
fn node_changes<N: AsRef<str>>(
    facts: &FactView,
    wanted: impl IntoIterator<Item = (N, Option<NodeRules>)>,
) -> Result<Vec<Change>, ReconcileError> {
    let mut changes = Vec::new();
    for (node, rules) in wanted {
        let key = schema::keys::node_rules(node.as_ref())?;
        let held = facts.get(key.as_str());
        match rules.map(|rules| schema::encode(&rules)) {
            Some(value) if held.map(|f| &f.value) != Some(&value) => {
                changes.push(Change::put(key, value));
            }
            None if held.is_some() => changes.push(Change::delete(key)),
            _ => {}
        }
    }
    Ok(changes)
}

#[cfg(test)]
#[path = "network_tests.rs"]
mod tests;
