//! [`LiveIndex::place`]: the ranking of [`schedule`](crate::scheduler::schedule), read off the
//! live index one request at a time.
//!
//! # Why the search is exact
//!
//! The ranking compares, in order: the zone's count of the service (`zone spread` only), the
//! node's count, `prefer` labels matched, utilisation after placement, name. A node without the
//! service beats every node with it in the same zone, so the search first looks, per zone, at the
//! nodes without the service, and at the nodes holding it (few: at most the service's instances)
//! only when needed. Among nodes without the service, classes come by `prefer` matched (the same
//! for all of a class), and inside a class loads come by utilisation before placement. Placing
//! adds to a node's usage, so its utilisation after placement is at least the one before: once a
//! load's utilisation before exceeds the best utilisation after found, no later load of the class
//! can win. Nodes of one load are equal but for the name, so the first without the service is the
//! only one of them to consider.
//!
//! # Long runs
//!
//! Once every eligible node holds the service, that search looks at every node for every
//! request: a run of `k` requests on `n` nodes cost `k * n`. A run (requests of one service with
//! equal resources and placement) longer than [`LONG_RUN`] is placed from a heap per zone
//! instead: every eligible node that fits is ranked once, the best is popped, and only the node
//! picked is ranked again, since placing on a node changes its own rank and its zone's count and
//! nothing else. That costs `(n + k) log n`, and picks exactly what the search picks.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use ccattler_core::schema::{Cpu, Memory, Placement, Resources, ZonePolicy};

use super::super::index::{Frac, eligible, preferred};
use super::super::place::{order, same_run};
use super::super::ports::HostPorts;
use super::super::volume::Storage;
use super::super::{Node, Ports, Request, Unsatisfied, VolumeNeed};
use super::{LiveIndex, Load};

/// A candidate's rank: smaller is better (see the module docs).
type Rank<'n> = (u32, u32, Reverse<u32>, Frac, &'n str);

/// Runs longer than this are placed from heaps ("Long runs" in the module docs); shorter ones
/// by a search per request, which costs nothing per node when few nodes hold the service.
const LONG_RUN: usize = 32;

/// A node in a run's heap: its count of the service, `prefer` matched, utilisation after one
/// more placement, name (the rank without the zone term), smallest first.
type Ranked = Reverse<(u32, Reverse<u32>, Frac, String)>;

/// What `place` changed in the index, to undo.
#[derive(Debug, Default)]
struct Undo {
    loads: Vec<(String, Load)>,
    counts: Vec<(String, String)>,
    /// Host ports taken: node, fixed ports, ports of the range.
    ports: Vec<(String, Vec<u16>, u32)>,
    /// Storage taken: node, bytes.
    storage: Vec<(String, u64)>,
}

/// The eligible classes of one placement.
struct Eligible {
    /// (class, `prefer` labels matched), most matched first, then by class.
    classes: Vec<(usize, u32)>,
    /// Per class: `prefer` labels matched when eligible.
    by_class: Vec<Option<u32>>,
}

/// What [`LiveIndex::place`] decided. Every request is in exactly one of the two maps.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Placed<'a> {
    /// Instance id to the node it goes to.
    pub placements: BTreeMap<&'a str, String>,
    /// Instance id to why no node can take it (the text of its
    /// [`Unsatisfied`](crate::scheduler::Unsatisfied) reason).
    pub unsatisfied: BTreeMap<&'a str, String>,
}

impl LiveIndex {
    /// Places `requests` as [`schedule`](crate::scheduler::schedule) would with these nodes,
    /// instances and [`Rebalance::Off`](crate::scheduler::Rebalance::Off). Leaves the index as
    /// it was.
    pub(crate) fn place<'a>(&mut self, requests: &[Request<'a>]) -> Placed<'a> {
        for request in requests {
            self.learn(request.placement);
        }
        let mut undo = Undo::default();
        let placed = self.place_in_order(requests, &mut undo);
        for (service, node) in undo.counts.iter().rev() {
            self.uncount(service, node);
        }
        for (node, fixed, any) in undo.ports.iter().rev() {
            if let Some(table) = self.ports.get_mut(node) {
                table.untake(Ports { fixed, any: *any });
            }
        }
        for (node, load) in undo.loads.into_iter().rev() {
            self.reload(&node, load);
        }
        for (node, bytes) in undo.storage.iter().rev() {
            let used = self.storage_used.get(node).copied().unwrap_or(0);
            self.set_storage(node, Memory::from_bytes(used.saturating_sub(*bytes)));
        }
        placed
    }

    fn place_in_order<'a>(&mut self, requests: &[Request<'a>], undo: &mut Undo) -> Placed<'a> {
        let sorted = order(requests);
        let mut out = Placed::default();
        for service in sorted.chunk_by(|a, b| a.service == b.service) {
            let name = service[0].service;
            let spreads = service
                .iter()
                .any(|r| matches!(r.placement.zone, Some(ZonePolicy::Spread)));
            let mut zone_counts = if spreads {
                self.zone_counts(name)
            } else {
                Vec::new()
            };
            for run in service.chunk_by(|a, b| same_run(a, b)) {
                let placement = run[0].placement;
                let need = run[0].resources;
                let ports = run[0].ports;
                let volumes = run[0].volumes;
                let spread = matches!(placement.zone, Some(ZonePolicy::Spread));
                let eligible = self.eligible(placement);
                if run.len() > self.long_run.unwrap_or(LONG_RUN) {
                    let zc = &mut zone_counts;
                    self.place_long_run(name, run, spread, &eligible, zc, undo, &mut out);
                    continue;
                }
                for (i, request) in run.iter().enumerate() {
                    let zc = if spread { &zone_counts[..] } else { &[] };
                    let needs = (need, ports, volumes);
                    let Some(node) = self.best(name, needs, &eligible, zc) else {
                        // Nothing changes until the run ends: the rest fit nowhere either.
                        let why = self.diagnose(placement, needs);
                        for request in &run[i..] {
                            out.unsatisfied.insert(request.instance, why.clone());
                            self.hold_pinned(placement, need, volumes, undo);
                        }
                        break;
                    };
                    let node = node.to_owned();
                    self.take(&node, name, needs, undo, &mut zone_counts);
                    out.placements.insert(request.instance, node);
                }
            }
        }
        out
    }

    /// Places a run longer than [`LONG_RUN`] from one heap per zone (one heap without
    /// `spread`): see "Long runs" in the module docs.
    #[allow(clippy::too_many_arguments)]
    fn place_long_run<'a>(
        &mut self,
        service: &str,
        run: &[&Request<'a>],
        spread: bool,
        eligible: &Eligible,
        zone_counts: &mut [u32],
        undo: &mut Undo,
        out: &mut Placed<'a>,
    ) {
        let (placement, need, ports) = (run[0].placement, run[0].resources, run[0].ports);
        let volumes = run[0].volumes;
        let needs = (need, ports, volumes);
        let counts = self.counts.get(service);
        let mut heaps: BTreeMap<u32, BinaryHeap<Ranked>> = BTreeMap::new();
        for &(class, matched) in &eligible.classes {
            let zone = if spread { self.classes[class].zone } else { 0 };
            let heap = heaps.entry(zone).or_default();
            for (load, names) in &self.classes[class].by_load {
                let usage = load.usage();
                if !usage.fits(need) {
                    continue;
                }
                let util = usage.util_after(need);
                let fits = |n: &&String| self.ports_fit(n, ports) && self.volumes_fit(n, volumes);
                for node in names.iter().filter(fits) {
                    let held = counts.and_then(|c| c.get(node)).copied().unwrap_or(0);
                    heap.push(Reverse((held, Reverse(matched), util, node.clone())));
                }
            }
        }
        for (i, request) in run.iter().enumerate() {
            let zone_count = |zone: u32| match spread {
                true => zone_counts.get(zone as usize).copied().unwrap_or(0),
                false => 0,
            };
            let best = heaps
                .iter()
                .filter_map(|(&zone, heap)| {
                    // Compared by the rank itself (the heap's `Reverse` sorts the other way).
                    heap.peek()
                        .map(|Reverse(top)| ((zone_count(zone), top), zone))
                })
                .min()
                .map(|(_, zone)| zone);
            let Some(Reverse((held, matched, _, node))) = best
                .and_then(|zone| heaps.get_mut(&zone))
                .and_then(BinaryHeap::pop)
            else {
                let why = self.diagnose(placement, needs);
                for request in &run[i..] {
                    out.unsatisfied.insert(request.instance, why.clone());
                    self.hold_pinned(placement, need, volumes, undo);
                }
                return;
            };
            self.take(&node, service, needs, undo, zone_counts);
            let Some(live) = self.nodes.get(&node).copied() else {
                continue;
            };
            let usage = live.load.usage();
            if usage.fits(need) && self.ports_fit(&node, ports) && self.volumes_fit(&node, volumes)
            {
                let zone = if spread {
                    self.classes[live.class].zone
                } else {
                    0
                };
                let again = (held + 1, matched, usage.util_after(need), node.clone());
                heaps.entry(zone).or_default().push(Reverse(again));
            }
            out.placements.insert(request.instance, node);
        }
    }

    /// Why a request fits nowhere, every node counted: the one pass over all nodes.
    fn diagnose<'a>(
        &self,
        placement: &'a Placement,
        needs: (Resources, Ports<'_>, &[VolumeNeed<'a>]),
    ) -> String {
        let mut nodes = Vec::with_capacity(self.nodes.len());
        let mut usage = Vec::with_capacity(self.nodes.len());
        let mut host_ports = Vec::with_capacity(self.nodes.len());
        let mut storage: Vec<Storage> = Vec::with_capacity(self.nodes.len());
        for (name, n) in &self.nodes {
            storage.push(self.storage(name));
            host_ports.push(
                self.ports
                    .get(name)
                    .cloned()
                    .unwrap_or_else(HostPorts::none),
            );
            let attrs = &self.classes[n.class].attrs;
            nodes.push(Node {
                name,
                cpu: Cpu::from_millis(n.load.cpu_cap),
                memory: Memory::from_bytes(n.load.mem_cap),
                alive: n.alive,
                ..attrs.node()
            });
            usage.push(n.load.usage());
        }
        let tables = (&usage[..], &host_ports[..], &storage[..]);
        Unsatisfied::diagnose(&nodes, tables, placement, needs).to_string()
    }

    /// How many instances of `service` each zone holds (on known nodes, alive or not).
    fn zone_counts(&self, service: &str) -> Vec<u32> {
        let mut zc = vec![0; self.zones.len()];
        for (node, count) in self.counts.get(service).into_iter().flatten() {
            if let Some(n) = self.nodes.get(node) {
                zc[self.classes[n.class].zone as usize] += count;
            }
        }
        zc
    }

    fn eligible(&self, placement: &Placement) -> Eligible {
        let mut by_class = vec![None; self.classes.len()];
        let mut classes = Vec::new();
        for (i, class) in self.classes.iter().enumerate() {
            let node = class.attrs.node();
            if !class.by_load.is_empty() && eligible(&node, placement) {
                let matched = preferred(&node, &placement.prefer);
                by_class[i] = Some(matched);
                classes.push((i, matched));
            }
        }
        classes.sort_unstable_by_key(|&(i, matched)| (Reverse(matched), i));
        Eligible { classes, by_class }
    }

    /// The best node for one request of `service` (`zc`: the zone counts when spreading, else
    /// empty), or `None` when no node can take it.
    fn best(
        &self,
        service: &str,
        (need, ports, volumes): (Resources, Ports<'_>, &[VolumeNeed<'_>]),
        eligible: &Eligible,
        zc: &[u32],
    ) -> Option<&str> {
        let counts = self.counts.get(service);
        let holds = |node: &str| counts.and_then(|c| c.get(node)).copied().unwrap_or(0);
        let zone_count = |class: usize| zc.get(self.classes[class].zone as usize).copied();
        let mut best: Option<Rank<'_>> = None;
        let mut zones_without = false;
        if zc.is_empty() {
            best = self.best_without(&eligible.classes, 0, (need, ports, volumes), &holds);
            zones_without = best.is_none();
        } else {
            let mut zones: Vec<u32> = eligible
                .classes
                .iter()
                .map(|&(c, _)| self.classes[c].zone)
                .collect();
            zones.sort_unstable();
            zones.dedup();
            for zone in zones {
                let classes: Vec<(usize, u32)> = eligible
                    .classes
                    .iter()
                    .copied()
                    .filter(|&(c, _)| self.classes[c].zone == zone)
                    .collect();
                let count = zc.get(zone as usize).copied().unwrap_or(0);
                match self.best_without(&classes, count, (need, ports, volumes), &holds) {
                    Some(rank) => keep_min(&mut best, rank),
                    None => zones_without = true,
                }
            }
        }
        if zones_without {
            // Nodes holding the service: the best of those in zones without a free node.
            for (node, &count) in counts.into_iter().flatten() {
                let Some(n) = self.nodes.get(node).filter(|n| n.alive) else {
                    continue;
                };
                let Some(matched) = eligible.by_class.get(n.class).copied().flatten() else {
                    continue;
                };
                let usage = n.load.usage();
                if !usage.fits(need)
                    || !self.ports_fit(node, ports)
                    || !self.volumes_fit(node, volumes)
                {
                    continue;
                }
                let zone = zone_count(n.class).unwrap_or(0);
                let rank = (
                    zone,
                    count,
                    Reverse(matched),
                    usage.util_after(need),
                    node.as_str(),
                );
                keep_min(&mut best, rank);
            }
        }
        best.map(|rank| rank.4)
    }

    /// The best node not holding the service among `classes` (sorted by `prefer` matched),
    /// ranked with zone count `zone`.
    fn best_without<'s>(
        &'s self,
        classes: &[(usize, u32)],
        zone: u32,
        (need, ports, volumes): (Resources, Ports<'_>, &[VolumeNeed<'_>]),
        holds: &dyn Fn(&str) -> u32,
    ) -> Option<Rank<'s>> {
        let mut best: Option<(u32, Frac, &'s str)> = None;
        for &(class, matched) in classes {
            if best.is_some_and(|b| b.0 > matched) {
                break; // every later class matches fewer `prefer` labels
            }
            for (load, names) in &self.classes[class].by_load {
                if best.is_some_and(|b| load.util > b.1) {
                    break; // utilisation after placement only grows from here
                }
                let usage = load.usage();
                if !usage.fits(need) {
                    continue;
                }
                let util = usage.util_after(need);
                if best.is_some_and(|b| util > b.1) {
                    continue;
                }
                let free = |n: &&String| {
                    holds(n) == 0 && self.ports_fit(n, ports) && self.volumes_fit(n, volumes)
                };
                let Some(name) = names.iter().find(free) else {
                    continue;
                };
                let better = best.is_none_or(|b| (util, name.as_str()) < (b.1, b.2));
                if better {
                    best = Some((matched, util, name));
                }
            }
        }
        best.map(|(matched, util, name)| (zone, 0, Reverse(matched), util, name))
    }

    /// A request pinned to a node (by a volume attached there) that did not fit holds `need`
    /// of that node for the rest of the call, as [`schedule`](super::super::schedule) does.
    fn hold_pinned(
        &mut self,
        placement: &Placement,
        need: Resources,
        volumes: &[VolumeNeed<'_>],
        undo: &mut Undo,
    ) {
        if let Some(node) = volumes.iter().find_map(|v| v.node)
            && let Some(before) = self.hold(node, placement, need)
        {
            undo.loads.push((node.to_owned(), before));
        }
    }

    /// Records one placement on `node`: its usage and the service's counts, to undo later.
    fn take(
        &mut self,
        node: &str,
        service: &str,
        (need, ports, volumes): (Resources, Ports<'_>, &[VolumeNeed<'_>]),
        undo: &mut Undo,
        zone_counts: &mut [u32],
    ) {
        let Some(n) = self.nodes.get(node).copied() else {
            return;
        };
        let l = n.load;
        self.reload(node, l.plus(need));
        undo.loads.push((node.to_owned(), l));
        *self
            .counts
            .entry(service.to_owned())
            .or_default()
            .entry(node.to_owned())
            .or_default() += 1;
        undo.counts.push((service.to_owned(), node.to_owned()));
        if let Some(table) = self.ports.get_mut(node) {
            table.take(ports);
            undo.ports
                .push((node.to_owned(), ports.fixed.to_vec(), ports.any));
        }
        if !volumes.is_empty() {
            let mut storage = self.storage(node);
            let before = storage.used;
            storage.take(volumes);
            self.set_storage(node, Memory::from_bytes(storage.used));
            undo.storage
                .push((node.to_owned(), storage.used.saturating_sub(before)));
        }
        if let Some(zc) = zone_counts.get_mut(self.classes[n.class].zone as usize) {
            *zc += 1;
        }
    }
}

fn keep_min<'n>(best: &mut Option<Rank<'n>>, rank: Rank<'n>) {
    if best.is_none_or(|b| rank < b) {
        *best = Some(rank);
    }
}
