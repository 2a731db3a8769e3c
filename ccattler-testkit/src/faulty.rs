//! [`FaultyStore`]: any store, with faults a test switches on and off.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use ccattler_core::{
    Fact, FactStore, Key, Lease, LeaseId, Revision, Scan, StoreError, StoreLimits, Txn,
    TxnResponse, Value,
};

/// Wraps a store and injects faults: a partition (every call fails as unreachable) and lost
/// races (before a transaction, another writer changes the first key it guards).
///
/// Clones share the same switches.
///
/// ```
/// use ccattler_store::MemoryStore;
/// use ccattler_testkit::faulty::FaultyStore;
///
/// let store = FaultyStore::new(MemoryStore::new());
/// store.partition();
/// assert!(store.is_partitioned());
/// store.heal();
/// ```
#[derive(Clone, Debug)]
pub struct FaultyStore<S> {
    inner: S,
    down: Arc<AtomicBool>,
    races: Arc<AtomicUsize>,
    lost: Arc<AtomicUsize>,
}

impl<S: FactStore + Clone> FaultyStore<S> {
    /// `inner`, with no fault on.
    pub fn new(inner: S) -> Self {
        FaultyStore {
            inner,
            down: Arc::new(AtomicBool::new(false)),
            races: Arc::new(AtomicUsize::new(0)),
            lost: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// The wrapped store (faults do not apply to it).
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// From now on every call fails with [`StoreError::Unavailable`].
    pub fn partition(&self) {
        self.down.store(true, Ordering::SeqCst);
    }

    /// Ends a partition.
    pub fn heal(&self) {
        self.down.store(false, Ordering::SeqCst);
    }

    /// Whether calls currently fail.
    pub fn is_partitioned(&self) -> bool {
        self.down.load(Ordering::SeqCst)
    }

    /// Makes the next `n` guarded transactions lose a race: just before each is forwarded, the
    /// first key it compares is overwritten with `"intruder"`.
    pub fn lose_races(&self, n: usize) {
        self.races.store(n, Ordering::SeqCst);
    }

    /// Races still to be lost.
    pub fn races_left(&self) -> usize {
        self.races.load(Ordering::SeqCst)
    }

    /// Transactions whose compares failed, since the wrapper was made.
    pub fn failed_txns(&self) -> usize {
        self.lost.load(Ordering::SeqCst)
    }

    fn check(&self) -> Result<(), StoreError> {
        if self.is_partitioned() {
            Err(StoreError::unavailable("partitioned by the test"))
        } else {
            Ok(())
        }
    }
}

impl<S: FactStore + Clone> FactStore for FaultyStore<S> {
    type Watch = S::Watch;

    async fn get(&self, key: &Key) -> Result<Option<Fact>, StoreError> {
        self.check()?;
        self.inner.get(key).await
    }

    async fn put(&self, key: &Key, value: Value) -> Result<Revision, StoreError> {
        self.check()?;
        self.inner.put(key, value).await
    }

    async fn put_with_lease(
        &self,
        key: &Key,
        value: Value,
        lease: LeaseId,
    ) -> Result<Revision, StoreError> {
        self.check()?;
        self.inner.put_with_lease(key, value, lease).await
    }

    async fn delete(&self, key: &Key) -> Result<Option<Fact>, StoreError> {
        self.check()?;
        self.inner.delete(key).await
    }

    async fn scan(&self, prefix: &str) -> Result<Scan, StoreError> {
        self.check()?;
        self.inner.scan(prefix).await
    }

    async fn watch(&self, prefix: &str, start: Revision) -> Result<Self::Watch, StoreError> {
        self.check()?;
        self.inner.watch(prefix, start).await
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse, StoreError> {
        self.check()?;
        let race = self
            .races
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if let (true, Some(compare)) = (race, txn.compares.first()) {
            self.inner.put(&compare.key, "intruder".into()).await?;
        }
        let response = self.inner.txn(txn).await?;
        if !response.succeeded {
            self.lost.fetch_add(1, Ordering::SeqCst);
        }
        Ok(response)
    }

    async fn revision(&self) -> Result<Revision, StoreError> {
        self.check()?;
        self.inner.revision().await
    }

    async fn compact(&self, revision: Revision) -> Result<(), StoreError> {
        self.check()?;
        self.inner.compact(revision).await
    }

    async fn grant_lease(&self, ttl: Duration) -> Result<Lease, StoreError> {
        self.check()?;
        self.inner.grant_lease(ttl).await
    }

    async fn keep_alive(&self, lease: LeaseId) -> Result<Duration, StoreError> {
        self.check()?;
        self.inner.keep_alive(lease).await
    }

    async fn revoke_lease(&self, lease: LeaseId) -> Result<(), StoreError> {
        self.check()?;
        self.inner.revoke_lease(lease).await
    }

    fn limits(&self) -> StoreLimits {
        self.inner.limits()
    }
}
