//! The pure scheduler: placing 100,000 instances on 10,000 nodes, and rescheduling the instances
//! of one dead node in a full cluster.
//!
//! `cargo bench -p ccattler-benches --bench scheduler`
//!
//! The cluster: 10,000 nodes of four sizes (8 to 64 cores) in 3 zones, a tenth `arm64`, a quarter
//! with `disk=ssd`, 1 in 20 tainted `dedicated`, 1 in 50 with `gpu=yes` and tainted `gpu`.
//! 1,000 services of 100 instances each (100m to 1 core, 128Mi to 1Gi), their placements drawn
//! from twelve shapes: none, zone spread, prefer ssd, require ssd, zone only, arm64, accept
//! dedicated, gpu only, and combinations.

use std::collections::BTreeMap;

use ccattler_controllers::scheduler::{
    Existing, Node, Rebalance, Request, ScheduleInput, schedule,
};
use ccattler_core::schema::{Cpu, Memory, NodeStatus, Placement, Resources, ZonePolicy};
use criterion::{Criterion, criterion_group, criterion_main};

const NODES: usize = 10_000;
const SERVICES: usize = 1_000;
const PER_SERVICE: usize = 100;

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn nodes() -> Vec<NodeStatus> {
    (0..NODES)
        .map(|i| {
            let cores = [8, 16, 32, 64][i % 4];
            let mut node_labels = labels(&[("disk", if i % 4 == 1 { "ssd" } else { "hdd" })]);
            let mut taints = Vec::new();
            if i % 20 == 7 {
                taints.push("dedicated".to_string());
            }
            if i % 50 == 3 {
                node_labels.insert("gpu".into(), "yes".into());
                taints.push("gpu".to_string());
            }
            NodeStatus {
                name: format!("node-{i:05}"),
                cpu: Cpu::from_millis(cores * 1000),
                memory: Memory::from_bytes((cores * 4) << 30),
                labels: node_labels,
                taints,
                zone: Some(format!("zone-{}", i % 3)),
                architecture: if i % 10 == 9 { "arm64" } else { "amd64" }.into(),
                address: String::new(),
                ports: Default::default(),
                storage: Memory::ZERO,
            }
        })
        .collect()
}

fn shapes() -> Vec<Placement> {
    let spread = Some(ZonePolicy::Spread);
    let ssd = labels(&[("disk", "ssd")]);
    vec![
        Placement::default(),
        Placement {
            zone: spread.clone(),
            ..Placement::default()
        },
        Placement {
            prefer: ssd.clone(),
            ..Placement::default()
        },
        Placement {
            require: ssd.clone(),
            ..Placement::default()
        },
        Placement {
            zone: Some(ZonePolicy::Only("zone-1".into())),
            ..Placement::default()
        },
        Placement {
            architecture: Some("arm64".into()),
            ..Placement::default()
        },
        Placement {
            accept: vec!["dedicated".into()],
            ..Placement::default()
        },
        Placement {
            require: labels(&[("gpu", "yes")]),
            accept: vec!["gpu".into()],
            ..Placement::default()
        },
        Placement {
            zone: spread.clone(),
            prefer: ssd.clone(),
            ..Placement::default()
        },
        Placement {
            zone: spread,
            require: ssd.clone(),
            ..Placement::default()
        },
        Placement {
            architecture: Some("amd64".into()),
            prefer: ssd,
            ..Placement::default()
        },
        Placement::default(),
    ]
}

struct Requests {
    services: Vec<String>,
    ids: Vec<String>,
}

fn requests<'a>(r: &'a Requests, shapes: &'a [Placement]) -> Vec<Request<'a>> {
    r.ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let s = i / PER_SERVICE;
            Request {
                instance: id,
                service: &r.services[s],
                resources: Resources {
                    cpu: Cpu::from_millis(100 + (s as u64 * 37 % 10) * 100),
                    memory: Memory::from_bytes((1 + s as u64 % 8) * (128 << 20)),
                },
                placement: &shapes[s % shapes.len()],
                ports: ccattler_controllers::scheduler::Ports::NONE,
                volumes: &[],
            }
        })
        .collect()
}

fn scheduler_benches(c: &mut Criterion) {
    let statuses = nodes();
    let shapes = shapes();
    let names = Requests {
        services: (0..SERVICES).map(|s| format!("team/svc-{s:04}")).collect(),
        ids: (0..SERVICES * PER_SERVICE)
            .map(|i| format!("svc-{:04}-{:03}", i / PER_SERVICE, i % PER_SERVICE))
            .collect(),
    };
    let all = requests(&names, &shapes);
    let alive: Vec<Node<'_>> = statuses
        .iter()
        .map(|s| Node::from_status(s, true))
        .collect();

    let mut group = c.benchmark_group("scheduler");
    group.sample_size(10);
    let input = ScheduleInput {
        nodes: &alive,
        existing: &[],
        requests: &all,
        rebalance: Rebalance::All,
        reserved: None,
        storage: &[],
    };
    let full = schedule(&input);
    eprintln!(
        "placed {} of {}, {} unsatisfied",
        full.placements.len(),
        all.len(),
        full.unsatisfied.len()
    );
    group.bench_function("place_100k_on_10k_nodes", |b| b.iter(|| schedule(&input)));

    // The full cluster as existing allocation; the busiest node dies.
    let placed: Vec<&Request<'_>> = all
        .iter()
        .filter(|r| full.placements.contains_key(r.instance))
        .collect();
    let mut per_node: BTreeMap<&str, usize> = BTreeMap::new();
    for node in full.placements.values() {
        *per_node.entry(node).or_default() += 1;
    }
    let dead = per_node
        .iter()
        .max_by_key(|(name, n)| (**n, std::cmp::Reverse(**name)))
        .map(|(name, _)| *name)
        .expect("something was placed");
    let nodes: Vec<Node<'_>> = statuses
        .iter()
        .map(|s| Node::from_status(s, s.name != dead))
        .collect();
    let existing: Vec<Existing<'_>> = placed
        .iter()
        .filter(|r| full.placements[r.instance] != dead)
        .map(|r| Existing {
            instance: r.instance,
            service: r.service,
            node: full.placements[r.instance],
            resources: r.resources,
            placement: r.placement,
            ports: &[],
            needs: ccattler_controllers::scheduler::Ports::NONE,
            pinned: false,
        })
        .collect();
    let again: Vec<Request<'_>> = placed
        .iter()
        .filter(|r| full.placements[r.instance] == dead)
        .map(|r| **r)
        .collect();
    eprintln!(
        "{dead} held {} instances; {} existing elsewhere",
        again.len(),
        existing.len()
    );
    for (name, rebalance) in [
        ("reschedule_one_dead_node", Rebalance::Requested),
        ("reschedule_one_dead_node_rebalance_all", Rebalance::All),
    ] {
        let input = ScheduleInput {
            nodes: &nodes,
            existing: &existing,
            requests: &again,
            rebalance,
            reserved: None,
            storage: &[],
        };
        let result = schedule(&input);
        assert_eq!(
            result.placements.len() + result.unsatisfied.len(),
            again.len()
        );
        group.bench_function(name, |b| b.iter(|| schedule(&input)));
    }
    group.finish();
}

criterion_group!(benches, scheduler_benches);
criterion_main!(benches);
