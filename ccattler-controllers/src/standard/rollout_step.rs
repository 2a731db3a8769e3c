//! One judgement of one service's rollout: the pure step the [`RolloutController`]
//! (super::RolloutController) takes for each service it plans. Time comes in as milliseconds
//! since the Unix epoch; nothing here reads a clock or the store.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use ccattler_core::event::reasons;
use ccattler_core::schema::{Rollout, RolloutAction, RolloutPhase, RolloutRequest, UpdatePolicy};

/// How many versions a rollout keeps the spec of, besides those it needs (the version in
/// force, the stable one, the desired one and every version an instance still runs).
pub const KEPT_VERSIONS: usize = 5;

/// What the cluster shows of a service, as the step needs it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Seen {
    /// The instance count in force (`effective/service/{svc}`).
    pub count: u32,
    /// The version the effective record puts in force, if there is one.
    pub in_force: Option<String>,
    /// Instances of the rollout's version that run or will run (not asked to stop, not
    /// ended for good).
    pub updated: u32,
    /// Those of them that are ready.
    pub ready: u32,
    /// Those of them that ended and are left ended by their restart policy (`never`, or a
    /// clean exit under `on_failure`): settled, though never ready again.
    pub ended: u32,
    /// Instances of any other version that are not gone yet.
    pub others: u32,
    /// Failures of each instance of the rollout's version: its restarts, plus one if it is
    /// reported failed.
    pub failures: BTreeMap<String, u32>,
    /// Every version an instance of the service runs (or ran and is not gone).
    pub in_use: BTreeSet<String>,
}

/// What a step decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Step {
    /// The record to hold.
    pub record: Rollout,
    /// Events to record: (reason, message).
    pub events: Vec<(&'static str, String)>,
    /// When to judge again if nothing changes before (a deadline or the minimum ready time).
    pub wake: Option<Duration>,
    /// Versions no longer kept: their specs are deleted.
    pub dropped: Vec<String>,
}

/// The first 8 digits of a version, as messages print it.
pub(super) fn short(version: &str) -> &str {
    version.get(..8).unwrap_or(version)
}

/// Judges a service's rollout: `held` is its record (none before its first pass), `desired`
/// the desired spec's version, `request` the user's last request, `seen` what the cluster
/// shows of the record's version (as it stands before this step), `now` milliseconds since
/// the Unix epoch.
pub(super) fn step(
    held: Option<&Rollout>,
    desired: &str,
    policy: &UpdatePolicy,
    request: Option<&RolloutRequest>,
    seen: &Seen,
    now: u64,
) -> Step {
    let mut step = Step {
        record: held.cloned().unwrap_or_else(|| Rollout {
            desired: desired.to_owned(),
            ..Rollout::default()
        }),
        events: Vec::new(),
        wake: None,
        dropped: Vec::new(),
    };
    if held.is_none() {
        step.start(
            desired,
            now,
            format!("rolling out version {}", short(desired)),
        );
    }
    if let Some(request) = request.filter(|r| r.id != step.record.handled) {
        step.record.handled = request.id;
        step.answer(&request.action, desired, now);
    }
    if step.record.desired != desired {
        step.record.desired = desired.to_owned();
        if step.record.phase != RolloutPhase::Paused {
            step.start(
                desired,
                now,
                format!("rolling out version {}", short(desired)),
            );
        }
    }
    step.judge(policy, seen, now);
    step.keep(seen, desired);
    step
}

impl Step {
    /// Puts `version` in force as a new rollout.
    fn start(&mut self, version: &str, now: u64, reason: String) {
        let r = &mut self.record;
        r.version = version.to_owned();
        r.phase = RolloutPhase::Progressing;
        r.rolled_back_from = None;
        r.started_at = now;
        r.progress_at = now;
        r.best_ready = 0;
        r.ready_since = None;
        r.failures.clear();
        self.events.push((reasons::ROLLOUT_STARTED, reason.clone()));
        self.record.reason = reason;
    }

    /// Acts on one request of the user.
    fn answer(&mut self, action: &RolloutAction, desired: &str, now: u64) {
        let r = &mut self.record;
        match action {
            RolloutAction::Pause => {
                if r.phase != RolloutPhase::Paused {
                    r.phase = RolloutPhase::Paused;
                    r.reason = format!("paused by request at version {}", short(&r.version));
                    self.events
                        .push((reasons::ROLLOUT_PAUSED, self.record.reason.clone()));
                }
            }
            RolloutAction::Resume if r.version == desired && r.phase == RolloutPhase::Paused => {
                // The deadline did not run while paused.
                r.phase = RolloutPhase::Progressing;
                r.progress_at = now;
                r.ready_since = None;
                r.reason = format!("resumed by request at version {}", short(desired));
                self.events
                    .push((reasons::ROLLOUT_STARTED, self.record.reason.clone()));
            }
            RolloutAction::Resume if r.version != desired => {
                let reason = format!("resumed by request: rolling out version {}", short(desired));
                self.start(desired, now, reason);
            }
            RolloutAction::Resume => {}
            RolloutAction::Undo { to_version } => {
                let target = match to_version {
                    Some(v) => Some(v.clone()),
                    // The version before the one in force, newest first.
                    None => r.kept.iter().rev().find(|v| **v != r.version).cloned(),
                };
                match target {
                    Some(target) if r.kept.contains(&target) => {
                        let reason = format!("undone by request to version {}", short(&target));
                        self.start(&target, now, reason);
                    }
                    Some(target) => {
                        let message = format!(
                            "undo refused: version {target} is not kept (kept: {})",
                            r.kept.join(", ")
                        );
                        self.events.push((reasons::ROLLOUT_FAILED, message));
                    }
                    None => self.events.push((
                        reasons::ROLLOUT_FAILED,
                        "undo refused: no earlier version is kept".to_owned(),
                    )),
                }
            }
        }
    }

    /// Counts failures and progress of the version in force, and rolls it back or completes
    /// it.
    fn judge(&mut self, policy: &UpdatePolicy, seen: &Seen, now: u64) {
        let r = &mut self.record;
        if !matches!(r.phase, RolloutPhase::Progressing | RolloutPhase::Failing) {
            return;
        }
        // Until the effective record carries the version, what is seen is of the one before.
        if seen.in_force.as_deref() != Some(r.version.as_str()) {
            self.wake = Some(Duration::from_secs(1));
            return;
        }
        for (id, n) in &seen.failures {
            let held = r.failures.entry(id.clone()).or_default();
            *held = (*held).max(*n);
        }
        if seen.ready > r.best_ready {
            r.best_ready = seen.ready;
            r.progress_at = now;
        }
        let settled = seen.ready + seen.ended;
        let done = seen.updated >= seen.count && settled >= seen.count && seen.others == 0;
        if r.phase == RolloutPhase::Progressing {
            let failures = r.failure_count();
            let deadline = r.progress_at + millis(policy.progress_deadline);
            if failures >= policy.failure_threshold {
                let why = format!(
                    "version {} failed {failures} times (threshold {})",
                    short(&r.version),
                    policy.failure_threshold
                );
                return self.roll_back(why);
            }
            if !done && now >= deadline {
                let why = format!(
                    "version {} made no progress for {}: {} of {} instances ready",
                    short(&r.version),
                    ccattler_core::schema::format_duration(policy.progress_deadline),
                    seen.ready,
                    seen.count
                );
                return self.roll_back(why);
            }
            self.wake = Some(Duration::from_millis(deadline.saturating_sub(now).max(1)));
        }
        let r = &mut self.record;
        if !done {
            r.ready_since = None;
            return;
        }
        let since = *r.ready_since.get_or_insert(now);
        let soak_end = since + millis(policy.min_ready);
        if now < soak_end {
            self.wake = Some(Duration::from_millis(soak_end - now));
            return;
        }
        r.phase = RolloutPhase::Complete;
        r.stable = Some(r.version.clone());
        r.failures.clear();
        r.reason = match seen.ended {
            0 => format!(
                "{} instances of version {} ready",
                seen.count,
                short(&r.version)
            ),
            ended => format!(
                "{} instances of version {} ready, {ended} ended (restart policy)",
                seen.count.saturating_sub(ended),
                short(&r.version)
            ),
        };
        self.wake = None;
        self.events
            .push((reasons::ROLLOUT_COMPLETE, self.record.reason.clone()));
    }

    /// Puts the stable version back in force, or, with none other than the failing one, goes
    /// on failing.
    fn roll_back(&mut self, why: String) {
        let r = &mut self.record;
        match r.stable.clone().filter(|s| *s != r.version) {
            Some(stable) => {
                let from = std::mem::replace(&mut r.version, stable.clone());
                r.phase = RolloutPhase::RolledBack;
                r.rolled_back_from = Some(from);
                r.ready_since = None;
                r.failures.clear();
                r.reason = format!("{why}; rolled back to version {}", short(&stable));
                self.events
                    .push((reasons::ROLLED_BACK, self.record.reason.clone()));
            }
            None => {
                r.phase = RolloutPhase::Failing;
                r.reason = format!("{why}; no earlier version to roll back to");
                self.events
                    .push((reasons::ROLLOUT_FAILED, self.record.reason.clone()));
            }
        }
        self.wake = None;
    }

    /// Adds the versions the service needs to the kept list and drops the oldest of the rest
    /// beyond [`KEPT_VERSIONS`].
    fn keep(&mut self, seen: &Seen, desired: &str) {
        let r = &mut self.record;
        for version in [desired, r.version.as_str()] {
            if !r.kept.iter().any(|v| v == version) {
                r.kept.push(version.to_owned());
            }
        }
        // Newest last: the version in force moves to the end.
        if let Some(at) = r.kept.iter().position(|v| *v == r.version) {
            let version = r.kept.remove(at);
            r.kept.push(version);
        }
        let needed = |v: &String| {
            *v == r.version
                || *v == desired
                || r.stable.as_ref() == Some(v)
                || seen.in_use.contains(v)
        };
        let mut excess = r.kept.len().saturating_sub(KEPT_VERSIONS);
        let mut kept = Vec::with_capacity(r.kept.len());
        for version in std::mem::take(&mut r.kept) {
            if excess > 0 && !needed(&version) {
                excess -= 1;
                self.dropped.push(version);
            } else {
                kept.push(version);
            }
        }
        r.kept = kept;
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
#[path = "rollout_step_tests.rs"]
mod tests;
