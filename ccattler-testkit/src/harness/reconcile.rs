//! One reconcile as the runner makes it, without a store: the one place the harness and the
//! scenario world turn a controller and some facts into the changes a runner would commit.

use std::time::SystemTime;

use ccattler_core::runner::check_changes;
use ccattler_core::{Change, Controller, FactView, IdSource, ReconcileContext};

use super::error::HarnessError;

/// Reconciles `controller` once on `facts` at `now`, drawing ids from `ids`, as the runner does:
///
/// - the controller sees a view of only the facts under the prefixes it watches or writes, at
///   the revision of `facts`;
/// - its changes are validated by the runner's own rule,
///   [`check_changes`] (every key inside the write domain, one change per key);
/// - changes that would change nothing ([`FactView::is_noop`]) are dropped.
///
/// What is left is returned in the controller's order, not applied. The runner's commit marker
/// (`runner/commit/{name}`) is not part of the view.
pub(crate) fn reconcile(
    controller: &dyn Controller,
    facts: &FactView,
    now: SystemTime,
    ids: &mut dyn IdSource,
) -> Result<Vec<Change>, HarnessError> {
    let domain = controller.write_domain();
    let prefixes: Vec<String> = controller
        .watches()
        .into_iter()
        .chain(domain.iter().cloned())
        .collect();
    let view = FactView::from_facts(
        facts.revision(),
        facts
            .iter()
            .filter(|f| prefixes.iter().any(|p| f.key.has_prefix(p)))
            .cloned(),
    );
    let mut ctx = ReconcileContext::new(now, ids);
    let name = controller.name();
    let changes =
        controller
            .reconcile(&view, &mut ctx)
            .map_err(|error| HarnessError::Reconcile {
                controller: name.to_owned(),
                error,
            })?;
    check_changes(&domain, &changes).map_err(|reason| HarnessError::Rejected {
        controller: name.to_owned(),
        reason,
    })?;
    Ok(changes.into_iter().filter(|c| !view.is_noop(c)).collect())
}
