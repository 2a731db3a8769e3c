//! The HTTP/1.1 transport of [`HttpStore`](super::HttpStore): hyper's pooled client (one pool
//! for every endpoint), a bearer token, and each failed attempt classified as a [`Fault`] for
//! the failover policy; error answers are turned back into [`StoreError`]s.

use std::time::Duration;

use bytes::Bytes;
use ccattler_core::StoreError;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value as Json;

use super::failover::Fault;
use crate::wire::WireError;

/// A failed attempt: the error the caller would see, and how it failed.
pub(crate) type Failed = (StoreError, Fault);

/// A client of the store protocol's servers.
#[derive(Clone, Debug)]
pub(crate) struct Transport {
    token: String,
    http: Client<HttpConnector, Full<Bytes>>,
}

impl Transport {
    /// A client sending `token`, giving up on a connection after `connect_timeout`.
    pub(crate) fn new(token: String, connect_timeout: Duration) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(connect_timeout));
        connector.set_nodelay(true);
        Transport {
            token,
            http: Client::builder(TokioExecutor::new()).build(connector),
        }
    }

    /// Sends a request to the server at `base` (such as `http://127.0.0.1:7420`); the
    /// answer's body is unread.
    ///
    /// # Errors
    ///
    /// [`StoreError::Unavailable`] when the URL is malformed ([`Fault::Final`]), the server
    /// cannot be reached ([`Fault::Unreached`]) or the connection fails once the request is
    /// sent ([`Fault::Interrupted`]).
    pub(crate) async fn send(
        &self,
        base: &str,
        method: Method,
        path_and_query: &str,
        body: Bytes,
    ) -> Result<Response<Incoming>, Failed> {
        let request = Request::builder()
            .method(method)
            .uri(format!("{base}{path_and_query}"))
            .header(
                hyper::header::AUTHORIZATION,
                format!("Bearer {}", self.token),
            )
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(body))
            .map_err(|err| {
                let err = StoreError::unavailable(format!(
                    "cannot build a request to {base:?}: {err}; give a base URL such as \
                     http://127.0.0.1:7420"
                ));
                (err, Fault::Final)
            })?;
        self.http.request(request).await.map_err(|err| {
            let fault = if err.is_connect() {
                Fault::Unreached
            } else {
                Fault::Interrupted
            };
            (
                StoreError::unavailable(format!("cannot reach {base}: {err}")),
                fault,
            )
        })
    }

    /// Sends a request and reads its JSON answer.
    ///
    /// # Errors
    ///
    /// As [`send`](Self::send); a body that cannot be read is [`Fault::Interrupted`]; an error
    /// answer is the [`StoreError`] it stands for ([`store_error`]), [`Fault::Unavailable`]
    /// when it is a 5xx or a retryable store error, else [`Fault::Final`].
    pub(crate) async fn json(
        &self,
        base: &str,
        method: Method,
        path: &str,
        body: Bytes,
    ) -> Result<Json, Failed> {
        let response = self.send(base, method, path, body).await?;
        let status = response.status();
        let body = read_json(response.into_body())
            .await
            .map_err(|err| (err, Fault::Interrupted))?;
        if status.is_success() {
            Ok(body)
        } else {
            Err(classify(status, store_error(status, &body)))
        }
    }
}

/// How an error answer failed: a 5xx or a retryable store error is [`Fault::Unavailable`]
/// (another server may do better), anything else [`Fault::Final`].
pub(crate) fn classify(status: StatusCode, err: StoreError) -> Failed {
    let fault = if status.is_server_error() || err.is_retryable() {
        Fault::Unavailable
    } else {
        Fault::Final
    };
    (err, fault)
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
