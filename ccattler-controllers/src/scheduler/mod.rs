//! The pure scheduler: which node each new instance goes to, why the rest cannot go anywhere,
//! and which existing instances would be better elsewhere.
//!
//! [`schedule`] is a function of its [`ScheduleInput`] alone: no I/O, no clock, no randomness.
//! The same input gives the same [`Schedule`], whatever the order of the nodes, existing
//! instances or requests in it.
//!
//! # Expected flow
//!
//! A controller reads nodes (`observed/node/`, alive when `lease/node/` holds), existing
//! assignments (`placement/`) minus those on nodes it gave up on, and the instances without an
//! assignment; it calls [`schedule`], writes `placement/{node}/{id}` for
//! [`Schedule::placements`] and `status/unschedulable/{id}` with the [`Unsatisfied`] text for the
//! rest, and, when it wants, performs [`Schedule::rebalance`] moves safely (start the
//! replacement, then stop the old instance).
//!
//! # Filters (hard, never relaxed)
//!
//! A node can take a request only when all of these hold, checked in this order (the order an
//! [`Unsatisfied`] reason attributes each node to its first failure):
//!
//! 1. it is alive;
//! 2. it is the node every volume of the request that is attached somewhere
//!    ([`VolumeNeed::node`]) is attached to;
//! 3. its architecture is the one the placement names, if any;
//! 4. its zone is the one of `zone ZONE` ([`ZonePolicy::Only`]), if set;
//! 5. it has every `require` label with the required value;
//! 6. every one of its taints is in the placement's `accept` list;
//! 7. the request's cpu fits in what existing instances and this call's placements left;
//! 8. so does its memory;
//! 9. the sizes of the request's volumes not attached anywhere yet fit in the node's storage
//!    left ([`Node::storage`], less [`ScheduleInput::storage`] and this call's placements);
//! 10. every host port it needs by number ([`Ports::fixed`]) is held by no existing instance
//!     nor by this call's placements;
//! 11. the node's port range has [`Ports::any`] free ports left, counting the ports held there
//!     and those this call's placements took (the caller picks which: the scheduler only
//!     counts them).
//!
//! # Ranking (soft)
//!
//! Among the nodes that pass, the request goes to the smallest by, in order:
//!
//! 1. for `zone spread` ([`ZonePolicy::Spread`]) only: fewest instances of the service in the
//!    node's zone (nodes without a zone form one zone of their own);
//! 2. fewest instances of the service on the node;
//! 3. most `prefer` labels matched;
//! 4. least utilised after placement: the larger of `(cpu used + cpu needed) / cpu allocatable`
//!    and the same for memory, compared exactly as fractions with integer arithmetic (an empty
//!    capacity counts as 0);
//! 5. node name, in byte order.
//!
//! Instance counts include existing instances and those this call placed before.
//!
//! # Processing order
//!
//! Requests are placed one at a time: first the services with a request pinned to a node (it
//! mounts a volume attached there, so that node or none), then the others; each group by
//! service name, and within a service its pinned requests first, then by instance id. Each
//! sees the usage and counts left by the ones before it, so room on a node is given to the
//! request that can use no other node before one that could go anywhere.
//!
//! Existing instances that are [`Existing::pinned`] (their data is on their node) are never
//! moved by rebalancing.
//!
//! # Rebalancing
//!
//! For each service selected by [`ScheduleInput::rebalance`] (by name), once every request is
//! placed: the service's nodes are the alive nodes passing its filters 1 to 5, counted with
//! existing and newly placed instances. While some such node has at least two more than the least
//! loaded one, the scheduler moves one existing instance (the largest id) off the most loaded node
//! (ties: smaller name) to the best-ranked node, by the ranking above, that has at least two fewer
//! instances and room for it. Each move lowers the sum of squared counts, so the skew ends at one
//! or less unless capacity prevents it. A move reserves its target's capacity and, until the old
//! instance is stopped, keeps the source's. Services whose existing instances disagree on their
//! placement (a rollout in progress) and instances on nodes no longer eligible are left alone.
//!
//! # Guarantees
//!
//! - No node is given more cpu or memory than it has, counting existing instances and this call;
//!   nor more volumes than its storage takes, counting the volumes attached there.
//! - A request that mounts a volume attached to a node goes to that node or nowhere.
//! - No host port is given twice on a node, and no node's range is promised more ports than it
//!   has free (existing instances hold the ports listed in [`Existing::ports`]).
//! - No request lands on a node failing any filter: `require`, architecture, zone and taints are
//!   never relaxed.
//! - Every request is in exactly one of `placements` and `unsatisfied`.
//! - An unsatisfied request had no node able to take it when its turn came.
//!
//! # Assumptions
//!
//! Node names are unique, and instance ids are unique across `existing` and `requests`.
//! Resources of existing instances on unknown nodes are ignored.
//!
//! # Cost
//!
//! Linear in nodes plus existing instances to build the per-call tables (no sort over nodes),
//! plus, per run of identical requests (same service, resources and placement) of length `k`,
//! one pass over the eligible nodes and `O(k log k)` to place them; the eligible set of each
//! distinct set of hard constraints is computed once per call. An unsatisfied run costs one pass
//! over all nodes to explain it.
//!
//! [`ZonePolicy::Only`]: ccattler_core::schema::ZonePolicy::Only
//! [`ZonePolicy::Spread`]: ccattler_core::schema::ZonePolicy::Spread

mod index;
mod live;
mod place;
mod ports;
mod reason;
mod rebalance;
mod types;
mod volume;

#[cfg(test)]
mod fixture;

pub(crate) use live::{LiveIndex, Load, Placed};
pub use ports::port_needs;
pub use reason::{Rejection, Unsatisfied};
pub use types::{Existing, Move, Node, Ports, Rebalance, Request, Schedule, ScheduleInput};
pub use volume::VolumeNeed;

use index::{FastMap, Index};
use place::{Counts, Outcome, order, place_run, same_run};

/// Places `input.requests` on `input.nodes`, explains what does not fit and suggests moves for
/// skewed services. See the [module docs](self) for the filters, ranking and guarantees.
pub fn schedule<'a>(input: &ScheduleInput<'a>) -> Schedule<'a> {
    let mut index = Index::new(input);
    let mut counts = Counts::new(input.nodes.len(), index.zones);
    let sorted = order(input.requests);

    // Existing instances of the services that matter: (index into existing, node).
    let mut existing_of: FastMap<&'a str, Vec<(u32, u32)>> = FastMap::default();
    if input.rebalance != Rebalance::All {
        for r in &sorted {
            existing_of.entry(r.service).or_default();
        }
    }
    // One pass over the existing allocation: reserve capacity, group by service. Inputs read
    // from the store come grouped by node (`placement/{node}/`), so the last lookup is reused.
    for (node, need) in input.reserved.unwrap_or_default() {
        if let Some(&n) = index.by_name.get(node) {
            index.reserve(n, *need);
        }
    }
    for (node, size) in input.storage {
        if let Some(&n) = index.by_name.get(node) {
            let storage = &mut index.storage[n as usize];
            storage.used = storage.used.saturating_add(size.bytes());
        }
    }
    let mut last_node: Option<(&str, u32)> = None;
    for (e, ex) in input.existing.iter().enumerate() {
        let n = match last_node {
            Some((name, n)) if name == ex.node => n,
            _ => {
                let Some(&n) = index.by_name.get(ex.node) else {
                    continue;
                };
                last_node = Some((ex.node, n));
                n
            }
        };
        if input.reserved.is_none() {
            index.reserve(n, ex.resources);
        }
        index.ports[n as usize].hold(ex.ports);
        let e = u32::try_from(e).unwrap_or(u32::MAX);
        if input.rebalance == Rebalance::All {
            existing_of.entry(ex.service).or_default().push((e, n));
        } else if let Some(list) = existing_of.get_mut(ex.service) {
            list.push((e, n));
        }
    }

    let mut placements = Vec::with_capacity(sorted.len());
    let mut unsatisfied = Vec::new();
    let mut placed_of: FastMap<&'a str, Vec<u32>> = FastMap::default();
    for service in sorted.chunk_by(|a, b| a.service == b.service) {
        let name = service[0].service;
        for &(_, n) in existing_of.get(name).into_iter().flatten() {
            counts.add(n, index.zone_of[n as usize]);
        }
        let mut placed = Vec::new();
        for run in service.chunk_by(|a, b| same_run(a, b)) {
            let first = run[0];
            let outcomes = place_run(
                &mut index,
                &mut counts,
                first.placement,
                (first.resources, first.ports, first.volumes),
                run.len(),
            );
            for (request, outcome) in run.iter().zip(outcomes) {
                match outcome {
                    Outcome::Placed(n) => {
                        placements.push((request.instance, input.nodes[n as usize].name));
                        placed.push(n);
                    }
                    Outcome::Unsatisfied(why) => unsatisfied.push((request.instance, why)),
                }
            }
        }
        counts.clear(&index.zone_of);
        if input.rebalance != Rebalance::Off {
            placed_of.insert(name, placed);
        }
    }

    let mut moves = Vec::new();
    if input.rebalance != Rebalance::Off {
        let mut services: Vec<&'a str> = existing_of.keys().copied().collect();
        services.sort_unstable();
        for service in services {
            let mine = existing_of.get(service).map_or(&[][..], Vec::as_slice);
            let placed = placed_of.get(service).map_or(&[][..], Vec::as_slice);
            rebalance::rebalance_service(
                &mut index,
                &mut counts,
                input.existing,
                mine,
                placed,
                &mut moves,
            );
            counts.clear(&index.zone_of);
        }
    }

    Schedule {
        placements: placements.into_iter().collect(),
        unsatisfied: unsatisfied.into_iter().collect(),
        rebalance: moves,
    }
}

#[cfg(test)]
mod tests {
    use ccattler_core::schema::Placement;

    use super::fixture::{Fixture, res};

    fn two_nodes() -> Fixture {
        Fixture::default()
            .node("n1", "4", "8Gi")
            .node("n2", "4", "8Gi")
    }

    #[test]
    fn seed_five_web_instances_on_two_nodes_split_three_two() {
        let any = Placement::default();
        let result = two_nodes().request("web", 5, res("1", "128Mi"), &any).run();
        assert_eq!((result.on("n1"), result.on("n2")), (3, 2));
        assert!(result.unsatisfied.is_empty());
        assert!(result.moves.is_empty());
    }

    #[test]
    fn seed_n2_dead_fills_n1_and_leaves_one_unsatisfied() {
        let any = Placement::default();
        // The caller dropped the two instances that were on n2 and re-requests them.
        let result = two_nodes()
            .alive("n2", false)
            .existing("web", "n1", 3, res("1", "128Mi"))
            .request("web", 2, res("1", "128Mi"), &any)
            .run();
        assert_eq!((result.on("n1"), result.on("n2")), (1, 0));
        assert_eq!(result.unsatisfied.len(), 1);
        let why = result.unsatisfied.values().next().unwrap();
        assert_eq!(
            why,
            "0/2 nodes can run it: 1 is not alive, 1 has too little cpu (needs 1)"
        );
    }

    #[test]
    fn seed_n2_back_takes_the_request_and_one_move_evens_out() {
        let any = Placement::default();
        let result = two_nodes()
            .existing("web", "n1", 4, res("1", "128Mi"))
            .request("web", 1, res("1", "128Mi"), &any)
            .run();
        assert_eq!((result.on("n1"), result.on("n2")), (0, 1));
        assert_eq!(
            result.moves,
            vec![("web-e3".to_string(), "n1".to_string(), "n2".to_string())]
        );
    }

    #[test]
    fn same_output_whatever_the_input_order() {
        let spread = Placement {
            zone: Some(ccattler_core::schema::ZonePolicy::Spread),
            ..Placement::default()
        };
        let mut fixture = Fixture::default();
        for i in 0..12 {
            let zone = format!("z{}", i % 3);
            fixture = fixture
                .node(&format!("n{i:02}"), "2", "4Gi")
                .with(|n| n.zone = Some(zone));
        }
        let fixture = fixture
            .existing("api", "n03", 2, res("500m", "1Gi"))
            .request("web", 9, res("700m", "1Gi"), &spread)
            .request("api", 7, res("500m", "512Mi"), &Placement::default())
            .request("db", 9, res("1500m", "3Gi"), &spread);
        let expected = fixture.run();
        let mut shuffled = fixture.clone();
        shuffled.nodes.reverse();
        shuffled.nodes.rotate_left(5);
        shuffled.requests.reverse();
        shuffled.existing.reverse();
        assert_eq!(shuffled.run(), expected);
        assert_eq!(fixture.run(), expected);
        assert_eq!(expected.placements.len() + expected.unsatisfied.len(), 25);
    }
}
