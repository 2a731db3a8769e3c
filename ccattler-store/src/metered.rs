//! [`Metered`]: any [`FactStore`] with its operations, their latency and its open watches
//! recorded through the `metrics` facade (feature `metrics`).
//!
//! It records `ccattler_store_operations_total` (by `operation` and `outcome`),
//! `ccattler_store_operation_duration_seconds` (by `operation`) and `ccattler_store_watches`
//! (watch streams open now). The table of every metric CCattler records is [`ccattler_core::telemetry`].

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use ccattler_core::{
    Fact, FactStore, Key, Lease, LeaseId, Revision, Scan, StoreError, StoreLimits, Txn,
    TxnResponse, Value, WatchEvent,
};
use futures_core::Stream;

/// Name of the operations counter.
pub const OPERATIONS: &str = "ccattler_store_operations_total";
/// Name of the latency histogram.
pub const DURATION: &str = "ccattler_store_operation_duration_seconds";
/// Name of the open watches gauge.
pub const WATCHES: &str = "ccattler_store_watches";

/// A store whose every call is counted and timed; see the [module docs](self).
///
/// It changes nothing else: results, errors and events pass through as they are.
///
/// ```
/// use ccattler_core::{FactStore, Key};
/// use ccattler_store::{MemoryStore, Metered};
/// # fn block_on<F: std::future::Future>(f: F) -> F::Output {
/// #     let mut f = std::pin::pin!(f);
/// #     let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
/// #     loop { if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) { return v; } }
/// # }
/// let store = Metered::new(MemoryStore::new());
/// // Recorded as ccattler_store_operations_total{operation="put",outcome="ok"}.
/// block_on(store.put(&Key::new("desired/service/web")?, "{}".into()))?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct Metered<S> {
    inner: S,
}

impl<S: FactStore> Metered<S> {
    /// Wraps `inner`.
    pub fn new(inner: S) -> Self {
        Metered { inner }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Unwraps the inner store.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

/// Records one call of `operation` that began at `start`.
fn record<T>(operation: &'static str, start: Instant, result: &Result<T, StoreError>) {
    let outcome = if result.is_ok() { "ok" } else { "error" };
    metrics::counter!(OPERATIONS, "operation" => operation, "outcome" => outcome).increment(1);
    metrics::histogram!(DURATION, "operation" => operation).record(start.elapsed().as_secs_f64());
}

/// Times `call` and records it as `operation`.
async fn metered<T>(
    operation: &'static str,
    call: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    let start = Instant::now();
    let result = call.await;
    record(operation, start, &result);
    result
}

/// The watch stream of a [`Metered`] store: the inner stream, counted in
/// `ccattler_store_watches` while it lives.
#[derive(Debug)]
pub struct MeteredWatch<W> {
    inner: W,
    _open: OpenWatch,
}

/// Counts one open watch from [`OpenWatch::new`] until it drops.
#[derive(Debug)]
struct OpenWatch;

impl OpenWatch {
    fn new() -> Self {
        metrics::gauge!(WATCHES).increment(1.0);
        OpenWatch
    }
}

impl Drop for OpenWatch {
    fn drop(&mut self) {
        metrics::gauge!(WATCHES).decrement(1.0);
    }
}

impl<W> Stream for MeteredWatch<W>
where
    W: Stream<Item = Result<WatchEvent, StoreError>> + Unpin,
{
    type Item = Result<WatchEvent, StoreError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        Pin::new(&mut self.inner).poll_next(cx)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.inner.size_hint()
    }
}

impl<S: FactStore> FactStore for Metered<S> {
    type Watch = MeteredWatch<S::Watch>;

    async fn get(&self, key: &Key) -> Result<Option<Fact>, StoreError> {
        metered("get", self.inner.get(key)).await
    }

    async fn put(&self, key: &Key, value: Value) -> Result<Revision, StoreError> {
        metered("put", self.inner.put(key, value)).await
    }

    async fn put_with_lease(
        &self,
        key: &Key,
        value: Value,
        lease: LeaseId,
    ) -> Result<Revision, StoreError> {
        metered(
            "put_with_lease",
            self.inner.put_with_lease(key, value, lease),
        )
        .await
    }

    async fn delete(&self, key: &Key) -> Result<Option<Fact>, StoreError> {
        metered("delete", self.inner.delete(key)).await
    }

    async fn scan(&self, prefix: &str) -> Result<Scan, StoreError> {
        metered("scan", self.inner.scan(prefix)).await
    }

    async fn watch(&self, prefix: &str, start: Revision) -> Result<Self::Watch, StoreError> {
        let inner = metered("watch", self.inner.watch(prefix, start)).await?;
        Ok(MeteredWatch {
            inner,
            _open: OpenWatch::new(),
        })
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse, StoreError> {
        metered("txn", self.inner.txn(txn)).await
    }

    async fn revision(&self) -> Result<Revision, StoreError> {
        metered("revision", self.inner.revision()).await
    }

    async fn compact(&self, revision: Revision) -> Result<(), StoreError> {
        metered("compact", self.inner.compact(revision)).await
    }

    async fn grant_lease(&self, ttl: Duration) -> Result<Lease, StoreError> {
        metered("grant_lease", self.inner.grant_lease(ttl)).await
    }

    async fn keep_alive(&self, lease: LeaseId) -> Result<Duration, StoreError> {
        metered("keep_alive", self.inner.keep_alive(lease)).await
    }

    async fn revoke_lease(&self, lease: LeaseId) -> Result<(), StoreError> {
        metered("revoke_lease", self.inner.revoke_lease(lease)).await
    }

    fn limits(&self) -> StoreLimits {
        self.inner.limits()
    }
}

#[cfg(test)]
mod tests {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    use super::*;
    use crate::MemoryStore;

    fn block_on<F: Future>(f: F) -> F::Output {
        let mut f = std::pin::pin!(f);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        loop {
            if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
                return v;
            }
        }
    }

    #[test]
    fn calls_are_counted_by_operation_and_outcome() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, || {
            let store = Metered::new(MemoryStore::new());
            let key = Key::new("a/b").expect("key");
            block_on(store.put(&key, "x".into())).expect("put");
            let missing = block_on(store.keep_alive(LeaseId(42)));
            assert!(missing.is_err());
        });
        let snapshot = snapshotter.snapshot().into_vec();
        let count = |operation: &str, outcome: &str| {
            snapshot.iter().find_map(|(key, _, _, value)| {
                let labels: Vec<_> = key.key().labels().map(|l| (l.key(), l.value())).collect();
                (key.key().name() == OPERATIONS
                    && labels == [("operation", operation), ("outcome", outcome)])
                .then_some(value)
            })
        };
        assert_eq!(count("put", "ok"), Some(&DebugValue::Counter(1)));
        assert_eq!(count("keep_alive", "error"), Some(&DebugValue::Counter(1)));
        let timed = snapshot.iter().any(|(key, _, _, value)| {
            key.key().name() == DURATION
                && matches!(value, DebugValue::Histogram(h) if h.len() == 1)
        });
        assert!(timed, "{snapshot:?}");
    }

    #[test]
    fn open_watches_are_counted_until_dropped() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, || {
            let store = Metered::new(MemoryStore::new());
            let first = block_on(store.watch("a/", Revision::ZERO)).expect("watch");
            let second = block_on(store.watch("a/", Revision::ZERO)).expect("watch");
            drop(first);
            // One of the two is still open.
            assert_eq!(gauge(&snapshotter, WATCHES), 1.0);
            drop(second);
        });
    }

    fn gauge(snapshotter: &metrics_util::debugging::Snapshotter, name: &str) -> f64 {
        snapshotter
            .snapshot()
            .into_vec()
            .iter()
            .find_map(|(key, _, _, value)| match value {
                DebugValue::Gauge(g) if key.key().name() == name => Some(g.into_inner()),
                _ => None,
            })
            .unwrap_or(f64::NAN)
    }
}
