//! One pass of the agent: start, restart and stop through the runtime, probe, and build the
//! observations to report.

use std::collections::BTreeMap;
use std::time::Duration;

use ccattler_core::schema::{self, DesiredState, Health, InstanceObservation, ObservedState};
use ccattler_core::{FactStore, InstanceState, Key, ObservedInstance, Runtime, Value};
use tokio::time::Instant;

use super::spec::{init_id, init_spec, instance_spec, restarts};
use super::{Local, NodeAgent, ProbeState, Track};

const STARTUP: usize = 0;
const LIVENESS: usize = 1;
const READINESS: usize = 2;

impl<S: FactStore + Clone, R: Runtime> NodeAgent<S, R> {
    /// Compares desired and observed state once and acts on the difference. Returns what the
    /// runtime reported when the pass changed nothing (it is still current, so reporting need
    /// not ask again), `None` when it acted or the runtime did not answer.
    pub(super) async fn pass(
        &self,
        local: &mut Local,
    ) -> Option<BTreeMap<String, ObservedInstance>> {
        let observed = match self.runtime.observe().await {
            Ok(list) => list
                .into_iter()
                .map(|o| (o.id.clone(), o))
                .collect::<BTreeMap<_, _>>(),
            Err(err) => {
                tracing::warn!(node = %self.config.node, error = %err, "runtime unreachable");
                return None;
            }
        };
        let mut acted = false;
        let volumes = self.config.cache_dir.join("volumes");
        let now = Instant::now();
        let placements: Vec<_> = local.desired.placements.values().cloned().collect();
        for assignment in &placements {
            let id = assignment.instance.as_str();
            let seen = observed.get(id);
            if assignment.state == DesiredState::Stopped {
                if seen.is_some_and(|o| !o.state.has_ended()) {
                    acted = true;
                    let _ = self
                        .runtime
                        .ensure_stopped(id, self.config.stop_grace)
                        .await;
                }
                continue;
            }
            let Some(spec) = local.desired.specs.get(&assignment.service).cloned() else {
                local.tracks.entry(id.to_owned()).or_default().failure = Some(format!(
                    "the spec of service {} is not known yet",
                    assignment.service
                ));
                continue;
            };
            let track = local.tracks.entry(id.to_owned()).or_default();
            let start = match seen {
                None => true,
                Some(o) if o.state.has_ended() => restarts(spec.restart, &o.state),
                Some(_) => false,
            };
            if seen.is_some_and(|o| o.state == InstanceState::Running) && track.started.is_none() {
                track.started = Some(now);
            }
            if !start || track.retry_at.is_some_and(|at| now < at) {
                continue;
            }
            // Volumes are directories of the node, made before anything uses them.
            for volume in &spec.volumes {
                if let Err(err) = std::fs::create_dir_all(volumes.join(&volume.volume)) {
                    track.fail(now, format!("volume {}: {err}", volume.volume));
                }
            }
            // Init steps run once, before the first start.
            if seen.is_none() && (track.init_done as usize) < spec.init.len() {
                let step = track.init_done as usize;
                let step_id = init_id(id, step);
                match observed.get(&step_id).map(|o| &o.state) {
                    None => {
                        let init = init_spec(id, step, &spec, &local.desired, &volumes);
                        acted = true;
                        if let Err(err) = self.runtime.ensure_running(&init).await {
                            track.fail(now, format!("init step {step}: {err}"));
                        }
                    }
                    Some(InstanceState::Exited { code: 0 }) => {
                        track.init_done += 1;
                        acted = true;
                        let _ = self.runtime.remove(&step_id).await;
                    }
                    Some(state) if state.has_ended() => {
                        acted = true;
                        let _ = self.runtime.remove(&step_id).await;
                        track.fail(now, format!("init step {step} ended: {state:?}"));
                        if track.attempts > spec.init[step].retry {
                            track.retry_at = Some(now + Duration::from_secs(30));
                        }
                    }
                    Some(_) => {
                        let step_started = track.started.get_or_insert(now);
                        if now.duration_since(*step_started) > spec.init[step].timeout {
                            acted = true;
                            let _ = self.runtime.ensure_stopped(&step_id, Duration::ZERO).await;
                            track.fail(now, format!("init step {step} timed out"));
                        }
                    }
                }
                continue;
            }
            let instance = instance_spec(id, &spec, &local.desired, &volumes);
            acted = true;
            match self.runtime.ensure_running(&instance).await {
                Ok(()) => {
                    track.attempts = 0;
                    track.failure = None;
                    track.retry_at = None;
                    track.started = Some(now);
                    track.probes = [
                        spec.startup.clone().map(|p| ProbeState::new(p, now)),
                        spec.liveness.clone().map(|p| ProbeState::new(p, now)),
                        spec.readiness.clone().map(|p| ProbeState::new(p, now)),
                    ];
                }
                Err(err) => track.fail(now, err.to_string()),
            }
        }
        // Instances nobody placed here: stopped and removed, but only once the agent has seen
        // the real placements (not just its cache).
        if local.synced {
            for (id, seen) in &observed {
                let owner = id
                    .split_once(".init")
                    .map_or(id.as_str(), |(owner, _)| owner);
                if local.desired.placements.contains_key(owner) {
                    continue;
                }
                if seen.state.has_ended() {
                    acted = true;
                    let _ = self.runtime.remove(id).await;
                    local.tracks.remove(id);
                } else {
                    acted = true;
                    let _ = self
                        .runtime
                        .ensure_stopped(id, self.config.stop_grace)
                        .await;
                }
            }
        }
        acted |= self.probe(local, &observed).await;
        (!acted).then_some(observed)
    }

    /// Runs the probes that are due; restarts an instance whose liveness probe failed. Returns
    /// whether it restarted one.
    async fn probe(
        &self,
        local: &mut Local,
        observed: &BTreeMap<String, ObservedInstance>,
    ) -> bool {
        let now = Instant::now();
        let mut acted = false;
        for (id, track) in &mut local.tracks {
            let Some(seen) = observed
                .get(id)
                .filter(|o| o.state == InstanceState::Running)
            else {
                continue;
            };
            let startup_passed = track.probes[STARTUP]
                .as_ref()
                .is_none_or(|p| p.passing == Some(true));
            for kind in [STARTUP, LIVENESS, READINESS] {
                if kind != STARTUP && !startup_passed {
                    continue;
                }
                let Some(state) = track.probes[kind].as_mut() else {
                    continue;
                };
                if !state.due(now) || (kind == STARTUP && state.passing == Some(true)) {
                    continue;
                }
                let result = state
                    .check(self.runtime.as_ref(), id, seen.address.as_deref())
                    .await;
                state.record(now, result);
            }
            let dead = track.probes[LIVENESS]
                .as_ref()
                .is_some_and(|p| p.passing == Some(false));
            match track.condemned {
                // Reported unhealthy in the pass before: restart it now (the restart policy of
                // the ended instance decides, as for a crash).
                Some(at) if dead && now > at => {
                    tracing::warn!(instance = %id, "liveness probe failed; restarting");
                    acted = true;
                    let _ = self
                        .runtime
                        .ensure_stopped(id, self.config.stop_grace)
                        .await;
                    track.probes = Default::default();
                    track.started = None;
                    track.condemned = None;
                }
                None if dead => track.condemned = Some(now),
                _ => {}
            }
        }
        acted
    }

    /// The observations that changed since they were last written, and the keys of those to
    /// delete (instances no longer placed here).
    ///
    /// `current` is the runtime's report when the pass just read it and changed nothing; it is
    /// asked again otherwise.
    pub(super) async fn observations(
        &self,
        local: &mut Local,
        current: Option<BTreeMap<String, ObservedInstance>>,
    ) -> (Vec<(Key, Value)>, Vec<Key>) {
        let observed = match current {
            Some(observed) => observed,
            None => match self.runtime.observe().await {
                Ok(list) => list.into_iter().map(|o| (o.id.clone(), o)).collect(),
                Err(_) => return (Vec::new(), Vec::new()),
            },
        };
        let node = &self.config.node;
        let mut puts = Vec::new();
        for (id, assignment) in &local.desired.placements {
            let track = local.tracks.get(id);
            let seen = observed.get(id);
            let spec = local.desired.specs.get(&assignment.service);
            let mut report = InstanceObservation {
                node: node.clone(),
                service: assignment.service.clone(),
                image: spec.map(|s| s.image.clone()).unwrap_or_default(),
                init_done: track.map_or(0, |t| t.init_done),
                restarts: seen.map_or(0, |o| o.restarts),
                address: seen.and_then(|o| o.address.clone()),
                ..InstanceObservation::default()
            };
            match seen.map(|o| &o.state) {
                None => {
                    report.state = if track.and_then(|t| t.failure.as_ref()).is_some() {
                        ObservedState::Failed
                    } else if track.is_some_and(|t| t.init_done > 0) {
                        ObservedState::Starting
                    } else {
                        ObservedState::Pending
                    };
                }
                Some(InstanceState::Starting) => report.state = ObservedState::Starting,
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
                    report.reason = Some(reason.clone());
                }
                Some(_) => report.state = ObservedState::Pending,
            }
            if report.reason.is_none() {
                report.reason = track.and_then(|t| t.failure.clone());
            }
            if report.state == ObservedState::Running {
                let probe = |kind: usize| track.and_then(|t| t.probes[kind].as_ref());
                report.health = match probe(LIVENESS).map(|p| p.passing) {
                    Some(Some(false)) => Health::Unhealthy,
                    Some(Some(true)) | None => Health::Healthy,
                    Some(None) => Health::Unknown,
                };
                let startup_ok = probe(STARTUP).is_none_or(|p| p.passing == Some(true));
                report.ready =
                    startup_ok && probe(READINESS).is_none_or(|p| p.passing == Some(true));
                if let Some(reason) = probe(READINESS).and_then(|p| p.last_error.clone()) {
                    report.reason = Some(format!("readiness: {reason}"));
                }
                if let Ok(stats) = self.runtime.stats(id).await {
                    report.cpu = stats.cpu;
                    report.memory = stats.memory;
                }
            }
            let value = schema::encode(&report);
            if local.reported.get(id) != Some(&value) {
                if let Ok(key) = schema::keys::observed_instance(node, id) {
                    puts.push((key, value.clone()));
                }
                local.reported.insert(id.clone(), value);
            }
        }
        let gone: Vec<String> = local
            .reported
            .keys()
            .filter(|id| !local.desired.placements.contains_key(*id))
            .cloned()
            .collect();
        let mut deletes = Vec::new();
        for id in gone {
            local.reported.remove(&id);
            local.tracks.remove(&id);
            if let Ok(key) = schema::keys::observed_instance(node, &id) {
                deletes.push(key);
            }
        }
        (puts, deletes)
    }
}

impl Track {
    /// Records a failed start and schedules the next attempt with backoff.
    fn fail(&mut self, now: Instant, reason: String) {
        self.attempts += 1;
        self.failure = Some(reason);
        let delay = Duration::from_millis(500)
            .saturating_mul(1 << self.attempts.min(6))
            .min(Duration::from_secs(30));
        self.retry_at = Some(now + delay);
    }
}
