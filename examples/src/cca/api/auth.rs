//! Bearer tokens and node enrollment: how `cca server` tells who a caller is
//! ([`TokenAuthorizer`]). What a caller may then do is the store protocol's rule, library code
//! in [`ccattler_store::http_server`] ([`Principal`], `node_may_write`), shared by every route.
//!
//! # Model
//!
//! Tokens are random (`cca_` and 64 hex digits) and never stored: the store holds only their
//! SHA-256, under `auth/token/{hex digest}`, with a [`TokenRecord`] saying what the token is:
//!
//! | role | may |
//! |---|---|
//! | `admin` | everything: read, apply, write any key outside `auth/`, create enrollment tokens |
//! | `node` (of node N) | read; write only `lease/node/N`, `observed/node/N` and `observed/instance/N/...` |
//! | `enroll` | nothing but being exchanged once, before it expires, for a `node` token at `POST /api/enroll` |
//!
//! Nothing under `auth/` or `secret/` is ever returned by reads or watches of the API, and no
//! request writes under `auth/` except through these handlers ([`AUTH_PREFIX`] is the store
//! protocol's reserved prefix).
//!
//! # Guarantees
//!
//! - A request without a valid, unexpired token gets 401 and writes nothing. A token deleted
//!   from the store is refused within
//!   [`TOKEN_CACHE_TTL`](super::token_cache::TOKEN_CACHE_TTL) (5 s).
//! - An enrollment token is consumed by a transaction guarded by its own mod revision: of two
//!   concurrent enrollments with the same token, exactly one succeeds.
//! - A token with an expiry is stored under a lease of the same length, so the store itself
//!   deletes it once it expires: unused enrollment tokens leave nothing behind.
//! - `POST /api/enroll` is rate-limited per client address ([`EnrollLimit`]); attempts over the
//!   limit get 429 and never reach the store.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::{ConnectInfo, State};
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use ccattler_core::schema;
use ccattler_core::{Compare, FactStore, Key, Op, StoreError, Txn};
use ccattler_store::http_server::{Authorizer, ServerError, bearer_token, node_may_write};
use rand::{RngCore, SeedableRng};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::ApiState;
use super::error::ApiError;
use super::token_cache::TokenCache;

pub use ccattler_store::http_server::{AUTH_PREFIX, Principal};

/// The prefix of token records: `auth/token/{sha256 hex}`.
pub const TOKENS: &str = "auth/token/";

/// What a token is allowed to do.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum Role {
    /// Everything.
    Admin,
    /// One node's agent.
    Node {
        /// The node's name.
        node: String,
    },
    /// A one-time enrollment token.
    Enroll,
}

/// The stored record of one token.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenRecord {
    /// What the token may do.
    #[serde(flatten)]
    pub role: Role,
    /// Unix seconds after which the token is refused; `None` never expires.
    #[serde(default)]
    pub expires_at: Option<u64>,
}

/// A new random token.
pub fn generate_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rngs::StdRng::from_os_rng().fill_bytes(&mut bytes);
    format!("cca_{}", hex(&bytes))
}

/// The key of a token's record.
pub fn token_key(token: &str) -> Key {
    let digest = hex(&Sha256::digest(token.as_bytes()));
    // 64 hex digits always make a valid key segment.
    Key::join(TOKENS, [digest.as_str()]).unwrap_or_else(|_| unreachable!("hex is a valid key"))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Unix seconds now.
pub fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Stores `token` with `role`, expiring after `ttl` (never when `None`). An expiring token is
/// put under a lease of `ttl`, so the store deletes it when it expires.
///
/// # Errors
///
/// The store's error; [`StoreError::InvalidTtl`] for a
/// `ttl` the store's leases cannot have (under 1 s, or over a year).
pub async fn store_token<S: FactStore>(
    store: &S,
    token: &str,
    role: Role,
    ttl: Option<Duration>,
) -> Result<TokenRecord, StoreError> {
    let record = TokenRecord {
        role,
        expires_at: ttl.map(|ttl| now_secs().saturating_add(ttl.as_secs().max(1))),
    };
    let value = serde_json::to_vec(&record).unwrap_or_default();
    match ttl {
        Some(ttl) => {
            let lease = store.grant_lease(ttl).await?;
            store
                .put_with_lease(&token_key(token), value.into(), lease.id)
                .await?;
        }
        None => {
            store.put(&token_key(token), value.into()).await?;
        }
    }
    Ok(record)
}

/// The rate limit of `POST /api/enroll`, per client address.
#[derive(Debug)]
pub struct EnrollLimit {
    limiter: governor::DefaultKeyedRateLimiter<Option<IpAddr>>,
}

impl EnrollLimit {
    /// Allows `per_minute` attempts per address and minute (at least one), in bursts of up to 10.
    pub fn per_minute(per_minute: u32) -> Self {
        let rate = std::num::NonZeroU32::new(per_minute).unwrap_or(std::num::NonZeroU32::MIN);
        let burst =
            std::num::NonZeroU32::new(per_minute.min(10)).unwrap_or(std::num::NonZeroU32::MIN);
        let quota = governor::Quota::per_minute(rate).allow_burst(burst);
        EnrollLimit {
            limiter: governor::RateLimiter::keyed(quota),
        }
    }

    /// Takes one attempt for `client` (`None`: an unknown address, which shares one limit).
    ///
    /// # Errors
    ///
    /// [`ApiError`] 429 with `Retry-After` (in `retry_after_secs` too) when over the limit.
    pub fn check(&self, client: Option<IpAddr>) -> Result<(), ApiError> {
        use governor::clock::{Clock as _, DefaultClock};
        // Forget addresses that are back to a full allowance, now and then.
        if self.limiter.len() > 10_000 {
            self.limiter.retain_recent();
        }
        self.limiter.check_key(&client).map_err(|not_until| {
            let wait = not_until.wait_time_from(DefaultClock::default().now());
            let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            ApiError::new(
                axum::http::StatusCode::TOO_MANY_REQUESTS,
                format!("too many enrollment attempts from this address; retry in {secs} s"),
            )
            .with(serde_json::json!({ "retry_after_secs": secs }))
        })
    }
}

/// Looks a token up; `None` when unknown, undecodable or expired.
async fn lookup<S: FactStore>(
    store: &S,
    token: &str,
) -> Result<Option<(TokenRecord, ccattler_core::Fact)>, StoreError> {
    let Some(fact) = store.get(&token_key(token)).await? else {
        return Ok(None);
    };
    let Ok(record) = serde_json::from_slice::<TokenRecord>(&fact.value) else {
        return Ok(None);
    };
    if record.expires_at.is_some_and(|at| now_secs() >= at) {
        return Ok(None);
    }
    Ok(Some((record, fact)))
}

/// The [`Authorizer`] of `cca server`: a bearer token is looked up by its SHA-256 under
/// [`TOKENS`]; an admin record speaks for [`Principal::Admin`], a node record for
/// [`Principal::Node`]. Enrollment tokens and unknown or expired tokens are refused (401).
/// A credential found is taken on trust for a few seconds before it is looked up again
/// ([`TokenCache`]); clones share what they found.
#[derive(Clone, Debug)]
pub struct TokenAuthorizer<S> {
    store: S,
    found: Arc<TokenCache>,
}

impl<S> TokenAuthorizer<S> {
    /// Looks tokens up in `store`.
    pub fn new(store: S) -> Self {
        TokenAuthorizer {
            store,
            found: Arc::default(),
        }
    }
}

impl<S: FactStore + Clone> Authorizer for TokenAuthorizer<S> {
    async fn authorize(&self, request: &Parts) -> Result<Principal, ServerError> {
        let token = bearer_token(&request.headers)?;
        let key = token_key(token);
        if let Some(principal) = self.found.get(key.as_str()) {
            return Ok(principal);
        }
        let keep = |principal: Principal, expires_at| {
            self.found
                .keep(key.as_str().to_owned(), principal.clone(), expires_at);
            Ok(principal)
        };
        match lookup(&self.store, token).await? {
            Some((record, _)) => match record.role {
                Role::Admin => keep(Principal::Admin, record.expires_at),
                Role::Node { node } => keep(Principal::Node(node), record.expires_at),
                Role::Enroll => Err(ServerError::unauthenticated(
                    "an enrollment token only works at POST /api/enroll; use the credential \
                     it was exchanged for",
                )),
            },
            None => Err(ServerError::unauthenticated(
                "unknown or expired token; ask an admin for a new one",
            )),
        }
    }
}

/// The body of `POST /api/enroll`.
#[derive(Debug, Deserialize)]
pub struct EnrollRequest {
    /// The one-time enrollment token.
    pub token: String,
    /// The node's name (one key segment).
    pub node: String,
}

/// `POST /api/enroll`: exchanges a one-time enrollment token for a node credential.
pub async fn enroll<S: FactStore + Clone>(
    State(api): State<ApiState<S>>,
    client: Option<axum::Extension<ConnectInfo<SocketAddr>>>,
    body: Result<axum::body::Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Response, ApiError> {
    api.enroll_limit
        .check(client.map(|axum::Extension(ConnectInfo(addr))| addr.ip()))?;
    let request: EnrollRequest = super::parse_json(&body?)?;
    // A name is valid when its credential could write its own node record: one plain key
    // segment (not empty, no `/`, not `.` or `..`).
    if !schema::keys::node(&request.node)
        .is_ok_and(|own| node_may_write(&request.node, own.as_str()))
    {
        return Err(ApiError::bad_request(
            "`node` must be one key segment such as `n1` (no `/`, not `.` or `..`)",
        ));
    }
    let refused = || ApiError::unauthorized("unknown, expired or already used enrollment token");
    let Some((record, fact)) = lookup(&api.store, &request.token).await? else {
        return Err(refused());
    };
    if record.role != Role::Enroll {
        return Err(refused());
    }
    let credential = generate_token();
    let node_record = TokenRecord {
        role: Role::Node {
            node: request.node.clone(),
        },
        expires_at: None,
    };
    let value = serde_json::to_vec(&node_record).unwrap_or_default();
    let txn = Txn::new()
        .when(Compare::mod_revision(fact.key.clone(), fact.mod_revision))
        .then(Op::delete(fact.key.clone()))
        .then(Op::put(token_key(&credential), value));
    if !api.store.txn(txn).await?.succeeded {
        return Err(refused());
    }
    Ok(
        axum::Json(serde_json::json!({ "node": request.node, "token": credential }))
            .into_response(),
    )
}

/// The body of `POST /api/tokens`.
#[derive(Debug, Default, Deserialize)]
pub struct TokenRequest {
    /// How long the enrollment token lives (`10m`); 10 minutes by default.
    #[serde(default)]
    pub ttl: Option<String>,
}

/// `POST /api/tokens` (admin): creates a one-time enrollment token.
pub async fn create_enrollment<S: FactStore + Clone>(
    State(api): State<ApiState<S>>,
    axum::Extension(principal): axum::Extension<Principal>,
    body: Result<axum::body::Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Response, ApiError> {
    principal.require_admin()?;
    let body = body?;
    let request: TokenRequest = if body.is_empty() {
        TokenRequest::default()
    } else {
        super::parse_json(&body)?
    };
    let ttl = match &request.ttl {
        Some(text) => ccattler_core::schema::parse_duration(text)
            .map_err(|err| ApiError::bad_request(format!("`ttl`: {err}")))?,
        None => Duration::from_secs(600),
    };
    let token = generate_token();
    let record = store_token(&api.store, &token, Role::Enroll, Some(ttl)).await?;
    Ok(axum::Json(serde_json::json!({
        "token": token,
        "role": "enroll",
        "expires_at": record.expires_at,
    }))
    .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_random_and_hashed() {
        let (a, b) = (generate_token(), generate_token());
        assert_ne!(a, b);
        assert!(!token_key(&a).as_str().contains(&a));
    }
}
