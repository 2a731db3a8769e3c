//! The Prometheus exporter of `cca server` and `cca agent`: one process-wide recorder of the
//! `metrics` facade (`metrics-exporter-prometheus`), rendered by their `GET /metrics` routes.
//!
//! The names, types and labels of every metric are in one table,
//! [`ccattler_core::telemetry`]. The server's route is [`super::api::metrics`] (admin token);
//! the agent's is on its local port ([`super::local`]).
//!
//! # Caveats
//!
//! The recorder is global: it is installed by the first [`install`] (both commands call it at
//! start; the server's route calls it too, so an embedding that never did still gets metrics
//! from its first scrape on). Metrics recorded before it is installed are lost. In a process
//! whose `metrics` recorder is another one, [`install`] fails and says so.

use std::sync::OnceLock;
use std::time::Duration;

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// The content type of Prometheus' text exposition format.
pub const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The buckets of every histogram, in seconds: 0.5 ms to 10 s.
pub const BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// How often the recorder's histograms are drained between scrapes.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// Why the exporter cannot serve.
#[derive(Clone, Debug, thiserror::Error)]
pub enum MetricsError {
    /// Another `metrics` recorder is installed in this process.
    #[error(
        "cannot install the Prometheus recorder: {0}; a process has one `metrics` recorder, so \
         install none of your own before `cca::metrics::install`"
    )]
    Install(String),
}

static RECORDER: OnceLock<Result<PrometheusHandle, MetricsError>> = OnceLock::new();

/// Installs the process-wide Prometheus recorder (once; later calls return the same handle).
///
/// # Errors
///
/// [`MetricsError::Install`] when the process has another `metrics` recorder.
pub fn install() -> Result<&'static PrometheusHandle, MetricsError> {
    RECORDER
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets(&BUCKETS)
                .map_err(|err| MetricsError::Install(err.to_string()))?;
            let recorder = builder.build_recorder();
            let handle = recorder.handle();
            metrics::set_global_recorder(recorder)
                .map_err(|err| MetricsError::Install(err.to_string()))?;
            Ok(handle)
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// Drains the recorder's histograms every few seconds, so memory stays bounded however
/// rarely Prometheus scrapes. Call it once, inside the tokio runtime.
pub fn spawn_upkeep(handle: &'static PrometheusHandle) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut every = tokio::time::interval(UPKEEP_EVERY);
        loop {
            every.tick().await;
            handle.run_upkeep();
        }
    })
}

/// Everything recorded so far, in the text format, as a `200` answer; a `500` naming the
/// problem when the recorder cannot be installed.
pub fn render() -> Response {
    match install() {
        Ok(handle) => ([(header::CONTENT_TYPE, TEXT_FORMAT)], handle.render()).into_response(),
        Err(err) => (StatusCode::INTERNAL_SERVER_ERROR, err.to_string()).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_recorder_installs_once_and_renders_in_text_format() {
        let first = install().expect("installs");
        let again = install().expect("the same");
        assert!(std::ptr::eq(first, again));
        metrics::counter!("ccattler_test_renders_total").increment(2);
        metrics::histogram!("ccattler_test_duration_seconds").record(0.003);
        let response = render();
        assert_eq!(response.status(), StatusCode::OK);
        let text = first.render();
        assert!(text.contains("ccattler_test_renders_total 2"), "{text}");
        // A histogram, not a summary: it has buckets.
        assert!(
            text.contains("ccattler_test_duration_seconds_bucket{le=\"0.005\"} 1"),
            "{text}"
        );
    }
}
