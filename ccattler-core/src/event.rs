//! Events: what a controller or a node's agent did to an object, and why. The history
//! `cca events` shows ("placed web-3 on n2", "failed: exit code 1", "restarted").
//!
//! A controller records events with [`ReconcileContext::record`](crate::ReconcileContext::record);
//! the runner writes them in the same transaction as the changes of that reconcile, so an event
//! is in the store exactly when the change it explains is. A reconcile that changes nothing
//! writes no event. A node's agent writes the events of its instances with its reports.
//!
//! # Bounded in count and age
//!
//! Each writer keeps a ring of [`EVENT_RING`] slots per object: the key of an event is
//! `event/{object}/{writer}/{slot}` ([`keys::event`]), and the
//! seventeenth event of an object overwrites its first. The runner's events are attached to a
//! lease that expires after the runner's events max age, so the rings of objects long gone
//! disappear; an agent's are attached to its node's lease and deleted with the instance's
//! report when the instance leaves the node.
//!
//! # Caveats
//!
//! Events are explanations, not state: a writer that restarts starts its rings at slot 0 again
//! (overwriting whichever events were there), and readers order events by the store revision
//! at which they were written.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::schema::keys;
use crate::{Key, KeyError};

/// How many events each writer keeps per object.
pub const EVENT_RING: u32 = 16;

/// The standard reasons, one word each (custom controllers may use their own).
pub mod reasons {
    /// An instance was created (by the instance controller).
    pub const CREATED: &str = "Created";
    /// An instance was assigned a node.
    pub const PLACED: &str = "Placed";
    /// An instance could not be placed; the message says why.
    pub const UNPLACED: &str = "Unplaced";
    /// An instance was asked to stop; the message says why.
    pub const STOPPING: &str = "Stopping";
    /// A service's instance count was changed by the autoscaler; the message says why.
    pub const SCALED: &str = "Scaled";
    /// A rollout was rolled back to the last stable version; the message says why.
    pub const ROLLED_BACK: &str = "RolledBack";
    /// A version began rolling out (applied, resumed, or an undo); the message says which.
    pub const ROLLOUT_STARTED: &str = "RolloutStarted";
    /// Every instance runs the version in force and stayed ready for the minimum time.
    pub const ROLLOUT_COMPLETE: &str = "RolloutComplete";
    /// A rollout was paused by request.
    pub const ROLLOUT_PAUSED: &str = "RolloutPaused";
    /// A rollout failed and there was nothing to roll back to, or a request could not be
    /// honoured; the message says why.
    pub const ROLLOUT_FAILED: &str = "RolloutFailed";
    /// An instance's process started.
    pub const STARTED: &str = "Started";
    /// An instance became ready (its readiness probe passes, or it has none).
    pub const READY: &str = "Ready";
    /// An instance stopped being ready.
    pub const NOT_READY: &str = "NotReady";
    /// An instance ended in failure or could not start; the message has the exit code or the
    /// reason.
    pub const FAILED: &str = "Failed";
    /// An instance ended with exit code 0.
    pub const EXITED: &str = "Exited";
    /// An instance was started again after it ended (restart policy, liveness, a changed
    /// secret).
    pub const RESTARTED: &str = "Restarted";
    /// An instance's init step failed (the message gives the step, how it failed and when it is
    /// tried again).
    pub const INIT_FAILED: &str = "InitFailed";
    /// An instance stopped.
    pub const STOPPED: &str = "Stopped";
    /// An instance waits for something before it can start (a spec, a secret); the message
    /// says what.
    pub const WAITING: &str = "Waiting";
}

/// One event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// What it is about: an instance id, or a service name.
    pub object: String,
    /// The service the object belongs to (or is), so that a service's history includes its
    /// instances'.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    /// One word ([`reasons`]).
    pub reason: String,
    /// What happened and why, for people.
    pub message: String,
    /// Who wrote it: a controller's name, or `node.{node}` for a node's agent. Set by the
    /// writer.
    #[serde(default)]
    pub source: String,
    /// When, in milliseconds since the Unix epoch (the reconcile's time for a controller).
    #[serde(default)]
    pub at_ms: u64,
}

impl Event {
    /// An event about `object`: `reason` ([`reasons`]) and a message.
    pub fn new(object: impl Into<String>, reason: &str, message: impl Into<String>) -> Self {
        Event {
            object: object.into(),
            service: None,
            reason: reason.to_owned(),
            message: message.into(),
            source: String::new(),
            at_ms: 0,
        }
    }

    /// The same event, naming the service its object belongs to.
    #[must_use]
    pub fn of_service(mut self, service: impl Into<String>) -> Self {
        self.service = Some(service.into());
        self
    }

    /// The same event, stamped with `at` (a time before the epoch counts as the epoch).
    #[must_use]
    pub fn at(mut self, at: SystemTime) -> Self {
        self.at_ms = at
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        self
    }
}

/// The next slot of each object's ring, for one writer: hands out the key of an object's next
/// event.
#[derive(Clone, Debug, Default)]
pub struct EventRing {
    writer: String,
    next: BTreeMap<String, u32>,
}

impl EventRing {
    /// The rings of `writer` (a controller's name, or `node.{node}`), all starting at slot 0.
    pub fn new(writer: impl Into<String>) -> Self {
        EventRing {
            writer: writer.into(),
            next: BTreeMap::new(),
        }
    }

    /// The writer's name, as events' [`source`](Event::source).
    pub fn writer(&self) -> &str {
        &self.writer
    }

    /// The key of `object`'s next event, advancing its ring.
    ///
    /// # Errors
    ///
    /// [`KeyError`] when `object` or the writer is not a valid key path.
    pub fn next_key(&mut self, object: &str) -> Result<Key, KeyError> {
        let slot = self.next.entry(object.to_owned()).or_insert(0);
        let key = keys::event(object, &self.writer, *slot)?;
        *slot = (*slot + 1) % EVENT_RING;
        Ok(key)
    }

    /// Every slot key of `object`'s ring (to delete them with the object), and forgets it.
    ///
    /// # Errors
    ///
    /// [`KeyError`] as [`next_key`](Self::next_key).
    pub fn forget(&mut self, object: &str) -> Result<Vec<Key>, KeyError> {
        self.next.remove(object);
        (0..EVENT_RING)
            .map(|slot| keys::event(object, &self.writer, slot))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ring_wraps_after_its_slots_and_keys_parse_back() {
        let mut ring = EventRing::new("scheduler");
        let first = ring.next_key("web-1").unwrap();
        assert_eq!(first.as_str(), "event/web-1/scheduler/00");
        for _ in 1..EVENT_RING {
            ring.next_key("web-1").unwrap();
        }
        assert_eq!(
            ring.next_key("web-1").unwrap(),
            first,
            "the 17th overwrites the 1st"
        );
        assert_eq!(
            crate::schema::RecordKey::parse(&first),
            Some(crate::schema::RecordKey::Event {
                object: "web-1",
                writer: "scheduler",
                slot: 0
            })
        );
        let team = ring.next_key("team/web").unwrap();
        assert_eq!(
            crate::schema::RecordKey::parse(&team).and_then(|r| r.event_object()),
            Some("team/web")
        );
    }
}
