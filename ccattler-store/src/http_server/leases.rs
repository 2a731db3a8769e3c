//! The lease routes, and who owns a lease: a node's lease is recorded under
//! [`LEASE_OWNERS`]`{id}` (attached to the lease itself), and only that node, or an admin,
//! keeps it alive, revokes it or attaches keys to it.

use axum::Extension;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::response::Response;
use ccattler_core::{FactStore, Key, LeaseId, StoreError};
use serde_json::json;

use super::handlers::parse_json;
use super::rules::{LEASE_OWNERS, Principal};
use super::{ServerError, json_answer};
use crate::wire::{LeaseRequest, WireLease};

fn owner_key(lease: LeaseId) -> Result<Key, StoreError> {
    Ok(Key::new(format!("{LEASE_OWNERS}{}", lease.0))?)
}

/// Refuses unless `principal` granted `lease` (admins may use any lease).
///
/// # Errors
///
/// [`StoreError::LeaseNotFound`] for a lease that no longer exists (not reported as someone
/// else's), [`StoreError::Denied`] for another node's lease, or the store's error.
pub(crate) async fn check_lease_owner<S: FactStore>(
    store: &S,
    principal: &Principal,
    lease: LeaseId,
) -> Result<(), ServerError> {
    if *principal == Principal::Admin {
        return Ok(());
    }
    match store.get(&owner_key(lease)?).await? {
        Some(fact) if fact.value == principal.owner_name().as_bytes() => Ok(()),
        None => Err(ServerError::Store(StoreError::LeaseNotFound(lease))),
        Some(_) => Err(ServerError::denied(format!(
            "lease {} belongs to someone else; a node uses only the leases it granted",
            lease.0
        ))),
    }
}

/// `POST /store/lease/grant`: grants a lease, and records a node as its owner. An admin's
/// grant writes nothing (an admin may use any lease), so only a node's grant raises the
/// store's revision, by one.
pub(crate) async fn grant<S: FactStore + Clone>(
    State(store): State<S>,
    Extension(principal): Extension<Principal>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ServerError> {
    let request: WireLease = parse_json(body)?;
    let lease = store.grant_lease(request.ttl()).await?;
    if let Principal::Node(_) = principal {
        let recorded = match owner_key(lease.id) {
            Ok(key) => {
                store
                    .put_with_lease(&key, principal.owner_name().into(), lease.id)
                    .await
            }
            Err(err) => Err(err),
        };
        if let Err(err) = recorded {
            // Best effort: the lease expires by itself if this fails too.
            let _ = store.revoke_lease(lease.id).await;
            return Err(ServerError::Store(err));
        }
    }
    Ok(json_answer(&WireLease::new(lease.id.0, lease.ttl)))
}

/// `POST /store/lease/keep-alive`.
pub(crate) async fn keep_alive<S: FactStore + Clone>(
    State(store): State<S>,
    Extension(principal): Extension<Principal>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ServerError> {
    let request: LeaseRequest = parse_json(body)?;
    let lease = LeaseId(request.id);
    check_lease_owner(&store, &principal, lease).await?;
    let ttl = store.keep_alive(lease).await?;
    Ok(json_answer(&WireLease::new(lease.0, ttl)))
}

/// `POST /store/lease/revoke`.
pub(crate) async fn revoke<S: FactStore + Clone>(
    State(store): State<S>,
    Extension(principal): Extension<Principal>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ServerError> {
    let request: LeaseRequest = parse_json(body)?;
    let lease = LeaseId(request.id);
    check_lease_owner(&store, &principal, lease).await?;
    store.revoke_lease(lease).await?;
    Ok(json_answer(&json!({})))
}
