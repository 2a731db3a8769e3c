//! [`ServerError`]: every failure of the protocol server as a status code and a JSON body.

use axum::Json;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use ccattler_core::StoreError;
use serde_json::json;

use crate::wire::WireError;

/// Why the server refused or failed a request. Its [`IntoResponse`] answers
/// `{"error": "<message>"}` with [`status`](Self::status), plus `store_error` (a
/// [`WireError`]) for [`ServerError::Store`], so the client rebuilds the same [`StoreError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// The store refused or failed the operation, or the caller may not do it
    /// ([`StoreError::Denied`], 403). The status is [`status_of`] the error.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The request is malformed (bad JSON, a value that is not base64, an unknown operator):
    /// 400. The message says what to fix.
    #[error("{0}")]
    BadRequest(String),
    /// The request carries no credential, or one the [`Authorizer`](super::Authorizer) does
    /// not know: 401. The message says what credential to send.
    #[error("{0}")]
    Unauthenticated(String),
    /// axum rejected the request before a handler saw it (for example a body over the
    /// `DefaultBodyLimit`, 413); the status and text are axum's.
    #[error("{message}")]
    Rejected {
        /// The status axum chose.
        status: StatusCode,
        /// axum's explanation.
        message: String,
    },
}

impl ServerError {
    /// A refusal: [`StoreError::Denied`] with `message`, answered with 403.
    pub fn denied(message: impl Into<String>) -> Self {
        ServerError::Store(StoreError::Denied(message.into()))
    }

    /// A missing or unknown credential, answered with 401.
    pub fn unauthenticated(message: impl Into<String>) -> Self {
        ServerError::Unauthenticated(message.into())
    }

    /// A malformed request, answered with 400.
    pub fn bad_request(message: impl Into<String>) -> Self {
        ServerError::BadRequest(message.into())
    }

    /// The HTTP status this error is answered with.
    pub fn status(&self) -> StatusCode {
        match self {
            ServerError::Store(err) => status_of(err),
            ServerError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ServerError::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
            ServerError::Rejected { status, .. } => *status,
        }
    }

    /// The `store_error` field of the answer, for [`ServerError::Store`].
    pub fn wire_error(&self) -> Option<WireError> {
        match self {
            ServerError::Store(err) => Some(WireError::from(err)),
            _ => None,
        }
    }
}

/// The HTTP status of a store error: bad keys, values, transactions, TTLs and revisions are the
/// client's fault (400); a compacted revision is 410, a refusal 403, a missing lease 404; the
/// rest is the store's (503 when retrying may help, 500 otherwise).
pub fn status_of(err: &StoreError) -> StatusCode {
    match err {
        StoreError::InvalidKey(_)
        | StoreError::TooManyOps { .. }
        | StoreError::DuplicateKey(_)
        | StoreError::ValueTooLarge { .. }
        | StoreError::InvalidTtl(_)
        | StoreError::FutureRevision { .. } => StatusCode::BAD_REQUEST,
        StoreError::Compacted { .. } => StatusCode::GONE,
        StoreError::Denied(_) => StatusCode::FORBIDDEN,
        StoreError::LeaseNotFound(_) => StatusCode::NOT_FOUND,
        err if err.is_retryable() => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl From<BytesRejection> for ServerError {
    fn from(rejection: BytesRejection) -> Self {
        ServerError::Rejected {
            status: rejection.status(),
            message: rejection.body_text(),
        }
    }
}

impl From<QueryRejection> for ServerError {
    fn from(rejection: QueryRejection) -> Self {
        ServerError::Rejected {
            status: rejection.status(),
            message: rejection.body_text(),
        }
    }
}

impl IntoResponse for ServerError {
    fn into_response(self) -> Response {
        let body = match self.wire_error() {
            Some(wire) => json!({ "error": self.to_string(), "store_error": wire }),
            None => json!({ "error": self.to_string() }),
        };
        (self.status(), Json(body)).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_403_with_a_store_error() {
        let err = ServerError::denied("no");
        assert_eq!(err.status(), StatusCode::FORBIDDEN);
        assert!(matches!(err.wire_error(), Some(WireError::Denied { .. })));
        assert_eq!(
            ServerError::bad_request("x").status(),
            StatusCode::BAD_REQUEST
        );
        assert_eq!(ServerError::bad_request("x").wire_error(), None);
        assert_eq!(
            ServerError::unauthenticated("x").status(),
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(
            status_of(&StoreError::unavailable("down")),
            StatusCode::SERVICE_UNAVAILABLE
        );
    }
}
