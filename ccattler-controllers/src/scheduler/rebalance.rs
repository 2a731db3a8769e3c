//! Rebalancing suggestions: moves that even out a service skewed over its eligible nodes.

use std::cmp::Reverse;

use super::index::{FastMap, Index, eligible};
use super::place::Counts;
use super::{Existing, Move};

/// Plans moves for one service whose existing instances are `mine` (index into `existing`, node)
/// and whose instances placed by this call are on `placed`. Appends them to `out`.
///
/// Does nothing when the service's existing instances do not all share one placement (a rollout
/// is changing it; the rollout moves them anyway).
pub(crate) fn rebalance_service<'a>(
    index: &mut Index<'a>,
    counts: &mut Counts,
    existing: &[Existing<'a>],
    mine: &[(u32, u32)],
    placed: &[u32],
    out: &mut Vec<Move<'a>>,
) {
    let Some(&(first, _)) = mine.first() else {
        return;
    };
    let placement = existing[first as usize].placement;
    let uniform = mine.iter().all(|&(e, _)| {
        let p = existing[e as usize].placement;
        std::ptr::eq(p, placement) || p == placement
    });
    if !uniform {
        return;
    }
    let nodes = index.nodes;
    let on_eligible = |n: u32| eligible(&nodes[n as usize], placement);
    for &(_, n) in mine {
        counts.add(n, index.zone_of[n as usize]);
    }
    for &n in placed {
        counts.add(n, index.zone_of[n as usize]);
    }
    // Fast path: with at most one instance on every eligible node there is no skew above one.
    let busiest = mine
        .iter()
        .map(|&(_, n)| n)
        .chain(placed.iter().copied())
        .filter(|&n| on_eligible(n))
        .map(|n| counts.node[n as usize])
        .max()
        .unwrap_or(0);
    if busiest <= 1 {
        return;
    }
    // Movable instances per eligible node, largest instance id first.
    let mut movable: FastMap<u32, Vec<u32>> = FastMap::default();
    for &(e, n) in mine {
        if on_eligible(n) && !existing[e as usize].pinned {
            movable.entry(n).or_default().push(e);
        }
    }
    for list in movable.values_mut() {
        list.sort_by_key(|&e| Reverse(existing[e as usize].instance));
    }
    let targets = index.eligible(placement);
    let prefer = index.preferred(placement);
    let spread = matches!(
        placement.zone,
        Some(ccattler_core::schema::ZonePolicy::Spread)
    );
    loop {
        let least = targets
            .iter()
            .map(|&t| counts.node[t as usize])
            .min()
            .unwrap_or(0);
        let mut sources: Vec<u32> = movable
            .iter()
            .filter(|(n, list)| !list.is_empty() && counts.node[**n as usize] >= least + 2)
            .map(|(n, _)| *n)
            .collect();
        sources.sort_by_key(|&n| (Reverse(counts.node[n as usize]), nodes[n as usize].name));
        let mut planned = None;
        'sources: for &s in &sources {
            let (cs, zs) = (counts.node[s as usize], index.zone_of[s as usize]);
            for (pos, &e) in movable.get(&s).into_iter().flatten().enumerate() {
                let need = existing[e as usize].resources;
                let ports = existing[e as usize].needs;
                let best = targets
                    .iter()
                    .copied()
                    .filter(|&t| {
                        t != s
                            && counts.node[t as usize] + 2 <= cs
                            && index.usage[t as usize].fits(need)
                            && index.ports[t as usize].fits(ports)
                    })
                    .map(|t| {
                        let zt = index.zone_of[t as usize];
                        let zone = if spread {
                            counts.zone[zt as usize] - u32::from(zt == zs)
                        } else {
                            0
                        };
                        let count = counts.node[t as usize];
                        (zone, index.rank(t, count, prefer.as_deref(), need))
                    })
                    .min();
                if let Some((_, rank)) = best {
                    planned = Some((s, pos, e, rank.node));
                    break 'sources;
                }
            }
        }
        let Some((s, pos, e, t)) = planned else {
            break;
        };
        if let Some(list) = movable.get_mut(&s) {
            list.remove(pos);
        }
        let moving = &existing[e as usize];
        counts.remove(s, index.zone_of[s as usize]);
        counts.add(t, index.zone_of[t as usize]);
        // The source keeps its reservation: the old instance runs until its replacement is up.
        index.usage[t as usize].add(moving.resources);
        index.ports[t as usize].take(moving.needs);
        out.push(Move {
            instance: moving.instance,
            service: moving.service,
            from: nodes[s as usize].name,
            to: nodes[t as usize].name,
        });
    }
}

#[cfg(test)]
mod tests {
    use ccattler_core::schema::Placement;

    use super::super::Rebalance;
    use super::super::fixture::{Fixture, res};

    fn three() -> Fixture {
        Fixture::default()
            .node("n1", "8", "8Gi")
            .node("n2", "8", "8Gi")
            .node("n3", "8", "8Gi")
    }

    #[test]
    fn nodes_that_came_back_get_moves_down_to_a_skew_of_one() {
        let result = three().existing("web", "n1", 7, res("1", "1Gi")).run();
        let to = |node: &str| result.moves.iter().filter(|m| m.2 == node).count();
        assert_eq!(result.moves.len(), 4, "{result:?}");
        assert!(result.moves.iter().all(|m| m.1 == "n1"));
        assert_eq!((to("n2"), to("n3")), (2, 2));
        // Largest ids move first.
        assert_eq!(result.moves[0].0, "web-e6");
    }

    #[test]
    fn moves_respect_capacity() {
        let result = three()
            .existing("web", "n1", 6, res("1", "1Gi"))
            .existing("hog", "n2", 1, res("7", "1Gi"))
            .existing("hog", "n3", 1, res("8", "1Gi"))
            .run();
        assert_eq!(
            result.moves,
            vec![("web-e5".to_string(), "n1".to_string(), "n2".to_string())]
        );
    }

    #[test]
    fn moves_never_violate_the_placement() {
        let mut fixture = three()
            .with(|n| n.labels = [("disk".into(), "ssd".into())].into())
            .existing("db", "n1", 4, res("1", "1Gi"));
        let ssd = Placement {
            require: [("disk".to_string(), "ssd".to_string())].into(),
            ..Placement::default()
        };
        // n1 lacks the label now; only n3 has it, so n1's instances are not on an eligible node.
        for e in &mut fixture.existing {
            e.placement = ssd.clone();
        }
        assert!(fixture.run().moves.is_empty());
        let dead = fixture.clone().alive("n3", false);
        assert!(dead.run().moves.is_empty());
    }

    #[test]
    fn off_suggests_nothing_and_requested_only_looks_at_requested_services() {
        let mut fixture = three()
            .existing("web", "n1", 4, res("1", "1Gi"))
            .existing("api", "n2", 4, res("1", "1Gi"))
            .request("api", 1, res("1", "1Gi"), &Placement::default());
        fixture.rebalance = Rebalance::Off;
        assert!(fixture.run().moves.is_empty());
        fixture.rebalance = Rebalance::Requested;
        let result = fixture.run();
        assert!(result.moves.iter().all(|m| m.0.starts_with("api")));
        assert_eq!(result.moves.len(), 2, "{result:?}");
    }
}
