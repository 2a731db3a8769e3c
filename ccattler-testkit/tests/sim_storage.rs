//! Volumes in the seeded simulation: real controllers and agents, with the volume-attached
//! invariant checked at every start (a persistent volume's instance starts only on the node
//! its data is on, and never while another instance with it runs). A persistent volume's
//! instance waits for its node through a crash instead of starting elsewhere; one that is not
//! persistent is replaced elsewhere; a service that mounts a volume rolls out stop-first; each
//! identity of a stateful service keeps a volume of its own; a node that filled up while its
//! volume had no instance makes room for the volume's next one.

use std::time::Duration;

use ccattler_controllers::lang::{self, DesiredFacts, SourceFile};
use ccattler_core::schema::{self, Cpu, Memory, VolumeAttachment};
use ccattler_testkit::sim::{Fault, FaultKind, Schedule, Simulation};

fn desired(text: &str) -> DesiredFacts {
    lang::check(&SourceFile::new("db.cca", text))
        .expect("a valid document")
        .to_facts()
}

fn sec(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// `db`, mounting `data` (5Gi), with `extra` lines in the service.
fn db(persistent: bool, extra: &str) -> String {
    format!(
        "service db {{
    image example/db:1
    resources {{
        cpu 100m
        memory 64Mi
    }}
    volume data /var/lib/db
    {extra}
}}

volume data {{
    size 5Gi
    persistent {persistent}
}}
"
    )
}

fn builder(text: &str) -> ccattler_testkit::sim::SimulationBuilder {
    Simulation::builder(desired(text)).seed(11).nodes(
        3,
        Cpu::from_millis(4_000),
        Memory::from_bytes(8 << 30),
    )
}

fn attachment(sim: &Simulation, name: &str) -> Option<VolumeAttachment> {
    let snapshot = sim.snapshot().expect("a snapshot");
    let key = schema::keys::volume_attachment(name).expect("key");
    snapshot
        .view()
        .get(key.as_str())
        .and_then(|f| schema::decode(f).ok())
}

/// The nodes `db`'s instances are placed on.
fn db_nodes(sim: &Simulation) -> Vec<String> {
    let snapshot = sim.snapshot().expect("a snapshot");
    snapshot
        .instances("db")
        .iter()
        .filter_map(|i| i.node.clone())
        .collect()
}

/// The index (among n1, n2, n3) of the node `db` first goes to.
fn first_node(text: &str) -> (String, u32) {
    let mut sim = builder(text).build();
    sim.run_until(sec(10));
    let node = attachment(&sim, "data").expect("attached").node;
    let index = node.trim_start_matches('n').parse::<u32>().expect("n{k}") - 1;
    (node, index)
}

fn crash(target: u32, at: u64, length: u64) -> Schedule {
    Schedule {
        faults: vec![Fault {
            at: sec(at),
            kind: FaultKind::NodeCrash,
            target,
            length: sec(length),
            wipe: false,
        }],
    }
}

#[test]
fn a_persistent_volume_waits_for_its_node_through_a_crash() {
    let text = db(true, "");
    let (node, index) = first_node(&text);
    let mut sim = builder(&text).schedule(crash(index, 15, 40)).build();
    sim.run_until(sec(14));
    assert_eq!(db_nodes(&sim), vec![node.clone()]);
    // Down for 40 s: the lost instance holds the volume (it may still run there), so its
    // replacement waits, unplaced, and nothing is placed anywhere else meanwhile.
    for t in (20..55).step_by(5) {
        sim.run_until(sec(t));
        assert!(sim.violation().is_none(), "{:?}", sim.violation());
        let elsewhere: Vec<String> = db_nodes(&sim).into_iter().filter(|n| *n != node).collect();
        assert!(elsewhere.is_empty(), "placed on {elsewhere:?} at {t} s");
    }
    let snapshot = sim.snapshot().expect("a snapshot");
    let waiting = snapshot
        .view()
        .scan(schema::UNSCHEDULABLE)
        .filter_map(|f| schema::decode::<schema::Unschedulable>(f).ok())
        .map(|u| u.reason)
        .collect::<Vec<_>>();
    assert!(
        waiting
            .iter()
            .any(|r| r.starts_with("volume data is attached to instance")
                && r.contains(&format!("on node {node}"))),
        "{waiting:?}"
    );
    // Back: db runs there again, with the same data.
    sim.run_until(sec(90));
    assert!(sim.violation().is_none(), "{:?}", sim.violation());
    let snapshot = sim.snapshot().expect("a snapshot");
    assert!(snapshot.is_converged(), "{:?}", snapshot.gaps());
    assert_eq!(db_nodes(&sim), vec![node.clone()]);
    assert_eq!(attachment(&sim, "data").map(|a| a.node), Some(node));
}

#[test]
fn a_volume_that_is_not_persistent_is_replaced_elsewhere_after_a_crash() {
    let text = db(false, "");
    let (node, index) = first_node(&text);
    let mut sim = builder(&text).schedule(crash(index, 15, 60)).build();
    sim.run_until(sec(50));
    assert!(sim.violation().is_none(), "{:?}", sim.violation());
    let running: Vec<String> = sim
        .snapshot()
        .expect("a snapshot")
        .instances("db")
        .iter()
        .filter(|i| i.is_ready())
        .filter_map(|i| i.node.clone())
        .collect();
    assert_eq!(running.len(), 1, "{running:?}");
    assert_ne!(running[0], node, "replaced on another node");
    assert_eq!(
        attachment(&sim, "data").map(|a| a.node),
        Some(running[0].clone())
    );
    sim.run_until(sec(120));
    assert!(sim.violation().is_none(), "{:?}", sim.violation());
    assert!(sim.snapshot().expect("a snapshot").is_converged());
}

#[test]
fn a_service_with_a_volume_rolls_out_stop_first() {
    let text = db(true, "");
    let next = text.replace("example/db:1", "example/db:2");
    let mut sim = builder(&text).then_apply(sec(20), desired(&next)).build();
    sim.run_until(sec(60));
    assert!(sim.violation().is_none(), "{:?}", sim.violation());
    let snapshot = sim.snapshot().expect("a snapshot");
    assert!(snapshot.is_converged(), "{:?}", snapshot.gaps());
    let instances = snapshot.instances("db");
    assert_eq!(instances.len(), 1);
    let report = instances[0].report().expect("a report");
    assert_eq!(report.image, "example/db:2");
}

#[test]
fn each_identity_of_a_stateful_service_keeps_a_volume_of_its_own() {
    let text = db(true, "stateful\n    instances 3");
    let next = text.replace("example/db:1", "example/db:2");
    let mut sim = builder(&text).then_apply(sec(20), desired(&next)).build();
    sim.run_until(sec(15));
    let before: Vec<(String, String)> = (0..3)
        .map(|k| {
            let a = attachment(&sim, &format!("data@{k}")).expect("attached");
            (a.node, a.instance.unwrap_or_default())
        })
        .collect();
    assert_eq!(before[1].1, "db-1");
    sim.run_until(sec(90));
    assert!(sim.violation().is_none(), "{:?}", sim.violation());
    let snapshot = sim.snapshot().expect("a snapshot");
    assert!(snapshot.is_converged(), "{:?}", snapshot.gaps());
    for (k, (node, _)) in before.iter().enumerate() {
        let id = format!("db-{k}");
        let placed = snapshot
            .instances("db")
            .iter()
            .find(|i| i.id == id)
            .and_then(|i| i.node.clone());
        assert_eq!(placed.as_ref(), Some(node), "{id} after its update");
    }
}

/// `web`: twelve stateless instances of 200m.
const WEB: &str = "service web {
    image example/web:1
    instances 12
    resources {
        cpu 200m
        memory 64Mi
    }
}
";

#[test]
fn a_node_filled_while_its_volume_waited_makes_room_for_it() {
    // db (500m) and twelve web (200m) on three nodes of 1 cpu: 2,900m of 3,000m.
    let with_db = format!("{}\n{WEB}", db(true, "").replace("100m", "500m"));
    let nodes = |b: ccattler_testkit::sim::SimulationBuilder| {
        b.seed(5)
            .nodes(3, Cpu::from_millis(1_000), Memory::from_bytes(8 << 30))
    };
    // db deleted, its volume still declared: its data stays on its node, which web then
    // fills (4 of 1 cpu each)...
    let without_db = format!("{WEB}\nvolume data {{\n    size 5Gi\n    persistent true\n}}\n");
    let mut sim = nodes(Simulation::builder(desired(&with_db)))
        .then_apply(sec(20), desired(&without_db))
        // ...and declared again: it can only go back there.
        .then_apply(sec(60), desired(&with_db))
        .build();
    sim.run_until(sec(15));
    let node = attachment(&sim, "data").expect("attached").node;
    sim.run_until(sec(58));
    let snapshot = sim.snapshot().expect("a snapshot");
    assert!(snapshot.is_converged(), "{:?}", snapshot.gaps());
    let web_there = |sim: &Simulation| {
        let snapshot = sim.snapshot().expect("a snapshot");
        let instances = snapshot.instances("web");
        instances
            .iter()
            .filter(|i| i.node.as_ref() == Some(&node))
            .count()
    };
    assert_eq!(web_there(&sim), 4, "web spread evenly, over db's node too");

    // web instances are moved off that node, new before old, until db fits there.
    sim.run_until(sec(150));
    assert!(sim.violation().is_none(), "{:?}", sim.violation());
    let snapshot = sim.snapshot().expect("a snapshot");
    assert!(snapshot.is_converged(), "{:?}", snapshot.gaps());
    assert_eq!(db_nodes(&sim), vec![node.clone()]);
    assert_eq!(web_there(&sim), 2);
    assert_eq!(snapshot.instances("web").len(), 12);
}
