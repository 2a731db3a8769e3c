//! The events the standard controllers record: read off each reconcile's changes against the
//! facts it saw, so the plans themselves stay free of bookkeeping.
//!
//! | controller | change | event |
//! |---|---|---|
//! | instances | a new `desired/instance/{id}` | `Created`: its version (and what it takes over from) |
//! | instances | a running instance asked to stop | `Stopping`: why (failed, outdated, surplus, moved, service gone) |
//! | scheduler | a new `placement/{node}/{id}` | `Placed`: on which node |
//! | scheduler | a new or changed `status/unschedulable/{id}` | `Unplaced`: the reason |

use std::collections::HashMap;

use ccattler_core::event::reasons;
use ccattler_core::schema::{
    self, Assignment, DesiredInstance, DesiredState, EffectiveService, RecordKey, RestartPolicy,
    Unschedulable,
};
use ccattler_core::{Change, Event, Fact, FactView, Revision};

use super::cluster::{Instance, Standing};

/// The value a change puts, decoded as `T` (`None` for a delete or another record).
fn put<T: serde::de::DeserializeOwned>(change: &Change) -> Option<T> {
    match change {
        Change::Put { key, value } => {
            schema::decode(&Fact::created(key.clone(), value.clone(), Revision::ZERO)).ok()
        }
        Change::Delete { .. } => None,
    }
}

/// The scheduler's events for `changes`, made on `facts`.
pub(crate) fn placement_events(facts: &FactView, changes: &[Change]) -> Vec<Event> {
    let mut events = Vec::new();
    for change in changes {
        let key = change.key();
        match RecordKey::parse(key) {
            Some(RecordKey::Placement { node, instance }) if !facts.contains(key.as_str()) => {
                if let Some(assignment) = put::<Assignment>(change)
                    && assignment.state == DesiredState::Running
                {
                    events.push(
                        Event::new(instance, reasons::PLACED, format!("placed on {node}"))
                            .of_service(assignment.service),
                    );
                }
            }
            Some(RecordKey::Unschedulable(instance)) => {
                let held = facts
                    .get(key.as_str())
                    .and_then(|f| schema::decode::<Unschedulable>(f).ok());
                if let Some(record) = put::<Unschedulable>(change)
                    && held.as_ref().is_none_or(|h| h.reason != record.reason)
                {
                    events.push(
                        Event::new(instance, reasons::UNPLACED, record.reason)
                            .of_service(record.service),
                    );
                }
            }
            _ => {}
        }
    }
    events
}

/// The instance controller's events for the `changes` it planned for `service`: O(instances +
/// changes), as a pass may create or stop thousands of one service's instances at once.
pub(crate) fn instance_events(
    service: &str,
    effective: Option<&EffectiveService>,
    instances: &[&Instance],
    restart: RestartPolicy,
    changes: &[Change],
) -> Vec<Event> {
    let mut events = Vec::new();
    let by_id: HashMap<&str, &Instance> = instances.iter().map(|i| (i.id.as_str(), *i)).collect();
    // The instance that takes over from each one (the first, should there be several).
    let mut successors: HashMap<&str, &Instance> = HashMap::new();
    for instance in instances {
        if let Some(old) = instance.desired.replaces.as_deref() {
            successors.entry(old).or_insert(instance);
        }
    }
    for change in changes {
        let Some(RecordKey::Instance(id)) = RecordKey::parse(change.key()) else {
            continue;
        };
        let Some(wanted) = put::<DesiredInstance>(change) else {
            continue;
        };
        let held = by_id.get(id);
        let message = match (held, wanted.state) {
            (None, DesiredState::Running) => created(&wanted),
            (Some(i), DesiredState::Stopped) if i.desired.state == DesiredState::Running => {
                stopping(i, effective, successors.get(id).copied(), restart)
            }
            _ => continue,
        };
        let reason = match wanted.state {
            DesiredState::Running => reasons::CREATED,
            DesiredState::Stopped => reasons::STOPPING,
        };
        events.push(Event::new(id, reason, message).of_service(service));
    }
    events
}

fn created(wanted: &DesiredInstance) -> String {
    let mut message = format!("created at version {}", wanted.version);
    if let Some(ordinal) = wanted.ordinal {
        message.push_str(&format!(" as ordinal {ordinal}"));
    }
    if let Some(old) = &wanted.replaces {
        message.push_str(&format!(", to take over from {old} (rebalancing)"));
    }
    message
}

fn stopping(
    instance: &Instance,
    effective: Option<&EffectiveService>,
    successor: Option<&Instance>,
    restart: RestartPolicy,
) -> String {
    let Some(effective) = effective else {
        return "stopping: its service was removed".to_owned();
    };
    if let Some(new) = successor {
        return format!("stopping: {} took over from it (rebalancing)", new.id);
    }
    match instance.standing(restart) {
        Standing::Replaceable => {
            let state = instance
                .report()
                .map_or_else(|| "failed".to_owned(), |o| format!("{:?}", o.state));
            format!("stopping: it ended ({state}) and its restart policy replaces it")
        }
        Standing::Lost => "stopping: its node is gone".to_owned(),
        _ if instance.desired.version != effective.version => format!(
            "stopping: rollout from version {} to {}",
            instance.desired.version, effective.version
        ),
        _ => format!(
            "stopping: surplus, the service wants {} instances",
            effective.instances
        ),
    }
}
