//! Regression runs of the simulation: availability bugs found by hand with real processes,
//! each replayed here on virtual time and kept fixed.

use std::time::Duration;

use ccattler_controllers::apply::DesiredFacts;
use ccattler_controllers::lang::{self, SourceFile};
use ccattler_controllers::standard;
use ccattler_core::schema::{Cpu, Memory};
use ccattler_testkit::cluster::{NodeSpec, Snapshot};
use ccattler_testkit::sim::{Fault, FaultKind, Schedule, Simulation};

fn desired(text: &str) -> DesiredFacts {
    lang::check(&SourceFile::new("test.cca", text))
        .expect("a valid document")
        .to_facts()
}

fn web(image: &str, instances: u32, update: &str) -> String {
    format!(
        "service web {{\n  image {image}\n  instances {instances}\n  expose 8080 http\n  resources {{\n    cpu 1\n    memory 256Mi\n  }}\n  readiness {{\n    tcp\n    every 1s\n  }}\n{update}}}\n"
    )
}

/// Instances of web ready on live nodes, as the store says.
fn ready(snapshot: &Snapshot) -> usize {
    snapshot
        .cluster()
        .instances_of("web")
        .filter(|i| i.node_alive && i.is_ready())
        .count()
}

fn sec(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// Measured by hand: 3 ready web servers, `max_unavailable 0`, `max_extra 1`, then a version
/// that runs but never passes its readiness probe: all 3 old servers were stopped within a
/// second. Now the rollout waits, with the 3 old ones serving, for as long as it takes.
#[test]
fn a_bad_deploy_never_takes_the_old_ready_instances_down() {
    let policy = "  update {\n    max_unavailable 0\n    max_extra 1\n  }\n";
    let mut sim = Simulation::builder(desired(&web("example/web:1", 3, policy)))
        .seed(11)
        .nodes(2, Cpu::from_millis(4_000), Memory::from_bytes(8 << 30))
        .then_apply(sec(20), desired(&web("example/web:2", 3, policy)))
        .failing_probes("example/web:2")
        .build();
    sim.run_until(sec(19));
    assert_eq!(
        ready(&sim.snapshot().expect("snapshot")),
        3,
        "converged on version 1"
    );
    let mut lowest = usize::MAX;
    while sim.now() < sec(90) && sim.violation().is_none() {
        sim.run_until(sim.now() + Duration::from_millis(100));
        lowest = lowest.min(ready(&sim.snapshot().expect("snapshot")));
    }
    assert!(sim.violation().is_none(), "{:?}", sim.violation());
    assert_eq!(lowest, 3, "ready never dropped during the rollout");
    let report = sim.run();
    assert!(report.violation.is_none(), "{}", report.explain());
    assert!(
        !report.passed(),
        "a version that never gets ready does not converge"
    );
    assert!(
        report.state.contains("runs an old version"),
        "{}",
        report.state
    );
}

/// Measured by hand: two 4-cpu nodes, 5 instances of 1 cpu (3/2); n2's agent and instances
/// killed; n1 runs 4 and 1 is unplaced; when n2 came back empty, n1 dropped to 3 at once while
/// n2 still ran nothing. Now nothing that serves stops before the returning node reports.
/// The order that hurt is forced: n2's messages are held back for seconds as it returns, so
/// the controllers see it registered long before it reports (scenario 017 steps the same
/// order by hand).
#[test]
fn a_node_that_returns_empty_takes_nothing_down_on_the_others() {
    let crash = Fault {
        at: sec(20),
        kind: FaultKind::NodeCrash,
        target: 1, // n2
        length: sec(15),
        wipe: true,
    };
    let slow_return = Fault {
        at: sec(35),
        kind: FaultKind::NetworkDelay,
        // n2: the actors are the standard controllers, then n1 and n2.
        target: u32::try_from(standard::all().len() + 1).expect("a few controllers"),
        length: sec(8),
        wipe: false,
    };
    let mut sim = Simulation::builder(desired(&web("example/web:1", 5, "")))
        .seed(3)
        .node(NodeSpec::new(
            "n1",
            Cpu::from_millis(4_000),
            Memory::from_bytes(8 << 30),
        ))
        .node(NodeSpec::new(
            "n2",
            Cpu::from_millis(4_000),
            Memory::from_bytes(8 << 30),
        ))
        .lease_ttl(sec(3))
        .start_delay(sec(5)) // slow starts (image pulls) are what made the dip last
        .schedule(Schedule {
            faults: vec![crash, slow_return],
        })
        .build();
    sim.run_until(sec(19));
    let before = sim.snapshot().expect("snapshot");
    assert_eq!(ready(&before), 5);
    sim.run_until(sec(34));
    let during = sim.snapshot().expect("snapshot");
    assert_eq!(
        during.spread("web").get("n1"),
        Some(&4),
        "n1 took what fits"
    );
    assert_eq!(ready(&during), 4);
    assert_eq!(sim.running("web"), 4);
    // What really runs, not what the store says: the bug trusted the store's old reports.
    let mut lowest = usize::MAX;
    while sim.now() < sec(60) && sim.violation().is_none() {
        sim.run_until(sim.now() + Duration::from_millis(10));
        lowest = lowest.min(sim.running("web"));
    }
    assert!(sim.violation().is_none(), "{:?}", sim.violation());
    assert_eq!(lowest, 4, "no dip below what ran while n2 was away");
    let report = sim.run();
    assert!(report.passed(), "{}", report.explain());
}

/// Measured by hand: the store gone for 60 s, longer than the 5 s lease TTL: every node looked
/// dead at once, every instance got a replacement, and one agent rejoined only after its
/// backoff had grown past 30 s, so its instances were duplicated: 6 running for 4. Now no
/// instance is replaced while most nodes look dead at once (the control plane, not the nodes,
/// is the likelier one cut off), every agent rejoins within a third of its lease TTL, and the
/// few replacements made while the last nodes rejoin are stopped again as surplus.
#[test]
fn an_outage_longer_than_the_lease_replaces_nothing_while_most_nodes_look_dead() {
    let mut sim = Simulation::builder(desired(&web("example/web:1", 8, "")))
        .seed(5)
        .nodes(4, Cpu::from_millis(4_000), Memory::from_bytes(8 << 30))
        .lease_ttl(sec(5))
        .outage(sec(20), sec(60))
        .build();
    sim.run_until(sec(19));
    let ids = |s: &Snapshot| -> std::collections::BTreeSet<String> {
        s.cluster()
            .instances_of("web")
            .map(|i| i.id.clone())
            .collect()
    };
    let before = ids(&sim.snapshot().expect("snapshot"));
    assert_eq!(before.len(), 8);
    // Every instance record that exists at any moment the control plane is back while fewer
    // than half the nodes have rejoined.
    let nodes = ["n1", "n2", "n3", "n4"];
    let mut seen = before.clone();
    while sim.now() < sec(80) + sec(5) / 3 + Duration::from_millis(500) && sim.violation().is_none()
    {
        sim.run_until(sim.now() + Duration::from_millis(10));
        let now = sim.snapshot().expect("snapshot");
        if nodes.iter().filter(|n| now.node_alive(n)).count() * 2 < nodes.len() {
            seen.extend(ids(&now));
        }
    }
    let after = sim.snapshot().expect("snapshot");
    for node in nodes {
        assert!(
            after.node_alive(node),
            "{node} rejoined within a third of its lease TTL"
        );
    }
    assert_eq!(
        seen, before,
        "nothing was replaced while most nodes looked dead"
    );
    assert!(sim.violation().is_none(), "{:?}", sim.violation());
    let report = sim.run();
    assert!(report.passed(), "{}", report.explain());
    let kept = report
        .state
        .lines()
        .find(|l| l.contains("status/service/web"))
        .unwrap_or_default()
        .to_owned();
    assert!(kept.contains(r#""running":8"#), "{kept}");
}

/// Measured by hand: with two 4-cpu nodes and 5 instances of 1 cpu applied while only n1 was
/// up, the spread stayed 4/1 (n1 took what fitted, n2 the rest) and never evened out. Now the
/// scheduler suggests moves and the instance controller performs them new before old: the
/// spread ends 3/2, and neither what runs nor what is ready ever drops below 5.
#[test]
fn a_late_node_gets_its_share_without_a_dip() {
    let node = |name| NodeSpec::new(name, Cpu::from_millis(4_000), Memory::from_bytes(8 << 30));
    let mut sim = Simulation::builder(desired(&web("example/web:1", 5, "")))
        .seed(7)
        .node(node("n1"))
        .late_node(node("n2"), sec(20))
        .start_delay(sec(3))
        .build();
    sim.run_until(sec(19));
    let before = sim.snapshot().expect("snapshot");
    assert_eq!(
        before.spread("web").get("n1"),
        Some(&4),
        "n1 took what fits"
    );
    // n2 registers and takes the fifth: 4/1, all five ready. From then on, watch for a dip.
    let mut lowest: Option<(usize, usize)> = None;
    let mut moved = false;
    while sim.now() < sec(60) && sim.violation().is_none() {
        sim.run_until(sim.now() + Duration::from_millis(10));
        let snapshot = sim.snapshot().expect("snapshot");
        let now = (sim.running("web"), ready(&snapshot));
        lowest = match lowest {
            None if now.1 == 5 => Some(now),
            None => None,
            Some(low) => Some((low.0.min(now.0), low.1.min(now.1))),
        };
        moved |= snapshot.spread("web").get("n2") == Some(&2);
    }
    assert!(moved, "an instance moved to n2");
    assert!(sim.violation().is_none(), "{:?}", sim.violation());
    assert_eq!(lowest, Some((5, 5)), "no dip in running or ready instances");
    let after = sim.snapshot().expect("snapshot");
    let spread: Vec<usize> = after.spread("web").into_values().collect();
    assert_eq!(spread, [3, 2], "the spread a clean start chooses");
    let report = sim.run();
    assert!(report.passed(), "{}", report.explain());
}

/// Measured by hand: a service whose id holds `.init` (`shop.initial`, `team/initdb`) was taken
/// for an init step of another service and stopped as an orphan on every pass; and an init
/// step never ended on the simulator, so a service with one never ran. Both now converge under
/// every fault, with nothing stopped that the control plane did not ask for.
#[test]
fn names_with_init_and_init_steps_converge_under_faults() {
    let text = "service shop.initial {\n  image example/shop:1\n  instances 3\n}\n\
        service team/initdb {\n  image example/db:1\n  instances 2\n  init {\n    exec \"true\"\n    timeout 5s\n    retry 2\n  }\n}\n";
    for seed in 0..20 {
        let report = Simulation::builder(desired(text))
            .seed(seed)
            .nodes(3, Cpu::from_millis(4_000), Memory::from_bytes(8 << 30))
            .faults(ccattler_testkit::sim::FaultRates::default())
            .run();
        assert!(report.passed(), "seed {seed}: {}", report.explain());
    }
}

/// A start that takes longer than the lease TTL (a big image to pull, 25 s against a 10 s
/// lease) holds back only its own instances: meanwhile every node keeps its lease (none
/// registers again), and the other service is started, its crashed instances restarted, all
/// ready long before the slow ones run.
#[test]
fn a_start_longer_than_the_lease_holds_back_only_its_own_instance() {
    let text = "service big {\n  image example/big:1\n  instances 2\n}\n\
        service web {\n  image example/web:1\n  instances 6\n  expose 80 http\n  readiness {\n    tcp\n    every 1s\n  }\n}\n";
    let schedule = Schedule {
        faults: (0..4)
            .map(|i| Fault {
                at: sec(6 + 3 * i),
                kind: FaultKind::ProcessCrash,
                target: i as u32,
                length: Duration::ZERO,
                wipe: false,
            })
            .collect(),
    };
    let mut sim = Simulation::builder(desired(text))
        .seed(5)
        .nodes(2, Cpu::from_millis(8_000), Memory::from_bytes(8 << 30))
        .slow_image("example/big:1", sec(25))
        .schedule(schedule)
        .build();
    sim.run_until(sec(4));
    let registered = |sim: &Simulation| {
        sim.snapshot()
            .expect("snapshot")
            .cluster()
            .registered
            .clone()
    };
    let first = registered(&sim);
    assert_eq!(first.len(), 2, "both nodes registered");
    sim.run_until(sec(20));
    assert!(sim.violation().is_none(), "{:?}", sim.violation());
    let snapshot = sim.snapshot().expect("snapshot");
    let web_ready = snapshot
        .cluster()
        .instances_of("web")
        .filter(|i| i.node_alive && i.is_ready())
        .count();
    assert_eq!(
        web_ready, 6,
        "web ready, crashes restarted, while big still starts"
    );
    assert_eq!(sim.running("big"), 0, "big is still starting");
    assert_eq!(
        registered(&sim),
        first,
        "no node lost its lease or registered again"
    );
    sim.run_until(sec(40));
    assert_eq!(sim.running("big"), 2, "big runs once its starts are over");
    assert!(sim.violation().is_none(), "{:?}", sim.violation());
}

/// Measured by hand: a stateful service under process and node crashes ran one identity on two
/// nodes at once (the instance controller forgot a stopped identity on a report from before the
/// stop, and created it again while its agent was restarting it). Now an identity is freed only
/// by a report written after its agent saw the stop, and a new incarnation never takes the old
/// one's report: over many seeds of crashes, runs-once holds and the service converges.
#[test]
fn a_stateful_service_under_node_crashes_never_runs_an_identity_twice() {
    let text = "service jobs {\n  image example/jobs:1\n  instances 7\n  liveness {\n    exec \"true\"\n    every 1s\n  }\n  stateful\n}\n\
        service web {\n  image example/web:1\n  instances 6\n  restart on_failure\n}\n";
    let rates = ccattler_testkit::sim::FaultRates::none()
        .with(FaultKind::NodeCrash, 0.05)
        .with(FaultKind::ProcessCrash, 0.3)
        .with(FaultKind::NetworkDelay, 0.05);
    for seed in 0..40 {
        let report = Simulation::builder(desired(text))
            .seed(seed)
            .nodes(4, Cpu::from_millis(4_000), Memory::from_bytes(8 << 30))
            .faults(rates.clone())
            .run();
        assert!(report.passed(), "seed {seed}: {}", report.explain());
    }
}

/// Found by `cca chaos --generate` (seed 779766364): a service with `max_unavailable 2` deleted
/// in the middle of a rolling update. The checker then judged the rollout under the default
/// policy (`max_unavailable 1`, the spec being gone) and reported 2 instances down as a broken
/// floor. A deleted service is stopped whole: no rollout of it is held to a floor.
#[test]
fn a_service_deleted_during_its_rollout_is_not_held_to_a_floor() {
    let policy = "  update {\n    max_unavailable 2\n    max_extra 0\n  }\n";
    let other = "service other {\n  image example/other:1\n  instances 1\n}\n";
    let first = format!("{}{other}", web("example/web:1", 12, policy));
    let second = format!("{}{other}", web("example/web:2", 12, policy));
    for seed in 0..10 {
        let report = Simulation::builder(desired(&first))
            .seed(seed)
            .nodes(3, Cpu::from_millis(8_000), Memory::from_bytes(8 << 30))
            .then_apply(sec(20), desired(&second))
            .then_apply(
                sec(20) + Duration::from_millis(300 + 100 * seed),
                desired(other),
            )
            .run();
        assert!(report.passed(), "seed {seed}: {}", report.explain());
    }
}
