//! The store protocol: the [`FactStore`] operations over HTTP, for `cca agent` and any other
//! program that runs against the cluster's store through [`HttpStore`](crate::cca::http_store::HttpStore).
//!
//! # Routes
//!
//! Bodies and answers are JSON in the shapes of [`super::wire`]; values are base64.
//!
//! | route | body → answer |
//! |---|---|
//! | `POST /store/get` | `{key}` → `{fact}` (`null` when absent) |
//! | `POST /store/scan` | `{prefix}` → `{revision, facts}` |
//! | `POST /store/put` | `{key, value, lease}` → `{revision}` (idempotent, as `FactStore::put`) |
//! | `POST /store/delete` | `{key}` → `{fact}` (what was deleted, `null` when absent) |
//! | `POST /store/txn` | `{compare, then, else}` → `{succeeded, revision}` |
//! | `GET /store/revision` | → `{revision}` |
//! | `POST /store/compact` | `{revision}` → `{}` (admin) |
//! | `POST /store/lease/grant` | `{ttl_ms}` → `{id, ttl_ms}` |
//! | `POST /store/lease/keep-alive` | `{id}` → `{id, ttl_ms}` |
//! | `POST /store/lease/revoke` | `{id}` → `{}` |
//! | `GET /store/watch?prefix=P&from=R` | server-sent events: `change` ([`WireEvent`]), `error` ([`WireError`], then the stream ends) |
//!
//! # Who may do what
//!
//! - Nothing under `auth/` is ever read, compared, watched or written.
//! - `secret/{name}` is readable with `get` only by a node whose placements run a service that
//!   declares the secret; never by an admin, never in a scan or watch.
//! - Writes (transaction operations) follow [`Principal::may_write`]: a node writes only its
//!   own keys.
//! - A node's lease belongs to that node (recorded under `auth/lease/{id}`, attached to the
//!   lease itself so it vanishes with it): only the node (or an admin) keeps it alive, revokes
//!   it or attaches keys to it. So a node's grant, unlike an admin's, raises the store's
//!   revision by one.
//!
//! A refusal is 403 with `store_error: {"kind": "denied"}`; the client turns it into
//! [`StoreError::Denied`].

use std::convert::Infallible;
use std::time::Duration;

use axum::Extension;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use ccattler_core::schema::{self, Assignment, ServiceSpec};
use ccattler_core::{FactStore, Key, LeaseId, Op, Revision, StoreError};
use futures_util::stream::StreamExt;
use serde::Deserialize;
use serde_json::json;

use super::auth::{AUTH_PREFIX, Principal};
use super::error::ApiError;
use super::wire::{
    GetAnswer, GetRequest, LeaseRequest, PutRequest, RevisionBody, ScanAnswer, ScanRequest,
    TxnAnswer, WireError, WireEvent, WireFact, WireLease, WireTxn, decode_value,
};
use super::{ApiState, hidden, parse_json};

/// Where lease owners are recorded: `auth/lease/{id}`.
pub const LEASE_OWNERS: &str = "auth/lease/";

/// How often an idle watch sends a keep-alive comment.
pub const WATCH_KEEP_ALIVE: Duration = Duration::from_secs(5);

/// A store error as an answer: the usual status and message, plus `store_error`.
fn failure(err: StoreError) -> ApiError {
    let wire = WireError::from(&err);
    let status_of = ApiError::from(err);
    let status = match wire {
        WireError::Denied { .. } => axum::http::StatusCode::FORBIDDEN,
        _ => status_of.status,
    };
    ApiError::new(status, status_of.message).with(json!({ "store_error": wire }))
}

fn denied(message: String) -> ApiError {
    failure(StoreError::Denied(message))
}

fn key(text: String) -> Result<Key, ApiError> {
    Key::new(text).map_err(|err| failure(err.into()))
}

fn owner_name(principal: &Principal) -> String {
    match principal {
        Principal::Admin => "admin".to_owned(),
        Principal::Node(node) => format!("node/{node}"),
    }
}

fn owner_key(lease: LeaseId) -> Result<Key, ApiError> {
    key(format!("{LEASE_OWNERS}{}", lease.0))
}

/// Refuses unless `principal` granted `lease` (admins may use any lease).
async fn check_lease_owner<S: FactStore>(
    store: &S,
    principal: &Principal,
    lease: LeaseId,
) -> Result<(), ApiError> {
    if *principal == Principal::Admin {
        return Ok(());
    }
    let owner = store.get(&owner_key(lease)?).await.map_err(failure)?;
    match owner {
        Some(fact) if fact.value == owner_name(principal).as_bytes() => Ok(()),
        // A lease that no longer exists is reported as such, not as someone else's.
        None => Err(failure(StoreError::LeaseNotFound(lease))),
        Some(_) => Err(denied(format!("lease {} belongs to someone else", lease.0))),
    }
}

/// Whether `principal` may read `key` with `get`; see the [module docs](self).
async fn check_readable<S: FactStore>(
    store: &S,
    principal: &Principal,
    key: &Key,
) -> Result<(), ApiError> {
    if key.as_str().starts_with(AUTH_PREFIX) {
        return Err(denied(format!(
            "{key}: keys under auth/ are never readable"
        )));
    }
    let Some(secret) = key.as_str().strip_prefix(schema::SECRETS) else {
        return Ok(());
    };
    let Principal::Node(node) = principal else {
        return Err(denied(format!(
            "{key}: secrets are readable only by the nodes that run services declaring them"
        )));
    };
    let placements = store
        .scan(&format!("{}{node}/", schema::PLACEMENTS))
        .await
        .map_err(failure)?;
    let mut services: Vec<String> = placements
        .facts
        .iter()
        .filter_map(|fact| schema::decode::<Assignment>(fact).ok())
        .map(|assignment| assignment.service)
        .collect();
    services.sort();
    services.dedup();
    for service in services {
        let Ok(service_key) = schema::keys::service(&service) else {
            continue;
        };
        if let Some(fact) = store.get(&service_key).await.map_err(failure)?
            && let Ok(spec) = schema::decode::<ServiceSpec>(&fact)
            && spec.secrets.iter().any(|s| s.name == secret)
        {
            return Ok(());
        }
    }
    Err(denied(format!(
        "{key}: no service placed on node {node} declares this secret"
    )))
}

fn json_answer<T: serde::Serialize>(value: &T) -> Response {
    axum::Json(value).into_response()
}

/// `POST /store/get`.
pub async fn get<S: FactStore + Clone>(
    State(api): State<ApiState<S>>,
    Extension(principal): Extension<Principal>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let request: GetRequest = parse_json(&body?)?;
    let key = key(request.key)?;
    check_readable(&api.store, &principal, &key).await?;
    let fact = api.store.get(&key).await.map_err(failure)?;
    Ok(json_answer(&GetAnswer {
        fact: fact.as_ref().map(WireFact::from),
    }))
}

/// `POST /store/scan`.
pub async fn scan<S: FactStore + Clone>(
    State(api): State<ApiState<S>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let request: ScanRequest = parse_json(&body?)?;
    let scan = api.store.scan(&request.prefix).await.map_err(failure)?;
    Ok(json_answer(&ScanAnswer {
        revision: scan.revision.get(),
        facts: scan
            .facts
            .iter()
            .filter(|f| !hidden(f.key.as_str()))
            .map(WireFact::from)
            .collect(),
    }))
}

/// Refuses a write of `key` that `principal` may not make; see [`Principal::may_write`].
fn check_writable(principal: &Principal, key: &Key) -> Result<(), ApiError> {
    match principal.write_refusal(key.as_str()) {
        Some(why) => Err(denied(why)),
        None => Ok(()),
    }
}

/// `POST /store/put`.
pub async fn put<S: FactStore + Clone>(
    State(api): State<ApiState<S>>,
    Extension(principal): Extension<Principal>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let request: PutRequest = parse_json(&body?)?;
    let key = key(request.key)?;
    check_writable(&principal, &key)?;
    let value =
        decode_value(&request.value).map_err(|err| ApiError::bad_request(err.to_string()))?;
    let revision = match request.lease.map(LeaseId) {
        Some(lease) => {
            check_lease_owner(&api.store, &principal, lease).await?;
            api.store.put_with_lease(&key, value, lease).await
        }
        None => api.store.put(&key, value).await,
    }
    .map_err(failure)?;
    Ok(json_answer(&RevisionBody {
        revision: revision.get(),
    }))
}

/// `POST /store/delete`.
pub async fn delete<S: FactStore + Clone>(
    State(api): State<ApiState<S>>,
    Extension(principal): Extension<Principal>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let request: GetRequest = parse_json(&body?)?;
    let key = key(request.key)?;
    check_writable(&principal, &key)?;
    let deleted = api.store.delete(&key).await.map_err(failure)?;
    Ok(json_answer(&GetAnswer {
        fact: deleted.as_ref().map(WireFact::from),
    }))
}

/// `POST /store/txn`.
pub async fn txn<S: FactStore + Clone>(
    State(api): State<ApiState<S>>,
    Extension(principal): Extension<Principal>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let wire: WireTxn = parse_json(&body?)?;
    let txn = wire.into_txn().map_err(|err| match err {
        StoreError::InvalidKey(_) => failure(err),
        other => ApiError::bad_request(other.to_string()),
    })?;
    for compare in &txn.compares {
        if hidden(compare.key.as_str()) {
            return Err(denied(format!(
                "{}: keys under secret/ and auth/ cannot be compared",
                compare.key
            )));
        }
    }
    for op in txn.then.iter().chain(&txn.otherwise) {
        check_writable(&principal, op.key())?;
        if let Op::Put {
            lease: Some(lease), ..
        } = op
        {
            check_lease_owner(&api.store, &principal, *lease).await?;
        }
    }
    let answer = api.store.txn(txn).await.map_err(failure)?;
    Ok(json_answer(&TxnAnswer {
        succeeded: answer.succeeded,
        revision: answer.revision.get(),
    }))
}

/// `GET /store/revision`.
pub async fn revision<S: FactStore + Clone>(
    State(api): State<ApiState<S>>,
) -> Result<Response, ApiError> {
    let revision = api.store.revision().await.map_err(failure)?;
    Ok(json_answer(&RevisionBody {
        revision: revision.get(),
    }))
}

/// `POST /store/compact` (admin).
pub async fn compact<S: FactStore + Clone>(
    State(api): State<ApiState<S>>,
    Extension(principal): Extension<Principal>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    if principal != Principal::Admin {
        return Err(denied("only an admin compacts the store".to_owned()));
    }
    let request: RevisionBody = parse_json(&body?)?;
    api.store
        .compact(Revision(request.revision))
        .await
        .map_err(failure)?;
    Ok(json_answer(&json!({})))
}

/// `POST /store/lease/grant`: grants a lease (and records a node as its owner).
pub async fn grant<S: FactStore + Clone>(
    State(api): State<ApiState<S>>,
    Extension(principal): Extension<Principal>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let request: WireLease = parse_json(&body?)?;
    let lease = api
        .store
        .grant_lease(request.ttl())
        .await
        .map_err(failure)?;
    // Only a node's leases need an owner on record (an admin may use any lease), so an admin's
    // grant writes nothing, as on the store itself.
    if let Principal::Node(_) = principal {
        let recorded = api
            .store
            .put_with_lease(
                &owner_key(lease.id)?,
                owner_name(&principal).into(),
                lease.id,
            )
            .await;
        if let Err(err) = recorded {
            let _ = api.store.revoke_lease(lease.id).await;
            return Err(failure(err));
        }
    }
    Ok(json_answer(&WireLease::new(lease.id.0, lease.ttl)))
}

/// `POST /store/lease/keep-alive`.
pub async fn keep_alive<S: FactStore + Clone>(
    State(api): State<ApiState<S>>,
    Extension(principal): Extension<Principal>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let request: LeaseRequest = parse_json(&body?)?;
    let lease = LeaseId(request.id);
    check_lease_owner(&api.store, &principal, lease).await?;
    let ttl = api.store.keep_alive(lease).await.map_err(failure)?;
    Ok(json_answer(&WireLease::new(lease.0, ttl)))
}

/// `POST /store/lease/revoke`.
pub async fn revoke<S: FactStore + Clone>(
    State(api): State<ApiState<S>>,
    Extension(principal): Extension<Principal>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let request: LeaseRequest = parse_json(&body?)?;
    let lease = LeaseId(request.id);
    check_lease_owner(&api.store, &principal, lease).await?;
    api.store.revoke_lease(lease).await.map_err(failure)?;
    Ok(json_answer(&json!({})))
}

/// The query of `GET /store/watch`.
#[derive(Debug, Default, Deserialize)]
pub struct WatchParams {
    /// Plain string prefix.
    #[serde(default)]
    pub prefix: String,
    /// The first revision wanted (0: from the next write).
    #[serde(default)]
    pub from: u64,
}

/// `GET /store/watch?prefix=P&from=R`.
pub async fn watch<S: FactStore + Clone>(
    State(api): State<ApiState<S>>,
    params: Result<Query<WatchParams>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(params) = params?;
    let watch = api
        .store
        .watch(&params.prefix, Revision(params.from))
        .await
        .map_err(failure)?;
    let events = watch
        .filter_map(|item| async move {
            match item {
                Ok(event) if hidden(event.key().as_str()) => None,
                Ok(event) => Some(Ok(Event::default().event("change").data(
                    serde_json::to_string(&WireEvent::from(&event)).unwrap_or_default(),
                ))),
                Err(err) => Some(Err(err)),
            }
        })
        // An error ends the stream: one `error` event, then nothing.
        .scan(false, |ended, item| {
            let out = if *ended {
                None
            } else {
                *ended = item.is_err();
                Some(item.unwrap_or_else(|err| {
                    Event::default()
                        .event("error")
                        .data(serde_json::to_string(&WireError::from(&err)).unwrap_or_default())
                }))
            };
            async move { out }
        })
        .map(Ok::<_, Infallible>);
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::new().interval(WATCH_KEEP_ALIVE))
        .into_response())
}
