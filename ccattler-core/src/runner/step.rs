//! The runner's rules that are not loop state: the reconcile step every driver performs, the
//! check of a reconcile's changes, and the commit marker's key.
//!
//! They live here, beside [`ControllerLoop`](super::ControllerLoop), so that the tokio runner,
//! the testkit's simulation and its harness call the same code: a driver that performs an
//! [`Action::Reconcile`](super::Action::Reconcile) calls [`reconcile`] and hands what it returns
//! to [`ControllerLoop::reconciled_step`](super::ControllerLoop::reconciled_step), nothing else.

use std::collections::HashSet;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use crate::{Change, Controller, Event, FactView, Key, KeyError, ReconcileContext};

use super::ReconcileFailure;

/// Where each controller's commit marker lives: `runner/commit/{controller}` (see
/// [`ControllerLoop::set_commit_marker`](super::ControllerLoop::set_commit_marker)). Only the
/// runner writes there.
pub const COMMIT_MARKERS: &str = "runner/commit/";

/// What a commit marker holds; only its revision matters.
pub(super) const MARKER_VALUE: &str = "commit";

/// The commit marker key of the controller named `controller`.
///
/// # Errors
///
/// [`KeyError`] when the name is not a valid key path (empty, `//`, NUL).
pub fn commit_marker(controller: &str) -> Result<Key, KeyError> {
    Key::join(COMMIT_MARKERS, [controller])
}

/// What one reconcile produced: its changes (or why there are none), the [`Event`]s the
/// controller recorded and the pass it asked for, to hand to
/// [`ControllerLoop::reconciled_step`](super::ControllerLoop::reconciled_step).
#[derive(Debug)]
pub struct Reconciled {
    /// The changes, or the error or panic that replaced them.
    pub result: Result<Vec<Change>, ReconcileFailure>,
    /// The events recorded during the reconcile (written with its changes, or not at all).
    pub events: Vec<Event>,
    /// The pass the controller asked for within this time even if nothing changes
    /// ([`ReconcileContext::requeue_after`]).
    pub requeue: Option<Duration>,
}

/// The reconcile step: calls `controller` on `view` with `ctx`, turning a panic into
/// [`ReconcileFailure::Panicked`] with the panic's message (the loop restarts with backoff, the
/// runner carries on), and collects the events it recorded.
///
/// ```
/// use std::time::SystemTime;
/// use ccattler_core::runner::{ReconcileFailure, reconcile};
/// use ccattler_core::{Change, Controller, FactView, RandomIds, ReconcileContext, ReconcileError};
///
/// struct Broken;
/// impl Controller for Broken {
///     fn name(&self) -> &str { "broken" }
///     fn watches(&self) -> Vec<String> { vec![] }
///     fn write_domain(&self) -> Vec<String> { vec![] }
///     fn reconcile(&self, _: &FactView, _: &mut ReconcileContext<'_>)
///         -> Result<Vec<Change>, ReconcileError> { panic!("out of luck") }
/// }
///
/// let mut ids = RandomIds::seeded(1);
/// let mut ctx = ReconcileContext::new(SystemTime::UNIX_EPOCH, &mut ids);
/// let step = reconcile(&Broken, &FactView::new(), &mut ctx);
/// assert!(matches!(step.result, Err(ReconcileFailure::Panicked(m)) if m == "out of luck"));
/// ```
pub fn reconcile(
    controller: &dyn Controller,
    view: &FactView,
    ctx: &mut ReconcileContext<'_>,
) -> Reconciled {
    let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| controller.reconcile(view, ctx)));
    let events = ctx.take_events();
    let requeue = ctx.take_requeue();
    let result = match outcome {
        Ok(result) => result.map_err(ReconcileFailure::Error),
        Err(payload) => Err(ReconcileFailure::Panicked(panic_message(&*payload))),
    };
    Reconciled {
        result,
        events,
        requeue,
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_owned())
}

/// The runner's check of one reconcile's changes: every key inside the write `domain` (a list
/// of prefixes), and no key changed twice. Anything that stands in for the runner (a test
/// harness, a simulation) validates plans with this same rule.
///
/// ```
/// use ccattler_core::runner::check_changes;
/// use ccattler_core::{Change, Key};
///
/// let domain = vec!["output/".to_owned()];
/// let ok = [Change::put(Key::new("output/a").unwrap(), "1")];
/// assert!(check_changes(&domain, &ok).is_ok());
/// let outside = [Change::delete(Key::new("input/a").unwrap())];
/// assert!(check_changes(&domain, &outside).unwrap_err().contains("outside the write domain"));
/// ```
///
/// # Errors
///
/// What is wrong, for people: the first key outside the domain, or the first key changed twice.
pub fn check_changes(domain: &[String], changes: &[Change]) -> Result<(), String> {
    let mut seen = HashSet::with_capacity(changes.len());
    for change in changes {
        let key = change.key();
        if !domain.iter().any(|p| key.has_prefix(p)) {
            return Err(format!(
                "rejected a change to {key}, outside the write domain {domain:?}"
            ));
        }
        if !seen.insert(key.as_str()) {
            return Err(format!("rejected a reconcile that changes {key} twice"));
        }
    }
    Ok(())
}

/// An error and its sources, for people: `outer: cause: root cause`.
pub(super) fn error_chain(err: &dyn std::error::Error) -> String {
    let mut message = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}
