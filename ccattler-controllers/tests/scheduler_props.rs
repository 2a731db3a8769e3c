//! Property tests of the scheduler over random small clusters: hard constraints and capacity are
//! never violated, the output does not depend on input order, every request is answered once,
//! and placements equal a naive reference that scans every node for every request.

use std::collections::BTreeMap;

use ccattler_controllers::scheduler::{
    Existing, Node, Rebalance, Request, Schedule, ScheduleInput, schedule,
};
use ccattler_core::schema::{Cpu, Memory, NodeStatus, Placement, Resources, ZonePolicy};
use proptest::prelude::*;

const ZONES: [&str; 3] = ["z1", "z2", "z3"];
const TAINTS: [&str; 2] = ["dedicated", "gpu"];
const LABELS: [(&str, &str); 3] = [("disk", "ssd"), ("disk", "hdd"), ("gpu", "yes")];

#[derive(Clone, Debug)]
struct Cluster {
    nodes: Vec<(NodeStatus, bool)>,
    services: Vec<Placement>,
    /// (service index, node index, cpu millis, memory MiB)
    existing: Vec<(usize, usize, u64, u64)>,
    /// (service index, cpu millis, memory MiB)
    requests: Vec<(usize, u64, u64)>,
}

fn pick<T: Copy>(items: &[T], mask: u8) -> Vec<T> {
    (0..items.len())
        .filter(|i| mask & (1 << i) != 0)
        .map(|i| items[i])
        .collect()
}

fn node() -> impl Strategy<Value = (NodeStatus, bool)> {
    (
        0u64..=8,
        0u64..=8,
        0u8..8,
        0u8..4,
        0usize..4,
        any::<bool>(),
        0u8..5,
    )
        .prop_map(|(cpu, mem, labels, taints, zone, arm, alive)| {
            let status = NodeStatus {
                cpu: Cpu::from_millis(cpu * 500),
                memory: Memory::from_bytes(mem << 29),
                labels: pick(&LABELS, labels)
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                taints: pick(&TAINTS, taints)
                    .into_iter()
                    .map(String::from)
                    .collect(),
                zone: ZONES.get(zone).map(|z| z.to_string()),
                architecture: if arm { "arm64" } else { "amd64" }.into(),
                ..NodeStatus::default()
            };
            (status, alive != 0)
        })
}

fn placement() -> impl Strategy<Value = Placement> {
    (0u8..3, 0usize..6, 0u8..8, 0u8..8, 0u8..4).prop_map(|(arch, zone, req, pref, accept)| {
        let pairs = |mask| -> BTreeMap<String, String> {
            // At most one value per key: `disk=hdd` wins over `disk=ssd` when both are drawn.
            pick(&LABELS, mask)
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        Placement {
            architecture: [None, Some("amd64"), Some("arm64")][arch as usize].map(String::from),
            zone: match zone {
                0..=2 => None,
                3 => Some(ZonePolicy::Spread),
                z => Some(ZonePolicy::Only(ZONES[z - 4].into())),
            },
            require: pairs(req & 0b101),
            prefer: pairs(pref),
            accept: pick(&TAINTS, accept)
                .into_iter()
                .map(String::from)
                .collect(),
        }
    })
}

fn cluster() -> impl Strategy<Value = Cluster> {
    (
        prop::collection::vec(node(), 0..9),
        prop::collection::vec(placement(), 1..4),
    )
        .prop_flat_map(|(mut nodes, services)| {
            for (i, (status, _)) in nodes.iter_mut().enumerate() {
                status.name = format!("n{i}");
            }
            let (n, s) = (nodes.len().max(1), services.len());
            (
                Just(nodes),
                Just(services),
                prop::collection::vec((0..s, 0..n, 0u64..4, 0u64..3), 0..10),
                prop::collection::vec((0..s, 0u64..4, 0u64..3), 0..16),
            )
        })
        .prop_map(|(nodes, services, existing, requests)| Cluster {
            existing: existing
                .into_iter()
                .map(|(s, n, c, m)| (s, n, c * 250, m * 256))
                .collect(),
            requests: requests
                .into_iter()
                .map(|(s, c, m)| (s, c * 250, m * 256))
                .collect(),
            nodes,
            services,
        })
}

fn resources(cpu: u64, mib: u64) -> Resources {
    Resources {
        cpu: Cpu::from_millis(cpu),
        memory: Memory::from_bytes(mib << 20),
    }
}

/// Owned names so the borrowed input can be built in any order.
struct Names {
    services: Vec<String>,
    existing: Vec<String>,
    requests: Vec<String>,
}

impl Names {
    fn of(c: &Cluster) -> Self {
        Names {
            services: (0..c.services.len()).map(|s| format!("svc{s}")).collect(),
            existing: (0..c.existing.len()).map(|i| format!("e{i:02}")).collect(),
            requests: (0..c.requests.len()).map(|i| format!("r{i:02}")).collect(),
        }
    }
}

fn inputs<'a>(
    c: &'a Cluster,
    names: &'a Names,
) -> (Vec<Node<'a>>, Vec<Existing<'a>>, Vec<Request<'a>>) {
    let nodes = c
        .nodes
        .iter()
        .map(|(s, alive)| Node::from_status(s, *alive))
        .collect();
    let existing = c
        .existing
        .iter()
        .enumerate()
        .filter(|(_, e)| e.1 < c.nodes.len())
        .map(|(i, &(s, n, cpu, mib))| Existing {
            instance: &names.existing[i],
            service: &names.services[s],
            node: &c.nodes[n].0.name,
            resources: resources(cpu, mib),
            placement: &c.services[s],
            ports: &[],
            needs: ccattler_controllers::scheduler::Ports::NONE,
            pinned: false,
        })
        .collect();
    let requests = c
        .requests
        .iter()
        .enumerate()
        .map(|(i, &(s, cpu, mib))| Request {
            instance: &names.requests[i],
            service: &names.services[s],
            resources: resources(cpu, mib),
            placement: &c.services[s],
            ports: ccattler_controllers::scheduler::Ports::NONE,
            volumes: &[],
        })
        .collect();
    (nodes, existing, requests)
}

fn passes(node: &Node<'_>, p: &Placement) -> bool {
    node.alive
        && p.architecture
            .as_deref()
            .is_none_or(|a| a == node.architecture)
        && match &p.zone {
            Some(ZonePolicy::Only(z)) => node.zone == Some(z.as_str()),
            _ => true,
        }
        && p.require.iter().all(|(k, v)| node.labels.get(k) == Some(v))
        && node.taints.iter().all(|t| p.accept.contains(t))
}

/// The reference: for each request in (service, instance) order, scan every node, keep those
/// passing every filter with room, take the smallest by the documented ranking.
fn naive<'a>(
    nodes: &[Node<'a>],
    existing: &[Existing<'a>],
    requests: &[Request<'a>],
) -> Vec<(&'a str, Option<&'a str>)> {
    let mut used: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    let mut count: BTreeMap<(&str, &str), u32> = BTreeMap::new();
    let mut on: Vec<(&str, &str)> = Vec::new(); // (service, node)
    for e in existing {
        let u = used.entry(e.node).or_default();
        u.0 += e.resources.cpu.millis();
        u.1 += e.resources.memory.bytes();
        *count.entry((e.service, e.node)).or_default() += 1;
        on.push((e.service, e.node));
    }
    let mut order: Vec<&Request<'a>> = requests.iter().collect();
    order.sort_by_key(|r| (r.service, r.instance));
    let mut out = Vec::new();
    for r in order {
        let (cpu, mem) = (r.resources.cpu.millis(), r.resources.memory.bytes());
        let zone_count = |zone: Option<&str>| {
            on.iter()
                .filter(|(s, n)| {
                    *s == r.service && nodes.iter().any(|x| x.name == *n && x.zone == zone)
                })
                .count()
        };
        let best = nodes
            .iter()
            .filter(|n| passes(n, r.placement))
            .filter(|n| {
                let u = used.get(n.name).copied().unwrap_or_default();
                u.0 + cpu <= n.cpu.millis() && u.1 + mem <= n.memory.bytes()
            })
            .min_by(|a, b| {
                let key = |n: &Node<'_>| {
                    let u = used.get(n.name).copied().unwrap_or_default();
                    let frac = |x: u64, cap: u64| {
                        if cap == 0 {
                            (0u128, 1u128)
                        } else {
                            (u128::from(x), u128::from(cap))
                        }
                    };
                    let (c, m) = (
                        frac(u.0 + cpu, n.cpu.millis()),
                        frac(u.1 + mem, n.memory.bytes()),
                    );
                    let util = if c.0 * m.1 >= m.0 * c.1 { c } else { m };
                    let zone = match r.placement.zone {
                        Some(ZonePolicy::Spread) => zone_count(n.zone),
                        _ => 0,
                    };
                    let pref = r
                        .placement
                        .prefer
                        .iter()
                        .filter(|(k, v)| n.labels.get(*k) == Some(*v))
                        .count();
                    (
                        zone,
                        count.get(&(r.service, n.name)).copied().unwrap_or(0),
                        usize::MAX - pref,
                        util,
                    )
                };
                let (ka, kb) = (key(a), key(b));
                (ka.0, ka.1, ka.2)
                    .cmp(&(kb.0, kb.1, kb.2))
                    .then_with(|| (ka.3.0 * kb.3.1).cmp(&(kb.3.0 * ka.3.1)))
                    .then_with(|| a.name.cmp(b.name))
            });
        if let Some(n) = best {
            let u = used.entry(n.name).or_default();
            u.0 += cpu;
            u.1 += mem;
            *count.entry((r.service, n.name)).or_default() += 1;
            on.push((r.service, n.name));
        }
        out.push((r.instance, best.map(|n| n.name)));
    }
    out.sort();
    out
}

fn check(
    c: &Cluster,
    s: &Schedule<'_>,
    nodes: &[Node<'_>],
    existing: &[Existing<'_>],
    requests: &[Request<'_>],
) -> Result<(), TestCaseError> {
    // Every request exactly once.
    prop_assert_eq!(s.placements.len() + s.unsatisfied.len(), requests.len());
    for r in requests {
        prop_assert!(
            s.placements.contains_key(r.instance) != s.unsatisfied.contains_key(r.instance)
        );
    }
    // Capacity and hard constraints, counting moves' targets too.
    let mut used: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for e in existing {
        let u = used.entry(e.node).or_default();
        u.0 += e.resources.cpu.millis();
        u.1 += e.resources.memory.bytes();
    }
    let node = |name: &str| nodes.iter().find(|n| n.name == name).copied();
    for r in requests {
        if let Some(&name) = s.placements.get(r.instance) {
            let n = node(name).ok_or_else(|| TestCaseError::fail("unknown node"))?;
            prop_assert!(passes(&n, r.placement), "{} on {}", r.instance, name);
            let u = used.entry(name).or_default();
            u.0 += r.resources.cpu.millis();
            u.1 += r.resources.memory.bytes();
        }
    }
    for m in &s.rebalance {
        let e = existing
            .iter()
            .find(|e| e.instance == m.instance)
            .ok_or_else(|| TestCaseError::fail("unknown move"))?;
        prop_assert_eq!(e.node, m.from);
        let n = node(m.to).ok_or_else(|| TestCaseError::fail("unknown target"))?;
        prop_assert!(passes(&n, e.placement));
        let u = used.entry(m.to).or_default();
        u.0 += e.resources.cpu.millis();
        u.1 += e.resources.memory.bytes();
    }
    for n in nodes {
        let u = used.get(n.name).copied().unwrap_or_default();
        let before: (u64, u64) =
            existing
                .iter()
                .filter(|e| e.node == n.name)
                .fold((0, 0), |a, e| {
                    (
                        a.0 + e.resources.cpu.millis(),
                        a.1 + e.resources.memory.bytes(),
                    )
                });
        // Only what this call added must fit (existing may already overcommit).
        if u != before {
            prop_assert!(
                u.0 <= n.cpu.millis().max(before.0) && u.1 <= n.memory.bytes().max(before.1),
                "{} over capacity",
                n.name
            );
        }
    }
    // Unsatisfied reasons account for every node.
    for why in s.unsatisfied.values() {
        prop_assert_eq!(
            why.rejections.iter().map(|(_, n)| n).sum::<usize>(),
            c.nodes.len()
        );
    }
    // Same as the naive reference.
    let reference = naive(nodes, existing, requests);
    let ours: Vec<(&str, Option<&str>)> = {
        let mut v: Vec<_> = requests
            .iter()
            .map(|r| (r.instance, s.placements.get(r.instance).copied()))
            .collect();
        v.sort();
        v
    };
    prop_assert_eq!(ours, reference);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn schedules_are_valid_deterministic_and_match_the_reference(c in cluster(), rotate in 0usize..9) {
        let names = Names::of(&c);
        let (nodes, existing, requests) = inputs(&c, &names);
        let input = ScheduleInput { nodes: &nodes, existing: &existing, requests: &requests, rebalance: Rebalance::All, reserved: None, storage: &[] };
        let s = schedule(&input);
        check(&c, &s, &nodes, &existing, &requests)?;
        prop_assert_eq!(&schedule(&input), &s);
        // Shuffled input, same output.
        let (mut nodes2, mut existing2, mut requests2) = (nodes.clone(), existing.clone(), requests.clone());
        nodes2.reverse();
        let k = rotate.min(nodes2.len());
        nodes2.rotate_left(k);
        existing2.reverse();
        let k = rotate.min(requests2.len());
        requests2.rotate_left(k);
        let shuffled = ScheduleInput { nodes: &nodes2, existing: &existing2, requests: &requests2, rebalance: Rebalance::All, reserved: None, storage: &[] };
        prop_assert_eq!(&schedule(&shuffled), &s);
    }
}
