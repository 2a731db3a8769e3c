//! [`DynFactStore`], the object-safe form of [`FactStore`], and `FactStore` for
//! `Arc<dyn DynFactStore>`.
//!
//! # Example: the store named by a config string
//!
//! ```
//! use std::sync::Arc;
//!
//! use ccattler_core::{DynFactStore, FactStore, Key, StoreError};
//! use ccattler_store::{MemoryStore, Namespaced};
//! # fn block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     let mut f = std::pin::pin!(f);
//! #     let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
//! #     loop { if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) { return v; } }
//! # }
//!
//! /// Opens the store a config file names: `memory`, or `namespaced:PREFIX` over memory (a
//! /// real platform would add `etcd:URLS`, `http:URL`...).
//! fn open(config: &str) -> Result<Arc<dyn DynFactStore>, String> {
//!     match config.split_once(':') {
//!         None if config == "memory" => Ok(Arc::new(MemoryStore::new())),
//!         Some(("namespaced", prefix)) => {
//!             let store = Namespaced::new(MemoryStore::new(), prefix).map_err(|e| e.to_string())?;
//!             Ok(Arc::new(store))
//!         }
//!         _ => Err(format!("unknown store {config:?}")),
//!     }
//! }
//!
//! /// A component written for any store, as runners, agents and `apply` are.
//! async fn count<S: FactStore>(store: &S, prefix: &str) -> Result<usize, StoreError> {
//!     Ok(store.scan(prefix).await?.facts.len())
//! }
//!
//! for config in ["memory", "namespaced:tenant-a/"] {
//!     let store = open(config)?;
//!     block_on(store.put(&Key::new("desired/web")?, r#"{"replicas":3}"#.into()))?;
//!     assert_eq!(block_on(count(&store, "desired/"))?, 1);
//! }
//! assert!(open("zookeeper").is_err());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures_core::future::BoxFuture;
use futures_core::stream::BoxStream;

use crate::{
    Fact, FactStore, Key, Lease, LeaseId, Revision, Scan, StoreError, StoreLimits, Txn,
    TxnResponse, Value, WatchEvent,
};

/// The watch stream of a [`DynFactStore`]: any store's [`FactStore::Watch`], boxed.
///
/// It keeps every guarantee of the stream it boxes (order, no gaps, one final error).
pub type DynWatch = BoxStream<'static, Result<WatchEvent, StoreError>>;

/// The object-safe form of [`FactStore`]: the same operations, returning boxed futures, so
/// that `dyn DynFactStore` exists and a store can be chosen at run time.
///
/// Every [`FactStore`] implements it (blanket impl); nothing else needs to. Hold one as
/// `Arc<dyn DynFactStore>`, which implements [`FactStore`] and so goes wherever a store is
/// taken. See the [module docs](crate::dynamic) for when to prefer generics.
///
/// # Guarantees
///
/// Each `dyn_*` method is the [`FactStore`] method of the same name, unchanged: same result,
/// same errors, same effects. Only the future (and a watch's stream) is boxed.
///
/// # Caveats
///
/// Call the [`FactStore`] names (`get`, `put`...) on `Arc<dyn DynFactStore>`; the `dyn_`
/// prefix only keeps these methods from clashing with them when both traits are in scope.
pub trait DynFactStore: Send + Sync + 'static {
    /// [`FactStore::get`], boxed.
    fn dyn_get<'a>(&'a self, key: &'a Key) -> BoxFuture<'a, Result<Option<Fact>, StoreError>>;

    /// [`FactStore::put`], boxed.
    fn dyn_put<'a>(
        &'a self,
        key: &'a Key,
        value: Value,
    ) -> BoxFuture<'a, Result<Revision, StoreError>>;

    /// [`FactStore::put_with_lease`], boxed.
    fn dyn_put_with_lease<'a>(
        &'a self,
        key: &'a Key,
        value: Value,
        lease: LeaseId,
    ) -> BoxFuture<'a, Result<Revision, StoreError>>;

    /// [`FactStore::delete`], boxed.
    fn dyn_delete<'a>(&'a self, key: &'a Key) -> BoxFuture<'a, Result<Option<Fact>, StoreError>>;

    /// [`FactStore::scan`], boxed.
    fn dyn_scan<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Scan, StoreError>>;

    /// [`FactStore::watch`], boxed, with the stream boxed as a [`DynWatch`].
    fn dyn_watch<'a>(
        &'a self,
        prefix: &'a str,
        start: Revision,
    ) -> BoxFuture<'a, Result<DynWatch, StoreError>>;

    /// [`FactStore::txn`], boxed.
    fn dyn_txn(&self, txn: Txn) -> BoxFuture<'_, Result<TxnResponse, StoreError>>;

    /// [`FactStore::revision`], boxed.
    fn dyn_revision(&self) -> BoxFuture<'_, Result<Revision, StoreError>>;

    /// [`FactStore::compact`], boxed.
    fn dyn_compact(&self, revision: Revision) -> BoxFuture<'_, Result<(), StoreError>>;

    /// [`FactStore::grant_lease`], boxed.
    fn dyn_grant_lease(&self, ttl: Duration) -> BoxFuture<'_, Result<Lease, StoreError>>;

    /// [`FactStore::keep_alive`], boxed.
    fn dyn_keep_alive(&self, lease: LeaseId) -> BoxFuture<'_, Result<Duration, StoreError>>;

    /// [`FactStore::revoke_lease`], boxed.
    fn dyn_revoke_lease(&self, lease: LeaseId) -> BoxFuture<'_, Result<(), StoreError>>;

    /// [`FactStore::limits`].
    fn dyn_limits(&self) -> StoreLimits;

    /// The backend's type name, for `Debug` output and logs.
    ///
    /// # Caveats
    ///
    /// From [`std::any::type_name`]: meant for people, not guaranteed stable across compiler
    /// versions; do not match on it.
    fn dyn_type_name(&self) -> &'static str;
}

impl<S: FactStore> DynFactStore for S {
    fn dyn_get<'a>(&'a self, key: &'a Key) -> BoxFuture<'a, Result<Option<Fact>, StoreError>> {
        Box::pin(FactStore::get(self, key))
    }

    fn dyn_put<'a>(
        &'a self,
        key: &'a Key,
        value: Value,
    ) -> BoxFuture<'a, Result<Revision, StoreError>> {
        Box::pin(FactStore::put(self, key, value))
    }

    fn dyn_put_with_lease<'a>(
        &'a self,
        key: &'a Key,
        value: Value,
        lease: LeaseId,
    ) -> BoxFuture<'a, Result<Revision, StoreError>> {
        Box::pin(FactStore::put_with_lease(self, key, value, lease))
    }

    fn dyn_delete<'a>(&'a self, key: &'a Key) -> BoxFuture<'a, Result<Option<Fact>, StoreError>> {
        Box::pin(FactStore::delete(self, key))
    }

    fn dyn_scan<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Scan, StoreError>> {
        Box::pin(FactStore::scan(self, prefix))
    }

    fn dyn_watch<'a>(
        &'a self,
        prefix: &'a str,
        start: Revision,
    ) -> BoxFuture<'a, Result<DynWatch, StoreError>> {
        Box::pin(async move {
            let watch = FactStore::watch(self, prefix, start).await?;
            Ok(Box::pin(watch) as DynWatch)
        })
    }

    fn dyn_txn(&self, txn: Txn) -> BoxFuture<'_, Result<TxnResponse, StoreError>> {
        Box::pin(FactStore::txn(self, txn))
    }

    fn dyn_revision(&self) -> BoxFuture<'_, Result<Revision, StoreError>> {
        Box::pin(FactStore::revision(self))
    }

    fn dyn_compact(&self, revision: Revision) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(FactStore::compact(self, revision))
    }

    fn dyn_grant_lease(&self, ttl: Duration) -> BoxFuture<'_, Result<Lease, StoreError>> {
        Box::pin(FactStore::grant_lease(self, ttl))
    }

    fn dyn_keep_alive(&self, lease: LeaseId) -> BoxFuture<'_, Result<Duration, StoreError>> {
        Box::pin(FactStore::keep_alive(self, lease))
    }

    fn dyn_revoke_lease(&self, lease: LeaseId) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(FactStore::revoke_lease(self, lease))
    }

    fn dyn_limits(&self) -> StoreLimits {
        FactStore::limits(self)
    }

    fn dyn_type_name(&self) -> &'static str {
        std::any::type_name::<S>()
    }
}

/// A store chosen at run time is a [`FactStore`]: every method forwards to the backend's own
/// through [`DynFactStore`], so it behaves exactly as the backend does.
///
/// Each future is the backend's, boxed once by [`DynFactStore`] and awaited inside an
/// `async fn` here (no second allocation): an opaque future borrowing both `self` and a key
/// cannot be the boxed future itself, whose one lifetime is the shorter of the two borrows.
impl FactStore for Arc<dyn DynFactStore> {
    type Watch = DynWatch;

    async fn get(&self, key: &Key) -> Result<Option<Fact>, StoreError> {
        (**self).dyn_get(key).await
    }

    async fn put(&self, key: &Key, value: Value) -> Result<Revision, StoreError> {
        (**self).dyn_put(key, value).await
    }

    async fn put_with_lease(
        &self,
        key: &Key,
        value: Value,
        lease: LeaseId,
    ) -> Result<Revision, StoreError> {
        (**self).dyn_put_with_lease(key, value, lease).await
    }

    async fn delete(&self, key: &Key) -> Result<Option<Fact>, StoreError> {
        (**self).dyn_delete(key).await
    }

    async fn scan(&self, prefix: &str) -> Result<Scan, StoreError> {
        (**self).dyn_scan(prefix).await
    }

    async fn watch(&self, prefix: &str, start: Revision) -> Result<DynWatch, StoreError> {
        (**self).dyn_watch(prefix, start).await
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse, StoreError> {
        (**self).dyn_txn(txn).await
    }

    async fn revision(&self) -> Result<Revision, StoreError> {
        (**self).dyn_revision().await
    }

    async fn compact(&self, revision: Revision) -> Result<(), StoreError> {
        (**self).dyn_compact(revision).await
    }

    async fn grant_lease(&self, ttl: Duration) -> Result<Lease, StoreError> {
        (**self).dyn_grant_lease(ttl).await
    }

    async fn keep_alive(&self, lease: LeaseId) -> Result<Duration, StoreError> {
        (**self).dyn_keep_alive(lease).await
    }

    async fn revoke_lease(&self, lease: LeaseId) -> Result<(), StoreError> {
        (**self).dyn_revoke_lease(lease).await
    }

    fn limits(&self) -> StoreLimits {
        (**self).dyn_limits()
    }
}

/// Names the backend (see [`DynFactStore::dyn_type_name`]); a store's contents are not shown.
impl fmt::Debug for dyn DynFactStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("DynFactStore")
            .field(&self.dyn_type_name())
            .finish()
    }
}
