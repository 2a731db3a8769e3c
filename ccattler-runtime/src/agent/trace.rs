//! The agent's spans: one per runtime action that changes what runs (start, stop, file rewrite,
//! removal), named after the action and carrying the node, the instance and its service, so a
//! change can be followed from the apply, through each controller's reconcile and commit (the
//! runner's `reconcile` and `commit` spans, with the store revision), to the node that acted.
//!
//! `RUST_LOG=ccattler_runtime::agent=info` shows every start and stop with its outcome; probes
//! and observations are at `debug`.

use ccattler_core::Runtime;
use tracing::{Instrument, Level, Span};

use super::action::Action;
use super::cache::Desired;
use super::perform::{self, Outcome};

/// The span of a runtime action: `info` for what changes what runs, `debug` for the routine
/// ones (observe, probe).
pub(super) fn span(node: &str, action: &Action, desired: &Desired) -> Span {
    let service = |id: &str| {
        super::spec::owner(id, desired)
            .and_then(|owner| desired.placements.get(owner))
            .map(|a| a.service.clone())
            .unwrap_or_default()
    };
    match action {
        Action::EnsureRunning { spec } => tracing::info_span!(
            "ensure_running",
            node = %node,
            instance = %spec.id,
            service = %spec.service,
            image = %spec.image
        ),
        Action::EnsureStopped { id, reason, .. } => tracing::info_span!(
            "ensure_stopped",
            node = %node,
            instance = %id,
            service = %service(id),
            reason = reason.name()
        ),
        Action::UpdateFiles { id, files } => tracing::info_span!(
            "update_files",
            node = %node,
            instance = %id,
            service = %service(id),
            files = files.len()
        ),
        Action::Remove { id, .. } => tracing::info_span!(
            "remove",
            node = %node,
            instance = %id,
            service = %service(id)
        ),
        Action::Probe { id, kind, .. } => tracing::debug_span!(
            "probe",
            node = %node,
            instance = %id,
            kind = kind.name()
        ),
        _ => tracing::debug_span!("runtime", node = %node, action = %action),
    }
}

/// Performs a runtime action inside its [`span`], logging its outcome there: `info` for what
/// changes what runs, `warn` when it failed, `debug` for the rest.
pub(super) async fn traced_runtime_action<R: Runtime>(
    runtime: &R,
    action: Action,
    span: Span,
) -> Option<Outcome> {
    let routine = matches!(action, Action::Observe { .. } | Action::Probe { .. });
    async move {
        let outcome = perform::runtime_action(runtime, action).await;
        match outcome.as_ref().and_then(Outcome::error) {
            Some(error) => tracing::event!(Level::WARN, %error, "failed"),
            None if routine => tracing::event!(Level::DEBUG, "done"),
            None => tracing::event!(Level::INFO, "done"),
        }
        outcome
    }
    .instrument(span)
    .await
}
