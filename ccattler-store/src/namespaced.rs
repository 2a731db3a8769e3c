//! [`Namespaced`]: any [`FactStore`] seen through a key prefix, so several clusters share one
//! store without seeing each other's facts.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use ccattler_core::key::validate_prefix;
use ccattler_core::{
    Compare, Fact, FactStore, Key, KeyError, Lease, LeaseId, Op, Revision, Scan, StoreError,
    StoreLimits, Txn, TxnResponse, Value, WatchEvent,
};
use futures_core::Stream;

/// A store whose every key lives under a fixed prefix.
///
/// Keys and prefixes going in get the prefix prepended; facts and events coming out (their `prev`
/// included) have it stripped; transaction compares and operations are prefixed too. Leases, the
/// revision, compaction and limits pass through unchanged: revisions are those of the inner
/// store, shared by every namespace over it.
///
/// # Guarantees
///
/// Two `Namespaced` over one store with different prefixes never see each other's facts, as long
/// as neither prefix is a prefix of the other (`a/` and `a/b/` overlap; `a/` and `b/` do not).
///
/// # Caveats
///
/// A prefixed key must still fit within [`MAX_KEY_LEN`](ccattler_core::key::MAX_KEY_LEN).
/// Revisions are global: a namespace sees the revision jump when another namespace writes, and
/// [`compact`](FactStore::compact) compacts the whole inner store.
///
/// ```
/// use ccattler_core::{FactStore, Key};
/// use ccattler_store::{MemoryStore, Namespaced};
/// # fn block_on<F: std::future::Future>(f: F) -> F::Output {
/// #     let mut f = std::pin::pin!(f);
/// #     let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
/// #     loop { if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) { return v; } }
/// # }
///
/// let store = MemoryStore::new();
/// let blue = Namespaced::new(store.clone(), "clusters/blue/")?;
/// let key = Key::new("desired/service/web")?;
/// block_on(blue.put(&key, "{}".into()))?;
/// let inner = Key::new("clusters/blue/desired/service/web")?;
/// assert!(block_on(store.get(&inner))?.is_some());
/// assert_eq!(block_on(blue.get(&key))?.map(|fact| fact.key), Some(key));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct Namespaced<S> {
    inner: S,
    prefix: Arc<str>,
}

impl<S: FactStore> Namespaced<S> {
    /// Wraps `inner` under `prefix`.
    ///
    /// # Errors
    ///
    /// [`KeyError`] when `prefix` is empty ([`KeyError::Empty`]), does not end with `/`
    /// ([`KeyError::NamespaceWithoutSlash`]), or is not a valid key
    /// prefix.
    pub fn new(inner: S, prefix: &str) -> Result<Self, KeyError> {
        if prefix.is_empty() {
            return Err(KeyError::Empty);
        }
        validate_prefix(prefix)?;
        if !prefix.ends_with('/') {
            return Err(KeyError::NamespaceWithoutSlash(prefix.to_owned()));
        }
        Ok(Namespaced {
            inner,
            prefix: Arc::from(prefix),
        })
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The prefix every key is stored under (ends with `/`).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Unwraps the inner store.
    pub fn into_inner(self) -> S {
        self.inner
    }

    fn key_in(&self, key: &Key) -> Result<Key, StoreError> {
        let mut path = String::with_capacity(self.prefix.len() + key.as_str().len());
        path.push_str(&self.prefix);
        path.push_str(key.as_str());
        Ok(Key::new(path)?)
    }

    fn prefix_in(&self, prefix: &str) -> Result<String, StoreError> {
        validate_prefix(prefix)?;
        let joined = format!("{}{prefix}", self.prefix);
        validate_prefix(&joined)?;
        Ok(joined)
    }

    fn compare_in(&self, compare: Compare) -> Result<Compare, StoreError> {
        Ok(Compare {
            key: self.key_in(&compare.key)?,
            ..compare
        })
    }

    fn op_in(&self, op: Op) -> Result<Op, StoreError> {
        Ok(match op {
            Op::Put { key, value, lease } => Op::Put {
                key: self.key_in(&key)?,
                value,
                lease,
            },
            Op::Delete { key } => Op::Delete {
                key: self.key_in(&key)?,
            },
        })
    }
}

/// Strips `prefix` from a fact coming out of the inner store.
fn fact_out(prefix: &str, mut fact: Fact) -> Result<Fact, StoreError> {
    let rest = fact.key.strip_prefix(prefix).ok_or_else(|| {
        StoreError::unavailable(format!(
            "inner store returned key {} outside namespace {prefix}",
            fact.key
        ))
    })?;
    fact.key = Key::new(rest)?;
    Ok(fact)
}

/// Strips `prefix` from an event (and its previous fact).
fn event_out(prefix: &str, event: WatchEvent) -> Result<WatchEvent, StoreError> {
    Ok(WatchEvent {
        kind: event.kind,
        fact: fact_out(prefix, event.fact)?,
        prev: event.prev.map(|prev| fact_out(prefix, prev)).transpose()?,
    })
}

/// Strips `prefix` from the key an error names, so callers see their own keys.
fn error_out(prefix: &str, error: StoreError) -> StoreError {
    let strip = |key: Key| {
        key.strip_prefix(prefix)
            .and_then(|rest| Key::new(rest).ok())
            .unwrap_or(key)
    };
    match error {
        StoreError::DuplicateKey(key) => StoreError::DuplicateKey(strip(key)),
        StoreError::ValueTooLarge { key, size, limit } => StoreError::ValueTooLarge {
            key: strip(key),
            size,
            limit,
        },
        other => other,
    }
}

/// The watch stream of a [`Namespaced`] store: the inner stream with the prefix stripped from
/// every event. It ends as the inner stream ends.
#[derive(Debug)]
pub struct NamespacedWatch<W> {
    inner: W,
    prefix: Arc<str>,
}

impl<W> Stream for NamespacedWatch<W>
where
    W: Stream<Item = Result<WatchEvent, StoreError>> + Unpin,
{
    type Item = Result<WatchEvent, StoreError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        Pin::new(&mut this.inner)
            .poll_next(cx)
            .map(|item| item.map(|result| result.and_then(|e| event_out(&this.prefix, e))))
    }
}

impl<S: FactStore> FactStore for Namespaced<S> {
    type Watch = NamespacedWatch<S::Watch>;

    async fn get(&self, key: &Key) -> Result<Option<Fact>, StoreError> {
        let key = self.key_in(key)?;
        let fact = self.inner.get(&key).await?;
        fact.map(|f| fact_out(&self.prefix, f)).transpose()
    }

    async fn put(&self, key: &Key, value: Value) -> Result<Revision, StoreError> {
        let key = self.key_in(key)?;
        let result = self.inner.put(&key, value).await;
        result.map_err(|e| error_out(&self.prefix, e))
    }

    async fn put_with_lease(
        &self,
        key: &Key,
        value: Value,
        lease: LeaseId,
    ) -> Result<Revision, StoreError> {
        let key = self.key_in(key)?;
        let result = self.inner.put_with_lease(&key, value, lease).await;
        result.map_err(|e| error_out(&self.prefix, e))
    }

    async fn delete(&self, key: &Key) -> Result<Option<Fact>, StoreError> {
        let key = self.key_in(key)?;
        let prev = self.inner.delete(&key).await?;
        prev.map(|f| fact_out(&self.prefix, f)).transpose()
    }

    async fn scan(&self, prefix: &str) -> Result<Scan, StoreError> {
        let prefix = self.prefix_in(prefix)?;
        let scan = self.inner.scan(&prefix).await?;
        let facts = scan
            .facts
            .into_iter()
            .map(|f| fact_out(&self.prefix, f))
            .collect::<Result<_, _>>()?;
        Ok(Scan {
            revision: scan.revision,
            facts,
        })
    }

    async fn watch(&self, prefix: &str, start: Revision) -> Result<Self::Watch, StoreError> {
        let prefix = self.prefix_in(prefix)?;
        let inner = self.inner.watch(&prefix, start).await?;
        Ok(NamespacedWatch {
            inner,
            prefix: Arc::clone(&self.prefix),
        })
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse, StoreError> {
        let txn = Txn {
            compares: (txn.compares.into_iter())
                .map(|c| self.compare_in(c))
                .collect::<Result<_, _>>()?,
            then: (txn.then.into_iter())
                .map(|op| self.op_in(op))
                .collect::<Result<_, _>>()?,
            otherwise: (txn.otherwise.into_iter())
                .map(|op| self.op_in(op))
                .collect::<Result<_, _>>()?,
        };
        let result = self.inner.txn(txn).await;
        result.map_err(|e| error_out(&self.prefix, e))
    }

    async fn revision(&self) -> Result<Revision, StoreError> {
        self.inner.revision().await
    }

    async fn compact(&self, revision: Revision) -> Result<(), StoreError> {
        self.inner.compact(revision).await
    }

    async fn grant_lease(&self, ttl: Duration) -> Result<Lease, StoreError> {
        self.inner.grant_lease(ttl).await
    }

    async fn keep_alive(&self, lease: LeaseId) -> Result<Duration, StoreError> {
        self.inner.keep_alive(lease).await
    }

    async fn revoke_lease(&self, lease: LeaseId) -> Result<(), StoreError> {
        self.inner.revoke_lease(lease).await
    }

    fn limits(&self) -> StoreLimits {
        self.inner.limits()
    }
}

#[cfg(test)]
mod tests {
    use ccattler_core::{EventKind, Op};

    use super::*;
    use crate::MemoryStore;
    use crate::test_util::{block_on, drain, key};

    fn pair() -> (
        MemoryStore,
        Namespaced<MemoryStore>,
        Namespaced<MemoryStore>,
    ) {
        let store = MemoryStore::new();
        let blue = Namespaced::new(store.clone(), "blue/").unwrap();
        let green = Namespaced::new(store.clone(), "green/").unwrap();
        (store, blue, green)
    }

    #[test]
    fn prefix_must_be_a_nonempty_slash_terminated_prefix() {
        let store = MemoryStore::new();
        assert_eq!(
            Namespaced::new(store.clone(), "").unwrap_err(),
            KeyError::Empty
        );
        assert!(Namespaced::new(store.clone(), "blue").is_err());
        assert!(Namespaced::new(store.clone(), "/blue/").is_err());
        assert!(Namespaced::new(store.clone(), "a//").is_err());
        let ns = Namespaced::new(store, "a/b/").unwrap();
        assert_eq!(ns.prefix(), "a/b/");
        assert_eq!(ns.inner().limits(), ns.limits());
    }

    #[test]
    fn namespaces_are_isolated_and_keys_stripped() {
        let (store, blue, green) = pair();
        let k = key("desired/web");
        block_on(blue.put(&k, "b".into())).unwrap();
        block_on(green.put(&k, "g".into())).unwrap();
        let fact = block_on(blue.get(&k)).unwrap().unwrap();
        assert_eq!(
            (fact.key.as_str(), fact.value_str()),
            ("desired/web", Some("b"))
        );
        let scan = block_on(green.scan("")).unwrap();
        assert_eq!(scan.facts.len(), 1);
        assert_eq!(scan.facts[0].value_str(), Some("g"));
        assert_eq!(scan.revision, Revision(2));
        assert_eq!(block_on(store.scan("")).unwrap().facts.len(), 2);
        let prev = block_on(blue.delete(&k)).unwrap().unwrap();
        assert_eq!(prev.key, k);
        assert!(block_on(green.get(&k)).unwrap().is_some());
        assert_eq!(block_on(blue.revision()).unwrap(), Revision(3));
    }

    #[test]
    fn watches_see_only_their_namespace_with_stripped_prev() {
        let (_store, blue, green) = pair();
        let mut watch = block_on(blue.watch("desired/", Revision::ZERO)).unwrap();
        let k = key("desired/web");
        block_on(green.put(&k, "g".into())).unwrap();
        block_on(blue.put(&k, "1".into())).unwrap();
        block_on(blue.put(&k, "2".into())).unwrap();
        block_on(blue.delete(&k)).unwrap();
        let events = drain(&mut watch);
        assert_eq!(events.len(), 3);
        assert!(events.iter().all(|e| e.key() == &k));
        assert_eq!(events[1].prev.as_ref().map(|p| &p.key), Some(&k));
        assert_eq!(events[2].kind, EventKind::Delete);
    }

    #[test]
    fn txns_are_prefixed_and_errors_name_the_callers_keys() {
        let (store, blue, _green) = pair();
        let k = key("a");
        let txn = Txn::new()
            .when(Compare::absent(k.clone()))
            .then(Op::put(k.clone(), "1"));
        assert!(block_on(blue.txn(txn.clone())).unwrap().succeeded);
        assert!(!block_on(blue.txn(txn)).unwrap().succeeded);
        assert!(block_on(store.get(&key("blue/a"))).unwrap().is_some());
        let dup = Txn::new()
            .then(Op::put(k.clone(), "1"))
            .then(Op::delete(k.clone()));
        assert!(matches!(
            block_on(blue.txn(dup)),
            Err(StoreError::DuplicateKey(dup)) if dup == k
        ));
    }

    #[test]
    fn leases_pass_through() {
        let (store, blue, _green) = pair();
        let lease = block_on(blue.grant_lease(Duration::from_secs(30))).unwrap();
        block_on(blue.put_with_lease(&key("a"), "1".into(), lease.id)).unwrap();
        assert_eq!(
            block_on(blue.keep_alive(lease.id)).unwrap(),
            Duration::from_secs(30)
        );
        block_on(store.revoke_lease(lease.id)).unwrap();
        assert!(block_on(blue.get(&key("a"))).unwrap().is_none());
    }
}
