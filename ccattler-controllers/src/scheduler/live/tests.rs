//! The live index against the pure function, on random small clusters patched step by step.

use std::collections::BTreeMap;

use ccattler_core::schema::{Cpu, Memory, NodeStatus, Placement, PortRange, Resources, ZonePolicy};
use proptest::prelude::*;

use super::super::VolumeNeed;
use super::super::fixture::{Fixture, Inst, Result, res};
use super::LiveIndex;

const ZONES: [&str; 3] = ["z1", "z2", "z3"];
const LABELS: [(&str, &str); 3] = [("disk", "ssd"), ("disk", "hdd"), ("gpu", "yes")];
const TAINTS: [&str; 2] = ["dedicated", "gpu"];

fn pick<T: Copy>(items: &[T], mask: u8) -> Vec<T> {
    (0..items.len())
        .filter(|i| mask & (1 << i) != 0)
        .map(|i| items[i])
        .collect()
}

fn labels(mask: u8) -> BTreeMap<String, String> {
    pick(&LABELS, mask)
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The host ports drawn: a small pool, so that ports collide and ranges run out.
const PORTS: [u16; 4] = [80, 100, 101, 102];

/// Node names volumes are attached to (nodes are `n0`, `n1`...; some of these are no node).
const NODES: [&str; 12] = [
    "n0", "n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8", "n9", "n10", "n11",
];

/// The volumes drawn: few, so that two requests mount one.
const VOLUMES: [&str; 3] = ["v0", "v1", "v2"];

/// A request's volume: none, or one of [`VOLUMES`] of 1 to 3 GiB, attached to node `n{i}` or
/// to none.
fn volume(draw: (usize, u64, Option<usize>)) -> Vec<VolumeNeed<'static>> {
    let (v, size, node) = draw;
    VOLUMES
        .get(v)
        .map(|name| VolumeNeed {
            name,
            size: Memory::from_bytes(size << 30),
            node: node.map(|n| NODES[n % NODES.len()]),
        })
        .into_iter()
        .collect()
}

fn volume_draw() -> impl Strategy<Value = (usize, u64, Option<usize>)> {
    (0usize..6, 1u64..=3, prop::option::weighted(0.3, 0usize..12))
}

fn status(i: usize, (cpu, mem, label, taint, zone, arm, range, disk): NodeDraw) -> NodeStatus {
    NodeStatus {
        name: format!("n{i}"),
        cpu: Cpu::from_millis(cpu * 500),
        memory: Memory::from_bytes(mem << 29),
        // A label of its own on every node: no placement names it, so it splits no class.
        labels: labels(label)
            .into_iter()
            .chain([("host".to_string(), format!("n{i}"))])
            .collect(),
        taints: pick(&TAINTS, taint).into_iter().map(String::from).collect(),
        zone: ZONES.get(zone).map(|z| z.to_string()),
        architecture: if arm { "arm64" } else { "amd64" }.into(),
        // 100 to 99 (empty) up to 100 to 103.
        ports: PortRange {
            first: 100,
            last: 99 + range,
        },
        storage: Memory::from_bytes(disk << 30),
        ..NodeStatus::default()
    }
}

type NodeDraw = (u64, u64, u8, u8, usize, bool, u16, u64);

fn node() -> impl Strategy<Value = NodeDraw> {
    (
        0u64..=8,
        0u64..=8,
        0u8..8,
        0u8..2,
        0usize..4,
        prop::bool::weighted(0.2),
        0u16..=4,
        0u64..=4,
    )
}

/// A service's host ports: some of the pool by number, and 0 to 2 of the range.
fn ports() -> impl Strategy<Value = (Vec<u16>, u32)> {
    (0u8..16, 0u32..3).prop_map(|(mask, any)| (pick(&PORTS, mask & 0b1001), any))
}

fn placement() -> impl Strategy<Value = Placement> {
    (0u8..3, 0usize..6, 0u8..8, 0u8..8, 0u8..4).prop_map(|(arch, zone, req, pref, accept)| {
        Placement {
            architecture: [None, Some("amd64"), Some("arm64")][arch as usize].map(String::from),
            zone: match zone {
                0..=2 => None,
                3 => Some(ZonePolicy::Spread),
                z => Some(ZonePolicy::Only(ZONES[z - 4].into())),
            },
            require: labels(req & 0b101),
            prefer: labels(pref),
            accept: pick(&TAINTS, accept)
                .into_iter()
                .map(String::from)
                .collect(),
        }
    })
}

/// One change to the cluster.
#[derive(Clone, Debug)]
enum Step {
    /// Node `i` (modulo the nodes) becomes this.
    Node(usize, NodeDraw, bool),
    /// A new instance of service `s` on node `i`, holding these host ports.
    Add(usize, usize, u64, u64, u8),
    /// Existing instance `i` (modulo) goes away.
    Remove(usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0usize..16, node(), any::<bool>()).prop_map(|(i, d, a)| Step::Node(i, d, a)),
        (0usize..3, 0usize..16, 0u64..4, 0u64..3, 0u8..16)
            .prop_map(|(s, i, c, m, p)| Step::Add(s, i, c, m, p)),
        (0usize..16).prop_map(Step::Remove),
    ]
}

fn need(cpu: u64, mem: u64) -> Resources {
    Resources {
        cpu: Cpu::from_millis(cpu * 250),
        memory: Memory::from_bytes(mem << 28),
    }
}

/// Reservations of the fixture's existing instances, per node.
fn reserved(f: &Fixture) -> BTreeMap<&str, Resources> {
    let mut used: BTreeMap<&str, Resources> = BTreeMap::new();
    for e in &f.existing {
        let u = used.entry(&e.node).or_default();
        u.cpu = Cpu::from_millis(u.cpu.millis().saturating_add(e.resources.cpu.millis()));
        u.memory = Memory::from_bytes(u.memory.bytes().saturating_add(e.resources.memory.bytes()));
    }
    used
}

fn build(f: &Fixture) -> LiveIndex {
    let mut index = LiveIndex::default();
    let used = reserved(f);
    for (status, alive) in &f.nodes {
        let r = used.get(status.name.as_str()).copied().unwrap_or_default();
        index.set_node(&status.name, Some(status), *alive, r);
    }
    for e in &f.existing {
        index.set_instance(&e.instance, Some((&e.service, &e.node)));
        index.hold_ports(&e.instance, Some((&e.node, &e.held)));
    }
    index.reset_storage(f.storage.iter().copied());
    index
}

/// Placements and unsatisfied reasons, owned.
type Owned = (BTreeMap<String, String>, BTreeMap<String, String>);

/// What the live index decides.
/// An index built from `f` that places every run from heaps, however short.
fn heaps_only(f: &Fixture) -> LiveIndex {
    let mut index = build(f);
    index.long_run = Some(0);
    index
}

fn live(index: &mut LiveIndex, f: &Fixture) -> Owned {
    let placed = index.place(&f.borrowed_requests());
    let owned =
        |m: BTreeMap<&str, String>| m.into_iter().map(|(i, n)| (i.to_string(), n)).collect();
    (owned(placed.placements), owned(placed.unsatisfied))
}

/// What the pure function decides.
fn expected(f: &Fixture) -> Owned {
    let Result {
        placements,
        unsatisfied,
        ..
    } = f.run();
    (placements, unsatisfied)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn patched_index_places_like_the_pure_function(
        nodes in prop::collection::vec(node(), 1..10),
        services in prop::collection::vec(placement(), 3),
        service_ports in prop::collection::vec(ports(), 3),
        requests in prop::collection::vec((0usize..3, 0u64..4, 0u64..3, volume_draw()), 1..12),
        attached in prop::collection::vec((0usize..12, 0u64..=3), 0..4),
        steps in prop::collection::vec(step(), 0..12),
    ) {
        let mut f = Fixture { rebalance: super::super::Rebalance::Off, ..Fixture::default() };
        for (i, draw) in nodes.iter().enumerate() {
            f.nodes.push((status(i, *draw), true));
        }
        let mut storage: BTreeMap<&'static str, u64> = BTreeMap::new();
        for (n, gib) in attached {
            *storage.entry(NODES[n]).or_default() += gib << 30;
        }
        f.storage = storage.into_iter().map(|(n, b)| (n, Memory::from_bytes(b))).collect();
        for (i, &(s, cpu, mem, v)) in requests.iter().enumerate() {
            f.requests.push(Inst {
                instance: format!("r{i:02}"),
                service: format!("svc{s}"),
                node: String::new(),
                resources: need(cpu, mem),
                placement: services[s].clone(),
                fixed: service_ports[s].0.clone(),
                any: service_ports[s].1,
                held: Vec::new(),
                volumes: volume(v),
            });
        }
        let mut index = build(&f);
        prop_assert_eq!(live(&mut index, &f), expected(&f));
        prop_assert_eq!(live(&mut heaps_only(&f), &f), expected(&f), "from heaps");
        for (k, step) in steps.into_iter().enumerate() {
            let mut touched = Vec::new();
            match step {
                Step::Node(i, draw, alive) => {
                    let i = i % (f.nodes.len() + 1);
                    if i == f.nodes.len() {
                        f.nodes.push((status(i, draw), alive));
                    } else {
                        f.nodes[i] = (status(i, draw), alive);
                    }
                    touched.push(f.nodes[i].0.name.clone());
                }
                Step::Add(s, i, cpu, mem, held) => {
                    let node = format!("n{}", i % (f.nodes.len() + 1));
                    let e = Inst {
                        instance: format!("e{k:02}"),
                        service: format!("svc{s}"),
                        node: node.clone(),
                        resources: need(cpu, mem),
                        placement: services[s].clone(),
                        fixed: service_ports[s].0.clone(),
                        any: service_ports[s].1,
                        held: pick(&PORTS, held),
                        volumes: Vec::new(),
                    };
                    index.set_instance(&e.instance, Some((&e.service, &e.node)));
                    index.hold_ports(&e.instance, Some((&e.node, &e.held)));
                    f.existing.push(e);
                    touched.push(node);
                }
                Step::Remove(i) if !f.existing.is_empty() => {
                    let e = f.existing.remove(i % f.existing.len());
                    prop_assert!(index.set_instance(&e.instance, None).is_some());
                    index.hold_ports(&e.instance, None);
                    touched.push(e.node);
                }
                Step::Remove(_) => {}
            }
            let used = reserved(&f);
            for name in &touched {
                let node = f.nodes.iter().find(|(s, _)| &s.name == name);
                let r = used.get(name.as_str()).copied().unwrap_or_default();
                index.set_node(name, node.map(|(s, _)| s), node.is_some_and(|(_, a)| *a), r);
            }
            prop_assert_eq!(live(&mut index, &f), expected(&f), "after step {}", k);
            prop_assert_eq!(live(&mut index, &f), live(&mut build(&f), &f), "same as fresh");
            prop_assert_eq!(live(&mut heaps_only(&f), &f), expected(&f), "from heaps, step {}", k);
        }
    }
}

#[test]
fn spread_fills_the_emptiest_zone_then_holders_when_nothing_is_free() {
    let spread = Placement {
        zone: Some(ZonePolicy::Spread),
        ..Placement::default()
    };
    let mut f = Fixture::default();
    for (name, zone) in [("a1", "z1"), ("a2", "z1"), ("b1", "z2")] {
        f = f
            .node(name, "4", "8Gi")
            .with(|n| n.zone = Some(zone.into()));
    }
    let f = f
        .existing("web", "a1", 1, res("1", "1Gi"))
        .existing("web", "b1", 2, res("1", "1Gi"))
        .request("web", 4, res("1", "1Gi"), &spread);
    let mut index = build(&f);
    let placed = live(&mut index, &f);
    assert_eq!(placed, expected(&f));
    assert_eq!(placed.0.len(), 4);
    // Unchanged by placing: the same call gives the same answer.
    assert_eq!(live(&mut index, &f), placed);
}

#[test]
fn labels_no_placement_names_make_no_classes() {
    let mut f = Fixture::default();
    for i in 0..20 {
        f = f.node(&format!("n{i:02}"), "4", "8Gi").with(|n| {
            n.labels = [("host".to_string(), n.name.clone())].into();
            n.zone = Some(format!("z{}", i % 2));
        });
    }
    let ssd = Placement {
        prefer: [("disk".to_string(), "ssd".to_string())].into(),
        ..Placement::default()
    };
    let f = f.request("web", 5, res("1", "1Gi"), &ssd);
    let mut index = build(&f);
    assert_eq!(live(&mut index, &f), expected(&f));
    assert_eq!(index.classes.len(), 2, "one class per zone");
    // Naming the label splits the classes, and placements stay the same as the pure function's.
    let host = Placement {
        require: [("host".to_string(), "n07".to_string())].into(),
        ..Placement::default()
    };
    let f = f.request("pinned", 2, res("1", "1Gi"), &host);
    assert_eq!(live(&mut index, &f), expected(&f));
    assert_eq!(index.classes.len(), 20);
}

#[test]
fn a_volume_attached_to_a_node_takes_its_request_there_or_nowhere() {
    let f = Fixture::default()
        .node("n0", "4", "8Gi")
        .with(|n| n.storage = "10Gi".parse().unwrap())
        .node("n1", "4", "8Gi")
        .with(|n| n.storage = "10Gi".parse().unwrap())
        .existing("other", "n0", 1, res("4", "1Gi"))
        .request("db", 1, res("1", "1Gi"), &Placement::default())
        .volume("data", "5Gi", Some("n0"))
        .request("cache", 1, res("1", "1Gi"), &Placement::default())
        .volume("scratch", "8Gi", None)
        .attached("n1", "3Gi");
    let placed = live(&mut build(&f), &f);
    assert_eq!(placed, expected(&f));
    assert_eq!(
        placed.1["db-000"],
        "0/2 nodes can run it: 1 is not n0, where volume data is attached, 1 has too little \
         cpu (needs 1)"
    );
    assert_eq!(
        placed.1["cache-001"],
        "0/2 nodes can run it: 1 has too little cpu (needs 1), 1 has too little storage for \
         volumes (needs 8Gi)"
    );
}
