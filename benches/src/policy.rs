//! A cluster with network policy at a size, for the rule-set benchmark and `network_figures`:
//! `services` services of `per_service` instances, each exposing one port, spread over `nodes`
//! nodes; service `i` is called by services `i - 1` and `i + 1` (so every service is guarded,
//! and each guard lets through the nodes of two other services and of its own).

use ccattler_core::schema::{
    self, Assignment, DesiredState, NetworkPolicy, NetworkRule, NodeStatus, PortBinding, RuleAction,
};
use ccattler_core::{Fact, Key, Revision, Value};

/// The port every service declares.
pub const DECLARED: u16 = 8080;

/// The shape of the cluster.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// Services.
    pub services: usize,
    /// Instances (endpoints) per service.
    pub per_service: usize,
    /// Nodes.
    pub nodes: usize,
}

/// 1,000 services of 10 instances on 1,000 nodes: 10,000 endpoints.
pub const TARGET: Shape = Shape {
    services: 1_000,
    per_service: 10,
    nodes: 1_000,
};

fn fact(key: Key, value: Value) -> Fact {
    Fact::created(key, value, Revision(1))
}

/// Node `i`'s name.
pub fn node(i: usize) -> String {
    format!("node-{i:05}")
}

/// Service `i`'s name.
pub fn service(i: usize) -> String {
    format!("svc-{i:04}")
}

/// The placement of instance `k` of service `s` on `node`, at host port `host`.
pub fn placement(s: usize, k: usize, node: &str, host: u16) -> (Key, Value) {
    let id = format!("{}-{k}", service(s));
    let assignment = Assignment {
        instance: id.clone(),
        service: service(s),
        node: node.to_owned(),
        version: "v1".into(),
        state: DesiredState::Running,
        ports: vec![PortBinding {
            port: DECLARED,
            host,
        }],
        volumes: Vec::new(),
    };
    (
        schema::keys::placement(node, &id).expect("a valid key"),
        schema::encode(&assignment),
    )
}

/// The policy: service `i` is called by `i - 1` and `i + 1`.
pub fn policy(services: usize) -> NetworkPolicy {
    let mut rules = Vec::new();
    for i in 0..services {
        for caller in [i.wrapping_sub(1), i + 1] {
            if caller < services {
                rules.push(NetworkRule {
                    action: RuleAction::Allow,
                    from: service(caller),
                    to: service(i),
                    port: Some(DECLARED),
                });
            }
        }
    }
    NetworkPolicy { rules }
}

/// Every fact the network controller reads, for `shape`: nodes at 10.x.y.z, instances spread
/// round-robin, host ports from 20000 up per node.
pub fn facts(shape: Shape) -> Vec<Fact> {
    let mut facts = Vec::new();
    for i in 0..shape.nodes {
        let status = NodeStatus {
            name: node(i),
            address: format!("10.{}.{}.{}", i >> 16, (i >> 8) & 255, i & 255),
            ..NodeStatus::default()
        };
        facts.push(fact(
            schema::keys::node(&node(i)).expect("a valid key"),
            schema::encode(&status),
        ));
    }
    let mut next_port = vec![20_000u16; shape.nodes];
    let mut n = 0;
    for s in 0..shape.services {
        for k in 0..shape.per_service {
            let at = n % shape.nodes;
            n += 1;
            let (key, value) = placement(s, k, &node(at), next_port[at]);
            next_port[at] += 1;
            facts.push(fact(key, value));
        }
    }
    facts.push(fact(
        schema::keys::network_policy(),
        schema::encode(&policy(shape.services)),
    ));
    facts
}
