//! [`HttpStore`] (feature `http`): a [`FactStore`] whose every operation is a request to a
//! server of the store protocol ([`crate::wire`]), such as
//! [`http_server::router`](crate::http_server::router) mounted by a platform (`cca server`
//! mounts it). A remote node agent runs over it with its node's credential.
//!
//! # Guarantees
//!
//! The server runs each operation on its own store, so the guarantees of [`FactStore`] hold as
//! that store gives them: one global revision, atomic transactions, gap-free watches ending with
//! [`StoreError::Compacted`] when they cannot go on. The store conformance suite of
//! `ccattler-testkit` passes over it (`ccattler-testkit/tests/http_conformance.rs`).
//!
//! # Several servers
//!
//! [`HttpStore::with_endpoints`] takes several servers of one shared store (several
//! `cca server --store etcd` on one etcd), and [`resolve_endpoints`] turns a host name that
//! resolves to several addresses into one endpoint each. Requests go to one preferred
//! endpoint, the first, and stay with it while it answers. The policy (pure, in `failover`):
//!
//! - A request that never reached a server (connection refused, no connection within
//!   [`CONNECT_TIMEOUT`]) is sent at once to the next endpoint, whatever it is.
//! - A request sent but not answered (the connection dropped, the timeout ran out), or answered
//!   with a 5xx or a retryable store error, is sent at once to the next endpoint when sending it
//!   twice cannot change its outcome (reads, puts, lease renewals). A delete, a transaction, a
//!   lease grant or revocation, a compaction may have taken effect: the caller gets the error,
//!   as with one server, and its retry goes to the next endpoint.
//! - Any other answer (denied, lease not found, compacted, a failed compare) holds on every
//!   server and is returned as is.
//! - A watch whose connection breaks, falls silent or ends with a retryable error reopens at
//!   once on the next endpoint, from the revision of its last event, skipping the events of
//!   that revision it delivered: the caller sees one gap-free stream without duplicates. It
//!   ends with the error only when every endpoint failed in turn without an event in between.
//!
//! Leases, credentials and revisions are the shared store's, so a lease granted through one
//! server is renewed through any other. Servers over stores of their own (`--store memory`)
//! share nothing: failing over between them is not supported.
//!
//! # Errors
//!
//! The server's store errors come back as the same [`StoreError`]. A refusal (wrong token,
//! another node's key or lease) is [`StoreError::Denied`]. When no server can be reached, or a
//! watch's connection drops or falls silent for [`WATCH_IDLE_LIMIT`] on every server, the
//! error is [`StoreError::Unavailable`] (naming the last server tried); an attempt that takes
//! longer than the timeout (10 s by default) is [`StoreError::Timeout`].
//!
//! # Caveats
//!
//! - Plain HTTP/1.1 (no TLS): put a TLS-terminating proxy in front of the server, or keep it on
//!   a trusted network. Calls need a tokio runtime.
//! - [`FactStore::limits`] answers the limits given to [`HttpStore::with_limits`] (the defaults,
//!   which are etcd's, unless told): the client cannot know the server's store, and the server
//!   checks its own limits on every request anyway.
//! - The timeout is per attempt: a request that fails over after timeouts can take up to one
//!   timeout per endpoint. A server that is down fails over within milliseconds (refused) or
//!   [`CONNECT_TIMEOUT`] (unreachable host); a server that accepts but hangs costs a timeout.
//! - A watch from [`Revision::ZERO`] ("from the next write") asks the current revision first,
//!   so that it can resume: one more request.
//!
//! ```no_run
//! use ccattler_core::{FactStore, Key};
//! use ccattler_store::http::HttpStore;
//!
//! # async fn demo() -> Result<(), ccattler_core::StoreError> {
//! let store = HttpStore::new("http://127.0.0.1:7420", "my-node-credential");
//! store.put(&Key::new("observed/node/n1")?, "{}".into()).await?;
//! // Three servers of one shared store: requests fail over between them.
//! let servers = ["http://10.0.0.1:7420", "http://10.0.0.2:7420", "http://10.0.0.3:7420"];
//! let ha = HttpStore::with_endpoints(servers.map(String::from).to_vec(), "my-node-credential");
//! ha.put(&Key::new("observed/node/n1")?, "{}".into()).await?;
//! # Ok(())
//! # }
//! ```

mod failover;
pub mod sse;
mod transport;
mod watch;

pub use failover::resolve_endpoints;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ccattler_core::{
    Fact, FactStore, Key, Lease, LeaseId, Revision, Scan, StoreError, StoreLimits, Txn,
    TxnResponse, Value, WatchEvent,
};
use futures_util::stream::BoxStream;
use hyper::Method;
use parking_lot::Mutex;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value as Json;

use crate::wire::{
    GetAnswer, GetRequest, LeaseRequest, PutRequest, RevisionBody, Route, ScanAnswer, ScanRequest,
    TxnAnswer, WATCH_KEEP_ALIVE, WireLease, WireTxn, encode_value,
};
use failover::{Fault, Repeat, Ring, try_next};
use transport::{Failed, Transport};

/// How long a watch may stay silent (the server sends a keep-alive every
/// [`WATCH_KEEP_ALIVE`]) before it is taken as broken (and reopened on another endpoint).
pub const WATCH_IDLE_LIMIT: Duration = Duration::from_secs(WATCH_KEEP_ALIVE.as_secs() * 4);

/// How long a connection to one endpoint may take before the request goes to the next.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// A [`FactStore`] over the store protocol; see the [module docs](self).
///
/// Cloning is cheap; clones share one connection pool and one preferred endpoint.
#[derive(Clone, Debug)]
pub struct HttpStore {
    transport: Transport,
    endpoints: Arc<Endpoints>,
    limits: StoreLimits,
    timeout: Duration,
}

/// The servers, and which one requests go to first.
#[derive(Debug)]
struct Endpoints {
    urls: Vec<String>,
    ring: Mutex<Ring>,
}

impl Endpoints {
    fn url(&self, at: usize) -> &str {
        self.urls.get(at).map_or("", String::as_str)
    }

    fn order(&self) -> Vec<usize> {
        self.ring.lock().order()
    }

    fn answered(&self, at: usize) {
        self.ring.lock().answered(at);
    }

    /// Moves the preference on from `at`, and says so when it changes.
    fn failed(&self, at: usize, err: &StoreError) {
        let mut ring = self.ring.lock();
        let before = ring.preferred();
        ring.failed(at);
        let after = ring.preferred();
        drop(ring);
        if before != after && self.urls.len() > 1 {
            tracing::warn!(
                from = %self.url(before),
                to = %self.url(after),
                "store server failed ({err}); failing over"
            );
        }
    }
}

impl HttpStore {
    /// A store that sends its requests to `server` (a base URL such as
    /// `http://127.0.0.1:7420`) with the bearer `token`. Nothing is sent until the first call;
    /// a malformed URL fails that call with [`StoreError::Unavailable`].
    pub fn new(server: impl Into<String>, token: impl Into<String>) -> Self {
        HttpStore::with_endpoints(vec![server.into()], token)
    }

    /// A store over several servers of one shared store, preferring them in the order given
    /// (see [Several servers](self#several-servers)); an empty list fails every call with
    /// [`StoreError::Unavailable`]. A trailing `/` of a URL is ignored. Host names are
    /// resolved by each connection: use [`resolve_endpoints`] for a name that stands for
    /// several servers.
    pub fn with_endpoints(servers: Vec<String>, token: impl Into<String>) -> Self {
        let urls: Vec<String> = servers
            .iter()
            .map(|url| url.trim().trim_end_matches('/').to_owned())
            .collect();
        HttpStore {
            transport: Transport::new(token.into(), CONNECT_TIMEOUT),
            endpoints: Arc::new(Endpoints {
                ring: Mutex::new(Ring::new(urls.len())),
                urls,
            }),
            limits: StoreLimits::default(),
            timeout: Duration::from_secs(10),
        }
    }

    /// Answers `limits` from [`FactStore::limits`] (set them to the server's store's).
    #[must_use]
    pub fn with_limits(mut self, limits: StoreLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Gives up on an attempt after `timeout` (10 s by default), then tries the next endpoint
    /// when the policy allows. A watch's timeout covers only opening it; an open watch is
    /// taken as broken after [`WATCH_IDLE_LIMIT`] of silence.
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The servers' base URLs, in the order of preference given.
    pub fn endpoints(&self) -> &[String] {
        &self.endpoints.urls
    }

    /// The server requests go to first now: the one that answered last, or the next after
    /// one that failed.
    pub fn preferred(&self) -> &str {
        let at = self.endpoints.ring.lock().preferred();
        self.endpoints.url(at)
    }

    /// Sends one request to the endpoints in turn, as the failover policy says.
    async fn attempts(
        &self,
        method: Method,
        path: &str,
        body: Bytes,
        repeat: Repeat,
    ) -> Result<Json, StoreError> {
        if self.endpoints.urls.is_empty() {
            return Err(StoreError::unavailable(
                "no store server given; give at least one base URL",
            ));
        }
        let mut last = None;
        for at in self.endpoints.order() {
            let url = self.endpoints.url(at);
            let attempt = tokio::time::timeout(
                self.timeout,
                self.transport.json(url, method.clone(), path, body.clone()),
            )
            .await
            .unwrap_or_else(|_| Err((StoreError::Timeout(self.timeout), Fault::Interrupted)));
            match attempt {
                Ok(json) => {
                    self.endpoints.answered(at);
                    return Ok(json);
                }
                Err((err, Fault::Final)) => {
                    self.endpoints.answered(at);
                    return Err(err);
                }
                Err((err, fault)) => {
                    self.endpoints.failed(at, &err);
                    if !try_next(fault, repeat) {
                        return Err(err);
                    }
                    last = Some(err);
                }
            }
        }
        Err(self.none_answered(last))
    }

    /// The error of a request no endpoint answered: the last one's, saying how many were tried.
    fn none_answered(&self, last: Option<StoreError>) -> StoreError {
        match (last, self.endpoints.urls.len()) {
            (Some(err), 1) => err,
            (Some(StoreError::Unavailable { message, source }), n) => StoreError::Unavailable {
                message: format!("none of the {n} store servers answered; the last: {message}"),
                source,
            },
            (Some(err), _) => err,
            (None, _) => StoreError::unavailable("no store server answered"),
        }
    }

    async fn call<T: DeserializeOwned>(
        &self,
        route: Route,
        body: &impl Serialize,
    ) -> Result<T, StoreError> {
        let (method, body) = if route.is_get() {
            (Method::GET, Bytes::new())
        } else {
            let body = serde_json::to_vec(body)
                .map_err(|err| StoreError::unavailable(format!("encoding the request: {err}")))?;
            (Method::POST, Bytes::from(body))
        };
        let path = route.path();
        let json = self.attempts(method, path, body, repeat_of(route)).await?;
        serde_json::from_value(json)
            .map_err(|err| StoreError::unavailable(format!("unexpected answer from {path}: {err}")))
    }

    async fn put_request(
        &self,
        key: &Key,
        value: &Value,
        lease: Option<LeaseId>,
    ) -> Result<Revision, StoreError> {
        self.limits.check_value(key, value.len())?;
        let request = PutRequest {
            key: key.as_str().to_owned(),
            value: encode_value(value),
            lease: lease.map(|l| l.0),
        };
        let answer: RevisionBody = self.call(Route::Put, &request).await?;
        Ok(Revision(answer.revision))
    }
}

/// Whether a route's request may be sent twice (see [Several servers](self#several-servers)).
fn repeat_of(route: Route) -> Repeat {
    match route {
        Route::Get
        | Route::Scan
        | Route::Revision
        | Route::Put
        | Route::LeaseKeepAlive
        | Route::Watch => Repeat::Safe,
        Route::Delete | Route::Txn | Route::Compact | Route::LeaseGrant | Route::LeaseRevoke => {
            Repeat::Once
        }
    }
}

impl FactStore for HttpStore {
    type Watch = BoxStream<'static, Result<WatchEvent, StoreError>>;

    async fn get(&self, key: &Key) -> Result<Option<Fact>, StoreError> {
        let request = GetRequest {
            key: key.as_str().to_owned(),
        };
        let answer: GetAnswer = self.call(Route::Get, &request).await?;
        answer.fact.map(|f| f.into_fact()).transpose()
    }

    async fn put(&self, key: &Key, value: Value) -> Result<Revision, StoreError> {
        self.put_request(key, &value, None).await
    }

    async fn put_with_lease(
        &self,
        key: &Key,
        value: Value,
        lease: LeaseId,
    ) -> Result<Revision, StoreError> {
        self.put_request(key, &value, Some(lease)).await
    }

    async fn delete(&self, key: &Key) -> Result<Option<Fact>, StoreError> {
        let request = GetRequest {
            key: key.as_str().to_owned(),
        };
        let answer: GetAnswer = self.call(Route::Delete, &request).await?;
        answer.fact.map(|f| f.into_fact()).transpose()
    }

    async fn scan(&self, prefix: &str) -> Result<Scan, StoreError> {
        ccattler_core::key::validate_prefix(prefix)?;
        let request = ScanRequest {
            prefix: prefix.to_owned(),
        };
        let answer: ScanAnswer = self.call(Route::Scan, &request).await?;
        Ok(Scan {
            revision: Revision(answer.revision),
            facts: answer
                .facts
                .into_iter()
                .map(|f| f.into_fact())
                .collect::<Result<_, _>>()?,
        })
    }

    async fn watch(&self, prefix: &str, start: Revision) -> Result<Self::Watch, StoreError> {
        ccattler_core::key::validate_prefix(prefix)?;
        let start = if start == Revision::ZERO {
            Revision(self.revision().await?.get() + 1)
        } else {
            start
        };
        watch::Follow::open(self.clone(), prefix.to_owned(), start).await
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse, StoreError> {
        // Checked here too, so a bad transaction fails the same way on every backend.
        self.limits.check_txn(&txn)?;
        let answer: TxnAnswer = self.call(Route::Txn, &WireTxn::from(&txn)).await?;
        Ok(TxnResponse {
            succeeded: answer.succeeded,
            revision: Revision(answer.revision),
        })
    }

    async fn revision(&self) -> Result<Revision, StoreError> {
        let answer: RevisionBody = self.call(Route::Revision, &()).await?;
        Ok(Revision(answer.revision))
    }

    async fn compact(&self, revision: Revision) -> Result<(), StoreError> {
        let request = RevisionBody {
            revision: revision.get(),
        };
        let _: Json = self.call(Route::Compact, &request).await?;
        Ok(())
    }

    async fn grant_lease(&self, ttl: Duration) -> Result<Lease, StoreError> {
        let answer: WireLease = self
            .call(Route::LeaseGrant, &WireLease::new(0, ttl))
            .await?;
        Ok(Lease {
            id: LeaseId(answer.id),
            ttl: answer.ttl(),
        })
    }

    async fn keep_alive(&self, lease: LeaseId) -> Result<Duration, StoreError> {
        let request = LeaseRequest { id: lease.0 };
        let answer: WireLease = self.call(Route::LeaseKeepAlive, &request).await?;
        Ok(answer.ttl())
    }

    async fn revoke_lease(&self, lease: LeaseId) -> Result<(), StoreError> {
        let request = LeaseRequest { id: lease.0 };
        let _: Json = self.call(Route::LeaseRevoke, &request).await?;
        Ok(())
    }

    fn limits(&self) -> StoreLimits {
        self.limits
    }
}

/// A failed attempt at endpoint `at`, for the watch: records it and says whether to go on.
fn failed_attempt(store: &HttpStore, at: usize, failed: &Failed) -> bool {
    if failed.1 == Fault::Final {
        store.endpoints.answered(at);
        false
    } else {
        store.endpoints.failed(at, &failed.0);
        true
    }
}
