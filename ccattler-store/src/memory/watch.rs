//! Watchers: a bounded queue per watcher, fed by writers and drained by [`MemoryWatch`].
//!
//! Lock order is always store lock, then queue lock. Writers hold the store's write lock and
//! push into queues; a reader takes only its queue lock while events are buffered, and the store's
//! read lock (then its queue lock) when it must catch up from the history.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll, Waker};

use ccattler_core::{Revision, StoreError, WatchEvent};
use futures_core::Stream;
use parking_lot::Mutex;

use super::Shared;
use super::missed::{Missed, Next};
use super::state::History;

/// Where a watcher stands.
#[derive(Debug)]
pub(crate) enum Mode {
    /// Writers push new events straight into the buffer.
    Live,
    /// The buffer filled up (or the watch replays history): the reader refills it from the
    /// history starting at sequence number `seq`, the first event not yet delivered, whose
    /// revision is `rev`.
    Behind { seq: u64, rev: u64 },
    /// The watch ends with this error once the buffer is drained.
    Failed(StoreError),
    /// The watch has ended.
    Done,
}

/// The events waiting for one watcher.
#[derive(Debug)]
pub(crate) struct Queue {
    buf: VecDeque<Arc<WatchEvent>>,
    cap: usize,
    mode: Mode,
    waker: Option<Waker>,
}

impl Queue {
    /// Offers a live event; returns the waker to wake if the event was buffered.
    fn offer(&mut self, event: &Arc<WatchEvent>, seq: u64) -> Option<Waker> {
        if !matches!(self.mode, Mode::Live) {
            return None;
        }
        if self.buf.len() < self.cap {
            self.buf.push_back(Arc::clone(event));
            self.waker.take()
        } else {
            // Never block the writer and never grow past the bound: the reader catches up from
            // the history once it has drained what it has.
            self.mode = Mode::Behind {
                seq,
                rev: event.fact.mod_revision.0,
            };
            None
        }
    }

    /// Refills the buffer from `history` while the watcher is behind; goes live once caught up,
    /// or fails with `Compacted` when the history no longer holds what is needed. Where
    /// `missed` lists the prefix's events, it goes from one to the next; elsewhere it looks at
    /// the events one by one.
    fn catch_up(&mut self, history: &History, prefix: &str, min_rev: u64, missed: &Missed) {
        let Mode::Behind { seq, rev } = self.mode else {
            return;
        };
        if seq < history.base_seq {
            self.mode = Mode::Failed(StoreError::Compacted {
                requested: Revision(rev),
                earliest: Revision(history.compact_rev),
            });
            return;
        }
        let end = history.end_seq();
        let mut next = seq;
        while self.buf.len() < self.cap && next < end {
            let listed = match missed.next(next) {
                Next::Unknown => false,
                Next::At(at) => {
                    next = at;
                    true
                }
                Next::None => {
                    next = end;
                    break;
                }
            };
            let Some(event) = history.at(next) else {
                break;
            };
            next += 1;
            if event.fact.mod_revision.0 >= min_rev && (listed || event.fact.key.has_prefix(prefix))
            {
                self.buf.push_back(Arc::clone(event));
            }
        }
        self.mode = match history.at(next) {
            None => Mode::Live,
            Some(event) => Mode::Behind {
                seq: next,
                rev: event.fact.mod_revision.0,
            },
        };
    }
}

/// The watchers of one prefix, and where the prefix's events are while one of them is behind.
#[derive(Debug, Default)]
struct Group {
    slots: Vec<Slot>,
    missed: Missed,
}

/// One registered watcher, as the store sees it.
#[derive(Debug)]
struct Slot {
    id: u64,
    min_rev: u64,
    queue: Arc<Mutex<Queue>>,
}

/// Every watcher of one store, indexed by prefix.
///
/// A write is offered only to the watchers whose prefix it is under, found by looking up the
/// key's own prefixes of each length some watcher's prefix has: O(distinct prefix lengths +
/// matching watchers) per event, not O(watchers). A thousand agents each watching
/// `placement/{node}/` make four lengths, so a placement costs its one agent, not a thousand.
#[derive(Debug, Default)]
pub(crate) struct Watchers {
    by_prefix: HashMap<Arc<str>, Group>,
    /// How many distinct prefixes of each length are watched.
    lengths: BTreeMap<usize, usize>,
    /// Each watcher's prefix, to unregister it.
    prefixes: HashMap<u64, Arc<str>>,
    next_id: u64,
}

impl Watchers {
    /// Registers a watcher of `prefix` for revisions `min_rev` and later. `replay_from` is the
    /// history position to replay from first, `None` to start live.
    pub(crate) fn register(
        &mut self,
        prefix: Arc<str>,
        min_rev: u64,
        cap: usize,
        replay_from: Option<u64>,
        store: Weak<Shared>,
        delivered: Arc<AtomicU64>,
    ) -> MemoryWatch {
        let id = self.next_id;
        self.next_id += 1;
        let mode = match replay_from {
            Some(seq) => Mode::Behind { seq, rev: min_rev },
            None => Mode::Live,
        };
        let queue = Arc::new(Mutex::new(Queue {
            buf: VecDeque::new(),
            cap: cap.max(1),
            mode,
            waker: None,
        }));
        let group = self.by_prefix.entry(Arc::clone(&prefix)).or_default();
        if group.slots.is_empty() {
            *self.lengths.entry(prefix.len()).or_default() += 1;
        }
        group.slots.push(Slot {
            id,
            min_rev,
            queue: Arc::clone(&queue),
        });
        self.prefixes.insert(id, Arc::clone(&prefix));
        MemoryWatch {
            id,
            prefix,
            min_rev,
            queue,
            store,
            delivered,
        }
    }

    /// Forgets a watcher.
    fn unregister(&mut self, id: u64) {
        let Some(prefix) = self.prefixes.remove(&id) else {
            return;
        };
        let Some(group) = self.by_prefix.get_mut(&prefix) else {
            return;
        };
        if let Some(pos) = group.slots.iter().position(|slot| slot.id == id) {
            group.slots.swap_remove(pos);
        }
        if group.slots.is_empty() {
            self.by_prefix.remove(&prefix);
            if let Some(count) = self.lengths.get_mut(&prefix.len()) {
                *count -= 1;
                if *count == 0 {
                    self.lengths.remove(&prefix.len());
                }
            }
        }
    }

    /// How many watchers are registered.
    pub(crate) fn len(&self) -> usize {
        self.prefixes.len()
    }

    /// Offers a freshly committed event (history sequence number `seq`; `first_kept` the
    /// oldest one the history holds) to every matching watcher, collecting the wakers to wake
    /// once the store lock is released, and notes where it is for the prefixes that have a
    /// watcher behind.
    pub(crate) fn notify(
        &mut self,
        event: &Arc<WatchEvent>,
        seq: u64,
        first_kept: u64,
        wake: &mut Vec<Waker>,
    ) {
        let rev = event.fact.mod_revision.0;
        let key = event.fact.key.as_str();
        for &len in self.lengths.keys() {
            let Some(prefix) = key.get(..len) else {
                if len > key.len() {
                    break; // lengths ascend: no longer prefix fits
                }
                continue; // not a character boundary of this key
            };
            let Some(group) = self.by_prefix.get_mut(prefix) else {
                continue;
            };
            let mut oldest_behind: Option<u64> = None;
            for slot in &group.slots {
                let mut queue = slot.queue.lock();
                if rev >= slot.min_rev
                    && let Some(waker) = queue.offer(event, seq)
                {
                    wake.push(waker);
                }
                if let Mode::Behind { seq: behind, .. } = queue.mode {
                    oldest_behind = Some(oldest_behind.map_or(behind, |o| o.min(behind)));
                }
            }
            group.missed.record(seq, oldest_behind, first_kept);
        }
    }

    /// Where the events under `prefix` are while one of its watchers is behind.
    fn missed(&self, prefix: &str) -> &Missed {
        static NONE: Missed = Missed::EMPTY;
        self.by_prefix
            .get(prefix)
            .map_or(&NONE, |group| &group.missed)
    }

    fn slots(&self) -> impl Iterator<Item = &Slot> {
        self.by_prefix.values().flat_map(|group| &group.slots)
    }
}

impl Drop for Watchers {
    /// The store is gone: every watch ends, after what it has buffered, with `Unavailable`.
    fn drop(&mut self) {
        for slot in self.slots() {
            let waker = {
                let mut queue = slot.queue.lock();
                if matches!(queue.mode, Mode::Live | Mode::Behind { .. }) {
                    queue.mode =
                        Mode::Failed(StoreError::unavailable("the MemoryStore was dropped"));
                }
                queue.waker.take()
            };
            if let Some(waker) = waker {
                waker.wake();
            }
        }
    }
}

/// The stream of changes returned by [`MemoryStore::watch`](ccattler_core::FactStore::watch).
///
/// # Guarantees
///
/// Events come in revision order (within one revision, in the order the transaction wrote them),
/// each with the key's previous fact, with no gap and no duplicate. The stream wakes its task
/// through the task's [`Waker`], so it works with any executor.
///
/// # Slow readers
///
/// Each watcher has a buffer of at most [`MemoryConfig::watch_buffer`](super::MemoryConfig)
/// events. A writer never waits for a watcher and never grows its buffer past that bound: when
/// the buffer is full, the watcher is marked *behind* and writers stop pushing to it. Once the
/// reader has drained the buffer, the stream refills it from the store's history, starting at the
/// first event it has not delivered, and goes back to live delivery when it has caught up.
///
/// # Errors
///
/// If the history no longer holds the events a behind watcher needs (compaction, explicit or by
/// [`MemoryConfig::history_limit`](super::MemoryConfig)), the stream yields one
/// [`StoreError::Compacted`] and then `None`: list again and watch from the listed revision + 1.
/// If the store itself is dropped, the stream yields what it has buffered, then one
/// [`StoreError::Unavailable`], then `None`.
///
/// Dropping the stream unregisters the watcher.
pub struct MemoryWatch {
    id: u64,
    prefix: Arc<str>,
    min_rev: u64,
    queue: Arc<Mutex<Queue>>,
    store: Weak<Shared>,
    /// The store's count of events yielded by every watch.
    delivered: Arc<AtomicU64>,
}

impl fmt::Debug for MemoryWatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryWatch")
            .field("prefix", &self.prefix)
            .field("start", &self.min_rev)
            .finish_non_exhaustive()
    }
}

impl Stream for MemoryWatch {
    type Item = Result<WatchEvent, StoreError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            {
                let mut queue = this.queue.lock();
                if let Some(event) = queue.buf.pop_front() {
                    this.delivered.fetch_add(1, Ordering::Relaxed);
                    return Poll::Ready(Some(Ok(Arc::unwrap_or_clone(event))));
                }
                match std::mem::replace(&mut queue.mode, Mode::Done) {
                    Mode::Live => {
                        queue.mode = Mode::Live;
                        if !queue
                            .waker
                            .as_ref()
                            .is_some_and(|w| w.will_wake(cx.waker()))
                        {
                            queue.waker = Some(cx.waker().clone());
                        }
                        return Poll::Pending;
                    }
                    Mode::Failed(error) => return Poll::Ready(Some(Err(error))),
                    Mode::Done => return Poll::Ready(None),
                    behind @ Mode::Behind { .. } => queue.mode = behind,
                }
            }
            // Behind with an empty buffer: refill from the history.
            let Some(shared) = this.store.upgrade() else {
                this.queue.lock().mode =
                    Mode::Failed(StoreError::unavailable("the MemoryStore was dropped"));
                continue;
            };
            {
                let state = shared.state.read();
                let missed = state.watchers.missed(&this.prefix);
                this.queue
                    .lock()
                    .catch_up(&state.history, &this.prefix, this.min_rev, missed);
            }
            drop(shared);
        }
    }
}

impl Drop for MemoryWatch {
    fn drop(&mut self) {
        if let Some(shared) = self.store.upgrade() {
            shared.state.write().watchers.unregister(self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::task::Waker;

    use ccattler_core::{EventKind, FactStore, Op, Txn, Value};

    use super::*;
    use crate::test_util::{CountingWaker, block_on, drain, key, next_event, poll_once, poll_with};
    use crate::{MemoryConfig, MemoryStore};

    fn put(store: &MemoryStore, k: &str, v: &str) {
        block_on(store.put(&key(k), Value::copy_from_slice(v.as_bytes()))).unwrap();
    }

    #[test]
    fn replays_history_then_follows_live_with_prev() {
        let store = MemoryStore::new();
        put(&store, "a/1", "x"); // 1
        put(&store, "b/1", "x"); // 2
        put(&store, "a/1", "y"); // 3
        let mut watch = block_on(store.watch("a/", Revision(1))).unwrap();
        let first = next_event(&mut watch);
        assert_eq!(
            (first.kind, first.revision(), first.prev),
            (EventKind::Put, Revision(1), None)
        );
        let second = next_event(&mut watch);
        assert_eq!(second.revision(), Revision(3));
        assert_eq!(second.prev.as_ref().and_then(|p| p.value_str()), Some("x"));
        assert!(poll_once(&mut watch).is_pending());
        block_on(store.delete(&key("a/1"))).unwrap(); // 4
        let delete = next_event(&mut watch);
        assert_eq!(delete.kind, EventKind::Delete);
        assert_eq!(
            (
                delete.fact.mod_revision,
                delete.fact.version,
                delete.fact.create_revision
            ),
            (Revision(4), 0, Revision::ZERO)
        );
        assert!(delete.fact.value.is_empty() && delete.fact.lease.is_none());
        assert_eq!(delete.prev.map(|p| p.mod_revision), Some(Revision(3)));
    }

    #[test]
    fn zero_start_means_next_write_and_future_starts_wait() {
        let store = MemoryStore::new();
        put(&store, "a", "1");
        let mut now = block_on(store.watch("", Revision::ZERO)).unwrap();
        let mut later = block_on(store.watch("", Revision(4))).unwrap();
        assert!(poll_once(&mut now).is_pending());
        put(&store, "a", "2"); // 2
        put(&store, "a", "3"); // 3
        put(&store, "a", "4"); // 4
        assert_eq!(drain(&mut now).len(), 3);
        let events = drain(&mut later);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].revision(), Revision(4));
    }

    #[test]
    fn txn_events_share_a_revision_in_op_order() {
        let store = MemoryStore::new();
        let mut watch = block_on(store.watch("", Revision::ZERO)).unwrap();
        let txn = Txn::new()
            .then(Op::put(key("z"), "1"))
            .then(Op::put(key("a"), "1"));
        block_on(store.txn(txn)).unwrap();
        let events = drain(&mut watch);
        let keys: Vec<_> = events
            .iter()
            .map(|e| (e.key().as_str(), e.revision().0))
            .collect();
        assert_eq!(keys, [("z", 1), ("a", 1)]);
    }

    #[test]
    fn watch_from_a_compacted_revision_fails_at_once() {
        let store = MemoryStore::new();
        for v in ["1", "2", "3"] {
            put(&store, "a", v);
        }
        block_on(store.compact(Revision(3))).unwrap();
        assert!(matches!(
            block_on(store.watch("", Revision(2))),
            Err(StoreError::Compacted {
                requested: Revision(2),
                earliest: Revision(3)
            })
        ));
        let mut watch = block_on(store.watch("", Revision(3))).unwrap();
        assert_eq!(next_event(&mut watch).revision(), Revision(3));
        assert!(matches!(
            block_on(store.watch("/bad", Revision::ZERO)),
            Err(StoreError::InvalidKey(_))
        ));
    }

    #[test]
    fn slow_watcher_catches_up_from_history_in_order() {
        let store = MemoryStore::with_config(MemoryConfig::default().watch_buffer(2));
        let mut watch = block_on(store.watch("k", Revision::ZERO)).unwrap();
        for i in 0..10 {
            put(&store, "k", &i.to_string());
            put(&store, "other", &i.to_string());
        }
        let events = drain(&mut watch);
        let revs: Vec<u64> = events.iter().map(|e| e.revision().0).collect();
        assert_eq!(revs, (0..10).map(|i| 2 * i + 1).collect::<Vec<_>>());
        // Back in live mode.
        put(&store, "k", "live");
        assert_eq!(next_event(&mut watch).fact.value_str(), Some("live"));
    }

    #[test]
    fn slow_watcher_gets_compacted_when_history_was_trimmed() {
        let store =
            MemoryStore::with_config(MemoryConfig::default().watch_buffer(2).history_limit(3));
        let mut watch = block_on(store.watch("", Revision::ZERO)).unwrap();
        for i in 0..10 {
            put(&store, "k", &i.to_string());
        }
        assert_eq!(next_event(&mut watch).revision(), Revision(1));
        assert_eq!(next_event(&mut watch).revision(), Revision(2));
        match poll_once(&mut watch) {
            Poll::Ready(Some(Err(StoreError::Compacted {
                requested,
                earliest,
            }))) => assert_eq!((requested, earliest), (Revision(3), Revision(8))),
            other => panic!("expected compacted, got {other:?}"),
        }
        assert!(matches!(poll_once(&mut watch), Poll::Ready(None)));
        assert!(matches!(poll_once(&mut watch), Poll::Ready(None)));
    }

    #[test]
    fn writes_wake_the_waiting_task() {
        let store = MemoryStore::new();
        let mut watch = block_on(store.watch("a", Revision::ZERO)).unwrap();
        let counter = CountingWaker::new();
        let waker = Waker::from(Arc::clone(&counter));
        assert!(poll_with(&mut watch, &waker).is_pending());
        put(&store, "b", "1");
        assert_eq!(counter.count(), 0);
        put(&store, "a", "1");
        put(&store, "a", "2");
        assert_eq!(counter.count(), 1);
        assert_eq!(drain(&mut watch).len(), 2);
    }

    #[test]
    fn a_parked_reader_on_another_thread_is_woken() {
        struct Unpark(std::thread::Thread);
        impl std::task::Wake for Unpark {
            fn wake(self: Arc<Self>) {
                self.0.unpark();
            }
        }
        let store = MemoryStore::with_config(MemoryConfig::default().watch_buffer(4));
        let mut watch = block_on(store.watch("", Revision::ZERO)).unwrap();
        let reader = std::thread::spawn(move || {
            let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
            let mut revs = Vec::new();
            while revs.len() < 100 {
                match poll_with(&mut watch, &waker) {
                    Poll::Ready(Some(Ok(event))) => revs.push(event.revision().0),
                    Poll::Ready(other) => panic!("watch ended: {other:?}"),
                    Poll::Pending => std::thread::park(),
                }
            }
            revs
        });
        for i in 0..100 {
            put(&store, "k", &i.to_string());
        }
        let revs = reader.join().unwrap();
        assert_eq!(revs, (1..=100).collect::<Vec<_>>());
    }

    #[test]
    fn each_write_reaches_exactly_the_watchers_of_its_prefixes() {
        let store = MemoryStore::new();
        let prefixes = ["", "a", "a/", "a/b/", "b/", "数", "数据/", "a/"];
        let mut watches: Vec<_> = prefixes
            .iter()
            .map(|p| block_on(store.watch(p, Revision::ZERO)).unwrap())
            .collect();
        let keys = ["a/b/c", "a/x", "ab", "b/1", "数据/web", "数x", "c"];
        for k in keys {
            put(&store, k, "1");
        }
        for (prefix, watch) in prefixes.iter().zip(&mut watches) {
            let got: Vec<String> = drain(watch)
                .iter()
                .map(|e| e.key().as_str().to_owned())
                .collect();
            let want: Vec<&str> = keys.into_iter().filter(|k| k.starts_with(prefix)).collect();
            assert_eq!(got, want, "watcher of {prefix:?}");
        }
        // One of two watchers of `a/` goes: the other still hears; the gone prefix length
        // leaves the rest alone.
        drop(watches.remove(2));
        let _ = watches.remove(2); // `a/b/`, the only one of its length
        put(&store, "a/b/d", "1");
        assert_eq!(drain(&mut watches[5]).len(), 1, "the other watcher of a/");
        assert_eq!(store_watchers(&store), 6);
    }

    #[test]
    fn dropping_the_stream_unregisters_it() {
        let store = MemoryStore::new();
        let watch = block_on(store.watch("", Revision::ZERO)).unwrap();
        assert_eq!(store_watchers(&store), 1);
        drop(watch);
        assert_eq!(store_watchers(&store), 0);
    }

    #[test]
    fn dropping_the_store_ends_the_stream_after_its_buffer() {
        let store = MemoryStore::new();
        let mut watch = block_on(store.watch("", Revision::ZERO)).unwrap();
        put(&store, "a", "1");
        drop(store);
        assert_eq!(next_event(&mut watch).revision(), Revision(1));
        assert!(matches!(
            poll_once(&mut watch),
            Poll::Ready(Some(Err(StoreError::Unavailable { .. })))
        ));
        assert!(matches!(poll_once(&mut watch), Poll::Ready(None)));
    }

    #[test]
    fn deliveries_count_what_each_stream_yielded_from_its_buffer_and_from_the_history() {
        let store = MemoryStore::with_config(MemoryConfig::default().watch_buffer(2));
        let mut all = block_on(store.watch("", Revision::ZERO)).unwrap();
        let mut some = block_on(store.watch("a/", Revision::ZERO)).unwrap();
        for k in ["a/1", "b/1", "a/2", "b/2", "a/3"] {
            put(&store, k, "x");
        }
        assert_eq!(store.watch_deliveries(), 0, "nothing yielded yet");
        assert_eq!(
            drain(&mut all).len(),
            5,
            "two buffered, three from the history"
        );
        assert_eq!(drain(&mut some).len(), 3);
        assert_eq!(store.watch_deliveries(), 8);
        assert_eq!(store.watch_count(), 2);
        drop(all);
        assert_eq!(store.watch_count(), 1);
    }

    #[test]
    fn stream_is_send_unpin_static() {
        fn assert_stream<T: Stream + Send + Unpin + 'static>() {}
        assert_stream::<MemoryWatch>();
    }

    fn store_watchers(store: &MemoryStore) -> usize {
        store.shared.state.read().watchers.len()
    }
}
