//! Rollouts in the seeded simulation: real agents run the versions, the rollout controller
//! judges them. A version whose instances crash, or that never becomes ready, is rolled back
//! by itself within its progress deadline and 5 s; a healthy one completes; pause, resume and
//! undo act through the request record as the API writes it.

use std::time::Duration;

use ccattler_controllers::lang::{self, DesiredFacts, SourceFile};
use ccattler_core::schema::{
    self, Cpu, Memory, Rollout, RolloutAction, RolloutPhase, RolloutRequest, ServiceSpec,
};
use ccattler_testkit::sim::Simulation;

fn web(version: &str, extra: &str) -> String {
    format!(
        "service web {{
    image example/web:{version}
    instances 4
    resources {{
        cpu 100m
        memory 64Mi
    }}
    readiness {{
        tcp
        every 1s
    }}
    update {{
        progress_deadline 30s
    }}
    {extra}
}}
"
    )
}

fn desired(text: &str) -> DesiredFacts {
    lang::check(&SourceFile::new("web.cca", text))
        .expect("a valid document")
        .to_facts()
}

fn version_of(text: &str) -> String {
    let facts = desired(text);
    let key = schema::keys::service("web").expect("key");
    let value = facts.get(&key).expect("web is declared");
    serde_json::from_slice::<ServiceSpec>(value)
        .expect("a spec")
        .version()
}

fn sec(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn simulation(first: &str, then: &str, at: Duration) -> Simulation {
    Simulation::builder(desired(first))
        .seed(11)
        .nodes(3, Cpu::from_millis(4_000), Memory::from_bytes(8 << 30))
        .then_apply(at, desired(then))
        .build()
}

fn rollout(sim: &Simulation) -> Rollout {
    let snapshot = sim.snapshot().expect("a snapshot");
    let key = schema::keys::rollout("web").expect("key");
    snapshot
        .view()
        .get(key.as_str())
        .and_then(|f| schema::decode::<Rollout>(f).ok())
        .expect("a rollout record")
}

/// Steps a second at a time until `done` holds of the rollout or `limit` passes; the time it
/// held first.
fn run_until(
    sim: &mut Simulation,
    limit: Duration,
    done: impl Fn(&Rollout) -> bool,
) -> Option<Duration> {
    while sim.now() < limit {
        sim.run_until(sim.now() + sec(1));
        assert!(sim.violation().is_none(), "{:?}", sim.violation());
        if done(&rollout(sim)) {
            return Some(sim.now());
        }
    }
    None
}

/// Every instance of web runs `version`, ready, and the store is converged.
fn settled_on(sim: &mut Simulation, version: &str, limit: Duration) {
    while sim.now() < limit {
        sim.run_until(sim.now() + sec(1));
        let snapshot = sim.snapshot().expect("a snapshot");
        let cluster = snapshot.cluster();
        let instances: Vec<_> = cluster.instances_of("web").collect();
        if snapshot.is_converged()
            && instances.len() == 4
            && instances
                .iter()
                .all(|i| i.desired.version == version && i.is_ready())
        {
            return;
        }
    }
    let snapshot = sim.snapshot().expect("a snapshot");
    panic!("web did not settle on {version}: {:?}", snapshot.gaps());
}

#[test]
fn a_version_whose_instances_crash_is_rolled_back_within_its_deadline() {
    let good = web("1", "");
    let broken = web("2", "command \"exit 1\"");
    let mut sim = simulation(&good, &broken, sec(20));
    let v1 = version_of(&good);
    assert!(run_until(&mut sim, sec(20), |r| r.phase == RolloutPhase::Complete).is_some());
    assert_eq!(rollout(&sim).stable.as_deref(), Some(v1.as_str()));
    sim.run_until(sec(20));
    let at =
        run_until(&mut sim, sec(80), |r| r.phase == RolloutPhase::RolledBack).expect("rolled back");
    assert!(at <= sec(20 + 30 + 5), "rolled back at {at:?}");
    let r = rollout(&sim);
    assert_eq!(r.version, v1);
    assert_eq!(
        r.rolled_back_from.as_deref(),
        Some(version_of(&broken).as_str())
    );
    assert!(r.reason.contains("(threshold 3)"), "{}", r.reason);
    settled_on(&mut sim, &v1, sec(120));
    assert_eq!(
        sim.running("web"),
        4,
        "the simulators run the old version again"
    );
}

#[test]
fn a_version_never_ready_is_rolled_back_at_its_progress_deadline() {
    let good = web("1", "");
    let never_ready = web(
        "2",
        "readiness {\n        exec \"exit 1\"\n        every 1s\n    }",
    )
    .replace("readiness {\n        tcp\n        every 1s\n    }\n", "");
    let mut sim = simulation(&good, &never_ready, sec(20));
    let v1 = version_of(&good);
    sim.run_until(sec(20));
    let at =
        run_until(&mut sim, sec(90), |r| r.phase == RolloutPhase::RolledBack).expect("rolled back");
    // No instance of it ever became ready: the deadline counts from the rollout's start.
    assert!(at >= sec(20 + 30), "not before the deadline: {at:?}");
    assert!(at <= sec(20 + 30 + 5), "within 5 s of it: {at:?}");
    let r = rollout(&sim);
    assert!(
        r.reason
            .contains("made no progress for 30s: 0 of 4 instances ready"),
        "{}",
        r.reason
    );
    settled_on(&mut sim, &v1, sec(120));
}

#[test]
fn a_healthy_version_completes_and_becomes_stable() {
    let good = web("1", "");
    let next = web("2", "");
    let mut sim = simulation(&good, &next, sec(20));
    let v2 = version_of(&next);
    sim.run_until(sec(20));
    run_until(&mut sim, sec(80), |r| {
        r.version == v2 && r.phase == RolloutPhase::Complete
    })
    .expect("v2 completes");
    assert_eq!(rollout(&sim).stable.as_deref(), Some(v2.as_str()));
    settled_on(&mut sim, &v2, sec(100));
}

#[test]
fn pause_holds_a_new_version_and_undo_returns_to_the_one_before() {
    let good = web("1", "");
    let next = web("2", "");
    let mut sim = simulation(&good, &next, sec(30));
    let (v1, v2) = (version_of(&good), version_of(&next));
    sim.run_until(sec(20));
    let key = schema::keys::rollout_request("web").expect("key");
    let ask = |sim: &mut Simulation, id, action| {
        let request = RolloutRequest { id, action };
        sim.put(&key, schema::encode(&request)).expect("written");
    };
    ask(&mut sim, 1, RolloutAction::Pause);
    sim.run_until(sec(60));
    let r = rollout(&sim);
    assert_eq!(
        (r.phase, r.version.as_str()),
        (RolloutPhase::Paused, v1.as_str())
    );
    assert_eq!(r.desired, v2, "the new version waits");
    settled_on(&mut sim, &v1, sec(70));

    ask(&mut sim, 2, RolloutAction::Resume);
    run_until(&mut sim, sec(120), |r| {
        r.version == v2 && r.phase == RolloutPhase::Complete
    })
    .expect("resumed: v2 completes");

    ask(&mut sim, 3, RolloutAction::Undo { to_version: None });
    run_until(&mut sim, sec(180), |r| {
        r.version == v1 && r.phase == RolloutPhase::Complete
    })
    .expect("undone: v1 in force again");
    settled_on(&mut sim, &v1, sec(200));
}
