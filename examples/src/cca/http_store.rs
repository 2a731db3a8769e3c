//! [`HttpStore`]: a [`FactStore`] whose every operation is a request to `cca server`'s store
//! protocol ([`super::api::store`]). `cca agent` runs the standard `NodeAgent` over it.
//!
//! # Guarantees
//!
//! The server runs each operation on its own store, so the guarantees of [`FactStore`] hold as
//! that store gives them: one global revision, atomic transactions, gap-free watches ending with
//! [`StoreError::Compacted`] when they cannot go on. The store conformance suite passes over it
//! (see `examples/tests/cca_http_store.rs`).
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
//! [`FactStore::limits`] answers the limits given to [`HttpStore::with_limits`] (the defaults,
//! which are etcd's, unless told): the client cannot know the server's store, and the server
//! checks its own limits on every request anyway.

use std::time::Duration;

use ccattler_core::{
    Fact, FactStore, Key, Lease, LeaseId, Revision, Scan, StoreError, StoreLimits, Txn,
    TxnResponse, Value, WatchEvent,
};
use futures_util::stream::{self, BoxStream, StreamExt};
use hyper::{Method, StatusCode};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value as Json;

use super::api::store::WATCH_KEEP_ALIVE;
use super::api::wire::{
    GetAnswer, GetRequest, LeaseRequest, PutRequest, RevisionBody, ScanAnswer, ScanRequest,
    TxnAnswer, WireError, WireEvent, WireLease, WireTxn, encode_value,
};
use super::client::{ApiClient, ClientArgs, Failure, encode};
use super::sse::EventReader;

/// How long a watch may stay silent (the server sends a keep-alive every
/// [`WATCH_KEEP_ALIVE`]) before it ends with [`StoreError::Unavailable`].
pub const WATCH_IDLE_LIMIT: Duration = Duration::from_secs(WATCH_KEEP_ALIVE.as_secs() * 4);

/// A [`FactStore`] over `cca server`'s HTTP API; see the [module docs](self).
#[derive(Clone, Debug)]
pub struct HttpStore {
    client: ApiClient,
    limits: StoreLimits,
    timeout: Duration,
}

impl HttpStore {
    /// A store that sends its requests to `server` (a base URL such as
    /// `http://127.0.0.1:7420`) with the bearer `token`. Nothing is sent until the first call.
    pub fn new(server: impl Into<String>, token: impl Into<String>) -> Self {
        let args = ClientArgs {
            server: server.into(),
            token: Some(token.into()),
        };
        HttpStore {
            client: ApiClient::new(&args),
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

    /// Gives up on a request after `timeout` (10 s by default).
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: &impl Serialize,
    ) -> Result<T, StoreError> {
        let body = serde_json::to_vec(body)
            .map_err(|err| StoreError::unavailable(format!("encoding the request: {err}")))?;
        let answer = tokio::time::timeout(self.timeout, self.client.json(method, path, body))
            .await
            .map_err(|_| StoreError::Timeout(self.timeout))?
            .map_err(|err| StoreError::unavailable(err.to_string()))?;
        let json = answer.map_err(store_error)?;
        serde_json::from_value(json)
            .map_err(|err| StoreError::unavailable(format!("unexpected answer from {path}: {err}")))
    }
}

/// The [`StoreError`] an error answer stands for.
fn store_error(failure: Failure) -> StoreError {
    if let Some(wire) = failure.body.get("store_error")
        && let Ok(wire) = serde_json::from_value::<WireError>(wire.clone())
    {
        return wire.into_store_error();
    }
    match failure.status {
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => StoreError::Denied(failure.message()),
        StatusCode::NOT_FOUND => StoreError::unavailable(format!(
            "the server has no store protocol ({}); is it a cca server?",
            failure.message()
        )),
        status => StoreError::unavailable(format!("{status}: {}", failure.message())),
    }
}

impl FactStore for HttpStore {
    type Watch = BoxStream<'static, Result<WatchEvent, StoreError>>;

    async fn get(&self, key: &Key) -> Result<Option<Fact>, StoreError> {
        let request = GetRequest {
            key: key.as_str().to_owned(),
        };
        let answer: GetAnswer = self.call(Method::POST, "/store/get", &request).await?;
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
        let answer: GetAnswer = self.call(Method::POST, "/store/delete", &request).await?;
        answer.fact.map(|f| f.into_fact()).transpose()
    }

    async fn scan(&self, prefix: &str) -> Result<Scan, StoreError> {
        ccattler_core::key::validate_prefix(prefix)?;
        let request = ScanRequest {
            prefix: prefix.to_owned(),
        };
        let answer: ScanAnswer = self.call(Method::POST, "/store/scan", &request).await?;
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
        let path = format!(
            "/store/watch?prefix={}&from={}",
            encode(prefix),
            start.get()
        );
        let response =
            tokio::time::timeout(self.timeout, self.client.send(Method::GET, &path, "", &[]))
                .await
                .map_err(|_| StoreError::Timeout(self.timeout))?
                .map_err(|err| StoreError::unavailable(err.to_string()))?;
        let status = response.status();
        if !status.is_success() {
            let bytes = http_body_util::BodyExt::collect(response.into_body())
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            let body = serde_json::from_slice::<Json>(&bytes).unwrap_or_else(
                |_| serde_json::json!({ "error": String::from_utf8_lossy(&bytes) }),
            );
            return Err(store_error(Failure { status, body }));
        }
        let reader = EventReader::new(response.into_body());
        Ok(stream::unfold(Some(reader), next_change).boxed())
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse, StoreError> {
        // Checked here too, so a bad transaction fails the same way on every backend.
        self.limits.check_txn(&txn)?;
        let answer: TxnAnswer = self
            .call(Method::POST, "/store/txn", &WireTxn::from(&txn))
            .await?;
        Ok(TxnResponse {
            succeeded: answer.succeeded,
            revision: Revision(answer.revision),
        })
    }

    async fn revision(&self) -> Result<Revision, StoreError> {
        let answer: RevisionBody = self.call(Method::GET, "/store/revision", &()).await?;
        Ok(Revision(answer.revision))
    }

    async fn compact(&self, revision: Revision) -> Result<(), StoreError> {
        let request = RevisionBody {
            revision: revision.get(),
        };
        let _: Json = self.call(Method::POST, "/store/compact", &request).await?;
        Ok(())
    }

    async fn grant_lease(&self, ttl: Duration) -> Result<Lease, StoreError> {
        let answer: WireLease = self
            .call(Method::POST, "/store/lease/grant", &WireLease::new(0, ttl))
            .await?;
        Ok(Lease {
            id: LeaseId(answer.id),
            ttl: answer.ttl(),
        })
    }

    async fn keep_alive(&self, lease: LeaseId) -> Result<Duration, StoreError> {
        let request = LeaseRequest { id: lease.0 };
        let answer: WireLease = self
            .call(Method::POST, "/store/lease/keep-alive", &request)
            .await?;
        Ok(answer.ttl())
    }

    async fn revoke_lease(&self, lease: LeaseId) -> Result<(), StoreError> {
        let request = LeaseRequest { id: lease.0 };
        let _: Json = self
            .call(Method::POST, "/store/lease/revoke", &request)
            .await?;
        Ok(())
    }

    fn limits(&self) -> StoreLimits {
        self.limits
    }
}

impl HttpStore {
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
        let answer: RevisionBody = self.call(Method::POST, "/store/put", &request).await?;
        Ok(Revision(answer.revision))
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
                    "the watch stream was silent for {WATCH_IDLE_LIMIT:?}"
                ));
                return Some((Err(err), None));
            }
            Ok(Err(err)) => return Some((Err(StoreError::unavailable(err.to_string())), None)),
            Ok(Ok(None)) => {
                let err = StoreError::unavailable("the server ended the watch stream");
                return Some((Err(err), None));
            }
            Ok(Ok(Some(event))) => event,
        };
        match event.event.as_str() {
            "change" => {
                let parsed = serde_json::from_str::<WireEvent>(&event.data)
                    .map_err(|err| StoreError::unavailable(format!("a malformed event: {err}")))
                    .and_then(WireEvent::into_event);
                return match parsed {
                    Ok(change) => Some((Ok(change), Some(reader))),
                    Err(err) => Some((Err(err), None)),
                };
            }
            "error" => {
                let err = serde_json::from_str::<WireError>(&event.data).map_or_else(
                    |_| StoreError::unavailable(event.data.clone()),
                    WireError::into_store_error,
                );
                return Some((Err(err), None));
            }
            _ => continue,
        }
    }
}
