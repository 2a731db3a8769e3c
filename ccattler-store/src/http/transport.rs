//! The HTTP/1.1 transport of [`HttpStore`](super::HttpStore): hyper's pooled client, a bearer
//! token, and error answers turned back into [`StoreError`]s.

use bytes::Bytes;
use ccattler_core::StoreError;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value as Json;

use crate::wire::WireError;

/// A client of one server.
#[derive(Clone, Debug)]
pub(crate) struct Transport {
    base: String,
    token: String,
    http: Client<HttpConnector, Full<Bytes>>,
}

impl Transport {
    /// A client of `base` (such as `http://127.0.0.1:7420`; a trailing `/` is ignored).
    pub(crate) fn new(base: &str, token: String) -> Self {
        Transport {
            base: base.trim_end_matches('/').to_owned(),
            token,
            http: Client::builder(TokioExecutor::new()).build_http(),
        }
    }

    /// The base URL.
    pub(crate) fn base(&self) -> &str {
        &self.base
    }

    /// Sends a request; the answer's body is unread.
    ///
    /// # Errors
    ///
    /// [`StoreError::Unavailable`] when the URL is malformed or the server cannot be reached.
    pub(crate) async fn send(
        &self,
        method: Method,
        path_and_query: &str,
        body: Bytes,
    ) -> Result<Response<Incoming>, StoreError> {
        let request = Request::builder()
            .method(method)
            .uri(format!("{}{path_and_query}", self.base))
            .header(
                hyper::header::AUTHORIZATION,
                format!("Bearer {}", self.token),
            )
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(body))
            .map_err(|err| {
                StoreError::unavailable(format!(
                    "cannot build a request to {:?}: {err}; give a base URL such as \
                     http://127.0.0.1:7420",
                    self.base
                ))
            })?;
        self.http
            .request(request)
            .await
            .map_err(|err| StoreError::unavailable(format!("cannot reach {}: {err}", self.base)))
    }

    /// Sends a request and reads its JSON answer.
    ///
    /// # Errors
    ///
    /// [`StoreError::Unavailable`] when the server cannot be reached or the answer cannot be
    /// read; an error answer as the [`StoreError`] it stands for ([`store_error`]).
    pub(crate) async fn json(
        &self,
        method: Method,
        path: &str,
        body: Bytes,
    ) -> Result<Json, StoreError> {
        let response = self.send(method, path, body).await?;
        let status = response.status();
        let body = read_json(response.into_body()).await?;
        if status.is_success() {
            Ok(body)
        } else {
            Err(store_error(status, &body))
        }
    }
}

/// Reads a whole body as JSON; a body that is not JSON becomes `{"error": text}`.
///
/// # Errors
///
/// [`StoreError::Unavailable`] when the connection fails while reading.
pub(crate) async fn read_json(body: Incoming) -> Result<Json, StoreError> {
    let bytes = body
        .collect()
        .await
        .map_err(|err| StoreError::unavailable(format!("reading the answer: {err}")))?
        .to_bytes();
    Ok(serde_json::from_slice::<Json>(&bytes).unwrap_or_else(
        |_| serde_json::json!({ "error": String::from_utf8_lossy(&bytes).into_owned() }),
    ))
}

/// The [`StoreError`] an error answer stands for: its `store_error` when it has one; else a
/// refusal for 401 and 403, and [`StoreError::Unavailable`] naming the status otherwise.
pub(crate) fn store_error(status: StatusCode, body: &Json) -> StoreError {
    if let Some(wire) = body.get("store_error")
        && let Ok(wire) = serde_json::from_value::<WireError>(wire.clone())
    {
        return wire.into_store_error();
    }
    let message = body
        .get("error")
        .and_then(Json::as_str)
        .unwrap_or("(no message)");
    match status {
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => StoreError::Denied(message.to_owned()),
        StatusCode::NOT_FOUND => StoreError::unavailable(format!(
            "the server does not serve the store protocol ({message}); is the URL the \
             server's base URL?"
        )),
        status => StoreError::unavailable(format!("{status}: {message}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_answers_become_store_errors() {
        let denied = serde_json::json!({
            "error": "no",
            "store_error": {"kind": "lease_not_found", "id": 4},
        });
        assert!(matches!(
            store_error(StatusCode::NOT_FOUND, &denied),
            StoreError::LeaseNotFound(ccattler_core::LeaseId(4))
        ));
        let plain = serde_json::json!({ "error": "unknown token" });
        assert!(matches!(
            store_error(StatusCode::UNAUTHORIZED, &plain),
            StoreError::Denied(m) if m == "unknown token"
        ));
        assert!(matches!(
            store_error(StatusCode::NOT_FOUND, &plain),
            StoreError::Unavailable { .. }
        ));
    }
}
