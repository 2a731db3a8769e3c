//! Tests of the rule sets derived from network policy.

use super::*;
use ccattler_core::schema::{DesiredState, NetworkRule, keys};
use ccattler_core::{Revision, Value};

fn fact(key: Key, value: Value) -> Fact {
    Fact::created(key, value, Revision(1))
}

/// A cluster: nodes n1..n3 at 10.0.0.1..3, and the placements given as (node, instance,
/// service, [(declared, host)]).
fn inputs(rules: &[(RuleAction, &str, &str, Option<u16>)], placed: &[Placement]) -> NetworkInputs {
    let mut inputs = NetworkInputs::default();
    for i in 1..=3 {
        let node = format!("n{i}");
        let status = NodeStatus {
            name: node.clone(),
            address: format!("10.0.0.{i}"),
            ..NodeStatus::default()
        };
        let key = keys::node(&node).unwrap();
        inputs.apply(&key, Some(&fact(key.clone(), schema::encode(&status))));
    }
    for (node, instance, service, ports) in placed {
        let key = keys::placement(node, instance).unwrap();
        let assignment = Assignment {
            instance: (*instance).into(),
            service: (*service).into(),
            node: (*node).into(),
            version: "v".into(),
            state: DesiredState::Running,
            ports: ports
                .iter()
                .map(|&(port, host)| PortBinding { port, host })
                .collect(),
            volumes: Vec::new(),
        };
        inputs.apply(&key, Some(&fact(key.clone(), schema::encode(&assignment))));
    }
    let policy = NetworkPolicy {
        rules: rules
            .iter()
            .map(|&(action, from, to, port)| NetworkRule {
                action,
                from: from.into(),
                to: to.into(),
                port,
            })
            .collect(),
    };
    let key = keys::network_policy();
    inputs.apply(&key, Some(&fact(key.clone(), schema::encode(&policy))));
    inputs
}

type Placement = (&'static str, &'static str, &'static str, Vec<(u16, u16)>);

fn allowed_at(rules: &BTreeMap<String, NodeRules>, node: &str, port: u16) -> Vec<String> {
    let node = &rules[node];
    let guard = node
        .guards
        .iter()
        .find(|g| g.port == port)
        .expect("guarded");
    node.sets[guard.allow].clone()
}

use RuleAction::{Allow, Deny};

#[test]
fn a_called_service_lets_through_only_the_nodes_of_its_allowed_callers() {
    let inputs = inputs(
        &[(Allow, "web", "db", Some(5432))],
        &[
            ("n1", "db-0", "db", vec![(5432, 20000)]),
            ("n2", "web-0", "web", vec![(80, 20000)]),
            ("n3", "batch-0", "batch", vec![]),
        ],
    );
    let rules = inputs.rules();
    // Only db's node has rules: web is named only as a caller, batch not at all.
    assert_eq!(rules.keys().collect::<Vec<_>>(), ["n1"]);
    assert_eq!(allowed_at(&rules, "n1", 20000), ["10.0.0.1", "10.0.0.2"]);
    let guard = &rules["n1"].guards[0];
    assert_eq!(
        (
            guard.instance.as_str(),
            guard.service.as_str(),
            guard.declared
        ),
        ("db-0", "db", 5432)
    );
}

#[test]
fn the_first_matching_rule_decides_and_ports_are_the_declared_ones() {
    let inputs = inputs(
        &[
            (Deny, "web", "db", Some(22)),
            (Allow, "web", "db", None),
            (Allow, "batch", "db", Some(5432)),
            (Deny, "db", "db", None),
        ],
        &[
            ("n1", "db-0", "db", vec![(5432, 20000), (22, 20001)]),
            ("n2", "web-0", "web", vec![]),
            ("n3", "batch-0", "batch", vec![]),
        ],
    );
    let rules = inputs.rules();
    // db denies itself, so its own node is let through only as a caller's node (here: none).
    assert_eq!(allowed_at(&rules, "n1", 20000), ["10.0.0.2", "10.0.0.3"]);
    assert!(allowed_at(&rules, "n1", 20001).is_empty());
    assert_eq!(rules["n1"].sets.len(), 2, "one set per declared port");
}

#[test]
fn rules_follow_a_caller_that_moves() {
    let mut inputs = inputs(
        &[(Allow, "web", "db", None)],
        &[
            ("n1", "db-0", "db", vec![(5432, 20000)]),
            ("n2", "web-0", "web", vec![]),
        ],
    );
    assert_eq!(
        allowed_at(&inputs.rules(), "n1", 20000),
        ["10.0.0.1", "10.0.0.2"]
    );
    let old = keys::placement("n2", "web-0").unwrap();
    inputs.apply(&old, None);
    let moved = keys::placement("n3", "web-0").unwrap();
    let assignment = Assignment {
        instance: "web-0".into(),
        service: "web".into(),
        node: "n3".into(),
        version: "v".into(),
        state: DesiredState::Running,
        ports: Vec::new(),
        volumes: Vec::new(),
    };
    inputs.apply(
        &moved,
        Some(&fact(moved.clone(), schema::encode(&assignment))),
    );
    assert_eq!(
        allowed_at(&inputs.rules(), "n1", 20000),
        ["10.0.0.1", "10.0.0.3"]
    );
}

#[test]
fn guards_share_a_set_per_service_and_port_and_are_sorted_by_port() {
    let inputs = inputs(
        &[(Allow, "web", "db", None)],
        &[
            ("n1", "db-1", "db", vec![(5432, 20005)]),
            ("n1", "db-0", "db", vec![(5432, 20001)]),
        ],
    );
    let rules = &inputs.rules()["n1"];
    assert_eq!(rules.sets, [vec!["10.0.0.1".to_owned()]]);
    let ports: Vec<u16> = rules.guards.iter().map(|g| g.port).collect();
    assert_eq!(ports, [20001, 20005]);
}

#[test]
fn without_a_policy_no_node_has_rules() {
    let mut inputs = inputs(
        &[(Allow, "web", "db", None)],
        &[("n1", "db-0", "db", vec![(5432, 20000)])],
    );
    assert!(!inputs.rules().is_empty());
    inputs.apply(&keys::network_policy(), None);
    assert!(inputs.rules().is_empty());
    assert!(!inputs.has_policy());
}

#[test]
fn a_node_without_an_ip_address_lends_none() {
    let mut inputs = inputs(
        &[(Allow, "web", "db", None)],
        &[
            ("n1", "db-0", "db", vec![(5432, 20000)]),
            ("n2", "web-0", "web", vec![]),
        ],
    );
    let key = keys::node("n2").unwrap();
    let status = NodeStatus {
        address: "node-2.example".into(),
        ..NodeStatus::default()
    };
    inputs.apply(&key, Some(&fact(key.clone(), schema::encode(&status))));
    assert_eq!(allowed_at(&inputs.rules(), "n1", 20000), ["10.0.0.1"]);
}

#[test]
fn addresses_parse_with_brackets_and_ports() {
    assert_eq!(parse_address("10.0.0.1"), "10.0.0.1".parse().ok());
    assert_eq!(parse_address("[fd00::1]"), "fd00::1".parse().ok());
    assert_eq!(parse_address("10.0.0.1:7420"), "10.0.0.1".parse().ok());
    assert_eq!(parse_address("[fd00::1]:80"), "fd00::1".parse().ok());
    assert_eq!(parse_address("host.example"), None);
}
