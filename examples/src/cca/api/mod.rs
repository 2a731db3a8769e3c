//! The HTTP API of `cca server`: facts, apply, watch and enrollment over one store.
//!
//! # Routes
//!
//! Every route but `POST /api/enroll` and the static files of the page ([`ui`]) needs
//! `Authorization: Bearer <token>` (see [`auth`]).
//! Every error is a 4xx/5xx with a JSON body `{"error": "...", ...}`.
//!
//! | route | who | what |
//! |---|---|---|
//! | `GET /state?prefix=P` | any | `{revision, facts: [{key, value, create_revision, mod_revision, version}]}`; `value` is the parsed JSON when the stored value is JSON, else a string. Never anything under `secret/` or `auth/` |
//! | `QUERY /state`, `POST /state/query` | any | the same, filtered by a JSON [`query`](state::Query): `{"prefix": "observed/instance/", "where": [{"field": "state", "op": "==", "value": "running"}]}` |
//! | `PUT /state/{key}`, `DELETE /state/{key}` | admin; a node for its own keys | writes the raw body as the value / deletes; `{key, revision}` |
//! | `APPLY /config`, `POST /config?dry_run=true&prune=true` | admin | applies the `.cca` document in the body in one transaction; 400 with every diagnostic (`diagnostics`, and `rendered` as `cca check` prints them) and nothing applied on error |
//! | `WATCH /changes`, `GET /changes?prefix=P` | any | server-sent events: `ready` first (`{revision}`), then `put`/`delete` with `id` = revision; resume with `Last-Event-ID: R` (from R + 1); an `error` event with `relist: true` when R was compacted |
//! | `GET /api/status` | any | per service: desired, placed, present, running, ready, unplaced and the reasons, the instances in trouble (`troubled`: failed, or pending with a reason such as a missing secret), the autoscaler's recommendation (`autoscaler`: `{instances, reason}`, or null for a service without a target), the rollout (`rollout`: `{phase, version, desired, reason}`, or null), and the init steps (`init`: counts `waiting`, `running`, `failed`, `done` of `steps`, and up to ten `instances` not done with their `phase`, step, failures, reason and output; null for a service without init steps) |
//! | `GET /api/nodes` | any | every node: status and whether its lease is held |
//! | `GET /api/rollout/{svc}` | any | the service's rollout: `phase` (progressing, complete, paused, rolled back, failing), `reason`, `version` in force, `desired`, `stable`, `rolled_back_from`, `kept` versions, `failures`, and of the version in force `instances`, `updated`, `ready`, with `old` instances of others ([`rollout`]) |
//! | `POST /api/rollout/{svc}` | admin | `{"action": "pause"\|"resume"\|"undo", "to_version": V}` → 202 `{request}`: the rollout controller acts on it once; 400 for an undo to a version not kept, 409 while the previous request waits |
//! | `GET /api/events?object=X&limit=N` | any | the recorded events, oldest first: about instance X, or service X and its instances ([`events`]) |
//! | `GET /metrics` | admin | every metric of the process in Prometheus' text format ([`metrics`]; the table: [`ccattler_core::telemetry`]) |
//! | `POST /api/tokens` | admin | `{"ttl": "10m"}` → a one-time enrollment token |
//! | `POST /api/enroll` | no token | `{"token": ENROLLMENT, "node": N}` → a credential for node N |
//! | `/store/...` | any; writes as for `PUT /state` | the store protocol: every `FactStore` operation, values base64 ([`ccattler_store::http_server`], mounted as it is) |
//! | `GET /`, `/ui/app.js`, `/ui/app.css` | no token (static, no data) | the web page that watches the cluster; it reads the routes above with the user's token ([`ui`]) |
//!
//! # Limits
//!
//! Bodies over [`ApiConfig::max_body`] (1 MiB by default) get 413; malformed JSON or text gets
//! 400. Enrollment attempts beyond [`ApiConfig::enroll_per_minute`] from one address get 429
//! with `Retry-After`. Handlers never unwrap request data.

pub mod auth;
pub mod changes;
pub mod config;
pub mod error;
pub mod events;
pub mod metrics;
pub mod rollout;
pub mod state;
pub mod token_cache;
pub mod ui;
pub mod volumes;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post, put};
use ccattler_core::FactStore;
use ccattler_store::http_server;
use serde::de::DeserializeOwned;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use error::ApiError;

/// The default port of `cca server`.
pub const DEFAULT_PORT: u16 = 7420;

/// Settings of the API.
#[derive(Clone, Copy, Debug)]
pub struct ApiConfig {
    /// The largest request body accepted; larger ones get 413.
    pub max_body: usize,
    /// Enrollment attempts (`POST /api/enroll`) allowed per client address and minute, in
    /// bursts of up to 10; more get 429. Zero is taken as one.
    pub enroll_per_minute: u32,
}

impl Default for ApiConfig {
    /// 1 MiB bodies; 30 enrollment attempts per client address and minute.
    fn default() -> Self {
        ApiConfig {
            max_body: 1 << 20,
            enroll_per_minute: 30,
        }
    }
}

/// What every handler shares: the store, and the enrollment rate limit.
#[derive(Clone, Debug)]
pub struct ApiState<S> {
    /// The cluster's store.
    pub store: S,
    /// Limits `POST /api/enroll` per client address.
    pub enroll_limit: Arc<auth::EnrollLimit>,
}

/// The API's routes over `store`; see the [module docs](self). The store protocol is the
/// library's [`http_server::router`], authenticated by the same [`auth::TokenAuthorizer`] as
/// every other route.
///
/// Serve it with [`serve`] (or `into_make_service_with_connect_info::<SocketAddr>()`) so the
/// enrollment rate limit can tell clients apart; without the client's address, every
/// enrollment shares one limit.
pub fn router<S: FactStore + Clone>(store: S, config: ApiConfig) -> Router {
    let tokens = auth::TokenAuthorizer::new(store.clone());
    let protocol = http_server::router(store.clone(), tokens.clone());
    let api = ApiState {
        store,
        enroll_limit: Arc::new(auth::EnrollLimit::per_minute(config.enroll_per_minute)),
    };
    let authenticated = Router::new()
        .route(
            "/state",
            get(state::get_state::<S>).fallback(state::custom_method::<S>),
        )
        .route("/state/query", post(state::post_query::<S>))
        .route(
            "/state/{*key}",
            put(state::put_key::<S>).delete(state::delete_key::<S>),
        )
        .route(
            "/config",
            post(config::post_config::<S>).fallback(config::custom_method::<S>),
        )
        .route(
            "/changes",
            get(changes::get_changes::<S>).fallback(changes::custom_method::<S>),
        )
        .route("/api/status", get(config::status::<S>))
        .route("/api/nodes", get(config::nodes::<S>))
        .route(
            "/api/rollout/{*service}",
            get(rollout::get_rollout::<S>).post(rollout::post_rollout::<S>),
        )
        .route("/api/events", get(events::get_events::<S>))
        .route("/api/tokens", post(auth::create_enrollment::<S>))
        .route("/metrics", get(metrics::get_metrics::<S>))
        .route_layer(axum::middleware::from_fn_with_state(
            tokens,
            http_server::authenticate::<auth::TokenAuthorizer<S>>,
        ));
    Router::new()
        .route("/api/enroll", post(auth::enroll::<S>))
        .merge(authenticated)
        .with_state(api)
        .merge(protocol)
        .merge(ui::router())
        .fallback(error::no_route)
        .layer(axum::middleware::from_fn(metrics::track))
        .layer(DefaultBodyLimit::max(config.max_body))
}

/// Serves the API on `listener` until `shutdown` completes.
///
/// # Errors
///
/// The listener's I/O error.
pub async fn serve<S: FactStore + Clone>(
    store: S,
    config: ApiConfig,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = router(store, config).into_make_service_with_connect_info::<SocketAddr>();
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

/// A server running in the background (for tests and `cca dev`).
#[derive(Debug)]
pub struct ServerHandle {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<std::io::Result<()>>,
}

impl ServerHandle {
    /// Binds `addr` (port 0 picks a free one) and serves the API over `store` in a task.
    ///
    /// # Errors
    ///
    /// The bind error.
    pub async fn start<S: FactStore + Clone>(
        store: S,
        config: ApiConfig,
        addr: SocketAddr,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(serve(store, config, listener, async {
            let _ = stopped.await;
        }));
        Ok(ServerHandle {
            addr,
            stop: Some(stop),
            task,
        })
    }

    /// The address served.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL, `http://{addr}`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops accepting, gives open requests a second to finish, then drops the rest (open
    /// watches never finish by themselves).
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), &mut self.task).await;
        self.task.abort();
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Parses a JSON body; 400 with the parser's message when it is malformed.
///
/// # Errors
///
/// [`ApiError`] 400.
pub fn parse_json<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body)
        .map_err(|err| ApiError::bad_request(format!("malformed JSON body: {err}")))
}

/// Whether the API never shows `key`: secrets and token records (the store protocol's rule,
/// [`http_server::hidden`], applied to every route).
pub fn hidden(key: &str) -> bool {
    http_server::hidden(key)
}
