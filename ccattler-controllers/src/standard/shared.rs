//! [`SharedCluster`]: one decoded [`Cluster`] that the caches of several controllers in one
//! process patch and read, each for its own view.
//!
//! # How a reader catches up
//!
//! Each controller's runner loop keeps its own view, so two controllers' views share no tree
//! nodes and cannot be diffed cheaply against each other. A reader diffs only against its own
//! previous view. When it last left the shared cluster, the shared facts were those of its
//! view. Since then, other readers changed the keys they logged. So a key where the shared
//! facts differ from the reader's new view was changed either in its own diff or by a logged
//! patch. The reader compares exactly those keys and applies the ones that differ. A reader
//! that cannot follow compares every shared key: its first read, a read after the log dropped
//! the patches it missed, or a read after a patch panicked.
//!
//! Facts are compared whole (value, revisions and lease), so views built by hand are judged
//! as exactly as the store's.

use std::collections::{BTreeSet, VecDeque};

use parking_lot::Mutex;

use ccattler_core::schema;
use ccattler_core::{Fact, FactView, Key};

use super::cluster::Cluster;

/// The prefixes of the records a shared cluster holds: those every standard controller that
/// shares it watches. Other records (effective counts, rebalance moves, node status, a
/// controller's own outputs) are decoded by each reader for itself: small per-service records
/// that only some controllers see.
const SHARED: [&str; 5] = [
    schema::DESIRED_SERVICES,
    schema::DESIRED_INSTANCES,
    schema::PLACEMENTS,
    schema::OBSERVED_INSTANCES,
    schema::NODE_LEASES,
];

/// The most keys the log of patches keeps, or twice the shared facts when that is more: a
/// reader further behind compares every key. Following the log costs the keys it holds, and
/// comparing every key costs the facts, so a log as long as the facts is still worth following:
/// at 100,000 instances an apply logs more than 2^18 keys while some readers are busy.
const LOG_KEYS: usize = 1 << 18;

fn is_shared(key: &str) -> bool {
    SHARED.iter().any(|prefix| key.starts_with(prefix))
}

/// One decoded cluster shared by the caches of the standard controllers that run in one process
/// (see [`all`](super::all)), so that every record is decoded and indexed once, not once per
/// controller.
///
/// # Guarantees
///
/// Each reader gets the cluster of its own view, as [`Cluster::read`] of that view makes it, and
/// the services whose records changed since its own previous read (sometimes more: a service
/// another reader's patch touched). Readers may be at different revisions, and may run at
/// once: patching takes a lock, and reading the patched cluster is an O(1) copy of persistent
/// maps. No controller's contract changes: each still reads only its view, and one that is
/// handed no shared cluster keeps one of its own.
///
/// # Cost
///
/// A reader compares the keys of its own diff and the keys other readers patched since its
/// last read, and decodes and indexes only the facts that differ. When the controllers' views
/// move together, the first reader of a change patches it and the others find nothing to patch.
#[derive(Debug, Default)]
pub struct SharedCluster {
    state: Mutex<State>,
}

/// What a shared cluster holds: the facts of its shared prefixes, their cluster, and the log of
/// patches that lets a reader find what changed since it last read.
#[derive(Debug, Default)]
struct State {
    /// Raised whenever the state starts afresh: readers of an older epoch compare every key.
    epoch: u64,
    /// Set while a patch runs: still set at the next read, the patch panicked.
    patching: bool,
    facts: FactView,
    cluster: Cluster,
    /// Patches made in this epoch.
    seq: u64,
    log: VecDeque<Patch>,
    logged_keys: usize,
}

/// A key a reader compares, with its fact in the reader's view where that is known already
/// (from the view's own diff or scan; `Some(None)`: the view does not hold the key), or `None`
/// to look it up in the view.
type ToCompare<'v> = (Key, Option<Option<&'v Fact>>);

/// The keys one patch changed, and the services it touched.
#[derive(Debug)]
struct Patch {
    seq: u64,
    keys: Vec<Key>,
    touched: BTreeSet<String>,
}

/// Where one reader left a shared cluster: its view, the patch it had seen, and its own records
/// (those outside the shared prefixes).
#[derive(Debug)]
pub(super) struct Reader {
    view: FactView,
    epoch: u64,
    seq: u64,
    own: Cluster,
}

impl SharedCluster {
    /// An empty shared cluster, to hand to the controllers that should share it.
    pub fn new() -> Self {
        SharedCluster::default()
    }

    /// The cluster of `view` and the services whose records changed since `reader`'s previous
    /// read (every service a record names when there was none, or it cannot follow), and where
    /// this reader now stands.
    pub(super) fn read(
        &self,
        reader: Option<Reader>,
        view: &FactView,
    ) -> (Cluster, BTreeSet<String>, Reader) {
        let mut state = self.state.lock();
        if state.patching {
            // A patch panicked half-way: start afresh.
            *state = State {
                epoch: state.epoch + 1,
                ..State::default()
            };
        }
        let follows = reader.filter(|r| r.epoch == state.epoch && r.seq >= state.log_start());
        let mut touched = BTreeSet::new();
        // The reader's previous view outlives the keys its diff with `view` yields.
        let previous: FactView;
        let (mut own, keys) = match follows {
            Some(reader) => {
                let mut own = reader.own;
                previous = reader.view;
                let mut keys = Vec::new();
                for (key, _, new) in view.changes_since(&previous) {
                    if is_shared(key.as_str()) {
                        keys.push((key.clone(), Some(new)));
                    } else {
                        own.apply(key, new);
                    }
                }
                for patch in state.log.iter().filter(|p| p.seq > reader.seq) {
                    keys.extend(patch.keys.iter().map(|key| (key.clone(), None)));
                    touched.extend(patch.touched.iter().cloned());
                }
                (own, Some(keys))
            }
            None => {
                let mut own = Cluster::default();
                for fact in view.iter().filter(|f| !is_shared(f.key.as_str())) {
                    own.apply(&fact.key, Some(fact));
                }
                (own, None)
            }
        };
        state.patching = true;
        let full = keys.is_none();
        let keys = keys.unwrap_or_else(|| state.every_key(view));
        touched.extend(state.patch(view, keys));
        state.patching = false;
        if full {
            touched.extend(state.cluster.services_named());
        }
        touched.extend(own.take_touched());
        let mut cluster = state.cluster.clone();
        cluster.overlay(&own);
        let reader = Reader {
            view: view.clone(),
            epoch: state.epoch,
            seq: state.seq,
            own,
        };
        // Unlocked before the previous view drops: freeing what only it held takes a while.
        drop(state);
        (cluster, touched, reader)
    }
}

impl State {
    /// The patch a reader must have seen to follow the log: readers that saw an earlier one
    /// missed patches the log no longer holds.
    fn log_start(&self) -> u64 {
        self.log.front().map_or(self.seq, |p| p.seq - 1)
    }

    /// Every key of the shared prefixes held here or in `view`, with its fact for those in `view`.
    fn every_key<'v>(&self, view: &'v FactView) -> Vec<ToCompare<'v>> {
        let listed = SHARED.iter().flat_map(|prefix| view.scan(prefix));
        let listed = listed.map(|fact| (fact.key.clone(), Some(Some(fact))));
        let held = self.facts.iter().map(|fact| (fact.key.clone(), None));
        listed.chain(held).collect()
    }

    /// Makes the facts (and the cluster) of `keys` those of `view`, logs the keys that differed
    /// as one patch, and returns the services it touched.
    fn patch(&mut self, view: &FactView, mut keys: Vec<ToCompare<'_>>) -> BTreeSet<String> {
        // Key order, and of each key's entries the one that knows its fact first: that one is
        // kept, and the view is looked up only for the keys no entry knew. The keys come as
        // runs already in key order (the reader's diff, then each logged patch), which a
        // stable sort finds and merges: O(n log runs) comparisons of keys, not O(n log n),
        // and at 100,000 instances each comparison of two keys is a cache miss or two.
        keys.sort_by(|(a, a_known), (b, b_known)| {
            a.cmp(b).then(b_known.is_some().cmp(&a_known.is_some()))
        });
        keys.dedup_by(|later, kept| later.0 == kept.0);
        let mut changed = Vec::new();
        for (key, known) in keys {
            let new = known.unwrap_or_else(|| view.get(key.as_str()));
            if self.facts.get(key.as_str()) == new {
                continue;
            }
            self.cluster.apply(&key, new);
            match new {
                Some(fact) => self.facts.insert(fact.clone()),
                None => {
                    self.facts.remove(key.as_str());
                }
            }
            changed.push(key);
        }
        let touched = self.cluster.take_touched();
        if changed.is_empty() {
            return touched;
        }
        self.seq += 1;
        self.logged_keys += changed.len();
        self.log.push_back(Patch {
            seq: self.seq,
            keys: changed,
            touched: touched.clone(),
        });
        while self.logged_keys > LOG_KEYS.max(2 * self.facts.len()) {
            let Some(dropped) = self.log.pop_front() else {
                break;
            };
            self.logged_keys -= dropped.keys.len();
        }
        touched
    }
}
