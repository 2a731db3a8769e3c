//! Snapshot tests of `ServiceDns`: facts in, the plan as text out, compared by insta.

use ccattler_controllers::standard;
use ccattler_core::schema::{
    Cpu, Endpoint, Endpoints, Health, InstanceObservation, Memory, NodeStatus, ObservedState,
    ServiceSpec,
};
use ccattler_testkit::harness::{Harness, HarnessError};
use custom_controller::ServiceDns;

// The test README.md shows, with the two `use` lines above it: 12 lines.
#[test]
fn ready_endpoints_become_a_dns_record() -> Result<(), HarnessError> {
    let plan = Harness::new(ServiceDns)
        .fact("config/dns/domain", "prod.example.com")
        .facts(r#"endpoint/service/team/web = {"endpoints":[{"address":"n1:10000","instance":"web-1","node":"n1"}]}"#)
        .plan()?;
    insta::assert_snapshot!(plan, @r#"+ dns/record/team/web = {"name":"web.team.prod.example.com","targets":[{"host":"n1","port":10000}]}"#);
    Ok(())
}

#[test]
fn records_follow_the_endpoints_to_a_fixpoint() -> Result<(), HarnessError> {
    let endpoints = |addresses: &[&str]| Endpoints {
        endpoints: addresses
            .iter()
            .enumerate()
            .map(|(i, a)| Endpoint {
                address: a.to_string(),
                instance: format!("web-{i}"),
                node: "n1".into(),
            })
            .collect(),
    };
    let mut harness = Harness::new(ServiceDns)
        .json("endpoint/service/web", &endpoints(&["n1:80"]))
        .json("endpoint/service/db", &endpoints(&[]))
        .facts(
            r#"
            # left over from services that are gone
            dns/record/old = {"name":"old.cluster.local","targets":[]}
            dns/error/old = no record: something long fixed
            "#,
        );
    insta::assert_snapshot!(harness.run()?, @r#"
    - dns/error/old
    - dns/record/old
    + dns/record/web = {"name":"web.cluster.local","targets":[{"host":"n1","port":80}]}
    "#);
    // The last ready instance of web goes: so does its record.
    let mut harness = harness.json("endpoint/service/web", &endpoints(&[]));
    insta::assert_snapshot!(harness.run()?, @"- dns/record/web");
    insta::assert_snapshot!(harness.run()?, @"(no changes)");
    Ok(())
}

#[test]
fn what_cannot_become_a_record_is_said() -> Result<(), HarnessError> {
    let plan = Harness::new(ServiceDns)
        .facts(
            r#"
            endpoint/service/Web_1 = {"endpoints":[{"address":"n1:80","instance":"w-1","node":"n1"}]}
            endpoint/service/api = {"endpoints":[{"address":"n1:80","instance":"a-1","node":"n1"},{"address":"n2","instance":"a-2","node":"n2"},{"address":"n3:0","instance":"a-3","node":"n3"},{"address":"[fd00::3]:8080","instance":"a-4","node":"n4"}]}
            endpoint/service/broken = not json
            "#,
        )
        .plan()?;
    insta::assert_snapshot!(plan);
    Ok(())
}

#[test]
fn a_domain_that_is_not_dns_fails_the_reconcile() {
    let err = Harness::new(ServiceDns)
        .fact("config/dns/domain", "Prod Example")
        .plan()
        .unwrap_err();
    assert!(matches!(err, HarnessError::Reconcile { .. }), "{err:?}");
    insta::assert_snapshot!(err, @r#"controller service-dns failed: reconcile failed: config/dns/domain holds "Prod Example", which is not a DNS domain; write dot-separated labels of lowercase letters, digits and `-`, such as `prod.example.com`"#);
}

/// With the standard controllers: a service on a node, its instance reported ready, and the
/// record that follows through the endpoint controller.
#[test]
fn beside_the_standard_controllers() -> Result<(), HarnessError> {
    let service = ServiceSpec {
        name: "team/web".into(),
        image: "example/web:1".into(),
        instances: 1,
        ..ServiceSpec::default()
    };
    let node = NodeStatus {
        name: "n1".into(),
        cpu: Cpu::from_millis(2000),
        memory: Memory::from_bytes(4 << 30),
        architecture: "amd64".into(),
        address: "n1".into(),
        ..NodeStatus::default()
    };
    let mut harness = Harness::from_controllers(standard::all())
        .with(ServiceDns)
        .json("desired/service/team/web", &service)
        .json("observed/node/n1", &node)
        .fact("lease/node/n1", "n1");
    harness.run()?; // placed, not running yet: no record
    assert!(harness.get("dns/record/team/web").is_none());
    let lease = harness
        .get("lease/node/n1")
        .map(|f| f.create_revision.get() as i64);
    let running = InstanceObservation {
        node: "n1".into(),
        service: "team/web".into(),
        state: ObservedState::Running,
        address: Some("n1:10000".into()),
        health: Health::Healthy,
        ready: true,
        image: "example/web:1".into(),
        lease,
        ..InstanceObservation::default()
    };
    // What the node's agent would report of the instance the run placed on n1.
    let placed = harness
        .view()
        .scan("placement/n1/")
        .next()
        .map(|f| f.key.clone());
    let id = placed
        .as_ref()
        .and_then(|key| key.strip_prefix("placement/n1/"));
    assert_eq!(id, Some("team.web-i0"));
    let report = format!("observed/instance/n1/{}", id.unwrap_or_default());
    let mut harness = harness.json(report, &running);
    insta::assert_snapshot!(harness.run()?);
    Ok(())
}
