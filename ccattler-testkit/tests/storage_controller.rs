//! The scheduler's volumes, as plans: an instance that mounts a volume is placed where the
//! node's storage takes the volume, with the volume's attachment ahead of its placement; a
//! persistent volume stays attached to its node once its instance is gone, so the next instance
//! goes there or nowhere (and says why); a volume that is not persistent is released with its
//! instance; a volume another instance holds, one larger than any node's storage, and one two
//! instances want: each an unplaced reason, never a silent placement elsewhere.

use ccattler_controllers::standard::SchedulerController;
use ccattler_core::schema::{
    self, Assignment, DesiredInstance, DesiredState, Memory, NodeStatus, ServiceSpec,
    Unschedulable, VolumeAttachment, VolumeMount, VolumeSpec,
};
use ccattler_testkit::harness::{Harness, HarnessError};

fn gib(n: u64) -> Memory {
    Memory::from_bytes(n << 30)
}

fn service(name: &str, volume: &str) -> ServiceSpec {
    ServiceSpec {
        name: name.into(),
        image: format!("example/{name}:1"),
        instances: 1,
        volumes: vec![VolumeMount {
            volume: volume.into(),
            path: "/data".into(),
        }],
        ..ServiceSpec::default()
    }
}

fn volume(name: &str, size: u64, persistent: bool) -> VolumeSpec {
    VolumeSpec {
        name: name.into(),
        size: gib(size),
        persistent,
    }
}

fn node(name: &str, storage: u64) -> NodeStatus {
    NodeStatus {
        name: name.into(),
        cpu: "4".parse().expect("cpu"),
        memory: gib(8),
        architecture: "amd64".into(),
        address: name.into(),
        storage: gib(storage),
        ..NodeStatus::default()
    }
}

fn instance(service: &ServiceSpec) -> DesiredInstance {
    DesiredInstance {
        service: service.name.clone(),
        version: service.version(),
        ordinal: None,
        state: DesiredState::Running,
        replaces: None,
    }
}

/// `db` (persistent `data`, 5Gi) and `cache` (`scratch`, 2Gi, not persistent), one instance
/// each, on n1 (4Gi of storage) and n2 (10Gi).
fn cluster() -> Harness {
    let db = service("db", "data");
    let cache = service("cache", "scratch");
    Harness::new(SchedulerController::new())
        .json("desired/volume/data", &volume("data", 5, true))
        .json("desired/volume/scratch", &volume("scratch", 2, false))
        .json("desired/service/db", &db)
        .json("desired/service/cache", &cache)
        .json("desired/instance/db-a", &instance(&db))
        .json("desired/instance/cache-a", &instance(&cache))
        .json("observed/node/n1", &node("n1", 4))
        .json("observed/node/n2", &node("n2", 10))
        .fact("lease/node/n1", "n1")
        .fact("lease/node/n2", "n2")
}

fn attachment(harness: &Harness, volume: &str) -> Option<VolumeAttachment> {
    let key = schema::keys::volume_attachment(volume).expect("key");
    harness
        .get(key.as_str())
        .map(|f| schema::decode(f).expect("an attachment"))
}

fn reason(harness: &Harness, id: &str) -> Option<String> {
    let key = schema::keys::unschedulable(id).expect("key");
    harness
        .get(key.as_str())
        .map(|f| schema::decode::<Unschedulable>(f).expect("a reason").reason)
}

fn placed_on(harness: &Harness, id: &str) -> Option<String> {
    let key = schema::keys::placed(id).expect("key");
    harness
        .get(key.as_str())
        .map(|f| schema::decode::<String>(f).expect("a node"))
}

#[test]
fn the_first_placement_attaches_the_volume_where_the_storage_takes_it() -> Result<(), HarnessError>
{
    let mut harness = cluster();
    let plan = harness.run()?;
    insta::assert_snapshot!(plan);
    // data (5Gi) fits only n2; scratch then fits n1 (4Gi) better than what n2 has left.
    assert_eq!(placed_on(&harness, "db-a").as_deref(), Some("n2"));
    let data = attachment(&harness, "data").expect("data attached");
    assert_eq!(
        (
            data.node.as_str(),
            data.instance.as_deref(),
            data.persistent
        ),
        ("n2", Some("db-a"), true)
    );
    let node = placed_on(&harness, "cache-a").expect("cache-a placed");
    let scratch = attachment(&harness, "scratch").expect("scratch attached");
    assert_eq!((scratch.node, scratch.persistent), (node.clone(), false));
    let key = schema::keys::placement(&node, "cache-a").expect("key");
    let placement: Assignment =
        schema::decode(harness.get(key.as_str()).expect("placed")).expect("an assignment");
    assert_eq!(placement.volumes, vec![volume("scratch", 2, false)]);
    Ok(())
}

#[test]
fn a_persistent_volume_keeps_its_node_and_its_next_instance_goes_there_or_nowhere()
-> Result<(), HarnessError> {
    let mut harness = cluster();
    harness.run()?;
    // Both instances go (their records forgotten): data stays on n2, scratch is released.
    let mut harness = harness
        .without("desired/instance/db-a")
        .without("desired/instance/cache-a");
    insta::assert_snapshot!("instances_gone", harness.run()?);
    let data = attachment(&harness, "data").expect("data still attached");
    assert_eq!((data.node.as_str(), data.instance), ("n2", None));
    assert!(attachment(&harness, "scratch").is_none());

    // The next instance of db, with n2 down: it waits for n2 and says so.
    let db = service("db", "data");
    let mut harness = harness
        .json("desired/instance/db-b", &instance(&db))
        .without("lease/node/n2");
    harness.run()?;
    assert_eq!(placed_on(&harness, "db-b"), None);
    assert_eq!(
        reason(&harness, "db-b").as_deref(),
        Some("0/2 nodes can run it: 1 is not alive, 1 is not n2, where volume data is attached")
    );
    // n2 is back: db-b goes there, and holds data.
    let mut harness = harness.fact("lease/node/n2", "n2");
    harness.run()?;
    assert_eq!(placed_on(&harness, "db-b").as_deref(), Some("n2"));
    assert_eq!(
        attachment(&harness, "data").and_then(|a| a.instance),
        Some("db-b".into())
    );
    assert_eq!(reason(&harness, "db-b"), None);
    Ok(())
}

#[test]
fn a_volume_held_too_large_or_wanted_twice_is_an_unplaced_reason() -> Result<(), HarnessError> {
    let db = service("db", "data");
    let big = service("big", "huge");
    let mut harness = cluster()
        .json("desired/volume/huge", &volume("huge", 50, true))
        .json("desired/service/big", &big)
        .json("desired/instance/big-a", &instance(&big))
        // A second record of db beside db-a (written by hand: the language allows one).
        .json("desired/instance/db-b", &instance(&db));
    // The first pass: db-a (first by id) gets data, db-b is told another wants it.
    let first = harness.plan()?.to_string();
    assert!(
        first.contains(
            "volume data is wanted by instance db-a too: a volume is attached to one instance \
             at a time"
        ),
        "{first}"
    );
    harness.run()?;
    assert_eq!(
        reason(&harness, "big-a").as_deref(),
        Some("0/2 nodes can run it: 2 have too little storage for volumes (needs 50Gi)")
    );
    assert_eq!(placed_on(&harness, "db-a").as_deref(), Some("n2"));
    // Then db-a holds data, and db-b waits for it, by name.
    assert_eq!(
        reason(&harness, "db-b").as_deref(),
        Some(
            "volume data is attached to instance db-a on node n2: a volume is attached to one \
             instance at a time, so this one waits until that one is gone"
        )
    );
    // An undeclared volume (the declaration deleted while an instance waits for it).
    let mut harness = harness.without("desired/volume/huge");
    harness.run()?;
    let why = reason(&harness, "big-a").expect("a reason");
    assert!(why.starts_with("volume huge is not declared"), "{why}");
    Ok(())
}

#[test]
fn a_volume_that_is_not_persistent_is_let_go_by_an_instance_on_a_dead_node()
-> Result<(), HarnessError> {
    let mut harness = cluster();
    harness.run()?;
    let node = placed_on(&harness, "cache-a").expect("placed");
    let other = if node == "n1" { "n2" } else { "n1" };
    // Its node dies; the instance controller replaces cache-a with cache-b.
    let cache = service("cache", "scratch");
    let mut harness = harness
        .without(format!("lease/node/{node}"))
        .json("desired/instance/cache-b", &instance(&cache));
    harness.run()?;
    assert_eq!(placed_on(&harness, "cache-b").as_deref(), Some(other));
    let scratch = attachment(&harness, "scratch").expect("attached");
    assert_eq!(
        (scratch.node.as_str(), scratch.instance.as_deref()),
        (other, Some("cache-b"))
    );
    Ok(())
}

#[test]
fn each_identity_of_a_stateful_service_has_a_volume_of_its_own() -> Result<(), HarnessError> {
    let db = ServiceSpec {
        instances: 2,
        stateful: true,
        ..service("db", "data")
    };
    let ordinal = |k: u32| DesiredInstance {
        ordinal: Some(k),
        ..instance(&db)
    };
    let mut harness = Harness::new(SchedulerController::new())
        .json("desired/volume/data", &volume("data", 3, true))
        .json("desired/service/db", &db)
        .json("desired/instance/db-0", &ordinal(0))
        .json("desired/instance/db-1", &ordinal(1))
        .json("observed/node/n1", &node("n1", 4))
        .json("observed/node/n2", &node("n2", 4))
        .fact("lease/node/n1", "n1")
        .fact("lease/node/n2", "n2");
    harness.run()?;
    // 3Gi each on nodes of 4Gi: one identity per node, each with its own data.
    let zero = attachment(&harness, "data@0").expect("data@0 attached");
    let one = attachment(&harness, "data@1").expect("data@1 attached");
    assert_ne!(zero.node, one.node);
    assert_eq!(zero.instance.as_deref(), Some("db-0"));
    assert_eq!(placed_on(&harness, "db-1"), Some(one.node.clone()));
    assert!(attachment(&harness, "data").is_none());
    // db-0 goes and comes back as the same identity: its data is where it was.
    let mut harness = harness.without("desired/instance/db-0");
    harness.run()?;
    let mut harness = harness.json("desired/instance/db-0", &ordinal(0));
    harness.run()?;
    assert_eq!(placed_on(&harness, "db-0"), Some(zero.node));
    Ok(())
}

/// `db`, stateful, `count` identities of 5Gi of memory each with a persistent volume `data`;
/// `data@{absent}` attached to n1 with no instance (its owner between a stop and a start);
/// nodes of 8Gi of memory, n2 with a little in use already (so n1 is the emptier).
fn absent_owner(count: u32, absent: u32) -> (Harness, impl Fn(u32) -> DesiredInstance) {
    let db = ServiceSpec {
        instances: count,
        stateful: true,
        resources: schema::Resources {
            cpu: "1".parse().expect("cpu"),
            memory: gib(5),
        },
        ..service("db", "data")
    };
    let web = ServiceSpec {
        volumes: Vec::new(),
        ..service("web", "none")
    };
    let ordinal = {
        let db = db.clone();
        move |k: u32| DesiredInstance {
            ordinal: Some(k),
            ..instance(&db)
        }
    };
    let kept = VolumeAttachment {
        volume: format!("data@{absent}"),
        node: "n1".into(),
        instance: None,
        size: gib(1),
        persistent: true,
    };
    let in_use = Assignment {
        instance: "web-a".into(),
        service: "web".into(),
        node: "n2".into(),
        version: web.version(),
        state: DesiredState::Running,
        ports: Vec::new(),
        volumes: Vec::new(),
    };
    let harness = Harness::new(SchedulerController::new())
        .json("desired/volume/data", &volume("data", 1, true))
        .json("desired/service/db", &db)
        .json("desired/service/web", &web)
        .json("desired/instance/web-a", &instance(&web))
        .json("placement/n2/web-a", &in_use)
        .json(format!("volume/attachment/data@{absent}"), &kept)
        .json("observed/node/n1", &node("n1", 10))
        .json("observed/node/n2", &node("n2", 10))
        .fact("lease/node/n1", "n1")
        .fact("lease/node/n2", "n2");
    (harness, ordinal)
}

#[test]
fn the_room_a_volume_owner_comes_back_to_is_not_taken_while_it_is_away() -> Result<(), HarnessError>
{
    // db-0 is away; db-1, attached nowhere yet, would go to the emptier n1, where db-0 and
    // db-1 cannot both run: it goes to n2.
    let (harness, ordinal) = absent_owner(2, 0);
    let mut harness = harness.json("desired/instance/db-1", &ordinal(1));
    harness.run()?;
    assert_eq!(placed_on(&harness, "db-1").as_deref(), Some("n2"));
    // db-0 comes back to its data, and the room kept for it.
    let mut harness = harness.json("desired/instance/db-0", &ordinal(0));
    harness.run()?;
    assert_eq!(placed_on(&harness, "db-0").as_deref(), Some("n1"));
    assert_eq!(
        attachment(&harness, "data@0").and_then(|a| a.instance),
        Some("db-0".to_owned())
    );
    Ok(())
}

#[test]
fn the_data_of_an_identity_scaled_away_keeps_no_room() -> Result<(), HarnessError> {
    // One identity now: data@1's owner is not expected back, so n1 holds nothing for it and
    // db-0 takes the emptier node. Its data stays where it is all the same.
    let (harness, ordinal) = absent_owner(1, 1);
    let mut harness = harness.json("desired/instance/db-0", &ordinal(0));
    harness.run()?;
    assert_eq!(placed_on(&harness, "db-0").as_deref(), Some("n1"));
    let kept = attachment(&harness, "data@1").expect("data@1 kept");
    assert_eq!((kept.node.as_str(), kept.instance), ("n1", None));
    Ok(())
}

#[test]
fn the_room_is_kept_in_the_pass_that_sees_the_owner_go() -> Result<(), HarnessError> {
    // db-0's desired record just went (replaced: stopped first, started again next); its
    // placement and the attachment naming it are still there, and this pass releases both.
    let (harness, ordinal) = absent_owner(2, 0);
    let leaving = VolumeAttachment {
        volume: "data@0".into(),
        node: "n1".into(),
        instance: Some("db-0".into()),
        size: gib(1),
        persistent: true,
    };
    let placed = Assignment {
        instance: "db-0".into(),
        service: "db".into(),
        node: "n1".into(),
        version: ordinal(0).version,
        state: DesiredState::Running,
        ports: Vec::new(),
        volumes: Vec::new(),
    };
    let mut harness = harness
        .json("volume/attachment/data@0", &leaving)
        .json("placement/n1/db-0", &placed)
        .json("desired/instance/db-1", &ordinal(1));
    harness.run()?;
    assert_eq!(placed_on(&harness, "db-1").as_deref(), Some("n2"));
    assert!(harness.get("placement/n1/db-0").is_none());
    let kept = attachment(&harness, "data@0").expect("data@0 kept");
    assert_eq!((kept.node.as_str(), kept.instance), ("n1", None));
    Ok(())
}
