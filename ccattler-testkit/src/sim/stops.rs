//! [`Invariant::StopsWhenAsked`]: what each agent heard it must stop, and when, checked against
//! the simulators' truth once [`STOP_BOUND`] has passed.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use ccattler_core::schema::{self, Assignment, DesiredState, RecordKey};
use ccattler_core::{EventKind, WatchEvent};
use ccattler_runtime::agent::Listing;
use ccattler_runtime::simulator::SimulatorRuntime;

use super::actors::Actor;
use super::check::{Invariant, STOP_BOUND};
use super::world::World;

/// How long after a stale-observation window ends the agent sees and stops an instance the
/// window hid: its next pass (1 s) and the stop, with a second to spare.
const STALE_AFTER: std::time::Duration = std::time::Duration::from_secs(2);

/// What an agent heard of one instance: it must stop (`true`) or run (`false`).
pub(crate) type Heard = Vec<(String, bool)>;

/// The checks due: (when, node actor, instance, since when it was told).
#[derive(Debug, Default)]
pub(crate) struct Stops {
    due: BTreeSet<(Duration, usize, String, Duration)>,
}

impl Stops {
    /// Records what node actor `actor`'s agent just heard, at `now`.
    /// `told` is the node actor's `told_to_stop`.
    pub(crate) fn told(
        &mut self,
        actor: usize,
        told: &mut BTreeMap<String, Duration>,
        heard: Heard,
        now: Duration,
    ) {
        for (id, stop) in heard {
            if !stop {
                told.remove(&id);
            } else if !told.contains_key(&id) {
                told.insert(id.clone(), now);
                self.due.insert((now + STOP_BOUND, actor, id, now));
            }
        }
    }
}

/// What a placement event tells its agent.
pub(crate) fn heard_in_event(event: &WatchEvent) -> Heard {
    let Some(RecordKey::Placement { instance, .. }) = RecordKey::parse(&event.fact.key) else {
        return Vec::new();
    };
    let stop = match event.kind {
        EventKind::Delete => true,
        EventKind::Put => schema::decode::<Assignment>(&event.fact)
            .is_ok_and(|a| a.state == DesiredState::Stopped),
    };
    vec![(instance.to_owned(), stop)]
}

/// What a list of its placements tells an agent: each placement's state, and that whatever its
/// runtime runs that no placement names (nor is an init step of one) must stop.
pub(crate) fn heard_in_list(runtime: &SimulatorRuntime, listing: &Listing) -> Heard {
    let placed: Vec<Assignment> = listing
        .placements
        .facts
        .iter()
        .filter_map(|f| schema::decode::<Assignment>(f).ok())
        .collect();
    let mut heard: Heard = placed
        .iter()
        .map(|a| (a.instance.clone(), a.state == DesiredState::Stopped))
        .collect();
    let owned = |id: &str| {
        placed.iter().any(|a| {
            id == a.instance
                || id
                    .strip_prefix(a.instance.as_str())
                    .and_then(|rest| rest.strip_prefix(".init"))
                    .is_some_and(|step| step.parse::<usize>().is_ok())
        })
    };
    for id in runtime.ids() {
        if !owned(&id) {
            heard.push((id, true));
        }
    }
    heard
}

impl World {
    /// Judges the stops due by now: an instance its agent heard it must stop [`STOP_BOUND`]
    /// ago still running (and not because its start is still in flight) breaks
    /// [`Invariant::StopsWhenAsked`].
    pub(crate) fn check_stops(&mut self) {
        while let Some(first) = self.stops.due.first().cloned() {
            let (at, actor, id, since) = first;
            if at > self.now {
                return;
            }
            self.stops.due.remove(&(at, actor, id.clone(), since));
            let Some(Actor::Node(node)) = self.actors.get(actor) else {
                continue;
            };
            if node.machine.is_none() || node.told_to_stop.get(&id) != Some(&since) {
                continue; // the machine went down, or the agent heard otherwise since
            }
            // A stale observation hides the instance until its window ends; then the next
            // pass and the stop follow within STALE_AFTER.
            let unhidden = node.stale_until + STALE_AFTER;
            if node.stale_until > since && unhidden > self.now {
                self.stops.due.insert((unhidden, actor, id, since));
                continue;
            }
            let runs = node.runtime.state(&id).is_some_and(|s| !s.has_ended());
            if runs && !node.starting.contains_key(&id) {
                let detail = format!(
                    "{id} still runs on {} at {:?}, {STOP_BOUND:?} after its agent heard at {since:?} that it must stop",
                    node.name, self.now
                );
                self.violate((Invariant::StopsWhenAsked, detail));
                return;
            }
        }
    }
}
