//! One pass of the agent, decided: from what the runtime reports and what is placed here, the
//! starts, stops, removals and probes to perform. Pure: the results come back through
//! [`AgentLoop::done`] and [`AgentLoop::probed`].

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use ccattler_core::runner::Backoff;
use ccattler_core::schema::{DesiredState, ServiceSpec, format_duration};
use ccattler_core::{InstanceState, ObservedInstance};

use super::action::{Action, StopReason};
use super::machine::{AgentLoop, RuntimeOp};
use super::probe::{ProbeKind, ProbeState};
use super::scope::Scope;
use super::spec::{
    MissingSecret, held_init_step, init_id, init_spec, instance_data, instance_spec, owner,
    restarts,
};
use super::work::Observing;

/// How the reason of an instance whose spec is not fetched yet begins: a wait of a moment,
/// reported but not worth an event.
pub(super) const SPEC_WAIT: &str = "waiting for the spec";

/// How many of its last lines a failed init step's output is reported with.
const INIT_OUTPUT_LINES: usize = 10;

/// What the agent tracks about one placed instance between passes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Track {
    /// Init steps completed.
    pub init_done: u32,
    /// Failed start attempts in a row.
    pub attempts: u32,
    /// No new start attempt before this.
    pub retry_at: Option<Duration>,
    /// Why the last start failed (reported `failed`).
    pub failure: Option<String>,
    /// Why it cannot start yet, when that is only a matter of time (reported `pending`): the
    /// agent has not fetched its spec yet, for example.
    pub waiting: Option<String>,
    /// Probes, by [`ProbeKind`] as index: startup, liveness, readiness.
    pub probes: [Option<ProbeState>; 3],
    /// When the running instance (or the running init step) was last seen starting.
    pub started: Option<Duration>,
    /// A stop of it succeeded since it last started: the runtime holding nothing of it is then
    /// the truth, not an observation that lags (one taken before it started).
    pub stopped: bool,
    /// When its liveness probe failed: it is restarted one pass later, once reported unhealthy.
    pub condemned: Option<Duration>,
    /// A secret it uses changed: what the next pass does about it, if it runs.
    pub renew: Option<Renew>,
    /// The init step now due failed since the step before it passed: reported as the instance's
    /// init failure, not as a failed instance (which would be replaced), while the step is
    /// tried again on the restart schedule.
    pub init_failure: Option<InitFailure>,
    /// The running init step was stopped for running past its timeout.
    pub init_timed_out: bool,
    /// Placed anew over an earlier incarnation of its id (a stateful identity created again):
    /// whatever the runtime holds of the id is that earlier instance, removed (stopped first,
    /// should it run) before this one starts, and never reported as this one.
    pub anew: bool,
}

/// How the init step now due last failed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct InitFailure {
    /// Failed attempts of the step.
    pub failures: u32,
    /// Why the last one failed, for people.
    pub reason: String,
    /// The last lines it printed, once read.
    pub output: Option<String>,
}

/// How a running instance takes a changed secret.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Renew {
    /// Its mounted files are rewritten in place.
    Files,
    /// It restarts: the secret is in its environment (or its runtime cannot rewrite files).
    Restart,
}

impl Track {
    /// Records a failed start and schedules the next attempt after the retry schedule.
    pub(super) fn fail(&mut self, now: Duration, reason: String, delays: &[Duration]) {
        self.attempts += 1;
        self.failure = Some(reason);
        self.retry_at = Some(now.saturating_add(Backoff::nth(delays, self.attempts)));
    }

    /// Init step `step` of `spec` failed (`how`): tried again at once while its `retry` count
    /// lasts, then on the restart schedule `delays`, but never again under restart `never`,
    /// where the instance has failed for good.
    pub(super) fn init_failed(
        &mut self,
        now: Duration,
        spec: &ServiceSpec,
        step: usize,
        how: &str,
        delays: &[Duration],
    ) {
        let failures = self.init_failure.as_ref().map_or(0, |f| f.failures) + 1;
        let retry = spec.init.get(step).map_or(0, |s| s.retry);
        let mut reason = format!("init step {} of {} {how}", step + 1, spec.init.len());
        self.retry_at = None;
        if failures > retry && !spec.restart.replaces_failed() {
            reason.push_str("; restart never: not tried again");
            self.failure = Some(reason.clone());
        } else if failures > retry {
            let wait = Backoff::nth(delays, failures - retry);
            self.retry_at = Some(now.saturating_add(wait));
            reason.push_str(&format!("; next attempt in {}", format_duration(wait)));
        }
        self.init_failure = Some(InitFailure {
            failures,
            reason,
            output: None,
        });
    }

    /// Init step `init_done` passed: the next one starts afresh.
    fn init_passed(&mut self) {
        self.init_done += 1;
        self.init_failure = None;
        self.init_timed_out = false;
        self.retry_at = None;
        self.started = None;
    }

    /// Whether it started here and no stop of it has succeeded since: the runtime showing
    /// nothing of it does not prove it stopped.
    pub(super) fn unconfirmed_stop(&self) -> bool {
        self.started.is_some() && !self.stopped
    }

    /// The instance started (or was adopted running) at `now`: failures are forgotten and its
    /// probes start over.
    pub(super) fn started_now(&mut self, now: Duration, spec: Option<&ServiceSpec>) {
        self.attempts = 0;
        self.failure = None;
        self.init_failure = None;
        self.retry_at = None;
        self.started = Some(now);
        self.stopped = false;
        self.condemned = None;
        self.probes = match spec {
            Some(spec) => {
                ProbeKind::ALL.map(|kind| kind.of(spec).cloned().map(|p| ProbeState::new(p, now)))
            }
            None => Default::default(),
        };
    }

    /// The probe of one kind, if the spec has it.
    pub(super) fn probe(&self, kind: ProbeKind) -> Option<&ProbeState> {
        self.probes[kind as usize].as_ref()
    }
}

impl AgentLoop {
    /// Decides one pass on the current observation (`seen`, the one just taken) for the
    /// instances of the pass's [`Scope`], and queues its runtime actions, each on its
    /// instance's lane. An instance whose lane is busy is left to a later pass, and so is one
    /// whose lane acted after the observation was sent (it may not show what that did): then
    /// another pass follows at once.
    pub(super) fn plan_pass(&mut self, observation: Observing, covers: Option<&BTreeSet<String>>) {
        let now = self.now;
        let grace = self.config.stop_grace;
        let delays = self.config.retry_delays.clone();
        // What the observation did not cover waits for the next one, which will.
        let scope = self.pass_scope.take_covered(covers);
        if !self.pass_scope.is_empty() {
            self.pass_wanted = true;
        }
        for (_, assignment) in scope.entries(&self.desired.placements) {
            self.stats.decided += 1;
            let id = assignment.instance.as_str();
            if self.work.busy(id) {
                self.pass_scope.mark(id);
                continue;
            }
            if self.work.changed_since(id, observation) {
                self.pass_scope.mark(id);
                let due = self.batch_due();
                self.repass.get_or_insert(due);
                continue;
            }
            let seen = self.observed.get(id).map(|s| &s.instance);
            if assignment.state == DesiredState::Stopped {
                // Seen running, or started here and not seen at all: an observation that lags
                // (taken before it started) must not pass for a stop, so stop it for sure.
                let unconfirmed =
                    seen.is_none() && self.tracks.get(id).is_some_and(Track::unconfirmed_stop);
                if seen.is_some_and(|o| !o.state.has_ended()) || unconfirmed {
                    self.work.push(id, stop(id, grace, StopReason::Asked));
                }
                continue;
            }
            // Not `entry(id.to_owned())`: a pass would allocate for every placement.
            if !self.tracks.contains_key(id) {
                self.tracks.insert(id.to_owned(), Track::default());
            }
            let Some(track) = self.tracks.get_mut(id) else {
                continue;
            };
            // What the report says of it is derived from its track: a pass that changes the
            // track marks it for the next report (and one that only finds it running does not).
            if track.waiting.take().is_some() {
                self.report_scope.mark(id);
            }
            if track.anew {
                self.report_scope.mark(id);
                // Its init steps' containers are the earlier incarnation's too (their ids come
                // from the instance's): a step it left ended would pass for this one's.
                let earlier_step = held_init_step(&self.observed, id);
                match (seen, earlier_step) {
                    (Some(o), _) if o.state.has_ended() => {
                        let data = instance_data(&self.volumes, id);
                        self.work.push(id, remove(id, data));
                    }
                    (Some(_), _) => self.work.push(id, stop(id, grace, StopReason::PlacedAnew)),
                    (None, Some((step_id, true))) => self.work.push(id, remove(&step_id, None)),
                    (None, Some((step_id, false))) => {
                        self.work
                            .push(id, stop(&step_id, Duration::ZERO, StopReason::PlacedAnew));
                    }
                    (None, None) => track.anew = false,
                }
                if track.anew {
                    continue;
                }
            }
            let Some(spec) = self
                .desired
                .specs
                .get(&assignment.service)
                .and_then(|versions| versions.get(&assignment.version))
            else {
                self.report_scope.mark(id);
                let key = (assignment.service.clone(), assignment.version.clone());
                if self.unavailable.contains(&key) {
                    track.failure = Some(format!(
                        "version {} of service {} is no longer in the store",
                        assignment.version, assignment.service
                    ));
                } else {
                    // Not fetched yet: pending, not failed (a failed instance is replaced).
                    track.waiting = Some(format!(
                        "{SPEC_WAIT} of service {} (version {})",
                        assignment.service, assignment.version
                    ));
                }
                continue;
            };
            if seen.is_some_and(|o| o.state == InstanceState::Running) && track.started.is_none() {
                self.report_scope.mark(id);
                track.started_now(now, Some(spec)); // adopted
            }
            let renew = track.renew.take();
            if let Some(renew) = renew
                && seen.is_some_and(|o| o.state == InstanceState::Running)
            {
                self.report_scope.mark(id);
                // A secret it uses changed. Deleted meanwhile: it keeps what it has.
                let Ok(instance) = instance_spec(id, spec, &self.desired, &self.volumes) else {
                    continue;
                };
                match renew {
                    Renew::Files => self.work.push(
                        id,
                        (
                            Action::UpdateFiles {
                                id: id.to_owned(),
                                files: instance.files,
                            },
                            RuntimeOp::UpdateFiles(id.to_owned()),
                        ),
                    ),
                    Renew::Restart => {
                        // Stopped and started in one go, so no report shows it stopped (the
                        // instance controller would replace it).
                        self.work
                            .push(id, stop(id, grace, StopReason::SecretChanged));
                        self.work.push(
                            id,
                            (
                                Action::EnsureRunning {
                                    spec: Box::new(instance),
                                },
                                RuntimeOp::Start(id.to_owned()),
                            ),
                        );
                        track.probes = Default::default();
                        track.started = None;
                    }
                }
                continue;
            }
            let start = match seen {
                None => true,
                Some(o) if o.state.has_ended() => restarts(spec.restart, &o.state),
                Some(_) => false,
            };
            if !start || track.retry_at.is_some_and(|at| now < at) {
                continue;
            }
            self.report_scope.mark(id);
            // Never started with a secret missing (nor with an empty value in its place).
            let instance = match instance_spec(id, spec, &self.desired, &self.volumes) {
                Ok(instance) => instance,
                Err(MissingSecret(name)) => {
                    track.waiting = Some(if self.missing_secrets.contains(&name) {
                        format!(
                            "missing secret {name}: the store holds no secret of that name; \
                             the instance starts once it is set"
                        )
                    } else {
                        format!("waiting for secret {name}")
                    });
                    continue;
                }
            };
            // Init steps run once, in order, before the first start.
            let step = track.init_done as usize;
            if seen.is_none() && step < spec.init.len() {
                if track.failure.is_some() {
                    continue; // gave up on a failing step (restart never)
                }
                let step_id = init_id(id, step);
                match self.observed.get(&step_id).map(|s| &s.instance.state) {
                    None => {
                        track.started = None;
                        let Ok(init) = init_spec(id, step, spec, &self.desired, &self.volumes)
                        else {
                            continue; // its secrets are there: the instance's spec was built
                        };
                        self.work.push(
                            id,
                            (
                                Action::EnsureRunning {
                                    spec: Box::new(init),
                                },
                                RuntimeOp::StartInit(id.to_owned(), step),
                            ),
                        );
                    }
                    Some(InstanceState::Exited { code: 0 }) => {
                        track.init_passed();
                        self.work.push(id, remove(&step_id, None));
                    }
                    Some(state) if state.has_ended() => {
                        let how = if std::mem::take(&mut track.init_timed_out) {
                            format!(
                                "timed out after {}",
                                format_duration(spec.init[step].timeout)
                            )
                        } else {
                            match state {
                                InstanceState::Exited { code } => format!("exited with {code}"),
                                InstanceState::Failed { reason } => format!("failed: {reason}"),
                                _ => "was stopped".to_owned(),
                            }
                        };
                        track.started = None;
                        track.init_failed(now, spec, step, &how, &delays);
                        self.work.push(
                            id,
                            (
                                Action::ReadOutput {
                                    id: step_id.clone(),
                                    lines: INIT_OUTPUT_LINES,
                                },
                                RuntimeOp::ReadOutput(id.to_owned(), step),
                            ),
                        );
                        self.work.push(id, remove(&step_id, None));
                    }
                    Some(_) => {
                        let step_started = *track.started.get_or_insert(now);
                        if !track.init_timed_out
                            && now.saturating_sub(step_started) > spec.init[step].timeout
                        {
                            track.init_timed_out = true;
                            self.work
                                .push(id, stop(&step_id, Duration::ZERO, StopReason::InitTimeout));
                        }
                    }
                }
                continue;
            }
            self.work.push(
                id,
                (
                    Action::EnsureRunning {
                        spec: Box::new(instance),
                    },
                    RuntimeOp::Start(id.to_owned()),
                ),
            );
        }
        self.plan_orphans(observation, &scope);
        self.plan_probes();
        self.settle(&scope);
    }

    /// Instances nobody placed here (of `scope`): stopped, then removed once ended; but only
    /// once the agent has listed the real placements (not just read its cache).
    fn plan_orphans(&mut self, observation: Observing, scope: &Scope) {
        if !self.synced {
            return;
        }
        for (id, sample) in scope.entries(&self.observed) {
            if owner(id, &self.desired).is_some() {
                continue;
            }
            if self.work.busy(id) {
                self.pass_scope.mark(id);
                continue;
            }
            if self.work.changed_since(id, observation) {
                self.pass_scope.mark(id);
                let due = self.batch_due();
                self.repass.get_or_insert(due);
                continue;
            }
            if sample.instance.state.has_ended() {
                // An init step's id names no directory: it holds none of its own.
                let data = instance_data(&self.volumes, id);
                self.work.push(id, remove(id, data));
            } else {
                let grace = self.config.stop_grace;
                self.work.push(id, stop(id, grace, StopReason::Unplaced));
            }
        }
    }

    /// The probes that are due, and the restart of an instance whose liveness probe failed in
    /// the pass before.
    fn plan_probes(&mut self) {
        let now = self.now;
        for (id, track) in &mut self.tracks {
            // Nothing to probe, nor to restart for a probe: most instances, and the cheapest
            // test (every pass walks every track).
            if track.probes.iter().all(Option::is_none) || self.work.busy(id) {
                continue;
            }
            let Some(seen) = self
                .observed
                .get(id)
                .map(|s| &s.instance)
                .filter(|o| o.state == InstanceState::Running)
            else {
                continue;
            };
            let startup_passed = track
                .probe(ProbeKind::Startup)
                .is_none_or(|p| p.passing == Some(true));
            for kind in ProbeKind::ALL {
                if kind != ProbeKind::Startup && !startup_passed {
                    continue;
                }
                let Some(state) = track.probe(kind) else {
                    continue;
                };
                if !state.due(now) || (kind == ProbeKind::Startup && state.passing == Some(true)) {
                    continue;
                }
                self.work.push(id, probe(seen, kind, state));
            }
            let dead = track
                .probe(ProbeKind::Liveness)
                .is_some_and(|p| p.passing == Some(false));
            match track.condemned {
                // Reported unhealthy in the pass before: restart it now (the restart policy of
                // the ended instance decides, as for a crash).
                Some(at) if dead && now > at => {
                    self.report_scope.mark(id);
                    let grace = self.config.stop_grace;
                    self.work.push(id, stop(id, grace, StopReason::Liveness));
                    track.probes = Default::default();
                    track.started = None;
                    track.condemned = None;
                }
                None if dead => track.condemned = Some(now),
                _ => {}
            }
        }
    }
}

fn stop(id: &str, grace: Duration, reason: StopReason) -> (Action, RuntimeOp) {
    (
        Action::EnsureStopped {
            id: id.to_owned(),
            grace,
            reason,
        },
        RuntimeOp::Stop(id.to_owned()),
    )
}

/// Removes `id` and then `data`, the directory of its volumes that go with it (see
/// [`instance_data`](super::spec::instance_data); `None` for an init step).
fn remove(id: &str, data: Option<PathBuf>) -> (Action, RuntimeOp) {
    (
        Action::Remove {
            id: id.to_owned(),
            data,
        },
        RuntimeOp::Remove(id.to_owned()),
    )
}

fn probe(seen: &ObservedInstance, kind: ProbeKind, state: &ProbeState) -> (Action, RuntimeOp) {
    (
        Action::Probe {
            id: seen.id.clone(),
            kind,
            probe: Box::new(state.probe().clone()),
            address: probe_address(seen.address.as_deref(), state.probe().port),
        },
        RuntimeOp::Probe(seen.id.clone(), kind),
    )
}

/// Where a network probe connects: the instance's address, or, when the probe names a port,
/// that port on the same host (runtimes run workloads in their host's network, so every port
/// an instance listens on is reachable at its host's address; 127.0.0.1 when it reports none).
fn probe_address(served: Option<&str>, port: Option<u16>) -> Option<String> {
    match port {
        None => served.map(str::to_owned),
        Some(port) => {
            let host = served
                .and_then(|address| address.rsplit_once(':'))
                .map_or("127.0.0.1", |(host, _)| host);
            Some(crate::address::served_at(host, port))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::probe_address;

    #[test]
    fn a_probe_port_replaces_the_served_port_on_the_same_host() {
        assert_eq!(
            probe_address(Some("10.0.0.5:8080"), None).as_deref(),
            Some("10.0.0.5:8080")
        );
        assert_eq!(
            probe_address(Some("10.0.0.5:8080"), Some(9090)).as_deref(),
            Some("10.0.0.5:9090")
        );
        assert_eq!(
            probe_address(None, Some(9090)).as_deref(),
            Some("127.0.0.1:9090")
        );
        assert_eq!(probe_address(None, None), None);
    }
}
