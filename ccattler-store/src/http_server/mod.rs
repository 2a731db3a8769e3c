//! The server side of the store protocol (feature `http-server`): an axum [`Router`] that
//! serves every [`FactStore`] operation of any store over HTTP, for
//! [`HttpStore`](crate::http::HttpStore) clients such as remote node agents.
//!
//! # The cut between library and platform
//!
//! - **This module** owns the protocol (routes and shapes in [`crate::wire`]) and the rules of
//!   who may do what once the caller is known: a [`Principal`] is an admin or node N; a node
//!   writes only its own facts ([`node_may_write`]), uses only its own leases, and reads a
//!   secret only while a service placed on it declares that secret; nobody reads, compares,
//!   watches or writes under [`AUTH_PREFIX`].
//! - **The platform** says who the caller is, with an [`Authorizer`]: how credentials are
//!   issued, stored, hashed, enrolled and rate-limited is product policy (`cca` keeps SHA-256
//!   hashes of random tokens under `auth/token/` and trades one-time enrollment tokens for node
//!   credentials). [`StaticTokens`] is a fixed table for tests and simple set-ups.
//!
//! # Routes and rules
//!
//! The routes are those of [`crate::wire`]. On top of the store's own checks:
//!
//! | route | who | rule |
//! |---|---|---|
//! | `get` | any | `auth/...` never; `secret/{name}` only by a node with a placement (`placement/N/...`) of a service that declares the secret, never by an admin |
//! | `scan`, `watch` | any | secrets and `auth/...` are left out ([`hidden`]) |
//! | `put`, `delete`, `txn` | any | every written key must pass [`Principal::may_write`]; no compare on a [`hidden`] key; a lease attached must be the caller's |
//! | `lease/grant` | any | a node's lease is recorded as its own under [`LEASE_OWNERS`] (so a node's grant raises the revision by one; an admin's writes nothing) |
//! | `lease/keep-alive`, `lease/revoke` | owner or admin | another node's lease is refused |
//! | `compact` | admin | |
//!
//! A refusal is 403 with `store_error: {"kind": "denied", ...}`, which the client turns back
//! into [`StoreError::Denied`](ccattler_core::StoreError::Denied); a refused request writes
//! nothing. Every failure is a [`ServerError`].
//!
//! # Caveats
//!
//! The router has no fallback (so it merges into a platform's router) and no body limit of its
//! own: axum's default of 2 MB applies unless the platform layers a `DefaultBodyLimit`. Serve
//! it with a tokio runtime (`axum::serve`).
//!
//! # Example
//!
//! ```
//! use ccattler_store::MemoryStore;
//! use ccattler_store::http_server::{Principal, StaticTokens, router};
//!
//! let tokens = StaticTokens::new()
//!     .with("admin-secret", Principal::Admin)
//!     .with("n1-secret", Principal::Node("n1".to_owned()));
//! let app = router(MemoryStore::new(), tokens);
//! // axum::serve(listener, app).await?;
//! # drop(app);
//! ```

mod auth;
mod error;
mod handlers;
mod leases;
mod rules;

pub use auth::{Authorizer, StaticTokens, authenticate, bearer_token};
pub use error::{ServerError, status_of};
pub use rules::{AUTH_PREFIX, LEASE_OWNERS, Principal, hidden, node_may_write};

use axum::Router;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use ccattler_core::FactStore;

use crate::wire::Route;

/// The store protocol over `store`, each request authenticated by `authorizer`; see the
/// [module docs](self).
///
/// Merge it into a platform's own router (`app.merge(router(store, authorizer))`) or serve
/// it alone. Only the protocol's routes are authenticated: other paths fall through to the
/// platform's fallback (axum's 404 when served alone).
pub fn router<S, A>(store: S, authorizer: A) -> Router
where
    S: FactStore + Clone,
    A: Authorizer,
{
    let mut app = Router::new();
    for route in Route::ALL {
        let path = route.path();
        app = match route {
            Route::Get => app.route(path, post(handlers::get::<S>)),
            Route::Scan => app.route(path, post(handlers::scan::<S>)),
            Route::Put => app.route(path, post(handlers::put::<S>)),
            Route::Delete => app.route(path, post(handlers::delete::<S>)),
            Route::Txn => app.route(path, post(handlers::txn::<S>)),
            Route::Revision => app.route(path, get(handlers::revision::<S>)),
            Route::Compact => app.route(path, post(handlers::compact::<S>)),
            Route::LeaseGrant => app.route(path, post(leases::grant::<S>)),
            Route::LeaseKeepAlive => app.route(path, post(leases::keep_alive::<S>)),
            Route::LeaseRevoke => app.route(path, post(leases::revoke::<S>)),
            Route::Watch => app.route(path, get(handlers::watch::<S>)),
        };
    }
    app.route_layer(axum::middleware::from_fn_with_state(
        authorizer,
        authenticate::<A>,
    ))
    .layer(axum::Extension(std::sync::Arc::new(
        leases::LeaseOwners::default(),
    )))
    .with_state(store)
}

fn json_answer<T: serde::Serialize>(value: &T) -> Response {
    axum::Json(value).into_response()
}
