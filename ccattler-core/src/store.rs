//! The [`FactStore`] trait: the contract every backend keeps.

use std::future::Future;
use std::time::Duration;

use futures_core::Stream;

use crate::{
    Fact, Key, Lease, LeaseId, Revision, StoreError, StoreLimits, Txn, TxnResponse, Value,
    WatchEvent,
};

/// The facts under a prefix, read at one revision.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Scan {
    /// The store revision the facts were read at. Watch from `revision.next()` to follow on with
    /// no gap and no overlap.
    pub revision: Revision,
    /// The facts, sorted by key.
    pub facts: Vec<Fact>,
}

/// A store of facts with etcd's semantics.
///
/// Implemented by `MemoryStore` and `EtcdStore` (crate `ccattler-store`) and by `Namespaced<S>`
/// over any of them. Controllers never see which backend they run on.
///
/// # Guarantees
///
/// - **One global revision.** Every committed write raises it by exactly one, whatever number of
///   keys the write touched; reads never raise it.
/// - **Idempotent put.** [`put`](FactStore::put) of the value already stored (with no lease change)
///   writes nothing: no revision, no event. Transactions do not have this shortcut (see [`Txn`]).
/// - **Ordered, gap-free watches.** A watch delivers every change under its prefix from its start
///   revision on, in revision order, each with the key's previous value, and then follows live
///   changes. It never silently skips an event: when it cannot deliver one it ends with
///   [`StoreError::Compacted`], and the reader lists again.
/// - **Atomic transactions.** All of a branch commits at one revision, or nothing does.
/// - **Leases.** Keys put with a lease are deleted, with delete events, when the lease expires or
///   is revoked.
///
/// # Errors
///
/// Every method returns [`StoreError`]; invalid input is rejected before anything is written.
///
/// # Caveats
///
/// The trait uses `async fn` with `Send` futures and an associated watch type, so it is used
/// through generics (`S: FactStore`) rather than `dyn FactStore`. For a store chosen at run
/// time, use `Arc<dyn DynFactStore>` ([`DynFactStore`](crate::DynFactStore)), which implements
/// this trait.
pub trait FactStore: Send + Sync + 'static {
    /// The stream a watch returns. It yields events until the watcher drops it, or ends with one
    /// error (after which it yields `None`).
    type Watch: Stream<Item = Result<WatchEvent, StoreError>> + Send + Unpin + 'static;

    /// Reads one fact; `None` when the key does not exist.
    fn get(&self, key: &Key) -> impl Future<Output = Result<Option<Fact>, StoreError>> + Send;

    /// Writes `value` at `key` without lease. Returns the key's mod revision after the call: a new
    /// revision, or the existing one when the value was already stored.
    fn put(
        &self,
        key: &Key,
        value: Value,
    ) -> impl Future<Output = Result<Revision, StoreError>> + Send;

    /// Like [`put`](FactStore::put), attaching the key to `lease`.
    ///
    /// # Errors
    ///
    /// [`StoreError::LeaseNotFound`] when the lease has expired or was revoked.
    fn put_with_lease(
        &self,
        key: &Key,
        value: Value,
        lease: LeaseId,
    ) -> impl Future<Output = Result<Revision, StoreError>> + Send;

    /// Deletes one key, returning what it held; deleting a missing key writes nothing.
    fn delete(&self, key: &Key) -> impl Future<Output = Result<Option<Fact>, StoreError>> + Send;

    /// Reads every fact whose key starts with `prefix` (plain string prefix; `""` is everything).
    fn scan(&self, prefix: &str) -> impl Future<Output = Result<Scan, StoreError>> + Send;

    /// Follows every change under `prefix` whose revision is `start` or later.
    ///
    /// `start` may be in the past (history is replayed first, then live changes follow) or at most
    /// one past the current revision. `Revision::ZERO` means "from the next write on".
    ///
    /// # Errors
    ///
    /// [`StoreError::Compacted`] (returned here, or later as the stream's last item) when `start`
    /// is older than the retained history.
    fn watch(
        &self,
        prefix: &str,
        start: Revision,
    ) -> impl Future<Output = Result<Self::Watch, StoreError>> + Send;

    /// Commits a transaction atomically.
    fn txn(&self, txn: Txn) -> impl Future<Output = Result<TxnResponse, StoreError>> + Send;

    /// The current global revision.
    fn revision(&self) -> impl Future<Output = Result<Revision, StoreError>> + Send;

    /// Discards history before `revision`: later watches must start at `revision` or after.
    fn compact(&self, revision: Revision) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Grants a lease that lives `ttl` without keep-alive.
    fn grant_lease(&self, ttl: Duration) -> impl Future<Output = Result<Lease, StoreError>> + Send;

    /// Renews a lease for its full TTL, returning the TTL.
    fn keep_alive(
        &self,
        lease: LeaseId,
    ) -> impl Future<Output = Result<Duration, StoreError>> + Send;

    /// Ends a lease now, deleting every key attached to it in one revision.
    fn revoke_lease(&self, lease: LeaseId) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The request limits this store enforces.
    fn limits(&self) -> StoreLimits;
}
