//! Placing requests: processing order, runs of identical requests, and the per-run priority
//! queues that keep the ranking exact without rescanning every node for every request.
//!
//! # Why the queues are exact
//!
//! Within a run (requests of one service with equal resources and placement), placing on a node
//! changes the rank of that node only: its instance count and utilisation go up, every other
//! node's terms stay as they were. The zone term of `zone spread` changes for a whole zone, so
//! each zone has its own queue and zones are compared by (zone count, best rank in the zone).
//! A node whose rank only ever grows, and which is not among the `k` best of its queue at the
//! start of a run of `k` requests, can never be picked: the `k` better ones would all have to be
//! picked first. So each queue keeps only its `k` best nodes.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use ccattler_core::schema::{Placement, Resources, ZonePolicy};

use super::index::{Index, Rank};
use super::{Ports, Request, Unsatisfied, VolumeNeed};

/// The processing order: services with a request pinned to a node (it mounts a volume
/// attached there: that node or none) first, then by service; within a service its pinned
/// requests first, then by instance id. A pinned request has one node it can use: taken
/// first, room freed there for it is not given to a request that could go anywhere. (Each
/// service's requests stay together.)
pub(crate) fn order<'r, 'a>(requests: &'r [Request<'a>]) -> Vec<&'r Request<'a>> {
    let pinned = |r: &Request<'_>| r.volumes.iter().any(|v| v.node.is_some());
    let pinning: std::collections::BTreeSet<&str> = requests
        .iter()
        .filter(|r| pinned(r))
        .map(|r| r.service)
        .collect();
    let key = |r: &Request<'a>| {
        let first = !pinning.contains(r.service);
        (first, r.service, !pinned(r), r.instance)
    };
    let mut sorted: Vec<&Request<'a>> = requests.iter().collect();
    sorted.sort_by(|a, b| key(a).cmp(&key(b)));
    sorted
}

/// Whether two requests of one service form one run (equal resources, ports, volumes and
/// placement).
pub(crate) fn same_run(a: &Request<'_>, b: &Request<'_>) -> bool {
    a.resources == b.resources
        && a.ports == b.ports
        && a.volumes == b.volumes
        && (std::ptr::eq(a.placement, b.placement) || a.placement == b.placement)
}

/// Instance counts of one service, per node and per zone; reset by [`Counts::clear`] in time
/// proportional to what was touched.
#[derive(Debug)]
pub(crate) struct Counts {
    pub node: Vec<u32>,
    pub zone: Vec<u32>,
    touched: Vec<u32>,
}

impl Counts {
    pub(super) fn new(nodes: usize, zones: usize) -> Self {
        Counts {
            node: vec![0; nodes],
            zone: vec![0; zones],
            touched: Vec::new(),
        }
    }
    /// One more instance of the service on node `n` in zone `z`.
    pub(super) fn add(&mut self, n: u32, z: u32) {
        self.node[n as usize] += 1;
        self.zone[z as usize] += 1;
        self.touched.push(n);
    }
    /// One fewer instance on node `n` in zone `z` (it was counted before).
    pub(super) fn remove(&mut self, n: u32, z: u32) {
        self.node[n as usize] -= 1;
        self.zone[z as usize] -= 1;
    }
    /// Back to all zeros.
    pub(super) fn clear(&mut self, zone_of: &[u32]) {
        for n in self.touched.drain(..) {
            self.node[n as usize] = 0;
            self.zone[zone_of[n as usize] as usize] = 0;
        }
    }
}

/// A request pinned to a node (by a volume attached there) that did not fit holds its need
/// of that node for the rest of the call, if the node passes its filters and could ever take
/// it: the node then takes nothing that would leave it short (see "Processing order").
fn hold_pinned(
    index: &mut Index<'_>,
    eligible: &[u32],
    need: Resources,
    volumes: &[VolumeNeed<'_>],
) {
    let Some(&n) = volumes
        .iter()
        .find_map(|v| v.node)
        .and_then(|node| index.by_name.get(node))
    else {
        return;
    };
    let usage = &mut index.usage[n as usize];
    if eligible.contains(&n) && usage.could_ever_fit(need) {
        usage.add(need);
    }
}

/// What a run of requests produced, in the run's order.
pub(crate) enum Outcome<'a> {
    Placed(u32),
    Unsatisfied(Unsatisfied<'a>),
}

/// Places one run of requests (same service, resources, ports, volumes and placement), updating
/// usage, host ports, storage and counts. Returns one outcome per request.
pub(crate) fn place_run<'a>(
    index: &mut Index<'a>,
    counts: &mut Counts,
    placement: &'a Placement,
    (need, ports, volumes): (Resources, Ports<'_>, &'a [VolumeNeed<'a>]),
    k: usize,
) -> Vec<Outcome<'a>> {
    let spread = matches!(placement.zone, Some(ZonePolicy::Spread));
    let prefer = index.preferred(placement);
    let prefer = prefer.as_deref();
    let eligible = index.eligible(placement);
    let idx = &*index;
    let fits = |idx: &Index<'a>, n: u32| {
        let i = n as usize;
        idx.usage[i].fits(need)
            && idx.ports[i].fits(ports)
            && idx.storage[i].check(idx.nodes[i].name, volumes).is_ok()
    };
    let candidates = eligible
        .iter()
        .filter(|&&n| fits(idx, n))
        .map(|&n| idx.rank(n, counts.node[n as usize], prefer, need));
    // One queue per zone when spreading, else a single queue.
    let mut queues: Vec<Vec<Reverse<Rank<'a>>>> =
        vec![Vec::new(); if spread { idx.zones } else { 1 }];
    for rank in candidates {
        let q = if spread {
            idx.zone_of[rank.node as usize] as usize
        } else {
            0
        };
        queues[q].push(Reverse(rank));
    }
    let mut heaps: Vec<(u32, BinaryHeap<Reverse<Rank<'a>>>)> = queues
        .into_iter()
        .enumerate()
        .filter(|(_, q)| !q.is_empty())
        .map(|(z, mut q)| {
            if q.len() > k {
                // Keep the k best (Reverse: the best are the largest).
                q.select_nth_unstable_by(k - 1, |a, b| b.cmp(a));
                q.truncate(k);
            }
            (u32::try_from(z).unwrap_or(u32::MAX), BinaryHeap::from(q))
        })
        .collect();

    let mut out = Vec::with_capacity(k);
    while out.len() < k {
        let best = heaps
            .iter_mut()
            .filter_map(|(z, heap)| {
                let top = heap.peek()?.0;
                Some((*z, top, heap))
            })
            .min_by_key(|(z, top, _)| (if spread { counts.zone[*z as usize] } else { 0 }, *top));
        let Some((_, top, heap)) = best else {
            let why = Unsatisfied::diagnose(
                index.nodes,
                (&index.usage, &index.ports, &index.storage),
                placement,
                (need, ports, volumes),
            );
            while out.len() < k {
                out.push(Outcome::Unsatisfied(why.clone()));
                hold_pinned(index, &eligible, need, volumes);
            }
            break;
        };
        heap.pop();
        let n = top.node;
        index.usage[n as usize].add(need);
        index.ports[n as usize].take(ports);
        index.storage[n as usize].take(volumes);
        counts.add(n, index.zone_of[n as usize]);
        out.push(Outcome::Placed(n));
        if fits(index, n) {
            heap.push(Reverse(index.rank(
                n,
                counts.node[n as usize],
                prefer,
                need,
            )));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use ccattler_core::schema::{Placement, PortRange, ZonePolicy};

    use super::super::fixture::{Fixture, res};

    fn labels(pairs: &[(&str, &str)]) -> std::collections::BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn tainted_nodes_only_take_services_that_accept_every_taint() {
        let accepts = Placement {
            accept: vec!["dedicated".into()],
            ..Placement::default()
        };
        let fixture = Fixture::default()
            .node("plain", "2", "4Gi")
            .node("ded", "8", "4Gi")
            .with(|n| n.taints = vec!["dedicated".into()])
            .node("both", "8", "4Gi")
            .with(|n| n.taints = vec!["dedicated".into(), "gpu".into()]);
        let result = fixture
            .clone()
            .request("web", 3, res("1", "1Gi"), &Placement::default())
            .request("batch", 3, res("1", "1Gi"), &accepts)
            .run();
        // batch (first by name) goes ded, plain, ded; web only fits the last core of plain.
        assert_eq!(result.on("plain"), 2, "{result:?}");
        assert_eq!(result.on("ded"), 2);
        assert_eq!(result.on("both"), 0, "gpu is not accepted");
        assert_eq!(result.placements["web-000"], "plain");
        assert_eq!(result.unsatisfied.len(), 2);
    }

    #[test]
    fn require_is_never_relaxed() {
        let ssd = Placement {
            require: labels(&[("disk", "ssd")]),
            ..Placement::default()
        };
        let result = Fixture::default()
            .node("fast", "1", "4Gi")
            .with(|n| n.labels = labels(&[("disk", "ssd")]))
            .node("big", "64", "256Gi")
            .with(|n| n.labels = labels(&[("disk", "hdd")]))
            .request("db", 3, res("1", "1Gi"), &ssd)
            .run();
        assert_eq!(result.on("fast"), 1);
        assert_eq!(result.on("big"), 0);
        assert_eq!(result.unsatisfied.len(), 2);
    }

    #[test]
    fn architecture_and_zone_only_filter() {
        let arm = Placement {
            architecture: Some("arm64".into()),
            ..Placement::default()
        };
        let z2 = Placement {
            zone: Some(ZonePolicy::Only("z2".into())),
            ..Placement::default()
        };
        let result = Fixture::default()
            .node("a", "8", "8Gi")
            .with(|n| n.zone = Some("z1".into()))
            .node("b", "8", "8Gi")
            .with(|n| {
                n.architecture = "arm64".into();
                n.zone = Some("z1".into());
            })
            .node("c", "8", "8Gi")
            .with(|n| n.zone = Some("z2".into()))
            .request("arm", 3, res("1", "1Gi"), &arm)
            .request("zoned", 3, res("1", "1Gi"), &z2)
            .run();
        assert!(result.unsatisfied.is_empty());
        assert!(
            result
                .placements
                .iter()
                .all(|(i, n)| if i.starts_with("arm") {
                    n == "b"
                } else {
                    n == "c"
                })
        );
    }

    #[test]
    fn zone_spread_evens_out_three_zones_before_nodes() {
        let spread = Placement {
            zone: Some(ZonePolicy::Spread),
            ..Placement::default()
        };
        // z1 has four nodes, z2 two, z3 one: spreading goes by zone first.
        let mut fixture = Fixture::default();
        for (name, zone) in [
            ("a1", "z1"),
            ("a2", "z1"),
            ("a3", "z1"),
            ("a4", "z1"),
            ("b1", "z2"),
            ("b2", "z2"),
            ("c1", "z3"),
        ] {
            fixture = fixture
                .node(name, "16", "16Gi")
                .with(|n| n.zone = Some(zone.into()));
        }
        let result = fixture
            .existing("web", "a1", 1, res("1", "1Gi"))
            .request("web", 8, res("1", "1Gi"), &spread)
            .run();
        let zone = |prefix: &str| {
            result
                .placements
                .values()
                .filter(|n| n.starts_with(prefix))
                .count()
        };
        // With the existing one in z1: 3 per zone in total.
        assert_eq!((zone("a"), zone("b"), zone("c")), (2, 3, 3));
        assert_eq!(result.on("a1"), 0, "spread within the zone too");
    }

    #[test]
    fn prefer_ranks_before_utilisation_but_after_spread() {
        let prefer = Placement {
            prefer: labels(&[("disk", "ssd")]),
            ..Placement::default()
        };
        let result = Fixture::default()
            .node("empty", "16", "16Gi")
            .node("ssd1", "4", "4Gi")
            .with(|n| n.labels = labels(&[("disk", "ssd")]))
            .node("ssd2", "4", "4Gi")
            .with(|n| n.labels = labels(&[("disk", "ssd")]))
            .existing("other", "ssd2", 1, res("2", "1Gi"))
            .request("web", 3, res("1", "1Gi"), &prefer)
            .run();
        // ssd1 first (preferred, less used than ssd2), then ssd2, then spread wins over prefer.
        assert_eq!(result.placements["web-000"], "ssd1");
        assert_eq!(result.placements["web-001"], "ssd2");
        assert_eq!(result.placements["web-002"], "empty");
    }

    #[test]
    fn existing_allocation_counts_against_capacity_and_for_spread() {
        let result = Fixture::default()
            .node("a", "4", "8Gi")
            .node("b", "4", "8Gi")
            .existing("other", "a", 1, res("3500m", "1Gi"))
            .existing("web", "b", 2, res("500m", "1Gi"))
            .request("web", 3, res("1", "1Gi"), &Placement::default())
            .run();
        // a has 500m left; b has 3 cores and two web instances already.
        assert_eq!(result.on("a"), 0);
        assert_eq!(result.on("b"), 3);
        assert!(result.unsatisfied.is_empty());
    }

    #[test]
    fn a_fixed_host_port_goes_once_per_node_and_is_named_when_none_is_left() {
        let any = Placement::default();
        let result = Fixture::default()
            .node("a", "8", "8Gi")
            .node("b", "8", "8Gi")
            .node("c", "8", "8Gi")
            .existing("other", "c", 1, res("0", "0"))
            .ports(1, &[80], 0, &[80])
            .request("ingress", 3, res("1", "1Gi"), &any)
            .ports(3, &[80], 1, &[])
            .run();
        // c's port 80 is held: a and b take one each, the third fits nowhere.
        assert_eq!((result.on("a"), result.on("b"), result.on("c")), (1, 1, 0));
        assert_eq!(
            result.unsatisfied["ingress-002"],
            "0/3 nodes can run it: 3 have host port 80 taken"
        );
    }

    #[test]
    fn a_port_range_that_runs_out_is_named() {
        let any = Placement::default();
        let small = PortRange {
            first: 100,
            last: 102,
        };
        let result = Fixture::default()
            .node("a", "8", "8Gi")
            .with(|n| n.ports = small)
            .existing("other", "a", 1, res("0", "0"))
            .ports(1, &[], 1, &[101])
            .request("web", 2, res("1", "1Gi"), &any)
            .ports(2, &[], 1, &[])
            .request("api", 1, res("1", "1Gi"), &any)
            .ports(1, &[], 2, &[])
            .run();
        // Two ports of three are free: api (first by name) needs both, web gets none.
        assert_eq!(result.placements["api-002"], "a");
        assert_eq!(
            result.unsatisfied["web-000"],
            "0/1 nodes can run it: 1 has too few free host ports (needs 1)"
        );
    }

    #[test]
    fn least_utilised_after_placement_with_exact_fractions() {
        // After placing 1 cpu: a is 3/4 used by cpu, b is 2/3 used by memory (2Gi of 3Gi).
        let result = Fixture::default()
            .node("a", "4", "64Gi")
            .existing("x", "a", 1, res("2", "0"))
            .node("b", "64", "3Gi")
            .existing("y", "b", 1, res("0", "1Gi"))
            .request("web", 1, res("1", "1Gi"), &Placement::default())
            .run();
        assert_eq!(result.placements["web-000"], "b");
    }
}
