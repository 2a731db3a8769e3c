//! Tests of [`FirewallLoop`].

use super::*;
use ccattler_core::schema::{PortGuard, keys};
use ccattler_core::{Revision, Value};

fn rules_fact(revision: u64, ports: &[u16]) -> Fact {
    let rules = NodeRules {
        sets: vec![vec!["10.0.0.2".into()]],
        guards: ports
            .iter()
            .map(|&port| PortGuard {
                port,
                instance: format!("db-{port}"),
                service: "db".into(),
                declared: 5432,
                allow: 0,
            })
            .collect(),
    };
    let mut fact = Fact::created(
        keys::node_rules("n1").unwrap(),
        schema::encode(&rules),
        Revision(revision),
    );
    fact.mod_revision = Revision(revision);
    fact
}

fn report(revision: u64, guarded: usize, error: Option<&str>) -> NetworkReport {
    NetworkReport {
        revision,
        error: error.map(str::to_owned),
        guarded,
    }
}

#[test]
fn nothing_happens_before_the_store_is_read() {
    let mut machine = FirewallLoop::new();
    assert_eq!(machine.next_action(), None);
}

#[test]
fn applies_then_reports_then_rests() {
    let mut machine = FirewallLoop::new();
    machine.rules(Some(&rules_fact(7, &[20000, 20001])));
    let Some(FirewallAction::Apply { revision: 7, rules }) = machine.next_action() else {
        panic!("expected an apply");
    };
    assert_eq!(rules.guards.len(), 2);
    assert_eq!(machine.next_action(), None, "one action at a time");
    machine.applied(Ok(()));
    assert_eq!(
        machine.next_action(),
        Some(FirewallAction::Report(report(7, 2, None)))
    );
    machine.reported(report(7, 2, None), Ok(()));
    assert_eq!(machine.next_action(), None);
    // The same fact again (a resync) changes nothing.
    machine.rules(Some(&rules_fact(7, &[20000, 20001])));
    assert_eq!(machine.next_action(), None);
}

#[test]
fn a_refused_rule_set_keeps_the_previous_one_and_says_why() {
    let mut machine = FirewallLoop::new();
    machine.rules(Some(&rules_fact(7, &[20000])));
    machine.next_action();
    machine.applied(Ok(()));
    machine.next_action();
    machine.reported(report(7, 1, None), Ok(()));
    machine.rules(Some(&rules_fact(9, &[20000, 20001])));
    assert!(matches!(
        machine.next_action(),
        Some(FirewallAction::Apply { revision: 9, .. })
    ));
    machine.applied(Err("nft refused it".into()));
    assert_eq!(
        machine.next_action(),
        Some(FirewallAction::Report(report(7, 1, Some("nft refused it"))))
    );
    machine.reported(report(7, 1, Some("nft refused it")), Ok(()));
    assert_eq!(machine.next_action(), None, "no retry before a tick");
    machine.tick();
    assert!(matches!(
        machine.next_action(),
        Some(FirewallAction::Apply { revision: 9, .. })
    ));
    machine.applied(Ok(()));
    assert_eq!(
        machine.next_action(),
        Some(FirewallAction::Report(report(9, 2, None)))
    );
}

#[test]
fn a_rule_set_that_does_not_decode_is_not_applied() {
    let mut machine = FirewallLoop::new();
    machine.rules(Some(&rules_fact(7, &[20000])));
    machine.next_action();
    machine.applied(Ok(()));
    let mut broken = rules_fact(8, &[]);
    broken.value = Value::from(b"{not json".to_vec());
    machine.rules(Some(&broken));
    let Some(FirewallAction::Report(sent)) = machine.next_action() else {
        panic!("expected a report");
    };
    assert_eq!(sent.revision, 7);
    assert!(
        sent.error
            .is_some_and(|e| e.contains("previous rules stay"))
    );
}

#[test]
fn the_table_goes_only_when_the_rule_set_does() {
    let mut machine = FirewallLoop::new();
    // Just started and the store has no rules: a table of an earlier run must go.
    machine.rules(None);
    assert_eq!(machine.next_action(), Some(FirewallAction::Remove));
    machine.applied(Ok(()));
    assert_eq!(
        machine.next_action(),
        Some(FirewallAction::Report(report(0, 0, None)))
    );
    machine.reported(report(0, 0, None), Ok(()));
    machine.rules(None);
    assert_eq!(machine.next_action(), None, "removed once");
}

#[test]
fn a_failed_report_is_written_again_after_a_tick() {
    let mut machine = FirewallLoop::new();
    machine.rules(Some(&rules_fact(3, &[20000])));
    machine.next_action();
    machine.applied(Ok(()));
    let Some(FirewallAction::Report(sent)) = machine.next_action() else {
        panic!("expected a report");
    };
    machine.reported(sent.clone(), Err("store unreachable".into()));
    assert_eq!(machine.next_action(), None);
    machine.tick();
    assert_eq!(machine.next_action(), Some(FirewallAction::Report(sent)));
}

#[test]
fn only_the_newest_of_several_rule_sets_is_applied_next() {
    let mut machine = FirewallLoop::new();
    machine.rules(Some(&rules_fact(3, &[20000])));
    machine.next_action();
    machine.rules(Some(&rules_fact(4, &[20001])));
    machine.rules(Some(&rules_fact(5, &[20002])));
    machine.applied(Ok(()));
    assert!(matches!(
        machine.next_action(),
        Some(FirewallAction::Apply { revision: 5, .. })
    ));
}

#[test]
fn a_failed_removal_at_start_is_no_fault() {
    let mut machine = FirewallLoop::new();
    machine.rules(None);
    assert_eq!(machine.next_action(), Some(FirewallAction::Remove));
    machine.applied(Err("cannot run `nft`".into()));
    assert_eq!(
        machine.next_action(),
        Some(FirewallAction::Report(report(0, 0, None)))
    );
}
