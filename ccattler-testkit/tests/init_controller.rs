//! The init controller's plans, as snapshots: from the reports of a service's instances (one
//! waiting, one running its second step, one failed with output, one done) to the record
//! `status/init/{svc}`; then as a step passes; then for a service whose init steps are
//! taken out, and put back.

use std::sync::Arc;

use ccattler_controllers::standard::InitController;
use ccattler_core::schema::{
    self, Assignment, DesiredInstance, DesiredState, InitStep, InstanceObservation, ObservedState,
    ServiceSpec,
};
use ccattler_testkit::harness::{Harness, HarnessError};

fn spec() -> ServiceSpec {
    ServiceSpec {
        name: "team/web".into(),
        image: "example/web:1".into(),
        instances: 4,
        init: vec![InitStep::new("./prepare"), InitStep::new("./migrate --all")],
        ..ServiceSpec::default()
    }
}

fn report(state: ObservedState, done: u32, failures: u32) -> InstanceObservation {
    InstanceObservation {
        node: "n1".into(),
        service: "team/web".into(),
        state,
        ready: state == ObservedState::Running,
        image: "example/web:1".into(),
        init_done: done,
        init_steps: 2,
        init_failures: failures,
        init_output: (failures > 0).then(|| "psql: connection refused\nmigrate: giving up".into()),
        reason: (failures > 0).then(|| "init step 2 of 2 exited with 1; next attempt in 2s".into()),
        ..InstanceObservation::default()
    }
}

/// The service, its four instances placed on n1, and the reports of three of them.
fn cluster() -> Harness {
    let spec = spec();
    let version = spec.version();
    let mut harness = Harness::from_controllers([Arc::new(InitController::new()) as Arc<_>])
        .json("desired/service/team/web", &spec)
        .fact("lease/node/n1", "n1");
    for i in 0..4 {
        let id = format!("team.web-i{i}");
        harness = harness
            .json(
                format!("desired/instance/{id}"),
                &DesiredInstance {
                    service: "team/web".into(),
                    version: version.clone(),
                    ordinal: None,
                    state: DesiredState::Running,
                    replaces: None,
                },
            )
            .json(
                format!("placement/n1/{id}"),
                &Assignment {
                    instance: id.clone(),
                    service: "team/web".into(),
                    node: "n1".into(),
                    version: version.clone(),
                    state: DesiredState::Running,
                    ports: Vec::new(),
                    volumes: Vec::new(),
                },
            );
    }
    harness
        .json(
            "observed/instance/n1/team.web-i1",
            &report(ObservedState::Starting, 1, 0),
        )
        .json(
            "observed/instance/n1/team.web-i2",
            &report(ObservedState::Starting, 1, 3),
        )
        .json(
            "observed/instance/n1/team.web-i3",
            &report(ObservedState::Running, 2, 0),
        )
}

#[test]
fn each_instance_is_counted_and_those_not_done_are_named() -> Result<(), HarnessError> {
    let mut harness = cluster();
    insta::assert_snapshot!(harness.run()?);
    // The failed step passes, and the second instance's too.
    let mut harness = harness
        .json(
            "observed/instance/n1/team.web-i1",
            &report(ObservedState::Running, 2, 0),
        )
        .json(
            "observed/instance/n1/team.web-i2",
            &report(ObservedState::Running, 2, 0),
        );
    insta::assert_snapshot!("after_two_pass", harness.run()?);
    Ok(())
}

#[test]
fn no_record_without_init_steps() -> Result<(), HarnessError> {
    let mut harness = cluster();
    harness.run()?;
    assert!(harness.get("status/init/team/web").is_some());
    let plain = ServiceSpec {
        init: Vec::new(),
        ..spec()
    };
    let mut harness = harness.json("desired/service/team/web", &plain);
    let plan = harness.run()?;
    assert!(harness.get("status/init/team/web").is_none(), "{plan}");
    let key = schema::keys::service("team/web").expect("key");
    let mut harness = harness.json(key.as_str(), &spec());
    harness.run()?;
    assert!(harness.get("status/init/team/web").is_some());
    Ok(())
}

/// A service deleted while its init controller restarted (its delete of the record lost): the
/// controller that starts over finds the record left, with nothing else of the service, and
/// deletes it. Found by a generated workload (seed 826501636 of `cca chaos --generate`).
#[test]
fn a_record_left_of_a_deleted_service_is_deleted_by_a_fresh_controller() -> Result<(), HarnessError>
{
    let mut harness = cluster();
    harness.run()?;
    let left = harness
        .get("status/init/team/web")
        .map(|fact| fact.value.clone())
        .expect("the record of the service");
    let mut fresh = Harness::new(InitController::new()).fact("status/init/team/web", left);
    let plan = fresh.run()?;
    assert!(fresh.get("status/init/team/web").is_none(), "{plan}");
    Ok(())
}
