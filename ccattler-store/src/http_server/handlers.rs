//! The handlers of the store protocol's key, transaction, revision and watch routes.

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::sync::Arc;

use axum::Extension;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use ccattler_core::schema;
use ccattler_core::{FactStore, Key, LeaseId, Op, Revision, StoreError};
use futures_util::stream::StreamExt;
use serde::de::DeserializeOwned;
use serde_json::json;

use super::leases::{LeaseOwners, check_lease_owner};
use super::rules::{AUTH_PREFIX, Principal, check_readable, hidden};
use super::{ServerError, json_answer};
use crate::wire::{
    CHANGE_EVENT, ERROR_EVENT, GetAnswer, GetRequest, PutRequest, RevisionBody, ScanAnswer,
    ScanRequest, TxnAnswer, WATCH_KEEP_ALIVE, WatchParams, WireError, WireEvent, WireFact, WireTxn,
    decode_value,
};

/// Parses a JSON body.
///
/// # Errors
///
/// [`ServerError::BadRequest`] with the parser's message, or axum's rejection of the body.
pub(crate) fn parse_json<T: DeserializeOwned>(
    body: Result<Bytes, BytesRejection>,
) -> Result<T, ServerError> {
    serde_json::from_slice(&body?)
        .map_err(|err| ServerError::bad_request(format!("malformed JSON body: {err}")))
}

fn key(text: String) -> Result<Key, ServerError> {
    Key::new(text).map_err(|err| ServerError::Store(err.into()))
}

/// Refuses a write of `key` that `principal` may not make; see [`Principal::may_write`].
fn check_writable(principal: &Principal, key: &Key) -> Result<(), ServerError> {
    match principal.write_refusal(key.as_str()) {
        Some(why) => Err(ServerError::denied(why)),
        None => Ok(()),
    }
}

/// `POST /store/get`.
pub(crate) async fn get<S: FactStore + Clone>(
    State(store): State<S>,
    Extension(principal): Extension<Principal>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ServerError> {
    let request: GetRequest = parse_json(body)?;
    let key = key(request.key)?;
    check_readable(&store, &principal, &key).await?;
    let fact = store.get(&key).await?;
    Ok(json_answer(&GetAnswer {
        fact: fact.as_ref().map(WireFact::from),
    }))
}

/// `POST /store/scan`: never shows [`hidden`] keys.
pub(crate) async fn scan<S: FactStore + Clone>(
    State(store): State<S>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ServerError> {
    let request: ScanRequest = parse_json(body)?;
    let scan = store.scan(&request.prefix).await?;
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

/// `POST /store/put`.
pub(crate) async fn put<S: FactStore + Clone>(
    State(store): State<S>,
    Extension(owners): Extension<Arc<LeaseOwners>>,
    Extension(principal): Extension<Principal>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ServerError> {
    let request: PutRequest = parse_json(body)?;
    let key = key(request.key)?;
    check_writable(&principal, &key)?;
    let value =
        decode_value(&request.value).map_err(|err| ServerError::bad_request(err.to_string()))?;
    let revision = match request.lease.map(LeaseId) {
        Some(lease) => {
            check_lease_owner(&store, &owners, &principal, lease).await?;
            store.put_with_lease(&key, value, lease).await?
        }
        None => store.put(&key, value).await?,
    };
    Ok(json_answer(&RevisionBody {
        revision: revision.get(),
    }))
}

/// `POST /store/delete`.
pub(crate) async fn delete<S: FactStore + Clone>(
    State(store): State<S>,
    Extension(principal): Extension<Principal>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ServerError> {
    let request: GetRequest = parse_json(body)?;
    let key = key(request.key)?;
    check_writable(&principal, &key)?;
    let deleted = store.delete(&key).await?;
    Ok(json_answer(&GetAnswer {
        fact: deleted.as_ref().map(WireFact::from),
    }))
}

/// `POST /store/txn`: every operation must be writable by the caller, and no compare may look
/// at a [`hidden`] key. Each lease attached is checked once, however many operations use it.
pub(crate) async fn txn<S: FactStore + Clone>(
    State(store): State<S>,
    Extension(owners): Extension<Arc<LeaseOwners>>,
    Extension(principal): Extension<Principal>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ServerError> {
    let wire: WireTxn = parse_json(body)?;
    let txn = wire.into_txn().map_err(|err| match err {
        StoreError::InvalidKey(_) => ServerError::Store(err),
        other => ServerError::bad_request(other.to_string()),
    })?;
    for compare in &txn.compares {
        if hidden(compare.key.as_str()) {
            return Err(ServerError::denied(format!(
                "{}: keys under {} and {AUTH_PREFIX} cannot be compared",
                compare.key,
                schema::SECRETS,
            )));
        }
    }
    let mut leases = BTreeSet::new();
    for op in txn.then.iter().chain(&txn.otherwise) {
        check_writable(&principal, op.key())?;
        if let Op::Put {
            lease: Some(lease), ..
        } = op
        {
            leases.insert(*lease);
        }
    }
    for lease in leases {
        check_lease_owner(&store, &owners, &principal, lease).await?;
    }
    let answer = store.txn(txn).await?;
    Ok(json_answer(&TxnAnswer {
        succeeded: answer.succeeded,
        revision: answer.revision.get(),
    }))
}

/// `GET /store/revision`.
pub(crate) async fn revision<S: FactStore + Clone>(
    State(store): State<S>,
) -> Result<Response, ServerError> {
    let revision = store.revision().await?;
    Ok(json_answer(&RevisionBody {
        revision: revision.get(),
    }))
}

/// `POST /store/compact` (admins only).
pub(crate) async fn compact<S: FactStore + Clone>(
    State(store): State<S>,
    Extension(principal): Extension<Principal>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ServerError> {
    principal.require_admin()?;
    let request: RevisionBody = parse_json(body)?;
    store.compact(Revision(request.revision)).await?;
    Ok(json_answer(&json!({})))
}

/// `GET /store/watch?prefix=P&from=R`: `change` events without [`hidden`] keys; an error ends
/// the stream with one `error` event.
pub(crate) async fn watch<S: FactStore + Clone>(
    State(store): State<S>,
    params: Result<Query<WatchParams>, QueryRejection>,
) -> Result<Response, ServerError> {
    let Query(params) = params?;
    let watch = store.watch(&params.prefix, Revision(params.from)).await?;
    let events = watch
        .filter_map(|item| async move {
            match item {
                Ok(event) if hidden(event.key().as_str()) => None,
                // Serializing these plain structs cannot fail.
                Ok(event) => Some(Ok(Event::default().event(CHANGE_EVENT).data(
                    serde_json::to_string(&WireEvent::from(&event)).unwrap_or_default(),
                ))),
                Err(err) => Some(Err(err)),
            }
        })
        .scan(false, |ended, item| {
            let out = if *ended {
                None
            } else {
                *ended = item.is_err();
                Some(item.unwrap_or_else(|err| {
                    Event::default()
                        .event(ERROR_EVENT)
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
