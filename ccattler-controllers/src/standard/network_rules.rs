//! [`NetworkInputs`]: what network policy depends on (the policy, each placement's service and
//! host ports, each node's address), kept as an index, and the rule set of every node derived
//! from it, all at once or for the nodes a change touched.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, SocketAddr};

use ccattler_core::schema::{
    self, Assignment, NetworkPolicy, NodeRules, NodeStatus, PortBinding, PortGuard, RecordKey,
    RuleAction,
};
use ccattler_core::{Fact, Key};

/// One placement as the rules see it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Placed {
    node: usize,
    instance: String,
    service: String,
    ports: Vec<PortBinding>,
}

/// The nodes a change touched, whose rule sets must be derived again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Touched {
    /// Every node's (the policy changed, or nothing was read before).
    All,
    /// These nodes'.
    Nodes(BTreeSet<String>),
}

/// The facts network policy depends on, decoded and indexed. Patched one fact at a time
/// ([`apply`](Self::apply)); [`rules`](Self::rules) derives every node's rule set,
/// [`rules_of`](Self::rules_of) one node's, and [`take_touched`](Self::take_touched) names the
/// nodes whose rule sets the changes applied since it was last called may have changed.
///
/// A fact that does not decode counts as absent: a placement that is not an assignment guards
/// nothing, a node whose status does not decode (or whose address is a name, not an IP
/// address) lends no address to the services placed on it.
#[derive(Clone, Debug, Default)]
pub struct NetworkInputs {
    policy: Option<NetworkPolicy>,
    /// For each calling service, the services the policy lets it call on some port, and each
    /// guarded service itself (it may call itself unless a rule says otherwise).
    callees: HashMap<String, BTreeSet<String>>,
    placements: HashMap<Key, Placed>,
    /// Placement keys by service, in key order.
    by_service: HashMap<String, BTreeSet<Key>>,
    /// Node names, interned: placements refer to nodes by index.
    node_ids: HashMap<String, usize>,
    nodes: Vec<NodeEntry>,
    touched: Option<BTreeSet<usize>>,
    /// Services whose placements or nodes' addresses changed since the last `take_touched`.
    moved: BTreeSet<String>,
}

#[derive(Clone, Debug, Default)]
struct NodeEntry {
    name: String,
    address: Option<IpAddr>,
    /// Placement keys on the node.
    placed: BTreeSet<Key>,
}

impl NetworkInputs {
    /// Applies one fact change: `fact` is the key's new fact, `None` when it was deleted. A
    /// change of a node's rule set touches that node; keys of other records are ignored.
    pub fn apply(&mut self, key: &Key, fact: Option<&Fact>) {
        match RecordKey::parse(key) {
            Some(RecordKey::NetworkPolicy) => {
                self.policy = fact.and_then(|f| schema::decode(f).ok());
                self.callees = callees(self.policy.as_ref());
                self.touched = None;
            }
            Some(RecordKey::Node(node)) => {
                let address = fact
                    .and_then(|f| schema::decode::<NodeStatus>(f).ok())
                    .and_then(|status| parse_address(&status.address));
                let id = self.node_id(node);
                if self.nodes[id].address != address {
                    self.nodes[id].address = address;
                    let services = self.nodes[id]
                        .placed
                        .iter()
                        .filter_map(|key| self.placements.get(key))
                        .map(|placed| placed.service.clone());
                    self.moved.extend(services.collect::<Vec<_>>());
                }
            }
            // A rule set written by anyone (a late commit of an earlier pass included) is
            // derived again, so a wrong one does not stay.
            Some(RecordKey::NodeRules(node)) => {
                let id = self.node_id(node);
                self.touch(id);
            }
            Some(RecordKey::Placement { node, instance }) => {
                if let Some(old) = self.placements.remove(key) {
                    self.nodes[old.node].placed.remove(key);
                    self.touch(old.node);
                    if let Some(keys) = self.by_service.get_mut(&old.service) {
                        keys.remove(key);
                        if keys.is_empty() {
                            self.by_service.remove(&old.service);
                        }
                    }
                    self.moved.insert(old.service);
                }
                let Some(assignment) = fact.and_then(|f| schema::decode::<Assignment>(f).ok())
                else {
                    return;
                };
                let id = self.node_id(node);
                self.nodes[id].placed.insert(key.clone());
                self.touch(id);
                self.moved.insert(assignment.service.clone());
                self.by_service
                    .entry(assignment.service.clone())
                    .or_default()
                    .insert(key.clone());
                self.placements.insert(
                    key.clone(),
                    Placed {
                        node: id,
                        instance: instance.to_owned(),
                        service: assignment.service,
                        ports: assignment.ports,
                    },
                );
            }
            _ => {}
        }
    }

    /// Whether a policy is in force.
    pub fn has_policy(&self) -> bool {
        self.policy.is_some()
    }

    /// The nodes whose rule sets may have changed since the last call (on the first call,
    /// [`Touched::All`]).
    pub fn take_touched(&mut self) -> Touched {
        let moved = std::mem::take(&mut self.moved);
        let Some(mut touched) = self.touched.replace(BTreeSet::new()) else {
            return Touched::All;
        };
        // A caller that moved changes the sets of the services it may call, on their nodes.
        for callee in moved.iter().filter_map(|s| self.callees.get(s)).flatten() {
            for key in self.by_service.get(callee).into_iter().flatten() {
                if let Some(placed) = self.placements.get(key) {
                    touched.insert(placed.node);
                }
            }
        }
        Touched::Nodes(
            touched
                .into_iter()
                .map(|id| self.nodes[id].name.clone())
                .collect(),
        )
    }

    /// The rule set of every node that has a guarded host port.
    ///
    /// A service is guarded when a rule names it as the called side. Each host port given to
    /// an instance of a guarded service `B`, for its declared port `p`, lets through the
    /// addresses of the nodes where an allowed caller of `B` on `p` is placed; an allowed
    /// caller is a service `S` whose first matching rule (`S -> B`, with no port or port `p`)
    /// allows, or `B` itself when no rule matches it. Everything else that reaches the port
    /// from another host is refused.
    pub fn rules(&self) -> BTreeMap<String, NodeRules> {
        let mut sets = AllowedSets::default();
        (0..self.nodes.len())
            .filter_map(|id| {
                let rules = self.node_rules(id, &mut sets)?;
                Some((self.nodes[id].name.clone(), rules))
            })
            .collect()
    }

    /// The rule sets of `nodes` (`None`: the node has no guarded host port), as
    /// [`rules`](Self::rules) derives them.
    pub fn rules_of<'n>(
        &self,
        nodes: impl IntoIterator<Item = &'n str>,
    ) -> Vec<(&'n str, Option<NodeRules>)> {
        let mut sets = AllowedSets::default();
        nodes
            .into_iter()
            .map(|name| {
                let rules = self
                    .node_ids
                    .get(name)
                    .and_then(|id| self.node_rules(*id, &mut sets));
                (name, rules)
            })
            .collect()
    }

    fn node_rules(&self, id: usize, allowed: &mut AllowedSets) -> Option<NodeRules> {
        let policy = self.policy.as_ref()?;
        let mut rules = NodeRules::default();
        let mut index: Vec<(&str, u16, usize)> = Vec::new();
        for placed in self.nodes[id]
            .placed
            .iter()
            .filter_map(|key| self.placements.get(key))
        {
            if !self.is_guarded(&placed.service) {
                continue;
            }
            for binding in &placed.ports {
                let service = placed.service.as_str();
                let at = match index
                    .iter()
                    .find(|(s, p, _)| *s == service && *p == binding.port)
                {
                    Some((.., at)) => *at,
                    None => {
                        let set = allowed
                            .0
                            .entry((service.to_owned(), binding.port))
                            .or_insert_with(|| {
                                self.allowed_addresses(policy, service, binding.port)
                            });
                        rules.sets.push(set.clone());
                        index.push((service, binding.port, rules.sets.len() - 1));
                        rules.sets.len() - 1
                    }
                };
                rules.guards.push(PortGuard {
                    port: binding.host,
                    instance: placed.instance.clone(),
                    service: service.to_owned(),
                    declared: binding.port,
                    allow: at,
                });
            }
        }
        if rules.guards.is_empty() {
            return None;
        }
        rules
            .guards
            .sort_by(|a, b| (a.port, &a.instance).cmp(&(b.port, &b.instance)));
        Some(rules)
    }

    fn is_guarded(&self, service: &str) -> bool {
        self.callees
            .get(service)
            .is_some_and(|callees| callees.contains(service))
    }

    /// The addresses, sorted, of the nodes where an allowed caller of `service` on `port` is
    /// placed.
    fn allowed_addresses(&self, policy: &NetworkPolicy, service: &str, port: u16) -> Vec<String> {
        let addresses: BTreeSet<IpAddr> = allowed_callers(policy, service, port)
            .iter()
            .filter_map(|caller| self.by_service.get(*caller))
            .flatten()
            .filter_map(|key| self.placements.get(key))
            .filter_map(|placed| self.nodes[placed.node].address)
            .collect();
        addresses.iter().map(IpAddr::to_string).collect()
    }

    fn node_id(&mut self, name: &str) -> usize {
        if let Some(id) = self.node_ids.get(name) {
            return *id;
        }
        self.nodes.push(NodeEntry {
            name: name.to_owned(),
            ..NodeEntry::default()
        });
        self.node_ids.insert(name.to_owned(), self.nodes.len() - 1);
        self.nodes.len() - 1
    }

    fn touch(&mut self, node: usize) {
        if let Some(touched) = &mut self.touched {
            touched.insert(node);
        }
    }
}

/// The allowed addresses of each (service, declared port), derived once per call.
#[derive(Default)]
struct AllowedSets(HashMap<(String, u16), Vec<String>>);

/// For each service a rule names as the caller, the services it is named against; and each
/// guarded service against itself.
fn callees(policy: Option<&NetworkPolicy>) -> HashMap<String, BTreeSet<String>> {
    let mut callees: HashMap<String, BTreeSet<String>> = HashMap::new();
    for rule in policy.map(|p| p.rules.as_slice()).unwrap_or_default() {
        callees
            .entry(rule.from.clone())
            .or_default()
            .insert(rule.to.clone());
        callees
            .entry(rule.to.clone())
            .or_default()
            .insert(rule.to.clone());
    }
    callees
}

/// The services that may call `service` on its declared `port`: the first rule that matches a
/// caller decides for it; a service calling itself is allowed unless a rule says otherwise.
fn allowed_callers<'p>(policy: &'p NetworkPolicy, service: &'p str, port: u16) -> Vec<&'p str> {
    let mut decided: BTreeMap<&str, RuleAction> = BTreeMap::new();
    for rule in &policy.rules {
        if rule.to == service && rule.port.is_none_or(|p| p == port) {
            decided.entry(rule.from.as_str()).or_insert(rule.action);
        }
    }
    decided.entry(service).or_insert(RuleAction::Allow);
    decided
        .into_iter()
        .filter(|(_, action)| *action == RuleAction::Allow)
        .map(|(caller, _)| caller)
        .collect()
}

/// A node's address as an IP address: `10.0.0.2`, `fd00::2`, `[fd00::2]`, or with a port.
fn parse_address(address: &str) -> Option<IpAddr> {
    let trimmed = address.trim_start_matches('[').trim_end_matches(']');
    trimmed
        .parse()
        .ok()
        .or_else(|| address.parse::<SocketAddr>().ok().map(|s| s.ip()))
}

#[cfg(test)]
#[path = "network_rules_tests.rs"]
mod tests;
