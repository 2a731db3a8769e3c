//! Tests of [`NetworkController`]: its cached passes agree with a fresh controller's.

use super::*;
use ccattler_core::schema::{
    Assignment, DesiredState, NetworkPolicy, NetworkRule, NodeStatus, PortBinding, RuleAction, keys,
};
use ccattler_core::{Revision, SequentialIds};
use proptest::prelude::*;

const SERVICES: [&str; 4] = ["a", "b", "c", "d"];

/// One change to the cluster.
#[derive(Clone, Debug)]
enum Step {
    /// Instance `k` of service `s` placed on node `n` (or removed: `None`).
    Place(usize, usize, Option<usize>),
    /// Node `n`'s address becomes 10.0.0.`last` (or it reports none: `None`).
    Address(usize, Option<u8>),
    /// The policy becomes these (action, from, to, port) rules.
    Policy(Vec<(bool, usize, usize, Option<u16>)>),
    /// The controller passes; `commit`: its changes are committed.
    Pass { commit: bool },
    /// Someone else (a late commit of an earlier pass) writes node `n`'s rule set.
    Stray(usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0..4usize, 0..3usize, proptest::option::of(0..4usize))
            .prop_map(|(s, k, n)| Step::Place(s, k, n)),
        1 => (0..4usize, proptest::option::of(1..4u8)).prop_map(|(n, a)| Step::Address(n, a)),
        1 => proptest::collection::vec(
            (any::<bool>(), 0..4usize, 0..4usize, proptest::option::of(prop_oneof![Just(80u16), Just(81)])),
            0..5,
        )
        .prop_map(Step::Policy),
        4 => any::<bool>().prop_map(|commit| Step::Pass { commit }),
        1 => (0..4usize).prop_map(Step::Stray),
    ]
}

fn pass(controller: &NetworkController, view: &FactView) -> Vec<Change> {
    let mut ids = SequentialIds::new("t");
    let mut ctx = ReconcileContext::new(std::time::SystemTime::UNIX_EPOCH, &mut ids);
    controller.reconcile(view, &mut ctx).expect("a pass")
}

fn put(
    view: &mut FactView,
    revision: &mut u64,
    key: ccattler_core::Key,
    value: ccattler_core::Value,
) {
    *revision += 1;
    view.insert(Fact::created(key, value, Revision(*revision)));
}

fn run(steps: Vec<Step>) {
    let controller = NetworkController::new();
    let mut view = FactView::new();
    let mut revision = 0;
    for step in steps.into_iter().chain([Step::Pass { commit: true }]) {
        match step {
            Step::Place(s, k, node) => {
                let id = format!("{}-{k}", SERVICES[s]);
                for n in 0..4 {
                    view.remove(keys::placement(&format!("n{n}"), &id).unwrap().as_str());
                }
                if let Some(n) = node {
                    let assignment = Assignment {
                        instance: id.clone(),
                        service: SERVICES[s].into(),
                        node: format!("n{n}"),
                        version: "v".into(),
                        state: DesiredState::Running,
                        ports: vec![
                            PortBinding {
                                port: 80,
                                host: 20000 + k as u16 * 2 + s as u16 * 10,
                            },
                            PortBinding {
                                port: 81,
                                host: 20001 + k as u16 * 2 + s as u16 * 10,
                            },
                        ],
                        volumes: Vec::new(),
                    };
                    let key = keys::placement(&format!("n{n}"), &id).unwrap();
                    put(&mut view, &mut revision, key, schema::encode(&assignment));
                }
            }
            Step::Address(n, last) => {
                let status = NodeStatus {
                    address: last.map(|l| format!("10.0.0.{l}")).unwrap_or_default(),
                    ..NodeStatus::default()
                };
                let key = keys::node(&format!("n{n}")).unwrap();
                put(&mut view, &mut revision, key, schema::encode(&status));
            }
            Step::Policy(rules) => {
                let key = keys::network_policy();
                if rules.is_empty() {
                    view.remove(key.as_str());
                } else {
                    let policy = NetworkPolicy {
                        rules: rules
                            .into_iter()
                            .map(|(allow, from, to, port)| NetworkRule {
                                action: if allow {
                                    RuleAction::Allow
                                } else {
                                    RuleAction::Deny
                                },
                                from: SERVICES[from].into(),
                                to: SERVICES[to].into(),
                                port,
                            })
                            .collect(),
                    };
                    put(&mut view, &mut revision, key, schema::encode(&policy));
                }
            }
            Step::Stray(n) => {
                let key = keys::node_rules(&format!("n{n}")).unwrap();
                put(
                    &mut view,
                    &mut revision,
                    key,
                    schema::encode(&NodeRules::default()),
                );
            }
            Step::Pass { commit } => {
                let changes = pass(&controller, &view);
                if commit {
                    for change in changes {
                        match change {
                            Change::Put { key, value } => put(&mut view, &mut revision, key, value),
                            Change::Delete { key } => {
                                view.remove(key.as_str());
                            }
                        }
                    }
                }
            }
        }
    }
    // After a committed pass, the cached controller has nothing more to say, and neither has
    // a fresh one reading the same view.
    assert_eq!(pass(&controller, &view), Vec::new());
    assert_eq!(pass(&NetworkController::new(), &view), Vec::new());
}

proptest! {
    #[test]
    fn cached_passes_agree_with_a_fresh_controller(steps in proptest::collection::vec(step(), 0..40)) {
        run(steps);
    }
}

#[test]
fn without_a_policy_nothing_is_written_and_rules_go_with_it() {
    run(vec![
        Step::Address(0, Some(1)),
        Step::Place(0, 0, Some(0)),
        Step::Pass { commit: true },
    ]);
    let controller = NetworkController::new();
    let mut view = FactView::new();
    let policy = NetworkPolicy {
        rules: vec![NetworkRule {
            action: RuleAction::Allow,
            from: "a".into(),
            to: "b".into(),
            port: None,
        }],
    };
    view.insert(Fact::created(
        keys::network_policy(),
        schema::encode(&policy),
        Revision(1),
    ));
    let assignment = Assignment {
        instance: "b-0".into(),
        service: "b".into(),
        node: "n0".into(),
        version: "v".into(),
        state: DesiredState::Running,
        ports: vec![PortBinding {
            port: 80,
            host: 20000,
        }],
        volumes: Vec::new(),
    };
    let key = keys::placement("n0", "b-0").unwrap();
    view.insert(Fact::created(key, schema::encode(&assignment), Revision(2)));
    let changes = pass(&controller, &view);
    assert_eq!(changes.len(), 1);
    assert_eq!(changes[0].key().as_str(), "network/node/n0");
    if let Change::Put { key, value } = &changes[0] {
        view.insert(Fact::created(key.clone(), value.clone(), Revision(3)));
    }
    view.remove(keys::network_policy().as_str());
    let changes = pass(&controller, &view);
    assert_eq!(
        changes,
        vec![Change::delete(keys::node_rules("n0").unwrap())]
    );
}
