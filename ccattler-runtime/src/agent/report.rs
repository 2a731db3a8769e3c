//! What the agent reports: one `observed/instance/{node}/{id}` per placed instance, built from
//! the runtime's last observation and the agent's own tracking, written only when it changed.

use std::borrow::Cow;

use ccattler_core::schema::{self, DesiredState, Health, InstanceObservation, ObservedState};
use ccattler_core::{Event, InstanceState, Key, LeaseId, Value};

use super::events::transitions;
use super::machine::AgentLoop;
use super::probe::ProbeKind;
use super::scope::Scope;

/// A report to write.
#[derive(Debug, Default)]
pub(super) struct Changes {
    /// The observations that differ from what the store holds.
    pub puts: Vec<(Key, Value)>,
    /// The keys of observations of instances no longer placed here.
    pub deletes: Vec<Key>,
    /// The events the changes of state make, by instance id (stamped; keys are the loop's to
    /// give).
    pub events: Vec<(String, Event)>,
    /// The instances no longer placed here, whose event rings go.
    pub gone: Vec<String>,
    /// For bookkeeping once the report landed: each changed id with its new observation
    /// (`None`: deleted).
    pub applied: Vec<(String, Option<InstanceObservation>)>,
}

impl AgentLoop {
    /// What to write so that the store holds the observations of now, looking at the instances
    /// of `scope` only.
    pub(super) fn report_changes(&self, lease: LeaseId, scope: &Scope) -> Changes {
        let node = self.config.node.clone();
        let at = self.epoch + self.now;
        let mut changes = Changes::default();
        let placements = &self.desired.placements;
        let placed = scope.entries(placements).map(|(id, _)| id);
        // Compared as values, not as their encoding, and as a draft that borrows: a report
        // encodes and allocates only for what changed.
        for id in placed {
            let draft = self.observation(id, lease);
            let before = self.reported.get(id);
            if before.is_some_and(|b| b.as_ref().is_some_and(|b| draft.matches(b))) {
                continue;
            }
            let Ok(key) = schema::keys::observed_instance(&node, id) else {
                continue;
            };
            let observation = draft.into_owned();
            if self.config.events {
                let before = before.and_then(Option::as_ref);
                for mut event in transitions(id, before, &observation) {
                    event = event.at(at);
                    event.source = self.event_ring.writer().to_owned();
                    changes.events.push((id.clone(), event));
                }
            }
            changes.puts.push((key, schema::encode(&observation)));
            changes.applied.push((id.clone(), Some(observation)));
        }
        let unplaced = |id: &&String| !placements.contains_key(*id);
        let gone: Vec<String> = scope
            .entries(&self.reported)
            .map(|(id, _)| id)
            .filter(unplaced)
            .cloned()
            .collect();
        for id in gone {
            if let Ok(key) = schema::keys::observed_instance(&node, &id) {
                changes.deletes.push(key);
                changes.gone.push(id.clone());
                changes.applied.push((id, None));
            }
        }
        changes
    }

    /// The observation of one placed instance now.
    fn observation(&self, id: &str, lease: LeaseId) -> Draft<'_> {
        let assignment = &self.desired.placements[id];
        let track = self.tracks.get(id);
        // What the runtime holds of an id placed anew is its earlier incarnation's.
        let sample = self
            .observed
            .get(id)
            .filter(|_| !track.is_some_and(|t| t.anew));
        let seen = sample.map(|s| &s.instance);
        let spec = self.desired.spec_of(id);
        let init_steps = spec.map_or(0, |s| u32::try_from(s.init.len()).unwrap_or(u32::MAX));
        let init_failure = track.and_then(|t| t.init_failure.as_ref());
        let mut report = Draft {
            node: &self.config.node,
            service: &assignment.service,
            image: spec.map_or("", |s| s.image.as_str()),
            // Its main process starts only once every step passed (and an agent that restarted
            // adopts it without having seen them).
            init_done: if seen.is_some() {
                init_steps
            } else {
                track.map_or(0, |t| t.init_done)
            },
            init_steps,
            init_failures: init_failure.map_or(0, |f| f.failures),
            init_output: init_failure.and_then(|f| f.output.as_deref()),
            restarts: seen.map_or(0, |o| o.restarts),
            address: seen.and_then(|o| o.address.as_deref()),
            lease: Some(lease.0),
            stop_asked: assignment.state == DesiredState::Stopped,
            state: ObservedState::default(),
            health: Health::default(),
            ready: false,
            exit_code: None,
            reason: None,
        };
        match seen.map(|o| &o.state) {
            // Asked to stop, and the runtime has nothing of it (it never started here, or the
            // node came back empty, or a stop of it succeeded): it is as stopped as it gets.
            None if assignment.state == DesiredState::Stopped
                && !track.is_some_and(|t| t.unconfirmed_stop()) =>
            {
                report.state = ObservedState::Stopped;
            }
            // Started here and not stopped yet, though the runtime shows nothing of it (an
            // observation that lags): still what it was last reported as, until the stop the
            // pass asked for succeeds.
            None if assignment.state == DesiredState::Stopped => {
                report.state = self
                    .reported
                    .get(id)
                    .and_then(Option::as_ref)
                    .map(|r| r.state)
                    .filter(|state| state.is_active())
                    .unwrap_or(ObservedState::Running);
            }
            None => {
                report.state = if track.and_then(|t| t.failure.as_ref()).is_some() {
                    ObservedState::Failed
                } else if track.is_some_and(|t| {
                    t.init_done > 0 || t.started.is_some() || t.init_failure.is_some()
                }) {
                    ObservedState::Starting
                } else {
                    ObservedState::Pending
                };
            }
            Some(InstanceState::Starting) => report.state = ObservedState::Starting,
            Some(InstanceState::Pulling { image, done, total }) => {
                report.state = ObservedState::Pulling;
                report.reason = Some(format!("pulling {image}: {done} of {total} bytes").into());
            }
            Some(InstanceState::Running) => report.state = ObservedState::Running,
            Some(InstanceState::Stopped) => report.state = ObservedState::Stopped,
            Some(InstanceState::Exited { code }) => {
                report.state = if *code == 0 {
                    ObservedState::Exited
                } else {
                    ObservedState::Failed
                };
                report.exit_code = Some(*code);
            }
            Some(InstanceState::Failed { reason }) => {
                report.state = ObservedState::Failed;
                report.reason = Some(reason.as_str().into());
            }
            Some(_) => report.state = ObservedState::Pending,
        }
        if report.reason.is_none() {
            report.reason = track
                .and_then(|t| {
                    let init = t.init_failure.as_ref().map(|f| f.reason.as_str());
                    t.failure.as_deref().or(init).or(t.waiting.as_deref())
                })
                .map(Cow::Borrowed);
        }
        if report.state == ObservedState::Running {
            // A probe the spec declares counts from the moment the agent knows the instance
            // runs; until then (a start whose answer is still on its way) it has not passed.
            let probe = |kind| {
                let tracked = track.and_then(|t| t.probe(kind)).map(|p| p.passing);
                let declared = spec.is_some_and(|s| kind.of(s).is_some());
                match tracked {
                    Some(passing) => Some(passing),
                    None if declared => Some(None),
                    None => None,
                }
            };
            report.health = match probe(ProbeKind::Liveness) {
                Some(Some(false)) => Health::Unhealthy,
                Some(Some(true)) | None => Health::Healthy,
                Some(None) => Health::Unknown,
            };
            let passed = |kind| probe(kind).is_none_or(|p| p == Some(true));
            report.ready = passed(ProbeKind::Startup) && passed(ProbeKind::Readiness);
            let probe = |kind| track.and_then(|t| t.probe(kind));
            if let Some(reason) = probe(ProbeKind::Readiness).and_then(|p| p.last_error.as_ref()) {
                report.reason = Some(format!("readiness: {reason}").into());
            }
        }
        report
    }
}

/// An instance's observation as [`AgentLoop::observation`] derives it, borrowing what it can:
/// most observations equal the one last reported, and comparing a draft allocates nothing.
#[derive(Debug)]
struct Draft<'a> {
    node: &'a str,
    service: &'a str,
    state: ObservedState,
    address: Option<&'a str>,
    health: Health,
    ready: bool,
    image: &'a str,
    init_done: u32,
    init_steps: u32,
    init_failures: u32,
    init_output: Option<&'a str>,
    restarts: u32,
    exit_code: Option<i32>,
    reason: Option<Cow<'a, str>>,
    lease: Option<i64>,
    stop_asked: bool,
}

impl Draft<'_> {
    /// Whether `reported` says the same, field for field.
    fn matches(&self, reported: &InstanceObservation) -> bool {
        let InstanceObservation {
            node,
            service,
            state,
            address,
            health,
            ready,
            image,
            init_done,
            init_steps,
            init_failures,
            init_output,
            restarts,
            exit_code,
            reason,
            lease,
            stop_asked,
        } = reported;
        self.node == node
            && self.service == service
            && self.state == *state
            && self.address == address.as_deref()
            && self.health == *health
            && self.ready == *ready
            && self.image == image
            && self.init_done == *init_done
            && self.init_steps == *init_steps
            && self.init_failures == *init_failures
            && self.init_output == init_output.as_deref()
            && self.restarts == *restarts
            && self.exit_code == *exit_code
            && self.reason.as_deref() == reason.as_deref()
            && self.lease == *lease
            && self.stop_asked == *stop_asked
    }

    /// The observation to write.
    fn into_owned(self) -> InstanceObservation {
        InstanceObservation {
            node: self.node.to_owned(),
            service: self.service.to_owned(),
            state: self.state,
            address: self.address.map(str::to_owned),
            health: self.health,
            ready: self.ready,
            image: self.image.to_owned(),
            init_done: self.init_done,
            init_steps: self.init_steps,
            init_failures: self.init_failures,
            init_output: self.init_output.map(str::to_owned),
            restarts: self.restarts,
            exit_code: self.exit_code,
            reason: self.reason.map(Cow::into_owned),
            lease: self.lease,
            stop_asked: self.stop_asked,
        }
    }
}
