//! The agents' store, counted: a [`FactStore`] around each agent's [`HttpStore`] that counts
//! the events its watches deliver and records the shape of every write it sends (which kind,
//! how many keys, how long each key and value), so that the same write pattern can be sent
//! straight to etcd afterwards ([`super::ceiling`]).
//!
//! A write is one line of text: `g` (a lease grant), `k` (a keep-alive), `p KEY VALUE LEASE`
//! (a put: key and value lengths, 1 when under a lease) or `t OP,OP,...` (a transaction, each
//! operation `KEY:VALUE:LEASE` with `VALUE` `-` for a delete).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ccattler_core::{
    Fact, FactStore, Key, Lease, LeaseId, Op, Revision, Scan, StoreError, StoreLimits, Txn,
    TxnResponse, Value, WatchEvent,
};
use ccattler_store::http::HttpStore;
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use parking_lot::Mutex;

/// What all the agents of one process share: counters, and each agent's writes.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    /// Events delivered by the agents' watches.
    pub(crate) watch_events: AtomicU64,
    /// Requests of every kind sent to the servers.
    pub(crate) requests: AtomicU64,
    /// Write requests (grants, keep-alives, puts, transactions) sent to the servers.
    pub(crate) writes: AtomicU64,
}

/// One agent's store: its own [`HttpStore`], counted into the shared [`Tally`].
#[derive(Clone, Debug)]
pub(crate) struct Counted {
    inner: HttpStore,
    tally: Arc<Tally>,
    log: Arc<Mutex<Vec<String>>>,
}

impl Counted {
    pub(crate) fn new(inner: HttpStore, tally: Arc<Tally>) -> Self {
        Counted {
            inner,
            tally,
            log: Arc::default(),
        }
    }

    /// The writes this agent sent so far, one line each (see the module docs).
    pub(crate) fn writes(&self) -> Vec<String> {
        self.log.lock().clone()
    }

    fn request(&self) {
        self.tally.requests.fetch_add(1, Ordering::Relaxed);
    }

    fn write(&self, line: String) {
        self.request();
        self.tally.writes.fetch_add(1, Ordering::Relaxed);
        self.log.lock().push(line);
    }
}

/// One operation of a transaction as `KEY:VALUE:LEASE` lengths.
fn op_shape(op: &Op) -> String {
    match op {
        Op::Put { key, value, lease } => {
            format!(
                "{}:{}:{}",
                key.as_str().len(),
                value.len(),
                u8::from(lease.is_some())
            )
        }
        Op::Delete { key } => format!("{}:-:0", key.as_str().len()),
    }
}

impl FactStore for Counted {
    type Watch = BoxStream<'static, Result<WatchEvent, StoreError>>;

    async fn get(&self, key: &Key) -> Result<Option<Fact>, StoreError> {
        self.request();
        self.inner.get(key).await
    }

    async fn put(&self, key: &Key, value: Value) -> Result<Revision, StoreError> {
        self.write(format!("p {} {} 0", key.as_str().len(), value.len()));
        self.inner.put(key, value).await
    }

    async fn put_with_lease(
        &self,
        key: &Key,
        value: Value,
        lease: LeaseId,
    ) -> Result<Revision, StoreError> {
        self.write(format!("p {} {} 1", key.as_str().len(), value.len()));
        self.inner.put_with_lease(key, value, lease).await
    }

    async fn delete(&self, key: &Key) -> Result<Option<Fact>, StoreError> {
        self.write(format!("t {}:-:0", key.as_str().len()));
        self.inner.delete(key).await
    }

    async fn scan(&self, prefix: &str) -> Result<Scan, StoreError> {
        self.request();
        self.inner.scan(prefix).await
    }

    async fn watch(&self, prefix: &str, start: Revision) -> Result<Self::Watch, StoreError> {
        self.request();
        let tally = Arc::clone(&self.tally);
        let watch = self.inner.watch(prefix, start).await?;
        Ok(watch
            .inspect(move |event| {
                if event.is_ok() {
                    tally.watch_events.fetch_add(1, Ordering::Relaxed);
                }
            })
            .boxed())
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse, StoreError> {
        let ops: Vec<String> = txn.then.iter().map(op_shape).collect();
        self.write(format!("t {}", ops.join(",")));
        self.inner.txn(txn).await
    }

    async fn revision(&self) -> Result<Revision, StoreError> {
        self.request();
        self.inner.revision().await
    }

    async fn compact(&self, revision: Revision) -> Result<(), StoreError> {
        self.request();
        self.inner.compact(revision).await
    }

    async fn grant_lease(&self, ttl: Duration) -> Result<Lease, StoreError> {
        self.write("g".to_owned());
        self.inner.grant_lease(ttl).await
    }

    async fn keep_alive(&self, lease: LeaseId) -> Result<Duration, StoreError> {
        self.write("k".to_owned());
        self.inner.keep_alive(lease).await
    }

    async fn revoke_lease(&self, lease: LeaseId) -> Result<(), StoreError> {
        self.request();
        self.inner.revoke_lease(lease).await
    }

    fn limits(&self) -> StoreLimits {
        self.inner.limits()
    }
}
