//! Init steps in the seeded simulation: real agents run them before each instance's main
//! process, the init controller reports where each instance stands. Every report is checked
//! against the ready-after-init invariant as it is written (no instance reported running or
//! ready before its steps passed). A step that keeps failing is tried again in place on the
//! restart schedule, and no instance is replaced for it; under restart `never` the instance
//! gives up and stays failed.

use std::collections::BTreeSet;
use std::time::Duration;

use ccattler_controllers::lang::{self, DesiredFacts, SourceFile};
use ccattler_core::Event;
use ccattler_core::event::reasons;
use ccattler_core::schema::{self, Cpu, InitPhase, InitStatus, Memory};
use ccattler_testkit::sim::Simulation;

fn web(init: &str, extra: &str) -> String {
    format!(
        "service web {{
    image example/web:1
    instances 3
    resources {{
        cpu 100m
        memory 64Mi
    }}
    init {{
        exec \"./prepare --cache\"
    }}
    init {{
        exec \"{init}\"
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

fn sec(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn simulation(text: &str, then: Option<(Duration, &str)>) -> Simulation {
    let mut builder = Simulation::builder(desired(text)).seed(5).nodes(
        3,
        Cpu::from_millis(4_000),
        Memory::from_bytes(8 << 30),
    );
    if let Some((at, then)) = then {
        builder = builder.then_apply(at, desired(then));
    }
    builder.build()
}

fn init_status(sim: &Simulation) -> Option<InitStatus> {
    let snapshot = sim.snapshot().expect("a snapshot");
    let key = schema::keys::init_status("web").expect("key");
    snapshot
        .view()
        .get(key.as_str())
        .and_then(|f| schema::decode::<InitStatus>(f).ok())
}

fn instance_ids(sim: &Simulation) -> BTreeSet<String> {
    let snapshot = sim.snapshot().expect("a snapshot");
    snapshot
        .cluster()
        .instances_of("web")
        .map(|i| i.id.clone())
        .collect()
}

#[test]
fn steps_that_pass_end_in_a_converged_service_with_its_init_done() {
    let mut sim = simulation(&web("./migrate --all", ""), None);
    sim.run_until(sec(30));
    assert!(sim.violation().is_none(), "{:?}", sim.violation());
    let snapshot = sim.snapshot().expect("a snapshot");
    assert!(snapshot.is_converged(), "{:?}", snapshot.gaps());
    let init = init_status(&sim).expect("an init record");
    assert_eq!((init.steps, init.done), (2, 3), "{init:?}");
    assert!(init.is_done() && init.instances.is_empty(), "{init:?}");
    for instance in snapshot.cluster().instances_of("web") {
        let report = instance.report().expect("a report");
        assert_eq!((report.init_done, report.init_steps), (2, 2));
    }
}

#[test]
fn a_step_that_keeps_failing_backs_off_in_place_and_says_why() {
    let fixed = web("./migrate --all", "");
    let mut sim = simulation(&web("exit 3", ""), Some((sec(75), &fixed)));
    sim.run_until(sec(10));
    let first = instance_ids(&sim);
    assert_eq!(first.len(), 3);
    sim.run_until(sec(70));
    assert!(sim.violation().is_none(), "{:?}", sim.violation());
    assert_eq!(
        instance_ids(&sim),
        first,
        "no instance replaced for its init"
    );

    let init = init_status(&sim).expect("an init record");
    assert_eq!((init.failed, init.done), (3, 0), "{init:?}");
    for one in &init.instances {
        let InitPhase::Failed {
            step,
            of,
            failures,
            reason,
            output,
        } = &one.phase
        else {
            panic!("{} is not failed: {:?}", one.id, one.phase);
        };
        assert_eq!((*step, *of), (2, 2));
        // The restart schedule (0.1, 0.5, 1, 2, 5, then 30 s) over a minute: 6 to 8 attempts,
        // not one a second.
        assert!((5..=9).contains(failures), "{failures} failures in 60 s");
        let reason = reason.as_deref().unwrap_or_default();
        assert!(
            reason.starts_with("init step 2 of 2 exited with 3; next attempt in"),
            "{reason}"
        );
        assert_eq!(output.as_deref(), Some("exit 3: exit status 3"));
    }
    let snapshot = sim.snapshot().expect("a snapshot");
    assert!(
        snapshot
            .cluster()
            .instances_of("web")
            .all(|i| !i.is_ready()),
        "none ready before its init passed"
    );
    let events = snapshot
        .view()
        .scan(schema::EVENTS)
        .filter_map(|f| schema::decode::<Event>(f).ok())
        .filter(|e| e.reason == reasons::INIT_FAILED)
        .count();
    assert!(events >= 3, "an InitFailed event per failure: {events}");

    // A fixed step rolls out as a new version and the service converges.
    sim.run_until(sec(130));
    let snapshot = sim.snapshot().expect("a snapshot");
    assert!(snapshot.is_converged(), "{:?}", snapshot.gaps());
    assert!(init_status(&sim).is_some_and(|i| i.is_done() && i.done == 3));
}

#[test]
fn under_restart_never_a_failing_step_gives_up_and_stays_failed() {
    let mut sim = simulation(&web("exit 3", "restart never"), None);
    sim.run_until(sec(40));
    assert!(sim.violation().is_none(), "{:?}", sim.violation());
    let init = init_status(&sim).expect("an init record");
    assert_eq!(init.failed, 3, "{init:?}");
    let snapshot = sim.snapshot().expect("a snapshot");
    for instance in snapshot.cluster().instances_of("web") {
        let report = instance.report().expect("a report");
        assert_eq!(report.state, schema::ObservedState::Failed);
        assert_eq!(report.init_failures, 1, "not tried again");
    }
    assert!(snapshot.is_converged(), "{:?}", snapshot.gaps());
}
