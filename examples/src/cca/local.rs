//! The local port of `cca agent` (`--local-addr`, `127.0.0.1:7421` by default): the node's own
//! view, answered by the agent itself, so it keeps answering while `cca server` is unreachable.
//!
//! | route | what |
//! |---|---|
//! | `GET /metrics` | the agent's metrics in Prometheus' text format (see [`ccattler_core::telemetry`]) |
//! | `GET /node` | the node's observed state as JSON ([`NodeSnapshot`]): `{node, connected, instances: {id: {state, health, ready, reason, ...}}, placements: {id: {service, version, state, ...}}}` |
//!
//! # Auth
//!
//! None: the port is for the node's own monitoring, on loopback by default. It shows what the
//! agent reports to the server anyway (observations and placements) and never a spec, an
//! environment or a secret. Give a non-loopback `--local-addr` only on a network where anyone
//! who reaches it may read that; the agent warns when you do.

use std::net::SocketAddr;

use axum::Router;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use ccattler_runtime::agent::NodeSnapshot;
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::CliError;
use super::metrics;

/// The default local address of `cca agent`.
pub const DEFAULT_LOCAL_ADDR: &str = "127.0.0.1:7421";

/// The routes of the local port over the snapshots an agent publishes.
pub fn router(snapshots: watch::Receiver<NodeSnapshot>) -> Router {
    Router::new()
        .route("/metrics", get(|| async { metrics::render() }))
        .route("/node", get(node))
        .with_state(snapshots)
}

async fn node(State(snapshots): State<watch::Receiver<NodeSnapshot>>) -> Response {
    let snapshot = snapshots.borrow().clone();
    axum::Json(snapshot).into_response()
}

/// Installs the metrics recorder and serves the local port in the background: on `addr`, or on
/// [`DEFAULT_LOCAL_ADDR`] when `None`. Returns the sender to publish snapshots to (see
/// `NodeAgent::run_publishing`).
///
/// When the default port is taken (several agents on one machine), the agent warns and serves
/// no local port: its workloads matter more than its metrics.
///
/// # Errors
///
/// [`CliError::Start`] when the recorder cannot be installed, or an `addr` given cannot be
/// bound.
pub async fn start(addr: Option<SocketAddr>) -> Result<watch::Sender<NodeSnapshot>, CliError> {
    let handle = metrics::install().map_err(|err| CliError::Start(err.to_string()))?;
    metrics::spawn_upkeep(handle);
    let (snapshots, receiver) = watch::channel(NodeSnapshot::default());
    let listener = match addr {
        Some(addr) => {
            if !addr.ip().is_loopback() {
                eprintln!(
                    "cca agent: warning: the local port {addr} is not on loopback; anyone who \
                     reaches it can read this node's instances and metrics (no token is asked)"
                );
            }
            TcpListener::bind(addr).await.map_err(|err| {
                CliError::Start(format!(
                    "the local port {addr}: {err}; give another --local-addr (port 0 picks a \
                     free one)"
                ))
            })?
        }
        None => match TcpListener::bind(DEFAULT_LOCAL_ADDR).await {
            Ok(listener) => listener,
            Err(err) => {
                eprintln!(
                    "cca agent: warning: no local port ({DEFAULT_LOCAL_ADDR}: {err}); give \
                     --local-addr to serve /metrics and /node"
                );
                return Ok(snapshots);
            }
        },
    };
    let local = listener
        .local_addr()
        .map_err(|err| CliError::Start(format!("the local port: {err}")))?;
    println!("cca agent: node state and metrics on http://{local} (/node, /metrics)");
    tokio::spawn(async move {
        if let Err(err) = axum::serve(listener, router(receiver)).await {
            eprintln!("cca agent: the local port {local} stopped: {err}");
        }
    });
    Ok(snapshots)
}
