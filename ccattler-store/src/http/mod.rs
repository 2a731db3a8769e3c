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
//! # Errors
//!
//! The server's store errors come back as the same [`StoreError`]. A refusal (wrong token,
//! another node's key or lease) is [`StoreError::Denied`]. A server that cannot be reached, or
//! a watch whose connection drops or falls silent for [`WATCH_IDLE_LIMIT`], is
//! [`StoreError::Unavailable`]; a request that takes longer than the timeout (10 s by default)
//! is [`StoreError::Timeout`].
//!
//! # Caveats
//!
//! - Plain HTTP/1.1 (no TLS): put a TLS-terminating proxy in front of the server, or keep it on
//!   a trusted network. Calls need a tokio runtime.
//! - [`FactStore::limits`] answers the limits given to [`HttpStore::with_limits`] (the defaults,
//!   which are etcd's, unless told): the client cannot know the server's store, and the server
//!   checks its own limits on every request anyway.
//!
//! ```no_run
//! use ccattler_core::{FactStore, Key};
//! use ccattler_store::http::HttpStore;
//!
//! # async fn demo() -> Result<(), ccattler_core::StoreError> {
//! let store = HttpStore::new("http://127.0.0.1:7420", "my-node-credential");
//! store.put(&Key::new("observed/node/n1")?, "{}".into()).await?;
//! # Ok(())
//! # }
//! ```

pub mod sse;
mod transport;

use std::time::Duration;

use bytes::Bytes;
use ccattler_core::{
    Fact, FactStore, Key, Lease, LeaseId, Revision, Scan, StoreError, StoreLimits, Txn,
    TxnResponse, Value, WatchEvent,
};
use futures_util::stream::{self, BoxStream, StreamExt};
use hyper::Method;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value as Json;

use crate::wire::{
    CHANGE_EVENT, ERROR_EVENT, GetAnswer, GetRequest, LeaseRequest, PutRequest, RevisionBody,
    Route, ScanAnswer, ScanRequest, TxnAnswer, WATCH_KEEP_ALIVE, WatchParams, WireError, WireEvent,
    WireLease, WireTxn, encode_value,
};
use sse::EventReader;
use transport::Transport;

/// How long a watch may stay silent (the server sends a keep-alive every
/// [`WATCH_KEEP_ALIVE`]) before it ends with [`StoreError::Unavailable`].
pub const WATCH_IDLE_LIMIT: Duration = Duration::from_secs(WATCH_KEEP_ALIVE.as_secs() * 4);

/// A [`FactStore`] over the store protocol; see the [module docs](self).
///
/// Cloning is cheap and clones share one connection pool.
#[derive(Clone, Debug)]
pub struct HttpStore {
    transport: Transport,
    limits: StoreLimits,
    timeout: Duration,
}

impl HttpStore {
    /// A store that sends its requests to `server` (a base URL such as
    /// `http://127.0.0.1:7420`) with the bearer `token`. Nothing is sent until the first call;
    /// a malformed URL fails that call with [`StoreError::Unavailable`].
    pub fn new(server: impl Into<String>, token: impl Into<String>) -> Self {
        HttpStore {
            transport: Transport::new(&server.into(), token.into()),
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

    /// Gives up on a request after `timeout` (10 s by default). A watch's timeout covers only
    /// opening it; an open watch ends after [`WATCH_IDLE_LIMIT`] of silence.
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The server's base URL.
    pub fn server(&self) -> &str {
        self.transport.base()
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
        let json = tokio::time::timeout(self.timeout, self.transport.json(method, path, body))
            .await
            .map_err(|_| StoreError::Timeout(self.timeout))??;
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
        let params = WatchParams {
            prefix: prefix.to_owned(),
            from: start.get(),
        };
        let path = format!("{}?{}", Route::Watch.path(), params.to_query());
        let response = tokio::time::timeout(
            self.timeout,
            self.transport.send(Method::GET, &path, Bytes::new()),
        )
        .await
        .map_err(|_| StoreError::Timeout(self.timeout))??;
        let status = response.status();
        if !status.is_success() {
            let body = transport::read_json(response.into_body()).await?;
            return Err(transport::store_error(status, &body));
        }
        let reader = EventReader::new(response.into_body());
        Ok(stream::unfold(Some(reader), next_change).boxed())
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

/// The next event of a watch; after an error, the stream ends.
async fn next_change(
    reader: Option<EventReader>,
) -> Option<(Result<WatchEvent, StoreError>, Option<EventReader>)> {
    let mut reader = reader?;
    loop {
        let event = match tokio::time::timeout(WATCH_IDLE_LIMIT, reader.next()).await {
            Err(_) => {
                let err = StoreError::unavailable(format!(
                    "the watch stream was silent for {WATCH_IDLE_LIMIT:?}; watch again"
                ));
                return Some((Err(err), None));
            }
            Ok(Err(err)) => return Some((Err(err), None)),
            Ok(Ok(None)) => {
                let err = StoreError::unavailable("the server ended the watch stream; watch again");
                return Some((Err(err), None));
            }
            Ok(Ok(Some(event))) => event,
        };
        if event.event == CHANGE_EVENT {
            let parsed = serde_json::from_str::<WireEvent>(&event.data)
                .map_err(|err| StoreError::unavailable(format!("a malformed watch event: {err}")))
                .and_then(WireEvent::into_event);
            return match parsed {
                Ok(change) => Some((Ok(change), Some(reader))),
                Err(err) => Some((Err(err), None)),
            };
        }
        if event.event == ERROR_EVENT {
            let err = serde_json::from_str::<WireError>(&event.data).map_or_else(
                |_| StoreError::unavailable(event.data.clone()),
                WireError::into_store_error,
            );
            return Some((Err(err), None));
        }
    }
}
