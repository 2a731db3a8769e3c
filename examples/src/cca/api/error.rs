//! [`ApiError`]: every failure of the API as a status code and a JSON body.

use axum::Json;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use ccattler_core::StoreError;
use ccattler_store::http_server::{ServerError, status_of};
use serde_json::{Value as Json_, json};

/// An error answer: `{"error": "<message>", ...extra fields}` with a 4xx or 5xx status.
#[derive(Debug)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// The message, in words.
    pub message: String,
    /// More fields of the body (for example `diagnostics`); an object or `null`.
    pub extra: Json_,
}

impl ApiError {
    /// An error with `status` and `message`, no extra fields.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
            extra: Json_::Null,
        }
    }

    /// 400 Bad Request.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    /// 401 Unauthorized.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, message)
    }

    /// 403 Forbidden.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, message)
    }

    /// 404 Not Found.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, message)
    }

    /// Adds extra fields to the body.
    #[must_use]
    pub fn with(mut self, extra: Json_) -> Self {
        self.extra = extra;
        self
    }
}

impl From<StoreError> for ApiError {
    /// The status of [`status_of`] (shared with the store protocol): bad keys and values are
    /// the client's fault (400), a compacted revision is 410, a refusal 403, a missing lease
    /// 404, the rest the store's (503 when retrying may help, 500 otherwise).
    fn from(err: StoreError) -> Self {
        ApiError::new(status_of(&err), err.to_string())
    }
}

impl From<ServerError> for ApiError {
    /// The same status and message as the store protocol answers, with its `store_error`.
    fn from(err: ServerError) -> Self {
        let extra = err
            .wire_error()
            .map_or(Json_::Null, |wire| json!({ "store_error": wire }));
        ApiError::new(err.status(), err.to_string()).with(extra)
    }
}

impl From<BytesRejection> for ApiError {
    /// Keeps the rejection's status (413 for a body over the limit) with a JSON body.
    fn from(rejection: BytesRejection) -> Self {
        ApiError::new(rejection.status(), rejection.body_text())
    }
}

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> Self {
        ApiError::new(rejection.status(), rejection.body_text())
    }
}

impl IntoResponse for ApiError {
    /// The JSON body; a `retry_after_secs` extra field is also sent as `Retry-After`.
    fn into_response(self) -> Response {
        let retry_after = self.extra.get("retry_after_secs").and_then(Json_::as_u64);
        let mut body = json!({ "error": self.message });
        if let (Some(body), Json_::Object(extra)) = (body.as_object_mut(), self.extra) {
            body.extend(extra);
        }
        let mut response = (self.status, Json(body)).into_response();
        if let Some(secs) = retry_after {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, secs.into());
        }
        response
    }
}

/// The answer to a request no route serves: 404 with a JSON body.
pub async fn no_route() -> ApiError {
    ApiError::not_found("no such route; see the API reference in `cca server --help`")
}

/// The answer to a method a route does not serve: 405 with a JSON body.
pub fn method_not_allowed(method: &axum::http::Method, allowed: &str) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("method {method} is not allowed here; use {allowed}"),
    )
}
