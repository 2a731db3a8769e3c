//! What the runner logs of a commit that landed: one `debug` event per change inside the
//! `commit` span, with the key and the service and instance it names, so that a change can be
//! followed from the apply (its store revision), through each controller's `reconcile` span
//! (which names the revision of its view) and `commit` (the revision it wrote at), to the
//! agent's span for the instance.

use crate::schema::RecordKey;
use crate::{Key, Op, Revision};

/// Logs the changes of a landed commit (not the marker nor the events).
pub(super) fn committed(ops: &[(bool, Key)], revision: Revision) {
    if !tracing::enabled!(tracing::Level::DEBUG) {
        return;
    }
    for (put, key) in ops {
        let record = RecordKey::parse(key);
        let instance = record.and_then(|r| r.instance()).unwrap_or_default();
        let service = record.and_then(service_of).unwrap_or_default();
        tracing::debug!(
            %revision,
            key = %key,
            service,
            instance,
            "{}",
            if *put { "put" } else { "delete" }
        );
    }
}

/// The keys a commit changes, with whether each is a put: what [`committed`] logs once it
/// lands. Empty unless `debug` is on.
pub(super) fn changes(ops: &[Op], own: impl Fn(&Key) -> bool) -> Vec<(bool, Key)> {
    if !tracing::enabled!(tracing::Level::DEBUG) {
        return Vec::new();
    }
    ops.iter()
        .filter(|op| !own(op.key()))
        .map(|op| (matches!(op, Op::Put { .. }), op.key().clone()))
        .collect()
}

/// The service a standard key names in the key itself.
fn service_of<'k>(record: RecordKey<'k>) -> Option<&'k str> {
    match record {
        RecordKey::Service(s)
        | RecordKey::Effective(s)
        | RecordKey::Endpoints(s)
        | RecordKey::ServiceStatus(s)
        | RecordKey::Rebalance(s)
        | RecordKey::ScaleIntent(s) => Some(s),
        _ => None,
    }
}
