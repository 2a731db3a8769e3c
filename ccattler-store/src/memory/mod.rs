//! [`MemoryStore`]: the embedded, in-process fact store with etcd's semantics.
//!
//! | file | what it holds |
//! |---|---|
//! | `config.rs` | [`MemoryConfig`] |
//! | `state.rs` | the key map, the revision and the history log, behind one lock |
//! | `watch.rs` | per-watcher bounded queues and the [`MemoryWatch`] stream |
//! | `lease.rs` | the lease table and its ordered deadlines |
//! | `txn.rs` | transaction validation, compares and apply |
//!
//! One `parking_lot::RwLock` guards all state: reads share it, writes hold it exclusively while
//! they apply and offer the event to every watcher (each watcher's queue is offered the event
//! under the lock, so a write costs more the more watchers there are). Watchers are woken
//! after the lock is released.

#[cfg(test)]
mod catch_up_tests;
mod config;
mod lease;
mod missed;
mod ops;
mod state;
mod txn;
mod watch;

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::Waker;
use std::time::Duration;

use ccattler_core::{Clock, Key, StoreLimits};
use parking_lot::{RwLock, RwLockWriteGuard};

pub use config::MemoryConfig;
pub use watch::MemoryWatch;

use state::State;

/// What every clone of a [`MemoryStore`] shares. Watch streams and the lease reaper hold only a
/// `Weak` to it, so dropping the last store handle frees everything.
pub(crate) struct Shared {
    pub(crate) state: RwLock<State>,
    limits: StoreLimits,
    watch_buffer: usize,
    clock: Arc<dyn Clock>,
    /// The earliest lease deadline in clock nanoseconds (`u64::MAX`: no lease), readable without
    /// the lock so that operations pay for expiry only when something is due.
    next_deadline: AtomicU64,
    /// The reaper's interval, when the store runs on the system clock.
    reaper_interval: Option<Duration>,
    reaper_started: AtomicBool,
    /// Events every watch stream has yielded, summed ([`MemoryStore::watch_deliveries`]).
    delivered: Arc<AtomicU64>,
}

/// An in-memory [`FactStore`](ccattler_core::FactStore) with etcd's semantics: one global revision, idempotent put,
/// transactions, ordered gap-free watches with previous values, compaction and leases.
///
/// Clones share one store. Every operation completes without waiting, so the futures it returns
/// are ready on their first poll; the store needs no async runtime.
///
/// # Guarantees
///
/// Everything [`FactStore`](ccattler_core::FactStore) lists, plus:
///
/// - **Bounded memory.** The history keeps at most 100,000 events or as many as the store holds
///   facts, whichever is more, or the fixed [`MemoryConfig::history_limit`] (older revisions are
///   compacted away), and each watcher buffers at most
///   [`MemoryConfig::watch_buffer`] events (see [`MemoryWatch`] for what a slow reader sees).
/// - **Writers never wait for readers.** Watchers are fed without blocking.
/// - **Leases expire on time.** Expiry is checked at the start of every operation; on the system
///   clock a background thread (started with the first lease, holding only a weak reference,
///   ending when the store is dropped) also expires leases every
///   [`MemoryConfig::reaper_interval`], so watchers see the delete events even when nobody
///   writes. With a custom clock there is no thread: call [`MemoryStore::expire_leases`].
///   Each expired lease is revoked at its own revision.
#[derive(Clone)]
pub struct MemoryStore {
    shared: Arc<Shared>,
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore::new()
    }
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct("MemoryStore");
        match self.shared.state.try_read() {
            Some(state) => s
                .field("revision", &state.revision)
                .field("keys", &state.kv.len())
                .field("history", &state.history.events.len())
                .field("watchers", &state.watchers.len()),
            None => s.field("state", &"<locked>"),
        };
        s.finish_non_exhaustive()
    }
}

fn wake_all(wake: Vec<Waker>) {
    for waker in wake {
        waker.wake();
    }
}

impl MemoryStore {
    /// An empty store with the default [`MemoryConfig`].
    pub fn new() -> Self {
        MemoryStore::with_config(MemoryConfig::default())
    }

    /// An empty store set up by `config`.
    pub fn with_config(config: MemoryConfig) -> Self {
        let (clock, system) = config.resolve_clock();
        MemoryStore {
            shared: Arc::new(Shared {
                state: RwLock::new(State::new(config.history_limit)),
                limits: config.limits,
                watch_buffer: config.watch_buffer,
                clock,
                next_deadline: AtomicU64::new(u64::MAX),
                reaper_interval: system.then_some(config.reaper_interval),
                reaper_started: AtomicBool::new(false),
                delivered: Arc::new(AtomicU64::new(0)),
            }),
        }
    }

    /// How many events the store's watch streams have yielded since it was made, summed over
    /// every watch (open or ended): the cost of fan-out, beside the revisions that writes cost.
    /// A write seen by ten watchers counts ten.
    pub fn watch_deliveries(&self) -> u64 {
        self.shared.delivered.load(Ordering::Relaxed)
    }

    /// How many watch streams are open now.
    pub fn watch_count(&self) -> usize {
        self.shared.state.read().watchers.len()
    }

    /// Revokes every lease whose deadline has passed on the store's clock, deleting its keys
    /// (with delete events). Operations do this on their own; call it to make expiry visible to
    /// watchers when nothing else touches the store (tests on a `ManualClock`, typically).
    pub fn expire_leases(&self) {
        if !self.due() {
            return;
        }
        let (state, wake) = self.write();
        drop(state);
        wake_all(wake);
    }

    /// Whether some lease deadline may have passed.
    fn due(&self) -> bool {
        let due = self.shared.next_deadline.load(Ordering::Acquire);
        due != u64::MAX && clock_nanos(&*self.shared.clock) >= due
    }

    /// Takes the write lock and expires due leases first.
    fn write(&self) -> (RwLockWriteGuard<'_, State>, Vec<Waker>) {
        let mut state = self.shared.state.write();
        let mut wake = Vec::new();
        if self.due() {
            let now = self.shared.clock.now();
            while let Some((_, keys)) = state.leases.pop_expired(now) {
                delete_all(&mut state, keys, &mut wake);
            }
            self.sync_deadline(&state);
        }
        (state, wake)
    }

    fn sync_deadline(&self, state: &State) {
        self.shared
            .next_deadline
            .store(state.leases.next_deadline_nanos(), Ordering::Release);
    }

    /// Starts the lease reaper thread once, on the system clock only.
    fn start_reaper(&self) {
        let Some(interval) = self.shared.reaper_interval else {
            return;
        };
        if self.shared.reaper_started.swap(true, Ordering::AcqRel) {
            return;
        }
        let weak = Arc::downgrade(&self.shared);
        let spawned = std::thread::Builder::new()
            .name("ccattler-lease-reaper".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(interval);
                    let Some(shared) = weak.upgrade() else {
                        break;
                    };
                    MemoryStore { shared }.expire_leases();
                }
            });
        if spawned.is_err() {
            // Lazy expiry still works; try again with the next lease.
            self.shared.reaper_started.store(false, Ordering::Release);
        }
    }
}

/// The clock's time in nanoseconds, saturating.
fn clock_nanos(clock: &dyn Clock) -> u64 {
    u64::try_from(clock.now().as_nanos()).unwrap_or(u64::MAX)
}

/// Deletes `keys` (those of a revoked or expired lease) in one revision.
fn delete_all(state: &mut State, keys: impl IntoIterator<Item = Key>, wake: &mut Vec<Waker>) {
    let rev = state.next_revision();
    let mut changed = false;
    for key in keys {
        changed |= state.apply_delete(key.as_str(), rev, wake).is_some();
    }
    state.commit(rev, changed);
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use ccattler_core::{EventKind, FactStore, LeaseId, ManualClock, Revision, StoreError};

    use super::*;
    use crate::test_util::{block_on, drain, key};

    fn manual() -> (MemoryStore, ManualClock) {
        let clock = ManualClock::new();
        let store =
            MemoryStore::with_config(MemoryConfig::default().clock(Arc::new(clock.clone())));
        (store, clock)
    }

    #[test]
    fn lease_ttl_bounds_and_ids() {
        let (store, _clock) = manual();
        assert!(matches!(
            block_on(store.grant_lease(Duration::ZERO)),
            Err(StoreError::InvalidTtl(_))
        ));
        assert!(matches!(
            block_on(store.grant_lease(Duration::from_secs(366 * 24 * 3600))),
            Err(StoreError::InvalidTtl(_))
        ));
        let first = block_on(store.grant_lease(Duration::from_secs(5))).unwrap();
        let second = block_on(store.grant_lease(Duration::from_secs(5))).unwrap();
        assert_eq!((first.id, second.id), (LeaseId(1), LeaseId(2)));
        assert_eq!(first.ttl, Duration::from_secs(5));
        // No reaper thread on a custom clock.
        assert!(!store.shared.reaper_started.load(Ordering::SeqCst));
    }

    #[test]
    fn expiry_deletes_keys_in_one_revision_with_events() {
        let (store, clock) = manual();
        let lease = block_on(store.grant_lease(Duration::from_secs(10))).unwrap();
        block_on(store.put_with_lease(&key("a"), "1".into(), lease.id)).unwrap();
        block_on(store.put_with_lease(&key("b"), "1".into(), lease.id)).unwrap();
        block_on(store.put(&key("c"), "1".into())).unwrap();
        let mut watch = block_on(store.watch("", Revision::ZERO)).unwrap();
        clock.advance(Duration::from_secs(9));
        store.expire_leases();
        assert!(drain(&mut watch).is_empty());
        clock.advance(Duration::from_secs(1));
        store.expire_leases();
        let events = drain(&mut watch);
        assert_eq!(events.len(), 2);
        for event in &events {
            assert_eq!(
                (event.kind, event.revision()),
                (EventKind::Delete, Revision(4))
            );
            assert_eq!(event.prev.as_ref().and_then(|p| p.lease), Some(lease.id));
        }
        assert_eq!(block_on(store.scan("")).unwrap().facts.len(), 1);
        assert!(matches!(
            block_on(store.keep_alive(lease.id)),
            Err(StoreError::LeaseNotFound(_))
        ));
        assert!(matches!(
            block_on(store.put_with_lease(&key("a"), "1".into(), lease.id)),
            Err(StoreError::LeaseNotFound(_))
        ));
    }

    #[test]
    fn expiry_is_lazy_on_every_operation() {
        let (store, clock) = manual();
        let lease = block_on(store.grant_lease(Duration::from_secs(10))).unwrap();
        block_on(store.put_with_lease(&key("a"), "1".into(), lease.id)).unwrap();
        clock.advance(Duration::from_secs(10));
        assert_eq!(block_on(store.get(&key("a"))).unwrap(), None);
        assert_eq!(block_on(store.revision()).unwrap(), Revision(2));
    }

    #[test]
    fn keep_alive_renews_for_the_full_ttl() {
        let (store, clock) = manual();
        let lease = block_on(store.grant_lease(Duration::from_secs(10))).unwrap();
        block_on(store.put_with_lease(&key("a"), "1".into(), lease.id)).unwrap();
        clock.advance(Duration::from_secs(8));
        assert_eq!(
            block_on(store.keep_alive(lease.id)).unwrap(),
            Duration::from_secs(10)
        );
        clock.advance(Duration::from_secs(8));
        assert!(block_on(store.get(&key("a"))).unwrap().is_some());
        clock.advance(Duration::from_secs(2));
        assert!(block_on(store.get(&key("a"))).unwrap().is_none());
        assert!(matches!(
            block_on(store.keep_alive(LeaseId(42))),
            Err(StoreError::LeaseNotFound(LeaseId(42)))
        ));
    }

    #[test]
    fn revoke_deletes_attached_keys_once() {
        let (store, _clock) = manual();
        let lease = block_on(store.grant_lease(Duration::from_secs(10))).unwrap();
        block_on(store.put_with_lease(&key("a"), "1".into(), lease.id)).unwrap();
        block_on(store.put_with_lease(&key("b"), "1".into(), lease.id)).unwrap();
        // Detached by a plain put: survives the revoke.
        block_on(store.put(&key("b"), "2".into())).unwrap();
        block_on(store.revoke_lease(lease.id)).unwrap();
        assert_eq!(block_on(store.revision()).unwrap(), Revision(4));
        let facts = block_on(store.scan("")).unwrap().facts;
        assert_eq!(facts.len(), 1);
        assert_eq!(facts[0].key.as_str(), "b");
        assert!(matches!(
            block_on(store.revoke_lease(lease.id)),
            Err(StoreError::LeaseNotFound(_))
        ));
        // Revoking a lease with no keys writes nothing.
        let empty = block_on(store.grant_lease(Duration::from_secs(10))).unwrap();
        block_on(store.revoke_lease(empty.id)).unwrap();
        assert_eq!(block_on(store.revision()).unwrap(), Revision(4));
    }

    #[test]
    fn reaper_thread_expires_leases_without_any_operation() {
        let store = MemoryStore::with_config(
            MemoryConfig::default().reaper_interval(Duration::from_millis(10)),
        );
        let lease = block_on(store.grant_lease(Duration::from_secs(1))).unwrap();
        block_on(store.put_with_lease(&key("a"), "1".into(), lease.id)).unwrap();
        let mut watch = block_on(store.watch("", Revision::ZERO)).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let events = loop {
            // `drain` only polls the stream; it never touches the store's operations.
            let events = drain(&mut watch);
            if !events.is_empty() || std::time::Instant::now() > deadline {
                break events;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].kind, EventKind::Delete);
        // The reaper holds only a weak reference: the state is freed with the store.
        let weak = Arc::downgrade(&store.shared);
        drop(store);
        assert!(
            weak.upgrade().is_none() || {
                std::thread::sleep(Duration::from_millis(50));
                weak.upgrade().is_none()
            }
        );
    }
}
