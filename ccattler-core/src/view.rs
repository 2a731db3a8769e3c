//! [`FactView`]: the immutable snapshot of facts a controller reconciles on.

use std::cmp::Ordering;

use imbl::OrdMap;

use crate::{Change, EventKind, Fact, Key, Revision, Scan, WatchEvent};

/// An immutable, ordered snapshot of the facts under a controller's watched prefixes.
///
/// The runner keeps one view per controller, updates it in place from watch events (each update
/// costs O(log n)) and hands the controller a clone, which is O(1): the map is persistent, so the
/// snapshot and the live view share all unchanged nodes. A reconcile therefore never sees a fact
/// change under it, and taking the snapshot does not cost time in proportion to its size.
#[derive(Clone, Debug, Default)]
pub struct FactView {
    facts: OrdMap<Key, Fact>,
    revision: Revision,
}

impl FactView {
    /// An empty view at revision 0.
    pub fn new() -> Self {
        FactView::default()
    }

    /// A view holding `facts`, read at `revision`.
    pub fn from_facts(revision: Revision, facts: impl IntoIterator<Item = Fact>) -> Self {
        FactView {
            facts: facts.into_iter().map(|f| (f.key.clone(), f)).collect(),
            revision,
        }
    }

    /// The store revision this view reflects: every change up to it is applied.
    pub fn revision(&self) -> Revision {
        self.revision
    }

    /// The fact at `key`.
    pub fn get(&self, key: &str) -> Option<&Fact> {
        self.facts.get(key)
    }

    /// Whether `key` is present.
    pub fn contains(&self, key: &str) -> bool {
        self.facts.contains_key(key)
    }

    /// The facts whose key starts with `prefix`, in key order.
    pub fn scan<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = &'a Fact> + 'a {
        self.facts
            .range::<_, str>((
                std::ops::Bound::Included(prefix),
                std::ops::Bound::Unbounded,
            ))
            .map(|(_, fact)| fact)
            .take_while(move |fact| fact.key.has_prefix(prefix))
    }

    /// Every fact, in key order.
    pub fn iter(&self) -> impl Iterator<Item = &Fact> + '_ {
        self.facts.values()
    }

    /// How many facts the view holds.
    pub fn len(&self) -> usize {
        self.facts.len()
    }

    /// Whether the view is empty.
    pub fn is_empty(&self) -> bool {
        self.facts.is_empty()
    }

    /// Inserts or replaces a fact (a put event).
    pub fn insert(&mut self, fact: Fact) {
        self.facts.insert(fact.key.clone(), fact);
    }

    /// Removes a fact (a delete event).
    pub fn remove(&mut self, key: &str) -> Option<Fact> {
        self.facts.remove(key)
    }

    /// Applies a watch event, unless the view holds its key at the event's revision or later
    /// (the echo of a change the view holds already, or an event older than the view) or it
    /// deletes a key the view does not hold. Returns whether the view changed; when it did,
    /// the view's revision is at least the event's.
    ///
    /// Cost: one O(log n) update of the map for an event that changes the view, two for one
    /// that does not (the fact it displaced is put back). Most events change the view, so
    /// this is cheaper than looking the key up first, which costs every event two.
    pub fn apply_event(&mut self, event: WatchEvent) -> bool {
        let revision = event.revision();
        let displaced = match event.kind {
            EventKind::Put => self.facts.insert(event.fact.key.clone(), event.fact),
            EventKind::Delete => self.facts.remove(event.fact.key.as_str()),
        };
        match displaced {
            Some(held) if held.mod_revision >= revision => {
                self.facts.insert(held.key.clone(), held);
                false
            }
            None if event.kind == EventKind::Delete => false,
            _ => {
                if revision > self.revision {
                    self.revision = revision;
                }
                true
            }
        }
    }

    /// The keys that differ between `older` and this view, in key order, each with the fact it
    /// had in `older` and the fact it has here (`None` where absent).
    ///
    /// Cost: proportional to the changes when this view was derived from `older` by updates
    /// (the two share every unchanged node of their tree), up to the size of the views when they
    /// share nothing (after a relist). This is what lets a controller keep derived state up to
    /// date incrementally: see its use in `ccattler-controllers`.
    pub fn changes_since<'a>(
        &'a self,
        older: &'a FactView,
    ) -> impl Iterator<Item = (&'a Key, Option<&'a Fact>, Option<&'a Fact>)> + 'a {
        older.facts.diff(&self.facts).map(|item| match item {
            imbl::ordmap::DiffItem::Add(key, fact) => (key, None, Some(fact)),
            imbl::ordmap::DiffItem::Update { old, new } => (old.0, Some(old.1), Some(new.1)),
            imbl::ordmap::DiffItem::Remove(key, fact) => (key, Some(fact), None),
        })
    }

    /// Whether `other` holds the same facts: the same keys, each at the same mod revision (in
    /// one store, the same value too). Its revision may differ. Cost: O(n).
    pub fn holds_same_facts(&self, other: &FactView) -> bool {
        self.facts.len() == other.facts.len()
            && (self.facts.iter().zip(other.facts.values()))
                .all(|((key, held), f)| f.key == *key && f.mod_revision == held.mod_revision)
    }

    /// Makes this view hold exactly the facts of `scans` (what a list of its prefixes read at
    /// `revision`), changing only the keys that differ: a key listed at another mod revision
    /// than the view holds, or not held, is put; a key held but not listed is removed. Returns
    /// how many keys changed (0: the view already held what was listed). The revision becomes
    /// `revision` unless the view's is later. Each scan holds its facts in key order, as a
    /// store lists them.
    ///
    /// Unlike a view built afresh with [`from_facts`](Self::from_facts), the result keeps
    /// sharing every unchanged node with earlier snapshots, so [`changes_since`](Self::changes_since)
    /// from one of them costs the differences, not the size of the view. Cost: one ordered walk
    /// of the view beside the scans, O(n), and O(log n) for each key that differs; nothing is
    /// built when nothing differs. Scans may come in any order of prefix; when two prefixes
    /// overlap (one starts the other), a fact listed twice is taken at its latest mod revision.
    pub fn sync_to_scans(&mut self, scans: Vec<Scan>, revision: Revision) -> usize {
        let listed = in_key_order(scans);
        let mut puts = Vec::new();
        let mut removals = Vec::new();
        let mut held = self.facts.iter().peekable();
        for fact in listed {
            // One compare of keys per step: the walk is most of the cost.
            loop {
                match held.peek().map(|(key, _)| (*key).cmp(&fact.key)) {
                    Some(Ordering::Less) => {
                        removals.extend(held.next().map(|(key, _)| key.clone()));
                    }
                    Some(Ordering::Equal) => {
                        let same = held.next().map(|(_, f)| f.mod_revision);
                        if same != Some(fact.mod_revision) {
                            puts.push(fact);
                        }
                        break;
                    }
                    Some(Ordering::Greater) | None => {
                        puts.push(fact);
                        break;
                    }
                }
            }
        }
        removals.extend(held.map(|(key, _)| key.clone()));
        let changed = puts.len() + removals.len();
        for key in removals {
            self.facts.remove(&key);
        }
        for fact in puts {
            self.insert(fact);
        }
        self.revision = self.revision.max(revision);
        changed
    }

    /// Records that every change up to `revision` has been applied.
    pub fn set_revision(&mut self, revision: Revision) {
        self.revision = revision;
    }

    /// Whether committing `change` would change nothing: a put of the value the key holds
    /// (without a lease), or a delete of a key the view does not hold. The runner drops such
    /// changes before committing.
    pub fn is_noop(&self, change: &Change) -> bool {
        let held = self.get(change.key().as_str());
        match change {
            Change::Put { value, .. } => {
                held.is_some_and(|f| f.value == value && f.lease.is_none())
            }
            Change::Delete { .. } => held.is_none(),
        }
    }

    /// Applies `changes` as a store commits them at `revision`: a put keeps the key's create
    /// revision and raises its version (a new key starts at `revision`, version 1) and holds no
    /// lease; a delete removes the key. The view's revision becomes `revision` when that is later.
    pub fn apply(&mut self, changes: impl IntoIterator<Item = Change>, revision: Revision) {
        for change in changes {
            match change {
                Change::Put { key, value } => {
                    let held = self.facts.get(&key);
                    let fact = Fact {
                        create_revision: held.map_or(revision, |f| f.create_revision),
                        version: held.map_or(1, |f| f.version + 1),
                        mod_revision: revision,
                        lease: None,
                        key,
                        value,
                    };
                    self.insert(fact);
                }
                Change::Delete { key } => {
                    self.facts.remove(&key);
                }
            }
        }
        if revision > self.revision {
            self.revision = revision;
        }
    }
}

/// The facts of `scans` in key order, each key once (at its latest mod revision where scans
/// of overlapping prefixes both list it). Scans of disjoint prefixes, the usual case, are put
/// in order by their first keys and walked as they are: nothing is copied, since a resync of a
/// large view would otherwise build (and fault in) a second array of every fact listed.
fn in_key_order(scans: Vec<Scan>) -> Box<dyn Iterator<Item = Fact>> {
    let mut scans: Vec<Vec<Fact>> = scans
        .into_iter()
        .map(|s| s.facts)
        .filter(|facts| !facts.is_empty())
        .collect();
    scans.sort_by(|a, b| a[0].key.cmp(&b[0].key));
    let disjoint = scans
        .windows(2)
        .all(|pair| pair[0].last().map(|f| &f.key) < Some(&pair[1][0].key));
    if disjoint {
        return Box::new(scans.into_iter().flatten());
    }
    let mut facts: Vec<Fact> = scans.into_iter().flatten().collect();
    facts.sort_by(|a, b| a.key.cmp(&b.key).then(b.mod_revision.cmp(&a.mod_revision)));
    facts.dedup_by(|later, kept| later.key == kept.key);
    Box::new(facts.into_iter())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fact(key: &str, rev: u64) -> Fact {
        Fact::created(
            Key::new(key).unwrap(),
            crate::Value::from_static(b"v"),
            Revision(rev),
        )
    }

    #[test]
    fn an_event_applies_only_when_it_is_newer_than_what_the_view_holds() {
        let put = |key: &str, rev: u64, value: &'static str| WatchEvent {
            kind: EventKind::Put,
            fact: Fact::created(Key::new(key).unwrap(), value.into(), Revision(rev)),
            prev: None,
        };
        let delete = |key: &str, rev: u64| WatchEvent {
            kind: EventKind::Delete,
            ..put(key, rev, "")
        };
        let mut view = FactView::from_facts(Revision(5), [fact("a", 5)]);
        let value = |view: &FactView| view.get("a").map(|f| (f.mod_revision.0, f.value.clone()));

        // The echo of what the view holds, and an older put: the held fact stays.
        assert!(!view.apply_event(put("a", 5, "echo")));
        assert!(!view.apply_event(put("a", 3, "older")));
        assert_eq!(value(&view), Some((5, "v".into())));
        // A delete older than the held fact, and one of a key not held: nothing changes.
        assert!(!view.apply_event(delete("a", 4)));
        assert!(!view.apply_event(delete("b", 8)));
        assert_eq!((view.len(), view.revision()), (1, Revision(5)));

        assert!(view.apply_event(put("a", 7, "new")));
        assert_eq!(value(&view), Some((7, "new".into())));
        assert_eq!(view.revision(), Revision(7));
        assert!(view.apply_event(delete("a", 9)));
        assert_eq!((value(&view), view.revision()), (None, Revision(9)));
    }

    /// `view` synced to `scans`: how many keys changed, and each key with its mod revision
    /// after, checked against a view built afresh from the same scans.
    fn synced(view: &FactView, scans: &[Scan]) -> (usize, Vec<(String, u64)>) {
        let mut synced = view.clone();
        let changed = synced.sync_to_scans(scans.to_vec(), Revision(9));
        if changed == 0 {
            // Nothing differed: nothing was built, the map is the one it was.
            assert!(synced.facts.ptr_eq(&view.facts), "the same map, not a copy");
        }
        let fresh = FactView::from_facts(Revision(9), scans.iter().flat_map(|s| s.facts.clone()));
        assert!(synced.holds_same_facts(&fresh), "what a fresh list holds");
        assert_eq!(synced.revision(), Revision(9));
        let held = synced
            .iter()
            .map(|f| (f.key.as_str().to_owned(), f.mod_revision.0))
            .collect();
        (changed, held)
    }

    #[test]
    fn sync_to_scans_changes_only_what_differs_in_any_order_of_prefixes() {
        let view = FactView::from_facts(
            Revision(4),
            [
                fact("a/1", 1),
                fact("b/1", 2),
                fact("b/2", 3),
                fact("c/1", 4),
            ],
        );
        let scan = |facts: Vec<Fact>| Scan {
            revision: Revision(9),
            facts,
        };
        let held = [
            scan(vec![fact("c/1", 4)]),
            scan(vec![]),
            scan(vec![fact("b/1", 2), fact("b/2", 3)]),
            scan(vec![fact("a/1", 1)]),
        ];
        assert_eq!(synced(&view, &held).0, 0, "nothing differs");
        let owned = |pairs: &[(&str, u64)]| -> Vec<(String, u64)> {
            pairs.iter().map(|(k, r)| (k.to_string(), *r)).collect()
        };
        // A fact written again, one gone (c/1), one more (a/2).
        let rewritten = [
            scan(vec![fact("a/1", 1), fact("a/2", 6)]),
            scan(vec![fact("b/1", 2), fact("b/2", 5)]),
        ];
        assert_eq!(
            synced(&view, &rewritten),
            (3, owned(&[("a/1", 1), ("a/2", 6), ("b/1", 2), ("b/2", 5)]))
        );
        // Every fact gone, or listed for an empty view.
        assert_eq!(synced(&view, &[]), (4, vec![]));
        assert_eq!(synced(&FactView::new(), &held).0, 4);
        // Overlapping prefixes (a/ and a/1) list a/1 twice: taken once, at its latest.
        let overlapping = [
            held[3].clone(),
            scan(vec![fact("a/1", 7)]),
            held[2].clone(),
            held[0].clone(),
        ];
        assert_eq!(
            synced(&view, &overlapping),
            (1, owned(&[("a/1", 7), ("b/1", 2), ("b/2", 3), ("c/1", 4)]))
        );
    }

    #[test]
    fn a_synced_view_differs_from_its_snapshot_by_what_changed() {
        let facts = (0..1000).map(|i| fact(&format!("k/{i:04}"), i + 1));
        let mut view = FactView::from_facts(Revision(1000), facts.clone());
        let snapshot = view.clone();
        let mut listed: Vec<Fact> = facts.collect();
        listed[500] = fact("k/0500", 2000);
        listed.remove(10);
        view.sync_to_scans(
            vec![Scan {
                revision: Revision(2000),
                facts: listed,
            }],
            Revision(2000),
        );
        let changes: Vec<_> = view
            .changes_since(&snapshot)
            .map(|(key, old, new)| (key.as_str(), old.is_some(), new.is_some()))
            .collect();
        assert_eq!(changes, [("k/0010", true, false), ("k/0500", true, true)]);
    }

    #[test]
    fn scan_stops_at_the_end_of_the_prefix() {
        let view = FactView::from_facts(
            Revision(3),
            [fact("a/1", 1), fact("b/1", 2), fact("b/2", 3), fact("c", 3)],
        );
        let keys: Vec<_> = view.scan("b/").map(|f| f.key.as_str()).collect();
        assert_eq!(keys, ["b/1", "b/2"]);
        assert_eq!(view.scan("").count(), 4);
        assert_eq!(view.scan("z").count(), 0);
    }

    #[test]
    fn apply_commits_changes_like_a_store() {
        let mut view = FactView::from_facts(Revision(2), [fact("a", 1), fact("b", 2)]);
        let key = |k: &str| Key::new(k).unwrap();
        view.apply(
            [
                Change::put(key("a"), "new"),
                Change::put(key("c"), "c"),
                Change::delete(key("b")),
            ],
            Revision(5),
        );
        let a = view.get("a").unwrap();
        assert_eq!(
            (a.create_revision, a.mod_revision, a.version),
            (Revision(1), Revision(5), 2)
        );
        assert_eq!(a.value, "new");
        let c = view.get("c").unwrap();
        assert_eq!((c.create_revision, c.version), (Revision(5), 1));
        assert!(!view.contains("b"));
        assert_eq!(view.revision(), Revision(5));
        view.apply([], Revision(4));
        assert_eq!(view.revision(), Revision(5), "never goes back");
    }

    #[test]
    fn changes_since_lists_adds_updates_and_removes() {
        let older = FactView::from_facts(Revision(2), [fact("a", 1), fact("b", 2)]);
        let mut newer = older.clone();
        newer.insert(fact("b", 3));
        newer.insert(fact("c", 3));
        newer.remove("a");
        let changes: Vec<_> = newer
            .changes_since(&older)
            .map(|(k, old, new)| (k.as_str(), old.is_some(), new.map(|f| f.mod_revision.0)))
            .collect();
        assert_eq!(
            changes,
            [
                ("a", true, None),
                ("b", true, Some(3)),
                ("c", false, Some(3))
            ]
        );
        assert_eq!(newer.changes_since(&newer).count(), 0);
    }

    #[test]
    fn snapshots_do_not_see_later_changes() {
        let mut view = FactView::from_facts(Revision(1), [fact("a", 1)]);
        let snapshot = view.clone();
        view.insert(fact("b", 2));
        view.remove("a");
        assert!(snapshot.contains("a") && !snapshot.contains("b"));
        assert!(!view.contains("a") && view.contains("b"));
    }
}
