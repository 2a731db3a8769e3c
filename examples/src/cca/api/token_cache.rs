//! The credentials [`TokenAuthorizer`](super::auth::TokenAuthorizer) found lately, so that a
//! request is not one more read of the store before it is served.
//!
//! Every request carries its bearer token; looking the token up in the store was one read per
//! request, the same read again and again: a thousand agents, renewing their leases and
//! reporting, made it most of what the server asked etcd, and etcd answered it in 0.75 s
//! (median) under that load. A credential found is now taken on trust for [`TOKEN_CACHE_TTL`],
//! then looked up again.
//!
//! # Guarantees
//!
//! - Only credentials found in the store are kept (admins' and nodes'), by their SHA-256 key,
//!   never the tokens; an unknown token is looked up every time (and refused every time).
//! - A token's own expiry is checked at every use, kept or not.
//! - A token deleted from the store is refused within [`TOKEN_CACHE_TTL`].
//! - At most [`TokenCache::BOUND`] credentials are kept (all forgotten at once past it).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::auth::{Principal, now_secs};

/// How long a credential found in the store is taken on trust before it is looked up again.
pub const TOKEN_CACHE_TTL: Duration = Duration::from_secs(5);

/// One credential found: who it speaks for, until when the token itself is valid, and when
/// it was read.
#[derive(Debug)]
struct Found {
    principal: Principal,
    expires_at: Option<u64>,
    read_at: Instant,
}

/// The credentials found lately, by token key; see the [module docs](self).
#[derive(Debug, Default)]
pub struct TokenCache {
    found: Mutex<HashMap<String, Found>>,
}

impl TokenCache {
    /// How many credentials are kept at most.
    pub const BOUND: usize = 100_000;

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Found>> {
        self.found.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The principal of the token stored under `key`, if it was found less than
    /// [`TOKEN_CACHE_TTL`] ago and has not expired since.
    pub fn get(&self, key: &str) -> Option<Principal> {
        let found = self.lock();
        let entry = found.get(key)?;
        let fresh = entry.read_at.elapsed() < TOKEN_CACHE_TTL;
        let valid = entry.expires_at.is_none_or(|at| now_secs() < at);
        (fresh && valid).then(|| entry.principal.clone())
    }

    /// Keeps the principal the token under `key` speaks for, found in the store just now.
    pub fn keep(&self, key: String, principal: Principal, expires_at: Option<u64>) {
        let mut found = self.lock();
        if found.len() >= Self::BOUND {
            found.clear();
        }
        found.insert(
            key,
            Found {
                principal,
                expires_at,
                read_at: Instant::now(),
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_credentials_are_fresh_and_unexpired_only() {
        let cache = TokenCache::default();
        assert_eq!(cache.get("k"), None);
        cache.keep("k".into(), Principal::Admin, None);
        assert_eq!(cache.get("k"), Some(Principal::Admin));
        cache.keep(
            "old".into(),
            Principal::Node("n1".into()),
            Some(now_secs() - 1),
        );
        assert_eq!(cache.get("old"), None, "expired since it was read");
        if let Some(read_at) = Instant::now().checked_sub(TOKEN_CACHE_TTL) {
            let stale = TokenCache::default();
            let principal = Principal::Admin;
            let found = Found {
                principal,
                expires_at: None,
                read_at,
            };
            stale.lock().insert("s".into(), found);
            assert_eq!(stale.get("s"), None, "read too long ago");
        }
    }
}
