//! The lease routes, and who owns a lease: a node's lease is recorded under
//! [`LEASE_OWNERS`]`{id}` (attached to the lease itself), and only that node, or an admin,
//! keeps it alive, revokes it or attaches keys to it.
//!
//! Who owns a lease never changes while it lives, and a lease id is never handed out twice, so
//! the server remembers the owners it has seen ([`LeaseOwners`]) instead of reading the record
//! again for every renewal and every write under the lease: with a thousand agents renewing
//! every few seconds, that read was most of the store's reads.

use std::collections::HashMap;
use std::sync::Arc;

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

/// The owners of leases this server has seen recorded, by lease id: at most [`Self::BOUND`]
/// of them (forgotten all at once past it, then read again as needed). Only owners read from
/// the store or recorded by a grant are kept, so a lease is never taken as someone's on a
/// guess; a lease that expired meanwhile still fails, in the store, as not found.
#[derive(Debug, Default)]
pub(crate) struct LeaseOwners {
    owners: parking_lot::Mutex<HashMap<i64, String>>,
}

impl LeaseOwners {
    /// How many owners are kept at most: one lease per node of a large cluster.
    pub(crate) const BOUND: usize = 100_000;

    fn owner(&self, lease: LeaseId) -> Option<String> {
        self.owners.lock().get(&lease.0).cloned()
    }

    fn remember(&self, lease: LeaseId, owner: String) {
        let mut owners = self.owners.lock();
        if owners.len() >= Self::BOUND {
            owners.clear();
        }
        owners.insert(lease.0, owner);
    }

    fn forget(&self, lease: LeaseId) {
        self.owners.lock().remove(&lease.0);
    }
}

/// Refuses unless `principal` granted `lease` (admins may use any lease).
///
/// # Errors
///
/// [`StoreError::LeaseNotFound`] for a lease that no longer exists (not reported as someone
/// else's), [`StoreError::Denied`] for another node's lease, or the store's error.
pub(crate) async fn check_lease_owner<S: FactStore>(
    store: &S,
    owners: &LeaseOwners,
    principal: &Principal,
    lease: LeaseId,
) -> Result<(), ServerError> {
    if *principal == Principal::Admin {
        return Ok(());
    }
    let name = principal.owner_name();
    if owners.owner(lease).is_some_and(|owner| owner == name) {
        return Ok(());
    }
    match store.get(&owner_key(lease)?).await? {
        Some(fact) if fact.value == name.as_bytes() => {
            owners.remember(lease, name);
            Ok(())
        }
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
    Extension(owners): Extension<Arc<LeaseOwners>>,
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
        owners.remember(lease.id, principal.owner_name());
    }
    Ok(json_answer(&WireLease::new(lease.id.0, lease.ttl)))
}

/// `POST /store/lease/keep-alive`.
pub(crate) async fn keep_alive<S: FactStore + Clone>(
    State(store): State<S>,
    Extension(owners): Extension<Arc<LeaseOwners>>,
    Extension(principal): Extension<Principal>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ServerError> {
    let request: LeaseRequest = parse_json(body)?;
    let lease = LeaseId(request.id);
    check_lease_owner(&store, &owners, &principal, lease).await?;
    let ttl = store.keep_alive(lease).await?;
    Ok(json_answer(&WireLease::new(lease.0, ttl)))
}

/// `POST /store/lease/revoke`.
pub(crate) async fn revoke<S: FactStore + Clone>(
    State(store): State<S>,
    Extension(owners): Extension<Arc<LeaseOwners>>,
    Extension(principal): Extension<Principal>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ServerError> {
    let request: LeaseRequest = parse_json(body)?;
    let lease = LeaseId(request.id);
    check_lease_owner(&store, &owners, &principal, lease).await?;
    store.revoke_lease(lease).await?;
    owners.forget(lease);
    Ok(json_answer(&json!({})))
}
