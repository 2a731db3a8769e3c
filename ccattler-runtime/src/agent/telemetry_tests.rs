//! Step tests of the agent's telemetry on virtual time: one record per node, written when use
//! moves enough and at most once an interval, never while instances idle, and never through the
//! instances' observations.

use std::time::Duration;

use ccattler_core::schema::{self, Cpu, DesiredState, Memory, NodeTelemetry};
use ccattler_core::{Fact, FactStore};
use futures_util::FutureExt;

use super::machine_tests::{Step, running, service};
use crate::simulator::{Demand, Load, SimulatorRuntime};

fn telemetry(step: &Step) -> Option<(NodeTelemetry, Fact)> {
    let key = schema::keys::telemetry(step.machine.node()).expect("key");
    let fact = step
        .store
        .get(&key)
        .now_or_never()
        .expect("ready")
        .expect("get")?;
    Some((schema::decode(&fact).expect("a telemetry record"), fact))
}

fn observed_revision(step: &Step, id: &str) -> u64 {
    let key = schema::keys::observed_instance(step.machine.node(), id).expect("key");
    let fact = step.store.get(&key).now_or_never().expect("ready");
    fact.expect("get").expect("an observation").mod_revision.0
}

fn cpu_of(record: &NodeTelemetry, id: &str) -> u64 {
    record.usage[id].cpu.millis()
}

#[test]
fn telemetry_follows_use_that_moves_and_writes_nothing_while_it_idles() {
    let load = Load::new();
    let mut step = Step::with_runtime(SimulatorRuntime::new().with_load(&load));
    step.settle();
    let web = service("web", &[]);
    step.place("web-1", &web, DesiredState::Running);
    step.place("web-2", &web, DesiredState::Running);
    step.advance_until("both run", |s| running(s, "web-1") && running(s, "web-2"));
    step.advance(Duration::from_secs(10));
    let (record, fact) = telemetry(&step).expect("written within an interval");
    assert_eq!(record.instances, 2);
    assert_eq!((cpu_of(&record, "web-1"), record.cpu), (0, Cpu::ZERO));
    assert_eq!(record.usage["web-2"].service, "web");
    assert_eq!(
        record.memory,
        Memory::from_bytes(32 << 20),
        "16Mi each, the default"
    );
    assert_eq!(fact.lease.map(|l| l.0), step.machine.lease().map(|l| l.0));

    // Idle: nothing more is written, however long.
    let writes = step.count("write telemetry");
    step.advance(Duration::from_secs(30));
    assert_eq!(
        step.count("write telemetry"),
        writes,
        "idle instances cost no write"
    );

    // Load comes: written once the interval allows, the observations left alone.
    let observed = observed_revision(&step, "web-1");
    let demand = |cpu| Demand {
        cpu: Cpu::from_millis(cpu),
        memory: Memory::from_bytes(64 << 20),
    };
    load.set("web", demand(1000));
    step.advance(Duration::from_secs(10));
    let (record, _) = telemetry(&step).expect("written");
    assert_eq!(
        (cpu_of(&record, "web-1"), cpu_of(&record, "web-2")),
        (500, 500)
    );
    assert_eq!(record.cpu, Cpu::from_millis(1000));
    assert_eq!(step.count("write telemetry"), writes + 1);
    assert_eq!(
        observed_revision(&step, "web-1"),
        observed,
        "use is not an observation"
    );

    // A move under a tenth is not worth a write.
    load.set("web", demand(1080));
    step.advance(Duration::from_secs(20));
    assert_eq!(step.count("write telemetry"), writes + 1);
    assert_eq!(cpu_of(&telemetry(&step).expect("held").0, "web-1"), 500);

    // One instance goes: the other takes the whole demand, and the record shows one.
    step.unplace("web-2");
    step.advance(Duration::from_secs(11));
    let (record, _) = telemetry(&step).expect("written");
    assert_eq!(record.instances, 1);
    assert_eq!(cpu_of(&record, "web-1"), 1080);
    assert!(!record.usage.contains_key("web-2"));
}

#[test]
fn a_node_that_registers_anew_writes_its_telemetry_again_under_the_new_lease() {
    let mut step = Step::new();
    step.settle();
    step.place("web-1", &service("web", &[]), DesiredState::Running);
    step.advance_until("it runs", |s| running(s, "web-1"));
    step.advance(Duration::from_secs(10));
    let (_, before) = telemetry(&step).expect("written");
    // The lease is revoked (the control plane declared the node dead): the record goes with it.
    let lease = before.lease.expect("attached to the node's lease");
    step.store
        .revoke_lease(lease)
        .now_or_never()
        .expect("ready")
        .expect("revoke");
    assert!(telemetry(&step).is_none());
    step.advance_until("registered anew", |s| {
        s.machine.lease().is_some_and(|l| l != lease)
    });
    step.advance(Duration::from_secs(10));
    let (record, fact) = telemetry(&step).expect("written again");
    assert_eq!(record.instances, 1);
    assert_eq!(fact.lease, step.machine.lease());
}

#[test]
fn volumes_disk_use_is_measured_and_written_with_the_telemetry() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut step = Step::in_dir(dir.path());
    step.settle();
    let mut db = service("db", &[]);
    db.volumes = vec![schema::VolumeMount {
        volume: "data".into(),
        path: "/var/lib/db".into(),
    }];
    step.put(schema::keys::service(&db.name).expect("key"), &db);
    for (id, name, persistent) in [("db-1", "data", true), ("db-2", "data", false)] {
        let assignment = schema::Assignment {
            instance: id.to_owned(),
            service: db.name.clone(),
            node: step.machine.node().to_owned(),
            version: db.version(),
            state: DesiredState::Running,
            ports: Vec::new(),
            volumes: vec![schema::VolumeSpec {
                name: name.into(),
                size: Memory::from_bytes(1 << 30),
                persistent,
            }],
        };
        let key = schema::keys::placement(step.machine.node(), id).expect("key");
        step.put(key, &assignment);
    }
    step.advance_until("both run", |s| running(s, "db-1") && running(s, "db-2"));
    // What the instances write (the simulator writes nothing: the test does, where the
    // agent's mounts put it).
    let kept = dir.path().join("volumes/persistent/data");
    let scratch = dir.path().join("volumes/instance/db-2/data");
    for (at, bytes) in [(&kept, 4 << 20), (&scratch, 2 << 20)] {
        std::fs::create_dir_all(at).expect("dir");
        std::fs::write(at.join("file"), vec![1u8; bytes]).expect("write");
    }
    step.advance(Duration::from_secs(10));
    let (record, _) = telemetry(&step).expect("written");
    assert!(record.volumes["data"].bytes() >= 4 << 20, "{record:?}");
    assert!(record.usage["db-2"].disk.bytes() >= 2 << 20, "{record:?}");
    assert!(
        record.usage["db-1"].disk.is_zero(),
        "its data is the volume's"
    );

    // Growth below a tenth costs no write; the data doubling does.
    let writes = step.count("write telemetry");
    std::fs::write(kept.join("more"), vec![1u8; 256 << 10]).expect("write");
    step.advance(Duration::from_secs(10));
    assert_eq!(step.count("write telemetry"), writes, "under a tenth");
    std::fs::write(kept.join("most"), vec![1u8; 4 << 20]).expect("write");
    step.advance(Duration::from_secs(10));
    assert_eq!(step.count("write telemetry"), writes + 1);
    let (record, _) = telemetry(&step).expect("written");
    assert!(record.volumes["data"].bytes() >= 8 << 20, "{record:?}");

    // The instances go: the persistent data stays, and so does its report.
    step.unplace("db-1");
    step.unplace("db-2");
    std::fs::remove_dir_all(dir.path().join("volumes/instance")).expect("gone with db-2");
    step.advance(Duration::from_secs(20));
    let (record, _) = telemetry(&step).expect("written");
    assert!(record.usage.is_empty());
    assert!(
        record.volumes["data"].bytes() >= 8 << 20,
        "kept: {record:?}"
    );
}

#[test]
fn a_node_without_volumes_measures_once() {
    let mut step = Step::new();
    step.settle();
    step.place("web-1", &service("web", &[]), DesiredState::Running);
    step.advance_until("it runs", |s| running(s, "web-1"));
    step.advance(Duration::from_secs(60));
    assert_eq!(step.count("measure volumes"), 1, "the first round only");
}
