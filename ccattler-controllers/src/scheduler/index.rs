//! Per-call tables: node usage, name and zone lookups, the ranking key, and caches of the
//! eligible node set per distinct constraint signature.
//!
//! Everything here is built once per call in time linear in the nodes and existing instances;
//! nothing is sorted over all nodes.

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};
use std::rc::Rc;

use ccattler_core::schema::{Placement, Resources, ZonePolicy};

use super::ports::HostPorts;
use super::volume::Storage;
use super::{Node, ScheduleInput};

/// A small, fast, deterministic hasher for the per-call maps (keys are short names). Iteration
/// order of these maps is never observable in the output.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct FastHasher(u64);

impl FastHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Hasher for FastHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
        let mut word = [0u8; 8];
        word[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
        self.add(u64::from_le_bytes(word) ^ bytes.len() as u64);
    }
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// A hash map with [`FastHasher`].
pub(crate) type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

/// A non-negative fraction `num / den` (`den > 0`), compared exactly with 128-bit products.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Frac {
    num: u64,
    den: u64,
}

impl Frac {
    /// `used / capacity`, with an empty capacity counting as unused (only zero fits in it).
    fn of(used: u64, capacity: u64) -> Frac {
        if capacity == 0 {
            Frac { num: 0, den: 1 }
        } else {
            Frac {
                num: used,
                den: capacity,
            }
        }
    }
}

impl Ord for Frac {
    fn cmp(&self, other: &Self) -> Ordering {
        (u128::from(self.num) * u128::from(other.den))
            .cmp(&(u128::from(other.num) * u128::from(self.den)))
    }
}
impl PartialOrd for Frac {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl PartialEq for Frac {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Frac {}

/// A node's rank for one request, without the zone term (zones are compared outside): smaller is
/// better. Field order is comparison order, so the derived `Ord` is the documented ranking.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Rank<'a> {
    /// Instances of the service on the node.
    pub count: u32,
    /// `u32::MAX` minus the number of matched `prefer` labels.
    pub unpreferred: u32,
    /// Utilisation after placement: the larger of the cpu and memory fractions.
    pub util: Frac,
    /// The node's name.
    pub name: &'a str,
    /// The node's index (equal names never happen with distinct indexes in valid input).
    pub node: u32,
}

/// Capacity and what is reserved of it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Usage {
    pub cpu_cap: u64,
    pub mem_cap: u64,
    pub cpu: u64,
    pub mem: u64,
}

impl Usage {
    /// Whether `need` fits in what is left.
    pub(crate) fn fits(&self, need: Resources) -> bool {
        self.cpu
            .checked_add(need.cpu.millis())
            .is_some_and(|c| c <= self.cpu_cap)
            && self
                .mem
                .checked_add(need.memory.bytes())
                .is_some_and(|m| m <= self.mem_cap)
    }
    /// Utilisation once `need` is added (call only when it fits).
    pub(crate) fn util_after(&self, need: Resources) -> Frac {
        let cpu = Frac::of(self.cpu + need.cpu.millis(), self.cpu_cap);
        let mem = Frac::of(self.mem + need.memory.bytes(), self.mem_cap);
        cpu.max(mem)
    }
    /// Reserves `need` (call only when it fits).
    pub(crate) fn add(&mut self, need: Resources) {
        self.cpu += need.cpu.millis();
        self.mem += need.memory.bytes();
    }

    /// Whether `need` fits in the whole capacity (what an empty node would have left).
    pub(crate) fn could_ever_fit(&self, need: Resources) -> bool {
        need.cpu.millis() <= self.cpu_cap && need.memory.bytes() <= self.mem_cap
    }
}

/// The constraints that decide eligibility independently of usage: alive, architecture,
/// zone-only, required labels, accepted taints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Signature<'a> {
    architecture: Option<&'a str>,
    zone: Option<&'a str>,
    require: &'a BTreeMap<String, String>,
    accept: &'a [String],
}

impl<'a> Signature<'a> {
    fn of(placement: &'a Placement) -> Self {
        Signature {
            architecture: placement.architecture.as_deref(),
            zone: match &placement.zone {
                Some(ZonePolicy::Only(zone)) => Some(zone),
                _ => None,
            },
            require: &placement.require,
            accept: &placement.accept,
        }
    }
}

/// Whether `node` passes every hard filter of `placement` except resources.
pub(crate) fn eligible(node: &Node<'_>, placement: &Placement) -> bool {
    node.alive
        && placement
            .architecture
            .as_deref()
            .is_none_or(|arch| arch == node.architecture)
        && match &placement.zone {
            Some(ZonePolicy::Only(zone)) => node.zone == Some(zone.as_str()),
            _ => true,
        }
        && placement
            .require
            .iter()
            .all(|(k, v)| node.labels.get(k) == Some(v))
        && node.taints.iter().all(|t| placement.accept.contains(t))
}

/// How many of `prefer` the node matches.
pub(crate) fn preferred(node: &Node<'_>, prefer: &BTreeMap<String, String>) -> u32 {
    let matched = prefer
        .iter()
        .filter(|(k, v)| node.labels.get(*k) == Some(*v))
        .count();
    u32::try_from(matched).unwrap_or(u32::MAX)
}

/// The per-call tables.
#[derive(Debug)]
pub(crate) struct Index<'a> {
    pub nodes: &'a [Node<'a>],
    pub usage: Vec<Usage>,
    /// Each node's host ports.
    pub ports: Vec<HostPorts>,
    /// Each node's storage for volumes.
    pub storage: Vec<Storage>,
    pub by_name: FastMap<&'a str, u32>,
    /// Zone number of each node (`None` is a zone of its own for spreading).
    pub zone_of: Vec<u32>,
    pub zones: usize,
    eligible: FastMap<Signature<'a>, Rc<[u32]>>,
    prefer: FastMap<&'a BTreeMap<String, String>, Rc<[u32]>>,
}

impl<'a> Index<'a> {
    /// Node tables, with nothing reserved yet.
    pub(super) fn new(input: &ScheduleInput<'a>) -> Self {
        let nodes = input.nodes;
        let mut by_name = FastMap::default();
        let mut zone_ids: FastMap<Option<&str>, u32> = FastMap::default();
        let mut zone_of = Vec::with_capacity(nodes.len());
        let mut usage = Vec::with_capacity(nodes.len());
        let ports = nodes.iter().map(|n| HostPorts::new(n.ports)).collect();
        let storage = nodes
            .iter()
            .map(|n| Storage {
                cap: n.storage.bytes(),
                used: 0,
            })
            .collect();
        for (i, node) in nodes.iter().enumerate() {
            let i = u32::try_from(i).unwrap_or(u32::MAX);
            by_name.entry(node.name).or_insert(i);
            let next = u32::try_from(zone_ids.len()).unwrap_or(u32::MAX);
            zone_of.push(*zone_ids.entry(node.zone).or_insert(next));
            usage.push(Usage {
                cpu_cap: node.cpu.millis(),
                mem_cap: node.memory.bytes(),
                cpu: 0,
                mem: 0,
            });
        }
        Index {
            nodes,
            usage,
            ports,
            storage,
            by_name,
            zone_of,
            zones: zone_ids.len(),
            eligible: FastMap::default(),
            prefer: FastMap::default(),
        }
    }

    /// Reserves what an existing instance holds on node `n` (saturating: existing instances may
    /// overcommit a node that shrank).
    pub(super) fn reserve(&mut self, n: u32, need: Resources) {
        let u = &mut self.usage[n as usize];
        u.cpu = u.cpu.saturating_add(need.cpu.millis());
        u.mem = u.mem.saturating_add(need.memory.bytes());
    }

    /// The nodes passing every usage-independent filter of `placement`, in input order; computed
    /// once per distinct signature per call.
    pub(super) fn eligible(&mut self, placement: &'a Placement) -> Rc<[u32]> {
        let nodes = self.nodes;
        let list = self
            .eligible
            .entry(Signature::of(placement))
            .or_insert_with(|| {
                (0..nodes.len())
                    .filter(|&i| eligible(&nodes[i], placement))
                    .filter_map(|i| u32::try_from(i).ok())
                    .collect()
            });
        Rc::clone(list)
    }

    /// Matched `prefer` labels per node, computed once per distinct `prefer` per call; `None`
    /// when there is nothing to prefer.
    pub(super) fn preferred(&mut self, placement: &'a Placement) -> Option<Rc<[u32]>> {
        if placement.prefer.is_empty() {
            return None;
        }
        let nodes = self.nodes;
        let counts = self.prefer.entry(&placement.prefer).or_insert_with(|| {
            nodes
                .iter()
                .map(|n| preferred(n, &placement.prefer))
                .collect()
        });
        Some(Rc::clone(counts))
    }

    /// The rank of node `n` for a request needing `need`, given the service's `count` there.
    pub(super) fn rank(
        &self,
        n: u32,
        count: u32,
        prefer: Option<&[u32]>,
        need: Resources,
    ) -> Rank<'a> {
        let i = n as usize;
        Rank {
            count,
            unpreferred: u32::MAX - prefer.map_or(0, |p| p[i]),
            util: self.usage[i].util_after(need),
            name: self.nodes[i].name,
            node: n,
        }
    }
}
