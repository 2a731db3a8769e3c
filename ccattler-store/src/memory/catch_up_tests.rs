//! Watchers that fall behind and catch up, under writes to their prefix and to others: each
//! stream yields exactly the events under its prefix from its start, in order, whether its
//! catching up went one event at a time or from one listed position to the next.

use std::task::Poll;

use ccattler_core::{FactStore, Revision, Value, WatchEvent};
use proptest::prelude::*;

use super::{MemoryConfig, MemoryStore};
use crate::test_util::{block_on, drain, key, poll_once};

/// Prefixes watched: nested, disjoint, and one that is every key.
const PREFIXES: [&str; 4] = ["a/", "a/x/", "b/", ""];
/// Keys written: under one, two or none of the prefixes but "".
const KEYS: [&str; 5] = ["a/1", "a/x/1", "b/1", "b/2", "c"];

#[derive(Clone, Debug)]
enum Step {
    /// A write to `KEYS[k]`.
    Put(usize),
    /// Watcher `w` reads at most `n` events.
    Read(usize, usize),
    /// A new watcher of `PREFIXES[p]`, from revision `from` (0: the next write).
    Watch(usize, u64),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (0..KEYS.len()).prop_map(Step::Put),
        3 => (0..8usize, 1..4usize).prop_map(|(w, n)| Step::Read(w, n)),
        1 => (0..PREFIXES.len(), 0..30u64).prop_map(|(p, from)| Step::Watch(p, from)),
    ]
}

/// What watcher of `prefix` from `start` must yield, from the store's whole history.
fn expected(all: &[(String, u64)], prefix: &str, start: u64) -> Vec<(String, u64)> {
    all.iter()
        .filter(|(k, rev)| k.starts_with(prefix) && *rev >= start)
        .cloned()
        .collect()
}

fn shown(events: &[WatchEvent]) -> Vec<(String, u64)> {
    events
        .iter()
        .map(|e| (e.key().as_str().to_owned(), e.revision().0))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn behind_watchers_get_exactly_their_events(
        buffer in 1..4usize,
        steps in proptest::collection::vec(step(), 1..120),
    ) {
        let store = MemoryStore::with_config(MemoryConfig::default().watch_buffer(buffer));
        let mut written: Vec<(String, u64)> = Vec::new();
        // Each watcher: its prefix, its first revision, the stream, what it yielded.
        let mut watchers = Vec::new();
        for prefix in PREFIXES {
            let watch = block_on(store.watch(prefix, Revision::ZERO)).expect("watch");
            watchers.push((prefix, 1, watch, Vec::new()));
        }
        for step in steps {
            match step {
                Step::Put(k) => {
                    let rev = block_on(store.put(&key(KEYS[k]), Value::from(written.len().to_string())))
                        .expect("put")
                        .0;
                    written.push((KEYS[k].to_owned(), rev));
                }
                Step::Read(w, n) => {
                    if let Some((_, _, watch, got)) = watchers.get_mut(w) {
                        for _ in 0..n {
                            match poll_once(watch) {
                                Poll::Ready(Some(Ok(event))) => got.push(event),
                                Poll::Pending => break,
                                other => prop_assert!(false, "expected an event, got {:?}", other),
                            }
                        }
                    }
                }
                Step::Watch(p, from) => {
                    let now = written.last().map_or(0, |(_, rev)| *rev);
                    let start = match from {
                        0 => now + 1,
                        from => from.min(now + 1),
                    };
                    let watch = block_on(store.watch(PREFIXES[p], Revision(start))).expect("watch");
                    watchers.push((PREFIXES[p], start, watch, Vec::new()));
                }
            }
        }
        for (prefix, start, watch, got) in &mut watchers {
            got.extend(drain(watch));
            prop_assert_eq!(shown(got), expected(&written, prefix, *start), "watcher of {:?} from {}", prefix, start);
        }
    }
}
