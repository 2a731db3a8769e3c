//! The events an agent records about its instances: read off the change between the report the
//! store holds and the one about to be written (see [`ccattler_core::event`]).
//!
//! | change of the report | event |
//! |---|---|
//! | restarts went up | `Restarted` (with the count) |
//! | init failures went up | `InitFailed` (the step, how, and when it is tried again) |
//! | became running | `Started` |
//! | became ready / stopped being ready | `Ready` / `NotReady` (with the readiness reason) |
//! | became failed | `Failed` (with the exit code or the reason) |
//! | became exited / stopped | `Exited` / `Stopped` |
//! | pending, with a new reason | `Waiting` (what it waits for: a missing secret); not for the moment its spec is being fetched |

use ccattler_core::Event;
use ccattler_core::event::reasons;
use ccattler_core::schema::{InstanceObservation, ObservedState};

use super::plan::SPEC_WAIT;

/// The events for instance `id` going from `before` (what the store holds, if anything) to
/// `after`.
pub(super) fn transitions(
    id: &str,
    before: Option<&InstanceObservation>,
    after: &InstanceObservation,
) -> Vec<Event> {
    let event = |reason: &str, message: String| {
        Event::new(id, reason, message).of_service(after.service.clone())
    };
    let was = |state: ObservedState| before.is_some_and(|b| b.state == state);
    let mut events = Vec::new();
    let restarts_before = before.map_or(0, |b| b.restarts);
    if after.restarts > restarts_before {
        events.push(event(
            reasons::RESTARTED,
            format!("restarted on {} (restart {})", after.node, after.restarts),
        ));
    } else if after.state == ObservedState::Running && !was(ObservedState::Running) {
        events.push(event(
            reasons::STARTED,
            format!("started on {}", after.node),
        ));
    }
    if after.init_failures > before.map_or(0, |b| b.init_failures) {
        let why = after
            .reason
            .clone()
            .unwrap_or_else(|| "init step failed".into());
        events.push(event(reasons::INIT_FAILED, why));
    }
    let ready_before = before.is_some_and(|b| b.ready);
    if after.ready && !ready_before {
        events.push(event(reasons::READY, "ready".to_owned()));
    } else if !after.ready && ready_before && after.state == ObservedState::Running {
        let why = after
            .reason
            .clone()
            .unwrap_or_else(|| "readiness failed".into());
        events.push(event(reasons::NOT_READY, format!("not ready: {why}")));
    }
    if after.state != before.map_or(ObservedState::Pending, |b| b.state) || before.is_none() {
        let because = after.reason.as_deref().map(|r| format!(": {r}"));
        match after.state {
            ObservedState::Failed => {
                let what = match after.exit_code {
                    Some(code) => format!("failed with exit code {code}"),
                    None => "failed".to_owned(),
                };
                events.push(event(
                    reasons::FAILED,
                    format!("{what}{}", because.unwrap_or_default()),
                ));
            }
            ObservedState::Exited => {
                events.push(event(reasons::EXITED, "exited with code 0".to_owned()));
            }
            ObservedState::Stopped => {
                events.push(event(
                    reasons::STOPPED,
                    format!("stopped on {}", after.node),
                ));
            }
            _ => {}
        }
    }
    if after.state == ObservedState::Pending
        && let Some(reason) = &after.reason
        && !reason.starts_with(SPEC_WAIT)
        && before.and_then(|b| b.reason.as_ref()) != Some(reason)
    {
        events.push(event(reasons::WAITING, reason.clone()));
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(state: ObservedState, ready: bool, restarts: u32) -> InstanceObservation {
        InstanceObservation {
            node: "n1".into(),
            service: "web".into(),
            state,
            ready,
            restarts,
            ..InstanceObservation::default()
        }
    }

    fn reasons_of(events: &[Event]) -> Vec<&str> {
        events.iter().map(|e| e.reason.as_str()).collect()
    }

    #[test]
    fn a_start_a_crash_and_a_restart_read_as_events() {
        let pending = seen(ObservedState::Pending, false, 0);
        let running = seen(ObservedState::Running, true, 0);
        assert!(transitions("w", None, &pending).is_empty());
        assert_eq!(
            reasons_of(&transitions("w", Some(&pending), &running)),
            ["Started", "Ready"]
        );
        assert!(
            transitions("w", Some(&running), &running).is_empty(),
            "no change, no event"
        );
        let mut failed = seen(ObservedState::Failed, false, 0);
        failed.exit_code = Some(3);
        let events = transitions("w", Some(&running), &failed);
        assert_eq!(reasons_of(&events), ["Failed"]);
        assert_eq!(events[0].message, "failed with exit code 3");
        assert_eq!(events[0].service.as_deref(), Some("web"));
        let again = seen(ObservedState::Running, true, 1);
        assert_eq!(
            reasons_of(&transitions("w", Some(&failed), &again)),
            ["Restarted", "Ready"]
        );
    }

    #[test]
    fn a_missing_secret_is_an_event_once() {
        let mut waiting = seen(ObservedState::Pending, false, 0);
        waiting.reason = Some("missing secret db-pass: ...".into());
        let events = transitions("w", None, &waiting);
        assert_eq!(reasons_of(&events), ["Waiting"]);
        assert!(transitions("w", Some(&waiting), &waiting).is_empty());
    }
}
