//! [`NetworkInputs`]: what network policy depends on (the policy, each placement's service and
//! host ports, each node's address), kept as an index, and the rule set of every node derived
//! from it.

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
    node: String,
    instance: String,
    ports: Vec<PortBinding>,
}

/// The facts network policy depends on, decoded and indexed by service. Patched one fact at a
/// time ([`apply`](Self::apply)); [`rules`](Self::rules) derives every node's rule set.
///
/// A fact that does not decode counts as absent: a placement that is not an assignment guards
/// nothing, a node whose status does not decode (or whose address is a name, not an IP
/// address) lends no address to the services placed on it.
#[derive(Clone, Debug, Default)]
pub struct NetworkInputs {
    policy: Option<NetworkPolicy>,
    /// Placements by service, then by placement key.
    by_service: BTreeMap<String, BTreeMap<Key, Placed>>,
    /// The service of each placement key, to find it again when it is deleted.
    service_of: HashMap<Key, String>,
    addresses: BTreeMap<String, IpAddr>,
}

impl NetworkInputs {
    /// Applies one fact change: `fact` is the key's new fact, `None` when it was deleted. Keys
    /// of other records are ignored.
    pub fn apply(&mut self, key: &Key, fact: Option<&Fact>) {
        match RecordKey::parse(key) {
            Some(RecordKey::NetworkPolicy) => {
                self.policy = fact.and_then(|f| schema::decode(f).ok());
            }
            Some(RecordKey::Node(node)) => {
                let address = fact
                    .and_then(|f| schema::decode::<NodeStatus>(f).ok())
                    .and_then(|status| parse_address(&status.address));
                match address {
                    Some(address) => self.addresses.insert(node.to_owned(), address),
                    None => self.addresses.remove(node),
                };
            }
            Some(RecordKey::Placement { node, instance }) => {
                if let Some(service) = self.service_of.remove(key)
                    && let Some(placed) = self.by_service.get_mut(&service)
                {
                    placed.remove(key);
                    if placed.is_empty() {
                        self.by_service.remove(&service);
                    }
                }
                let Some(assignment) = fact.and_then(|f| schema::decode::<Assignment>(f).ok())
                else {
                    return;
                };
                self.service_of
                    .insert(key.clone(), assignment.service.clone());
                self.by_service
                    .entry(assignment.service)
                    .or_default()
                    .insert(
                        key.clone(),
                        Placed {
                            node: node.to_owned(),
                            instance: instance.to_owned(),
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

    /// The rule set of every node that has a guarded host port.
    ///
    /// A service is guarded when a rule names it as the called side. Each host port given to
    /// an instance of a guarded service `B`, for its declared port `p`, lets through the
    /// addresses of the nodes where an allowed caller of `B` on `p` is placed; an allowed
    /// caller is a service `S` whose first matching rule (`S -> B`, with no port or port `p`)
    /// allows, or `B` itself when no rule matches it. Everything else that reaches the port
    /// from another host is refused.
    pub fn rules(&self) -> BTreeMap<String, NodeRules> {
        let mut nodes: BTreeMap<String, NodeRules> = BTreeMap::new();
        let Some(policy) = &self.policy else {
            return nodes;
        };
        let guarded: BTreeSet<&str> = policy.rules.iter().map(|r| r.to.as_str()).collect();
        let mut allowed: HashMap<(&str, u16), Vec<String>> = HashMap::new();
        // Per node, the index of each (service, declared port)'s set.
        let mut set_index: HashMap<(&str, &str, u16), usize> = HashMap::new();
        for service in guarded {
            let Some(placements) = self.by_service.get(service) else {
                continue;
            };
            for placed in placements.values() {
                for binding in &placed.ports {
                    let addresses = allowed
                        .entry((service, binding.port))
                        .or_insert_with(|| self.allowed_addresses(policy, service, binding.port));
                    let rules = nodes.entry(placed.node.clone()).or_default();
                    let index = *set_index
                        .entry((placed.node.as_str(), service, binding.port))
                        .or_insert_with(|| {
                            rules.sets.push(addresses.clone());
                            rules.sets.len() - 1
                        });
                    rules.guards.push(PortGuard {
                        port: binding.host,
                        instance: placed.instance.clone(),
                        service: service.to_owned(),
                        declared: binding.port,
                        allow: index,
                    });
                }
            }
        }
        for rules in nodes.values_mut() {
            rules
                .guards
                .sort_by(|a, b| (a.port, &a.instance).cmp(&(b.port, &b.instance)));
        }
        nodes
    }

    /// The addresses, sorted, of the nodes where an allowed caller of `service` on `port` is
    /// placed.
    fn allowed_addresses(&self, policy: &NetworkPolicy, service: &str, port: u16) -> Vec<String> {
        let callers = allowed_callers(policy, service, port);
        let addresses: BTreeSet<IpAddr> = callers
            .iter()
            .filter_map(|caller| self.by_service.get(*caller))
            .flat_map(|placements| placements.values())
            .filter_map(|placed| self.addresses.get(&placed.node).copied())
            .collect();
        addresses.iter().map(IpAddr::to_string).collect()
    }
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
