//! `GET /metrics` of `cca server` (admin token; 401 without one, 403 for a node's), and the
//! layer that counts and times every request of the API.
//!
//! A scrape first sets the scheduler's gauges from the store (see
//! [`ccattler_core::telemetry`] for why at scrape time), then renders everything the process
//! recorded: the runner's, the store's ([`ccattler_store::Metered`]), the API's.

use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use ccattler_core::FactStore;
use ccattler_core::schema::{self, Unschedulable};

use super::ApiState;
use super::auth::Principal;
use super::error::ApiError;

/// Name of the requests counter.
pub const REQUESTS: &str = "ccattler_api_requests_total";
/// Name of the request latency histogram.
pub const REQUEST_DURATION: &str = "ccattler_api_request_duration_seconds";
/// Name of the placed instances gauge.
pub const PLACED: &str = "ccattler_scheduler_placed_instances";
/// Name of the unplaced instances gauge.
pub const UNPLACED: &str = "ccattler_scheduler_unplaced_instances";

/// The `reason` label values of [`UNPLACED`], each set at every scrape (0 when none).
pub const REASONS: [&str; 9] = [
    "no_nodes",
    "not_alive",
    "architecture",
    "zone",
    "label",
    "taint",
    "cpu",
    "memory",
    "other",
];

/// `GET /metrics` (admin): the Prometheus text format. The first scrape installs the recorder
/// ([`crate::cca::metrics::install`]) if the process has not yet; `cca server` does at start.
///
/// # Errors
///
/// [`ApiError`] 403 for a node's credential; 500 when the recorder cannot be installed; the
/// store's error when it cannot be scanned.
pub async fn get_metrics<S: FactStore + Clone>(
    State(api): State<ApiState<S>>,
    axum::Extension(principal): axum::Extension<Principal>,
) -> Result<Response, ApiError> {
    principal.require_admin()?;
    if let Err(err) = crate::cca::metrics::install() {
        return Err(ApiError::new(
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            err.to_string(),
        ));
    }
    record_scheduler(&api.store).await?;
    Ok(crate::cca::metrics::render())
}

/// Sets the scheduler's gauges from `placement/` and `status/unschedulable/`.
///
/// # Errors
///
/// The store's error.
pub async fn record_scheduler<S: FactStore>(store: &S) -> Result<(), ApiError> {
    let placed = store.scan(schema::PLACEMENTS).await?.facts.len();
    let mut unplaced = [0usize; REASONS.len()];
    for fact in store.scan(schema::UNSCHEDULABLE).await?.facts {
        let class = match schema::decode::<Unschedulable>(&fact) {
            Ok(record) => reason_class(&record.reason),
            Err(_) => "other",
        };
        let slot = REASONS
            .iter()
            .position(|r| *r == class)
            .unwrap_or(REASONS.len() - 1);
        unplaced[slot] += 1;
    }
    metrics::gauge!(PLACED).set(placed as f64);
    for (reason, count) in REASONS.iter().zip(unplaced) {
        metrics::gauge!(UNPLACED, "reason" => *reason).set(count as f64);
    }
    Ok(())
}

/// The label of a scheduler reason: its first, most common rejection ("0/3 nodes can run it: 2
/// have too little cpu (needs 1), 1 is not alive" is `cpu`).
pub fn reason_class(reason: &str) -> &'static str {
    if reason.ends_with("the cluster has no nodes") {
        return "no_nodes";
    }
    let rejections = reason.split_once(": ").map_or(reason, |(_, rest)| rest);
    let first = rejections.split(", ").next().unwrap_or(rejections);
    let classes = [
        ("not alive", "not_alive"),
        ("(architecture mismatch)", "architecture"),
        ("outside zone ", "zone"),
        (" label ", "label"),
        (" tainted ", "taint"),
        ("too little cpu", "cpu"),
        ("too little memory", "memory"),
    ];
    classes
        .iter()
        .find(|(phrase, _)| first.contains(phrase))
        .map_or("other", |(_, class)| class)
}

/// The middleware that records [`REQUESTS`] and [`REQUEST_DURATION`] of every request, by
/// matched route (`unmatched` when no route matched), method and status.
pub async fn track(request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |path| path.as_str().to_owned());
    let method = method_label(request.method());
    let start = Instant::now();
    let response = next.run(request).await;
    let status = response.status().as_u16().to_string();
    metrics::histogram!(REQUEST_DURATION, "route" => route.clone(), "method" => method)
        .record(start.elapsed().as_secs_f64());
    metrics::counter!(REQUESTS, "route" => route, "method" => method, "status" => status)
        .increment(1);
    response
}

/// The methods the API knows by name; any other is `other`, so a client cannot make series.
fn method_label(method: &axum::http::Method) -> &'static str {
    match method.as_str() {
        "GET" => "GET",
        "POST" => "POST",
        "PUT" => "PUT",
        "DELETE" => "DELETE",
        "QUERY" => "QUERY",
        "APPLY" => "APPLY",
        "WATCH" => "WATCH",
        "HEAD" => "HEAD",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_classed_by_their_first_rejection() {
        let cases = [
            ("0/0 nodes can run it: the cluster has no nodes", "no_nodes"),
            ("0/2 nodes can run it: 2 are not alive", "not_alive"),
            (
                "0/2 nodes can run it: 1 is not alive, 1 has too little cpu (needs 1)",
                "not_alive",
            ),
            (
                "0/10 nodes can run it: 4 have too little cpu (needs 500m), 3 lack label disk=ssd",
                "cpu",
            ),
            (
                "0/1 nodes can run it: 1 has too little memory (needs 256Mi)",
                "memory",
            ),
            (
                "0/2 nodes can run it: 1 is not arm64 (architecture mismatch), 1 is outside zone z1",
                "architecture",
            ),
            ("0/1 nodes can run it: 1 is outside zone z1", "zone"),
            ("0/3 nodes can run it: 3 lack label disk=ssd", "label"),
            (
                "0/1 nodes can run it: 1 is tainted gpu (not accepted)",
                "taint",
            ),
            ("something new", "other"),
        ];
        for (reason, class) in cases {
            assert_eq!(reason_class(reason), class, "{reason}");
            assert!(REASONS.contains(&class));
        }
    }

    #[test]
    fn unknown_methods_make_no_new_series() {
        let custom = axum::http::Method::from_bytes(b"BREW").expect("a method");
        assert_eq!(method_label(&custom), "other");
        assert_eq!(method_label(&axum::http::Method::GET), "GET");
    }
}
