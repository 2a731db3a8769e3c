//! The HTTP client behind `cca apply`, `get`, `query`, `watch`, `status`, `nodes` and `token`.
//!
//! Plain HTTP/1.1 over hyper; every command takes `--server URL` (default
//! `http://127.0.0.1:7420`) and `--token` (or `CCATTLER_TOKEN`).

use axum::body::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::client::legacy::Client as Hyper;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value as Json;

use super::CliError;

/// The server commands talk to unless told (`--server`, or this environment variable:
/// [`SERVER_ENV`]).
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:7420";
/// The environment variable that names the server.
pub const SERVER_ENV: &str = "CCATTLER_SERVER";

/// Where the server is and how to authenticate.
#[derive(Clone, Debug, clap::Args)]
pub struct ClientArgs {
    /// The API server's base URL.
    #[arg(long, value_name = "URL", env = SERVER_ENV, default_value = DEFAULT_SERVER)]
    pub server: String,
    /// The bearer token (printed by `cca server` at first start).
    #[arg(
        long,
        value_name = "TOKEN",
        env = "CCATTLER_TOKEN",
        hide_env_values = true
    )]
    pub token: Option<String>,
}

/// A client of one server.
#[derive(Clone, Debug)]
pub struct ApiClient {
    base: String,
    token: Option<String>,
    http: Hyper<HttpConnector, Full<Bytes>>,
}

/// A failed request: the status and the server's error message (with its extra fields).
#[derive(Debug)]
pub struct Failure {
    /// The HTTP status.
    pub status: StatusCode,
    /// The JSON body, or the text wrapped as `{"error": text}`.
    pub body: Json,
}

impl Failure {
    /// The server's `error` message.
    pub fn message(&self) -> String {
        self.body
            .get("error")
            .and_then(Json::as_str)
            .unwrap_or("(no message)")
            .to_owned()
    }

    /// How long the server asked the client to wait before trying again (a 429 or 503 with
    /// `retry_after_secs`), if it did.
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        let retryable = self.status == StatusCode::TOO_MANY_REQUESTS
            || self.status == StatusCode::SERVICE_UNAVAILABLE;
        let secs = self.body.get("retry_after_secs").and_then(Json::as_u64)?;
        retryable.then(|| std::time::Duration::from_secs(secs))
    }

    /// Into a command error.
    pub fn into_cli(self) -> CliError {
        CliError::Api(format!("{}: {}", self.status, self.message()))
    }
}

impl ApiClient {
    /// A client for `args`.
    pub fn new(args: &ClientArgs) -> Self {
        ApiClient {
            base: args.server.trim_end_matches('/').to_owned(),
            token: args.token.clone(),
            http: Hyper::builder(TokioExecutor::new()).build_http(),
        }
    }

    /// The same client, connecting from the local address `source` (one of this machine's
    /// addresses, such as `127.0.0.7` on loopback): the server then counts it as that client,
    /// for instance in the enrollment rate limit, which is kept per address.
    #[must_use]
    pub fn from_address(mut self, source: std::net::IpAddr) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_local_address(Some(source));
        self.http = Hyper::builder(TokioExecutor::new()).build(connector);
        self
    }

    /// Sends a request and returns the response with its body unread.
    ///
    /// # Errors
    ///
    /// [`CliError::Api`] when the server cannot be reached or the URL is malformed.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: impl Into<Bytes>,
        headers: &[(&str, &str)],
    ) -> Result<Response<Incoming>, CliError> {
        let mut request = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base));
        if let Some(token) = &self.token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request
            .body(Full::new(body.into()))
            .map_err(|err| CliError::Api(format!("bad request to {}: {err}", self.base)))?;
        self.http
            .request(request)
            .await
            .map_err(|err| CliError::Api(format!("cannot reach {}: {err}", self.base)))
    }

    /// Sends a request and reads a JSON answer: `Ok(Ok(json))` on 2xx, `Ok(Err(failure))` for
    /// an error answer.
    ///
    /// # Errors
    ///
    /// [`CliError::Api`] when the server cannot be reached or answers something not JSON.
    pub async fn json(
        &self,
        method: Method,
        path: &str,
        body: impl Into<Bytes>,
    ) -> Result<Result<Json, Failure>, CliError> {
        let response = self.send(method, path, body, &[]).await?;
        let status = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|err| CliError::Api(format!("reading the answer: {err}")))?
            .to_bytes();
        let body = serde_json::from_slice::<Json>(&bytes).unwrap_or_else(
            |_| serde_json::json!({ "error": String::from_utf8_lossy(&bytes).into_owned() }),
        );
        if status.is_success() {
            Ok(Ok(body))
        } else {
            Ok(Err(Failure { status, body }))
        }
    }

    /// Like [`json`](Self::json), with every error answer turned into [`CliError::Api`].
    ///
    /// # Errors
    ///
    /// [`CliError::Api`].
    pub async fn ok(
        &self,
        method: Method,
        path: &str,
        body: impl Into<Bytes>,
    ) -> Result<Json, CliError> {
        self.json(method, path, body)
            .await?
            .map_err(Failure::into_cli)
    }
}

/// Percent-encodes a query parameter value.
pub fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-_.~/".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// A fact's value as one line: strings as they are, JSON compact.
pub fn value_text(value: &Json) -> String {
    match value {
        Json::String(s) => s.clone(),
        other => other.to_string(),
    }
}
