//! Who the caller is: the [`Authorizer`] a platform supplies, the [`authenticate`] middleware
//! that asks it, and [`StaticTokens`], a fixed table of bearer tokens.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::{Principal, ServerError};

/// Says who sent a request: the platform's half of the credential rules. The protocol server
/// decides what a [`Principal`] may do; the authorizer decides which principal a request
/// speaks for (by bearer token, client certificate, ...).
///
/// # Guarantees expected
///
/// `authorize` answers for one request only from that request's parts (headers, extensions
/// such as `ConnectInfo`) and the authorizer's own state. It must not trust anything the
/// request says about itself beyond a credential it verifies.
///
/// # Errors
///
/// [`ServerError::Unauthenticated`] (401) for a missing or unknown credential; a
/// [`ServerError::Store`] when looking the credential up failed. The request then reaches no
/// handler and writes nothing.
pub trait Authorizer: Clone + Send + Sync + 'static {
    /// The principal `request` speaks for.
    fn authorize(
        &self,
        request: &Parts,
    ) -> impl Future<Output = Result<Principal, ServerError>> + Send;
}

/// The token of an `Authorization: Bearer <token>` header, trimmed.
///
/// # Errors
///
/// [`ServerError::Unauthenticated`] when the header is missing, not text or not `Bearer`.
pub fn bearer_token(headers: &HeaderMap) -> Result<&str, ServerError> {
    headers
        .get(AUTHORIZATION)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|token| !token.is_empty())
        .ok_or_else(|| {
            ServerError::unauthenticated("missing `Authorization: Bearer <token>` header")
        })
}

/// Middleware: asks the authorizer who sent the request and hands the [`Principal`] on as a
/// request extension (`Extension<Principal>` in handlers), or answers the authorizer's error.
///
/// [`router`](super::router) layers it over the protocol's routes; a platform layers it over
/// its own routes too, so they see the same principals:
/// `.route_layer(axum::middleware::from_fn_with_state(authorizer, authenticate::<A>))`.
pub async fn authenticate<A: Authorizer>(
    State(authorizer): State<A>,
    request: Request,
    next: Next,
) -> Response {
    let (parts, body) = request.into_parts();
    match authorizer.authorize(&parts).await {
        Ok(principal) => {
            let mut request = Request::from_parts(parts, body);
            request.extensions_mut().insert(principal);
            next.run(request).await
        }
        Err(err) => err.into_response(),
    }
}

/// A fixed table of bearer tokens and the principals they speak for: for tests, and for
/// platforms whose credentials are set at start-up.
///
/// # Caveats
///
/// Tokens live in memory as given (hash them yourself, as `cca` does, if they must not), and
/// the table never changes once the router has it: rotate by building a new router. Its
/// `Debug` output shows how many tokens it holds, never the tokens.
///
/// ```
/// use ccattler_store::http_server::{Principal, StaticTokens};
///
/// let tokens = StaticTokens::new()
///     .with("admin-secret", Principal::Admin)
///     .with("n1-secret", Principal::Node("n1".to_owned()));
/// assert_eq!(tokens.len(), 2);
/// ```
#[derive(Clone, Default)]
pub struct StaticTokens {
    tokens: Arc<HashMap<String, Principal>>,
}

impl StaticTokens {
    /// An empty table: every request is refused.
    pub fn new() -> Self {
        StaticTokens::default()
    }

    /// Adds (or replaces) `token`, which then speaks for `principal`.
    #[must_use]
    pub fn with(mut self, token: impl Into<String>, principal: Principal) -> Self {
        Arc::make_mut(&mut self.tokens).insert(token.into(), principal);
        self
    }

    /// How many tokens the table holds.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether the table holds no token.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }
}

impl fmt::Debug for StaticTokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StaticTokens")
            .field("tokens", &self.tokens.len())
            .finish()
    }
}

impl Authorizer for StaticTokens {
    async fn authorize(&self, request: &Parts) -> Result<Principal, ServerError> {
        let token = bearer_token(&request.headers)?;
        self.tokens.get(token).cloned().ok_or_else(|| {
            ServerError::unauthenticated("unknown token; send a token the server knows")
        })
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    #[test]
    fn bearer_tokens_are_read_from_the_header() {
        let mut headers = HeaderMap::new();
        assert!(bearer_token(&headers).is_err());
        headers.insert(AUTHORIZATION, HeaderValue::from_static("Basic abc"));
        assert!(bearer_token(&headers).is_err());
        headers.insert(AUTHORIZATION, HeaderValue::from_static("Bearer  t-1 "));
        assert_eq!(bearer_token(&headers).ok(), Some("t-1"));
    }

    #[test]
    fn static_tokens_never_show_their_tokens() {
        let tokens = StaticTokens::new().with("hunter2", Principal::Admin);
        assert!(!format!("{tokens:?}").contains("hunter2"));
        assert!(!tokens.is_empty());
    }
}
