//! The rollout step, scenario by scenario: each test walks one service's rollout through
//! time and what its instances do.

use std::time::Duration;

use ccattler_core::schema::{Rollout, RolloutAction, RolloutPhase, RolloutRequest, UpdatePolicy};

use super::{KEPT_VERSIONS, Seen, Step, step};

const S: u64 = 1_000;

/// One service's rollout, stepped by hand.
struct Walk {
    record: Option<Rollout>,
    policy: UpdatePolicy,
    desired: String,
    request: Option<RolloutRequest>,
    now: u64,
    last: Option<Step>,
}

impl Walk {
    fn new() -> Self {
        Walk {
            record: None,
            policy: UpdatePolicy::default(),
            desired: "v1".into(),
            request: None,
            now: 1_000 * S,
            last: None,
        }
    }

    /// One step at `now + after`, with `seen` of the record's version.
    fn step(&mut self, after: u64, seen: Seen) -> &Rollout {
        self.now += after;
        let step = step(
            self.record.as_ref(),
            &self.desired,
            &self.policy,
            self.request.as_ref(),
            &seen,
            self.now,
        );
        self.record = Some(step.record.clone());
        self.last = Some(step);
        self.record.as_ref().expect("just set")
    }

    /// What the cluster shows once the effective record carries the version in force.
    fn seen(&self, updated: u32, ready: u32, others: u32) -> Seen {
        Seen {
            count: 3,
            in_force: self.record.as_ref().map(|r| r.version.clone()),
            updated,
            ready,
            others,
            ..Seen::default()
        }
    }

    fn reasons(&self) -> Vec<&'static str> {
        self.last
            .as_ref()
            .map(|s| s.events.iter().map(|(r, _)| *r).collect())
            .unwrap_or_default()
    }

    fn ask(&mut self, id: u64, action: RolloutAction) {
        self.request = Some(RolloutRequest { id, action });
    }

    /// Applies `version` and walks it to complete.
    fn complete(&mut self, version: &str) {
        self.desired = version.into();
        self.step(S, Seen::default());
        let seen = self.seen(3, 3, 0);
        let r = self.step(S, seen);
        assert_eq!(r.phase, RolloutPhase::Complete, "{r:?}");
    }
}

fn failing(id: &str, n: u32) -> Seen {
    Seen {
        failures: [(id.to_owned(), n)].into(),
        ..Seen::default()
    }
}

#[test]
fn a_healthy_version_completes_and_becomes_stable() {
    let mut walk = Walk::new();
    let r = walk.step(0, Seen::default());
    assert_eq!(
        (r.phase, r.version.as_str()),
        (RolloutPhase::Progressing, "v1")
    );
    assert_eq!(walk.reasons(), ["RolloutStarted"]);
    // The effective record still carries nothing: nothing is judged, a wake is asked.
    assert!(walk.last.as_ref().unwrap().wake.is_some());
    let seen = walk.seen(3, 2, 1);
    let r = walk.step(S, seen);
    assert_eq!((r.phase, r.best_ready), (RolloutPhase::Progressing, 2));
    let seen = walk.seen(3, 3, 0);
    let r = walk.step(S, seen);
    assert_eq!(r.phase, RolloutPhase::Complete);
    assert_eq!(r.stable.as_deref(), Some("v1"));
    assert_eq!(walk.reasons(), ["RolloutComplete"]);
}

#[test]
fn min_ready_holds_completion_until_every_instance_stayed_ready() {
    let mut walk = Walk::new();
    walk.policy.min_ready = Duration::from_secs(30);
    walk.step(0, Seen::default());
    let seen = walk.seen(3, 3, 0);
    walk.step(S, seen.clone());
    assert_eq!(
        walk.last.as_ref().unwrap().wake,
        Some(Duration::from_secs(30))
    );
    // One stops being ready: the soak starts again.
    walk.step(20 * S, walk.seen(3, 2, 0));
    let r = walk.step(S, seen.clone());
    assert_eq!(r.phase, RolloutPhase::Progressing);
    let r = walk.step(29 * S, seen.clone());
    assert_eq!(r.phase, RolloutPhase::Progressing);
    let r = walk.step(S, seen);
    assert_eq!(r.phase, RolloutPhase::Complete);
}

#[test]
fn a_version_that_keeps_failing_is_rolled_back_to_the_stable_one() {
    let mut walk = Walk::new();
    walk.complete("v1");
    walk.desired = "v2".into();
    let r = walk.step(S, Seen::default());
    assert_eq!(
        (r.phase, r.version.as_str()),
        (RolloutPhase::Progressing, "v2")
    );
    let in_force = |seen: Seen| Seen {
        in_force: Some("v2".into()),
        count: 3,
        ..seen
    };
    // Two failures of one instance, then the instance is replaced (forgotten): they still
    // count, and one more failure of its replacement reaches the threshold of 3.
    let seen = in_force(failing("web-a", 2));
    assert_eq!(walk.step(S, seen).phase, RolloutPhase::Progressing);
    let seen = in_force(failing("web-b", 1));
    let r = walk.step(S, seen);
    assert_eq!(r.phase, RolloutPhase::RolledBack);
    assert_eq!(r.version, "v1");
    assert_eq!(r.rolled_back_from.as_deref(), Some("v2"));
    assert!(
        r.reason.contains("failed 3 times (threshold 3)"),
        "{}",
        r.reason
    );
    assert_eq!(walk.reasons(), ["RolledBack"]);
    // It stays rolled back while the desired version is the same.
    let seen = walk.seen(3, 3, 0);
    let r = walk.step(60 * S, seen);
    assert_eq!(
        (r.phase, r.version.as_str()),
        (RolloutPhase::RolledBack, "v1")
    );
    // A new apply rolls out again.
    walk.desired = "v3".into();
    let r = walk.step(S, Seen::default());
    assert_eq!(
        (r.phase, r.version.as_str()),
        (RolloutPhase::Progressing, "v3")
    );
}

#[test]
fn no_progress_by_the_deadline_rolls_back() {
    let mut walk = Walk::new();
    walk.complete("v1");
    walk.policy.progress_deadline = Duration::from_secs(60);
    walk.desired = "v2".into();
    walk.step(S, Seen::default());
    let seen = walk.seen(2, 1, 2);
    walk.step(S, seen.clone());
    let wake = walk.last.as_ref().unwrap().wake;
    assert_eq!(wake, Some(Duration::from_secs(60)), "woken at the deadline");
    // Progress (a second ready instance) moves the deadline.
    walk.step(50 * S, walk.seen(2, 2, 2));
    let r = walk.step(59 * S, walk.seen(2, 2, 2));
    assert_eq!(r.phase, RolloutPhase::Progressing);
    let r = walk.step(S, walk.seen(2, 2, 2));
    assert_eq!(
        (r.phase, r.version.as_str()),
        (RolloutPhase::RolledBack, "v1")
    );
    assert!(
        r.reason
            .contains("no progress for 1m: 2 of 3 instances ready"),
        "{}",
        r.reason
    );
}

#[test]
fn a_first_version_that_fails_has_nothing_to_roll_back_to() {
    let mut walk = Walk::new();
    walk.step(0, Seen::default());
    let seen = Seen {
        in_force: Some("v1".into()),
        count: 3,
        ..failing("web-a", 5)
    };
    let r = walk.step(S, seen);
    assert_eq!((r.phase, r.version.as_str()), (RolloutPhase::Failing, "v1"));
    assert!(r.reason.contains("no earlier version"), "{}", r.reason);
    // If it recovers, it completes.
    let seen = walk.seen(3, 3, 0);
    assert_eq!(walk.step(S, seen).phase, RolloutPhase::Complete);
}

#[test]
fn paused_holds_the_version_and_a_new_one_waits_for_resume() {
    let mut walk = Walk::new();
    walk.complete("v1");
    walk.ask(1, RolloutAction::Pause);
    let r = walk.step(S, walk.seen(3, 3, 0));
    assert_eq!(r.phase, RolloutPhase::Paused);
    assert_eq!(walk.reasons(), ["RolloutPaused"]);
    walk.desired = "v2".into();
    let r = walk.step(S, walk.seen(3, 3, 0));
    assert_eq!((r.phase, r.version.as_str()), (RolloutPhase::Paused, "v1"));
    assert_eq!(r.desired, "v2");
    // The same request again changes nothing.
    let r = walk.step(S, walk.seen(3, 3, 0));
    assert_eq!(r.handled, 1);
    walk.ask(2, RolloutAction::Resume);
    let r = walk.step(S, walk.seen(3, 3, 0));
    assert_eq!(
        (r.phase, r.version.as_str()),
        (RolloutPhase::Progressing, "v2")
    );
}

#[test]
fn resume_tries_a_rolled_back_version_again() {
    let mut walk = Walk::new();
    walk.complete("v1");
    walk.desired = "v2".into();
    walk.step(S, Seen::default());
    let seen = Seen {
        in_force: Some("v2".into()),
        count: 3,
        ..failing("web-a", 3)
    };
    assert_eq!(walk.step(S, seen).phase, RolloutPhase::RolledBack);
    walk.ask(7, RolloutAction::Resume);
    let r = walk.step(S, walk.seen(3, 3, 0));
    assert_eq!(
        (r.phase, r.version.as_str()),
        (RolloutPhase::Progressing, "v2")
    );
    assert!(r.failures.is_empty(), "a new count");
}

#[test]
fn undo_returns_to_the_version_before_or_one_named() {
    let mut walk = Walk::new();
    walk.complete("v1");
    walk.complete("v2");
    walk.complete("v3");
    walk.ask(1, RolloutAction::Undo { to_version: None });
    let r = walk.step(S, walk.seen(3, 3, 0));
    assert_eq!(r.version, "v2", "{r:?}");
    assert!(r.reason.contains("undone by request to version v2"));
    walk.ask(
        2,
        RolloutAction::Undo {
            to_version: Some("v1".into()),
        },
    );
    let r = walk.step(S, walk.seen(3, 3, 0));
    assert_eq!(r.version, "v1");
    // The desired version is still v3: resume goes back to it.
    walk.ask(3, RolloutAction::Resume);
    assert_eq!(walk.step(S, walk.seen(3, 3, 0)).version, "v3");
}

#[test]
fn undo_to_a_version_not_kept_changes_nothing_and_says_so() {
    let mut walk = Walk::new();
    walk.complete("v1");
    let before = walk.record.clone().unwrap();
    walk.ask(
        1,
        RolloutAction::Undo {
            to_version: Some("v0".into()),
        },
    );
    let r = walk.step(S, walk.seen(3, 3, 0)).clone();
    assert_eq!(
        (r.version.as_str(), r.phase),
        (before.version.as_str(), before.phase)
    );
    let (reason, message) = &walk.last.as_ref().unwrap().events[0];
    assert_eq!(*reason, "RolloutFailed");
    assert!(
        message.contains("version v0 is not kept (kept: v1)"),
        "{message}"
    );
}

#[test]
fn old_versions_are_dropped_beyond_the_kept_ones_unless_an_instance_runs_them() {
    let mut walk = Walk::new();
    walk.complete("v0");
    let mut dropped = Vec::new();
    for n in 1..=KEPT_VERSIONS + 1 {
        walk.desired = format!("v{n}");
        for updated in [0, 3] {
            let mut seen = walk.seen(updated, updated, 0);
            seen.in_force = walk.record.as_ref().map(|r| r.version.clone());
            seen.in_use.insert("v0".into()); // one instance still runs v0
            walk.step(S, seen);
            dropped.extend(walk.last.as_ref().unwrap().dropped.clone());
        }
    }
    let r = walk.record.clone().unwrap();
    assert_eq!(r.kept, ["v0", "v3", "v4", "v5", "v6"]);
    assert_eq!(dropped, ["v1", "v2"]);
}
