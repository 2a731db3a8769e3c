//! The data behind one lock: the key map, the global revision, the history log, the leases and
//! the registered watchers.
//!
//! Every write goes through [`State::apply_put`] / [`State::apply_delete`] with the revision it
//! will commit at, then [`State::commit`]. Each change becomes one shared `Arc<WatchEvent>` that
//! is appended to the history and handed to the watchers whose prefix matches, so a write costs
//! one allocation however many watchers see it.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::task::Waker;

use ccattler_core::{EventKind, Fact, Key, LeaseId, Revision, Value, WatchEvent};

use super::config::HistoryLimit;
use super::lease::Leases;
use super::watch::Watchers;

/// What the store keeps per key. The key itself is the map's key, so the entry stays small.
#[derive(Debug)]
pub(crate) struct Entry {
    pub(crate) value: Value,
    pub(crate) create_revision: u64,
    pub(crate) mod_revision: u64,
    pub(crate) version: u64,
    /// The lease id, 0 for none (lease ids start at 1, as in etcd).
    pub(crate) lease: i64,
}

impl Entry {
    /// The entry as a fact named `key`.
    pub(crate) fn to_fact(&self, key: &Key) -> Fact {
        Fact {
            key: key.clone(),
            value: self.value.clone(),
            create_revision: Revision(self.create_revision),
            mod_revision: Revision(self.mod_revision),
            version: self.version,
            lease: self.lease(),
        }
    }

    /// The attached lease, if any.
    pub(crate) fn lease(&self) -> Option<LeaseId> {
        (self.lease != 0).then_some(LeaseId(self.lease))
    }
}

/// The log of past events that watches replay from, bounded by compaction.
#[derive(Debug)]
pub(crate) struct History {
    /// Events in commit order; the event at index `i` has sequence number `base_seq + i`.
    pub(crate) events: VecDeque<Arc<WatchEvent>>,
    /// The sequence number of `events[0]` (every event ever logged has a distinct one).
    pub(crate) base_seq: u64,
    /// The compaction revision: a watch may start at this revision or later (0: never compacted).
    pub(crate) compact_rev: u64,
    /// Most events kept before the oldest revisions are dropped.
    limit: HistoryLimit,
}

impl History {
    fn new(limit: HistoryLimit) -> Self {
        History {
            events: VecDeque::new(),
            base_seq: 0,
            compact_rev: 0,
            limit,
        }
    }

    /// The sequence number the next logged event will get.
    pub(crate) fn end_seq(&self) -> u64 {
        self.base_seq + self.events.len() as u64
    }

    /// The event with sequence number `seq`, if the history still (or already) holds it.
    pub(crate) fn at(&self, seq: u64) -> Option<&Arc<WatchEvent>> {
        let index = usize::try_from(seq.checked_sub(self.base_seq)?).ok()?;
        self.events.get(index)
    }

    /// The sequence number of the first event whose revision is `rev` or later.
    pub(crate) fn seq_of(&self, rev: u64) -> u64 {
        self.base_seq + self.events.partition_point(|e| e.fact.mod_revision.0 < rev) as u64
    }

    /// Drops every event whose revision is below `rev`, and makes `rev` the compaction revision.
    pub(crate) fn compact(&mut self, rev: u64) {
        let drop = self.events.partition_point(|e| e.fact.mod_revision.0 < rev);
        self.events.drain(..drop);
        self.base_seq += drop as u64;
        self.compact_rev = rev;
    }

    /// Drops whole oldest revisions until at most the limit's events remain, the store holding
    /// `facts` facts.
    fn trim(&mut self, facts: usize) {
        let limit = self.limit.events(facts);
        if self.events.len() <= limit {
            return;
        }
        let excess = self.events.len() - limit;
        let last_dropped = self.events[excess - 1].fact.mod_revision.0;
        self.compact(last_dropped + 1);
    }
}

/// Everything the store's lock protects.
#[derive(Debug)]
pub(crate) struct State {
    pub(crate) kv: BTreeMap<Key, Entry>,
    /// The current global revision.
    pub(crate) revision: u64,
    pub(crate) history: History,
    pub(crate) leases: Leases,
    pub(crate) watchers: Watchers,
}

impl State {
    /// An empty store whose history keeps what `history_limit` says.
    pub(crate) fn new(history_limit: HistoryLimit) -> Self {
        State {
            kv: BTreeMap::new(),
            revision: 0,
            history: History::new(history_limit),
            leases: Leases::default(),
            watchers: Watchers::default(),
        }
    }

    /// The revision the next write commits at.
    pub(crate) fn next_revision(&self) -> u64 {
        self.revision + 1
    }

    /// Reads one key.
    pub(crate) fn get(&self, key: &str) -> Option<Fact> {
        self.kv
            .get_key_value(key)
            .map(|(key, entry)| entry.to_fact(key))
    }

    /// Writes `value` at `key` at revision `rev` (always writes; callers decide idempotence).
    /// The lease, if any, must exist.
    pub(crate) fn apply_put(
        &mut self,
        key: &Key,
        value: Value,
        lease: Option<LeaseId>,
        rev: u64,
        wake: &mut Vec<Waker>,
    ) {
        let lease_raw = lease.map_or(0, |l| l.0);
        let event = match self.kv.get_mut(key.as_str()) {
            Some(entry) => {
                let prev = entry.to_fact(key);
                if entry.lease != lease_raw {
                    if let Some(old) = entry.lease() {
                        self.leases.detach(old, key.as_str());
                    }
                    if let Some(new) = lease {
                        self.leases.attach(new, key);
                    }
                }
                entry.value = value;
                entry.mod_revision = rev;
                entry.version += 1;
                entry.lease = lease_raw;
                WatchEvent {
                    kind: EventKind::Put,
                    fact: entry.to_fact(key),
                    prev: Some(prev),
                }
            }
            None => {
                if let Some(new) = lease {
                    self.leases.attach(new, key);
                }
                let entry = Entry {
                    value,
                    create_revision: rev,
                    mod_revision: rev,
                    version: 1,
                    lease: lease_raw,
                };
                let fact = entry.to_fact(key);
                self.kv.insert(key.clone(), entry);
                WatchEvent {
                    kind: EventKind::Put,
                    fact,
                    prev: None,
                }
            }
        };
        self.emit(event, wake);
    }

    /// Deletes `key` at revision `rev`, returning what it held; a missing key writes nothing.
    pub(crate) fn apply_delete(
        &mut self,
        key: &str,
        rev: u64,
        wake: &mut Vec<Waker>,
    ) -> Option<Fact> {
        let (key, entry) = self.kv.remove_entry(key)?;
        if let Some(lease) = entry.lease() {
            self.leases.detach(lease, key.as_str());
        }
        let prev = entry.to_fact(&key);
        let fact = Fact {
            key,
            value: Value::new(),
            create_revision: Revision::ZERO,
            mod_revision: Revision(rev),
            version: 0,
            lease: None,
        };
        self.emit(
            WatchEvent {
                kind: EventKind::Delete,
                fact,
                prev: Some(prev.clone()),
            },
            wake,
        );
        Some(prev)
    }

    /// Logs one event and offers it to the watchers.
    fn emit(&mut self, event: WatchEvent, wake: &mut Vec<Waker>) {
        let seq = self.history.end_seq();
        let event = Arc::new(event);
        self.watchers
            .notify(&event, seq, self.history.base_seq, wake);
        self.history.events.push_back(event);
    }

    /// Makes `rev` the current revision if the write changed anything, then trims the history.
    pub(crate) fn commit(&mut self, rev: u64, changed: bool) {
        if changed {
            self.revision = rev;
            self.history.trim(self.kv.len());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> Key {
        Key::new(s).unwrap()
    }

    #[test]
    fn put_and_delete_track_revisions_and_versions() {
        let mut state = State::new(HistoryLimit::Fixed(100));
        let mut wake = Vec::new();
        state.apply_put(&key("a"), Value::from_static(b"1"), None, 1, &mut wake);
        state.commit(1, true);
        state.apply_put(&key("a"), Value::from_static(b"2"), None, 2, &mut wake);
        state.commit(2, true);
        let fact = state.get("a").unwrap();
        assert_eq!(fact.create_revision, Revision(1));
        assert_eq!(fact.mod_revision, Revision(2));
        assert_eq!(fact.version, 2);
        let prev = state.apply_delete("a", 3, &mut wake).unwrap();
        state.commit(3, true);
        assert_eq!(prev, fact);
        assert!(state.apply_delete("a", 4, &mut wake).is_none());
        assert_eq!(state.history.events.len(), 3);
        let last = &state.history.events[2];
        assert_eq!(last.kind, EventKind::Delete);
        assert_eq!(last.fact.mod_revision, Revision(3));
        assert_eq!(last.fact.version, 0);
    }

    #[test]
    fn trim_drops_whole_revisions() {
        let mut state = State::new(HistoryLimit::Fixed(3));
        let mut wake = Vec::new();
        for (rev, keys) in [(1, &["a", "b"][..]), (2, &["c", "d"][..])] {
            for k in keys {
                state.apply_put(&key(k), Value::from_static(b"v"), None, rev, &mut wake);
            }
            state.commit(rev, true);
        }
        // Four events, limit three: revision 1 (two events) goes entirely.
        assert_eq!(state.history.events.len(), 2);
        assert_eq!(state.history.compact_rev, 2);
        assert_eq!(state.history.base_seq, 2);
        assert_eq!(state.history.seq_of(2), 2);
        assert_eq!(state.history.seq_of(3), 4);
    }

    #[test]
    fn a_history_at_least_the_facts_grows_with_the_store() {
        let mut state = State::new(HistoryLimit::AtLeastFacts(3));
        let mut wake = Vec::new();
        for (rev, k) in (1..).zip(["a", "b", "c", "d", "e"]) {
            state.apply_put(&key(k), Value::from_static(b"v"), None, rev, &mut wake);
            state.commit(rev, true);
        }
        // Five facts: five events kept, over the floor of three.
        assert_eq!(state.history.events.len(), 5);
        assert_eq!(state.history.compact_rev, 0);
        // Rewrites keep it at the facts held: the oldest revisions go.
        for rev in 6..9 {
            state.apply_put(&key("a"), Value::from_static(b"w"), None, rev, &mut wake);
            state.commit(rev, true);
        }
        assert_eq!(state.history.events.len(), 5);
        assert_eq!(state.history.compact_rev, 4);
    }
}
