//! The snapshot harness: plans and runs as stable text, the runner's rules, and errors that name
//! what is wrong.

use std::collections::BTreeMap;

use ccattler_controllers::standard;
use ccattler_core::schema::{
    self, Cpu, Endpoints, InstanceObservation, Memory, NodeStatus, ObservedState, ServiceSpec,
};
use ccattler_core::{Change, Controller, FactView, Key, Plan, ReconcileContext, ReconcileError};
use ccattler_testkit::harness::{FactError, Harness, HarnessError};
use ccattler_testkit::toy::ReplicaController;

/// Writes whatever it is told to: `order/{n}` holds the key to write (`put`), or `twice`.
struct Writer {
    domain: &'static str,
}

impl Controller for Writer {
    fn name(&self) -> &str {
        "writer"
    }
    fn watches(&self) -> Vec<String> {
        vec!["order/".into()]
    }
    fn write_domain(&self) -> Vec<String> {
        vec![self.domain.into()]
    }
    fn reconcile(
        &self,
        facts: &FactView,
        _ctx: &mut ReconcileContext<'_>,
    ) -> Result<Vec<Change>, ReconcileError> {
        let mut changes = Vec::new();
        for fact in facts.scan("order/") {
            let target = fact.value_str().unwrap_or_default();
            if target == "fail" {
                return Err(ReconcileError::failed("told to fail"));
            }
            changes.push(Change::put(Key::new(target)?, "written"));
        }
        Ok(changes)
    }
}

/// Counts the facts its view holds: proves the view holds only its prefixes.
struct Counter;

impl Controller for Counter {
    fn name(&self) -> &str {
        "counter"
    }
    fn watches(&self) -> Vec<String> {
        vec!["in/".into()]
    }
    fn write_domain(&self) -> Vec<String> {
        vec!["count".into()]
    }
    fn reconcile(
        &self,
        facts: &FactView,
        _ctx: &mut ReconcileContext<'_>,
    ) -> Result<Vec<Change>, ReconcileError> {
        // Every fact but its own output: only what it watches is there.
        let seen = facts.iter().filter(|f| f.key.as_str() != "count").count();
        let text = format!("{seen} facts seen");
        Ok(vec![Change::put(Key::new("count")?, text)])
    }
}

#[test]
fn a_plan_is_one_reconcile_sorted_by_key_without_no_ops() -> Result<(), HarnessError> {
    let harness = Harness::new(ReplicaController).facts(
        "
        # web wants three, one is there, old is not desired any more
        toy/desired/web = 3
        put toy/instance/web/i9 web
        put toy/instance/old/x old
        ",
    );
    insta::assert_snapshot!(harness.plan()?, @r"
    - toy/instance/old/x
    + toy/instance/web/i0 = web
    + toy/instance/web/i1 = web
    ");
    assert_eq!(
        harness.revision().get(),
        3,
        "one revision per fact, nothing applied"
    );
    Ok(())
}

#[test]
fn a_run_commits_rounds_to_a_fixpoint_and_returns_the_net_change() -> Result<(), HarnessError> {
    let mut harness = Harness::new(ReplicaController)
        .with(Counter)
        .fact("toy/desired/web", "2")
        .fact("in/a", "1")
        .fact("elsewhere/x", "not seen");
    let planned = harness.plan()?;
    let ran = harness.run()?;
    insta::assert_snapshot!(ran, @r"
    + count = 1 facts seen
    + toy/instance/web/i0 = web
    + toy/instance/web/i1 = web
    ");
    let toy = |plan: &Plan| -> Vec<Change> {
        let toy = plan.changes().iter().filter(|c| c.key().has_prefix("toy/"));
        toy.cloned().collect()
    };
    assert_eq!(
        toy(&planned),
        toy(&ran),
        "the plan drew ids from a copy: the run made the same"
    );
    // Three facts, then one commit per controller that changed something.
    assert_eq!(harness.revision().get(), 5);
    assert_eq!(
        harness.get("toy/instance/web/i1").map(|f| f.version),
        Some(1)
    );
    assert_eq!(
        harness.run()?.to_string(),
        "(no changes)\n",
        "already at the fixpoint"
    );
    Ok(())
}

/// The standard controllers, a service `web` of two instances and one node `n1` with its lease.
fn web_on_one_node() -> (Harness, ServiceSpec) {
    let service = ServiceSpec {
        name: "web".into(),
        image: "example/web:1".into(),
        instances: 2,
        ..ServiceSpec::default()
    };
    let node = NodeStatus {
        name: "n1".into(),
        cpu: Cpu::from_millis(4000),
        memory: Memory::from_bytes(8 << 30),
        architecture: "amd64".into(),
        address: "n1".into(),
        ..NodeStatus::default()
    };
    let harness = Harness::from_controllers(standard::all())
        .json("desired/service/web", &service)
        .json("observed/node/n1", &node)
        .fact("lease/node/n1", "n1");
    (harness, service)
}

#[test]
fn any_controllers_even_the_standard_ones() -> Result<(), HarnessError> {
    let (mut harness, service) = web_on_one_node();
    let stored = harness.get("desired/service/web").map(|f| f.value.clone());
    assert_eq!(
        stored,
        Some(schema::encode(&service)),
        "json stores what encode writes"
    );
    insta::assert_snapshot!("standard_intent_plan", harness.plan_of("intent-resolver")?);
    insta::assert_snapshot!("standard_run", harness.run()?);
    Ok(())
}

/// Two instances that report one address (a port given twice) are two endpoint entries, each
/// naming its instance and node, not one address that hides the fault.
#[test]
fn two_instances_at_one_address_stay_two_endpoints() -> Result<(), HarnessError> {
    let (mut harness, _) = web_on_one_node();
    harness.run()?;
    let lease = harness
        .get("lease/node/n1")
        .map(|f| f.create_revision.get() as i64);
    let placed: Vec<String> = harness
        .view()
        .scan("placement/n1/")
        .filter_map(|f| f.key.strip_prefix("placement/n1/").map(str::to_owned))
        .collect();
    assert_eq!(placed.len(), 2, "both instances placed on n1: {placed:?}");
    for id in &placed {
        let report = InstanceObservation {
            node: "n1".into(),
            service: "web".into(),
            state: ObservedState::Running,
            address: Some("n1:8080".into()),
            ready: true,
            image: "example/web:1".into(),
            lease,
            ..InstanceObservation::default()
        };
        harness = harness.json(format!("observed/instance/n1/{id}"), &report);
    }
    harness.run()?;
    let endpoints = harness
        .get("endpoint/service/web")
        .map(|f| schema::decode::<Endpoints>(f).expect("endpoints that decode"))
        .unwrap_or_default();
    let listed: Vec<(&str, &str, &str)> = endpoints
        .endpoints
        .iter()
        .map(|e| (e.address.as_str(), e.instance.as_str(), e.node.as_str()))
        .collect();
    let mut want: Vec<(&str, &str, &str)> = placed
        .iter()
        .map(|id| ("n1:8080", id.as_str(), "n1"))
        .collect();
    want.sort();
    assert_eq!(listed, want);
    assert_eq!(endpoints.addresses(), ["n1:8080", "n1:8080"]);
    Ok(())
}

#[test]
fn changes_the_runner_would_reject_fail_with_the_key_and_the_domain() {
    let outside = Harness::new(Writer { domain: "out/" }).fact("order/1", "elsewhere/k");
    let err = outside.plan().unwrap_err();
    assert!(matches!(&err, HarnessError::Rejected { controller, .. } if controller == "writer"));
    assert_eq!(
        err.to_string(),
        "controller writer: rejected a change to elsewhere/k, outside the write domain [\"out/\"]"
    );
    let twice = Harness::new(Writer { domain: "out/" }).facts("order/1 = out/k\norder/2 = out/k");
    let err = twice.plan().unwrap_err().to_string();
    assert!(err.contains("changes out/k twice"), "{err}");
    let failing = Harness::new(Writer { domain: "out/" }).fact("order/1", "fail");
    let err = failing.plan().unwrap_err().to_string();
    assert_eq!(
        err,
        "controller writer failed: reconcile failed: told to fail"
    );
}

#[test]
fn bad_facts_fail_naming_the_key_or_the_line() {
    let err = Harness::new(Counter)
        .fact("/in/a", "1")
        .fact("in/b", "2")
        .plan()
        .unwrap_err();
    assert!(
        matches!(&err, HarnessError::Fact(FactError::Key { key, .. }) if key == "/in/a"),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .starts_with("cannot add the fact \"/in/a\": key \"/in/a\" starts with `/`")
    );

    let err = Harness::new(Counter)
        .facts("in/a = 1\n\nin//b = 2")
        .plan()
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("facts text, line 3 `in//b = 2`: key \"in//b\" has an empty path segment"),
        "{err}"
    );

    let by_number: BTreeMap<u32, &str> = BTreeMap::from([(1, "one")]);
    let err = Harness::new(Counter).json("in/map", &by_number).plan();
    assert!(err.is_ok(), "serde_json writes integer map keys as strings");
    let by_pair: BTreeMap<(u8, u8), &str> = BTreeMap::from([((1, 2), "x")]);
    let err = Harness::new(Counter)
        .json("in/map", &by_pair)
        .plan()
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("cannot add the fact in/map: its record does not encode as JSON"),
        "{err}"
    );

    let big = vec![b'x'; 2 << 20];
    let err = Harness::new(Counter)
        .fact("in/big", big)
        .plan()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("its value of 2097152 bytes is over the store's limit"),
        "{err}"
    );

    let err = Harness::from_controllers([]).plan().unwrap_err();
    assert!(matches!(err, HarnessError::NoControllers));
    let err = Harness::new(Counter)
        .plan_of("nope")
        .unwrap_err()
        .to_string();
    assert_eq!(err, "no controller `nope`; the controllers are counter");
}

/// Flips `flip/state` between two values on every pass: it never settles.
struct Flip;

impl Controller for Flip {
    fn name(&self) -> &str {
        "flip"
    }
    fn watches(&self) -> Vec<String> {
        vec!["flip/".into()]
    }
    fn write_domain(&self) -> Vec<String> {
        vec!["flip/".into()]
    }
    fn reconcile(
        &self,
        facts: &FactView,
        _ctx: &mut ReconcileContext<'_>,
    ) -> Result<Vec<Change>, ReconcileError> {
        let next = match facts.get("flip/state").and_then(|f| f.value_str()) {
            Some("a") => "b",
            _ => "a",
        };
        Ok(vec![Change::put(Key::new("flip/state")?, next)])
    }
}

#[test]
fn a_livelock_is_an_error_after_the_bound() {
    let mut harness = Harness::new(Flip).max_rounds(7);
    let err = harness.run().unwrap_err();
    assert!(matches!(err, HarnessError::Livelock { rounds: 7, .. }));
    let text = err.to_string();
    assert!(
        text.starts_with(
            "no fixpoint after 7 rounds (a livelock); the last round changed 1 facts:\n  \
             flip: + flip/state = a\n"
        ),
        "{text}"
    );
    assert_eq!(harness.revision().get(), 7, "one commit per round");
}
