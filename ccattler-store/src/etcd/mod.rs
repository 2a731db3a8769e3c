//! [`EtcdStore`]: the distributed [`FactStore`], a thin mapping onto etcd's v3 API.
//!
//! | file | what it holds |
//! |---|---|
//! | `config.rs` | [`EtcdConfig`]: endpoints, prefix, timeouts, limits |
//! | `ops.rs` | get, put, delete, scan, txn, revision, compact |
//! | `lease.rs` | grant, keep-alive, revoke, and the [`LeaseKeeper`] task |
//! | `watch.rs` | [`EtcdWatch`]: etcd's watch bridged to a stream that resumes after a drop |
//! | `convert.rs`, `error.rs` | type mappings and error classification |
//! | [`server`] | test support: finding, and starting, real etcd processes |

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use ccattler_core::key::validate_prefix;
use ccattler_core::{
    Fact, FactStore, Key, KeyError, Lease, LeaseId, Revision, Scan, StoreError, StoreLimits, Txn,
    TxnResponse, Value,
};
use etcd_client::{Client, ConnectOptions, GetOptions, KvClient, LeaseClient, WatchClient};

mod config;
mod convert;
mod error;
mod lease;
mod ops;
pub mod server;
mod watch;

pub use config::{ETCD_MAX_REQUEST_BYTES, ETCD_MAX_TXN_OPS, EtcdConfig};
pub use lease::LeaseKeeper;
pub use watch::EtcdWatch;

use convert::Prefix;

/// Largest gRPC message the store decodes: scans and watch batches can be far larger than one
/// request.
const MAX_DECODING_BYTES: usize = 256 * 1024 * 1024;

/// A [`FactStore`] on an etcd cluster.
///
/// # Expected flow
///
/// [`connect`](EtcdStore::connect) with an [`EtcdConfig`]; clone the store freely (clones share
/// one gRPC connection per member). Give each CCattler cluster its own prefix, with
/// [`EtcdConfig::prefix`], [`namespace`](EtcdStore::namespace) or `Namespaced<EtcdStore>`.
///
/// # Guarantees
///
/// Everything [`FactStore`] documents, mapped onto etcd:
///
/// - Revisions are etcd's (from each response's header); a scan reports its header revision.
/// - [`put`](FactStore::put) is idempotent without a race: one etcd transaction
///   `if value == v and lease == l then get else put`, so an equal value writes nothing and the
///   existing mod revision comes back. (A value too large to be sent twice in one request takes
///   two steps instead: a get, then a put guarded by the mod revision it read, repeated if the
///   key moved in between.) Transaction puts always write, as in etcd.
/// - Watches ask etcd for previous values and resume, after a dropped connection or a member's
///   loss, from the revision after the last one delivered. They end with
///   [`StoreError::Compacted`] only when resuming is impossible.
/// - Requests over the limits ([`limits`](FactStore::limits)) fail before anything is sent;
///   etcd's own rejections are mapped to the same errors. Either way nothing is half-written:
///   an etcd transaction is atomic.
///
/// # Compaction and the earliest watchable revision
///
/// A watch event carries the key's previous value, which etcd reads at the event's revision
/// minus one. So [`compact(r)`](FactStore::compact) compacts etcd at `r - 1`, and a watch may
/// start at etcd's compact revision + 1 or later: an earlier start fails with
/// `Compacted { earliest: compact revision + 1 }`. Every watch then gets its previous values.
///
/// # Errors and retries
///
/// [`StoreError::Unavailable`] when etcd cannot be reached or fails (retryable),
/// [`StoreError::Timeout`] when a request took longer than [`EtcdConfig::request_timeout`]
/// (retryable; a write may or may not have been applied). Requests that are safe to repeat
/// (get, scan, revision, the idempotent put, keep-alive) are retried inside, up to
/// [`EtcdConfig::retries`] attempts; delete, transactions, grants, revokes and compaction are
/// not, because only the caller knows whether repeating them is right.
///
/// # Caveats
///
/// Needs a tokio runtime. [`keep_alive`](FactStore::keep_alive) is one renewal per call (a
/// short keep-alive stream); hold a [`LeaseKeeper`] from [`keep_lease_alive`](Self::keep_lease_alive)
/// to renew a lease in the background.
#[derive(Clone)]
pub struct EtcdStore {
    shared: Arc<Shared>,
    prefix: Prefix,
}

/// What every clone and namespace of one store shares.
struct Shared {
    kv: KvClient,
    watch: WatchClient,
    lease: LeaseClient,
    config: EtcdConfig,
    limits: StoreLimits,
}

impl fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdStore")
            .field("endpoints", &self.shared.config.endpoints)
            .field("prefix", &self.prefix.0)
            .finish_non_exhaustive()
    }
}

/// Checks a store prefix: empty, or a valid key prefix that ends with `/`.
fn check_prefix(prefix: &str) -> Result<(), KeyError> {
    if prefix.is_empty() {
        return Ok(());
    }
    validate_prefix(prefix)?;
    if !prefix.ends_with('/') {
        return Err(KeyError::NamespaceWithoutSlash(prefix.to_owned()));
    }
    Ok(())
}

impl EtcdStore {
    /// Connects to the cluster and proves the connection with one read.
    ///
    /// # Errors
    ///
    /// - [`StoreError::InvalidKey`] when the prefix is not empty or a key prefix ending in `/`.
    /// - [`StoreError::Unavailable`] (retryable) naming the endpoints when no member answered
    ///   within [`EtcdConfig::connect_timeout`], or when the endpoint list is empty or malformed.
    pub async fn connect(config: EtcdConfig) -> Result<EtcdStore, StoreError> {
        check_prefix(&config.prefix)?;
        let endpoints = config.endpoints.join(", ");
        let unreachable = |what: &str, source: Option<etcd_client::Error>| {
            StoreError::Unavailable {
                message: format!(
                    "cannot reach etcd at [{endpoints}]: {what} (connect timeout {:?}); is etcd running there?",
                    config.connect_timeout
                ),
                source: source.map(|e| Box::new(e) as _),
            }
        };
        if config.endpoints.is_empty() {
            return Err(StoreError::unavailable("no etcd endpoints configured"));
        }
        let mut options = ConnectOptions::new()
            .with_connect_timeout(config.connect_timeout)
            .with_require_leader(config.require_leader);
        if let Some((interval, timeout)) = config.keep_alive {
            options = options.with_keep_alive(interval, timeout);
        }
        let connecting = Client::connect(&config.endpoints, Some(options));
        let client = match tokio::time::timeout(config.connect_timeout, connecting).await {
            Ok(Ok(client)) => client,
            Ok(Err(e)) => return Err(unreachable("connect failed", Some(e))),
            Err(_) => return Err(unreachable("connect did not finish", None)),
        };
        let mut kv = client
            .kv_client()
            .max_decoding_message_size(MAX_DECODING_BYTES);
        let probe = kv.get(vec![0], Some(GetOptions::new().with_count_only()));
        match tokio::time::timeout(config.connect_timeout, probe).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(unreachable("the first request failed", Some(e))),
            Err(_) => return Err(unreachable("no answer", None)),
        }
        let limits = StoreLimits {
            max_txn_ops: config.max_txn_ops,
            max_value_bytes: config.max_value_bytes(),
        };
        let prefix = Prefix(config.prefix.clone());
        let shared = Shared {
            kv,
            watch: client
                .watch_client()
                .max_decoding_message_size(MAX_DECODING_BYTES),
            lease: client.lease_client(),
            config,
            limits,
        };
        Ok(EtcdStore {
            shared: Arc::new(shared),
            prefix,
        })
    }

    /// The same store seen under one more prefix level: keys of the result live under this
    /// store's prefix followed by `prefix` (which must end with `/`). Shares the connection.
    ///
    /// # Errors
    ///
    /// [`KeyError`] when `prefix` is empty, malformed or does not end with `/`.
    pub fn namespace(&self, prefix: &str) -> Result<EtcdStore, KeyError> {
        if prefix.is_empty() {
            return Err(KeyError::Empty);
        }
        check_prefix(prefix)?;
        let joined = format!("{}{prefix}", self.prefix.0);
        check_prefix(&joined)?;
        Ok(EtcdStore {
            shared: Arc::clone(&self.shared),
            prefix: Prefix(joined),
        })
    }

    /// The prefix every key is stored under (empty or ending with `/`).
    pub fn prefix(&self) -> &str {
        &self.prefix.0
    }

    /// The config the store was connected with.
    pub fn config(&self) -> &EtcdConfig {
        &self.shared.config
    }

    /// The etcd key (with the prefix) that `key` is stored at, for tools such as `etcdctl`.
    pub fn etcd_key(&self, key: &Key) -> String {
        format!("{}{key}", self.prefix.0)
    }

    fn timeout(&self) -> Duration {
        self.shared.config.request_timeout
    }
}

impl FactStore for EtcdStore {
    type Watch = EtcdWatch;

    async fn get(&self, key: &Key) -> Result<Option<Fact>, StoreError> {
        self.get_fact(key).await
    }

    async fn put(&self, key: &Key, value: Value) -> Result<Revision, StoreError> {
        self.put_idempotent(key, value, None).await
    }

    async fn put_with_lease(
        &self,
        key: &Key,
        value: Value,
        lease: LeaseId,
    ) -> Result<Revision, StoreError> {
        self.put_idempotent(key, value, Some(lease)).await
    }

    async fn delete(&self, key: &Key) -> Result<Option<Fact>, StoreError> {
        self.delete_key(key).await
    }

    async fn scan(&self, prefix: &str) -> Result<Scan, StoreError> {
        self.scan_prefix(prefix).await
    }

    async fn watch(&self, prefix: &str, start: Revision) -> Result<EtcdWatch, StoreError> {
        validate_prefix(prefix)?;
        EtcdWatch::open(self.watch_source(prefix), start).await
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse, StoreError> {
        self.commit(txn).await
    }

    async fn revision(&self) -> Result<Revision, StoreError> {
        self.current_revision().await
    }

    async fn compact(&self, revision: Revision) -> Result<(), StoreError> {
        self.compact_history(revision).await
    }

    async fn grant_lease(&self, ttl: Duration) -> Result<Lease, StoreError> {
        self.grant(ttl).await
    }

    async fn keep_alive(&self, lease: LeaseId) -> Result<Duration, StoreError> {
        self.renew(lease).await
    }

    async fn revoke_lease(&self, lease: LeaseId) -> Result<(), StoreError> {
        self.revoke(lease).await
    }

    fn limits(&self) -> StoreLimits {
        self.shared.limits
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_prefixes_are_checked() {
        assert!(check_prefix("").is_ok());
        assert!(check_prefix("a/b/").is_ok());
        assert!(matches!(
            check_prefix("a"),
            Err(KeyError::NamespaceWithoutSlash(_))
        ));
        assert!(check_prefix("/a/").is_err());
    }

    #[tokio::test]
    async fn unreachable_etcd_is_a_retryable_error_naming_the_endpoints() {
        let config =
            EtcdConfig::new(["http://127.0.0.1:1"]).connect_timeout(Duration::from_millis(500));
        let e = EtcdStore::connect(config).await.unwrap_err();
        assert!(e.is_retryable(), "{e:?}");
        assert!(e.to_string().contains("http://127.0.0.1:1"), "{e}");
        let bad = EtcdStore::connect(EtcdConfig::new(["http://127.0.0.1:1"]).prefix("x")).await;
        assert!(matches!(bad, Err(StoreError::InvalidKey(_))));
    }
}
