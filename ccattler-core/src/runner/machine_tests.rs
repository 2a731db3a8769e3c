//! Deterministic tests of [`ControllerLoop`], stepped on virtual time.

use std::collections::BTreeSet;
use std::time::Duration;

use super::*;
use crate::{
    Change, CompareTarget, EventKind, Fact, Key, ReconcileError, Revision, Scan, StoreError,
    TxnResponse, WatchEvent,
};

fn key(k: &str) -> Key {
    Key::new(k).unwrap()
}

fn fact(k: &str, v: &str, rev: u64) -> Fact {
    Fact::created(key(k), v.to_owned().into(), Revision(rev))
}

fn put_event(k: &str, v: &str, rev: u64) -> WatchEvent {
    WatchEvent {
        kind: EventKind::Put,
        fact: fact(k, v, rev),
        prev: None,
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A loop over `in/` writing `out/`, listed at revision 10 with `in/a`.
fn live_loop() -> ControllerLoop {
    let mut l = ControllerLoop::new(
        vec!["in/".into()],
        vec!["out/".into()],
        LoopConfig::default(),
        1,
    );
    assert!(
        matches!(l.next_action(), Some(Action::List { prefixes }) if prefixes == ["in/", "out/"])
    );
    l.listed(Ok(vec![
        Scan {
            revision: Revision(10),
            facts: vec![fact("in/a", "1", 5)],
        },
        Scan {
            revision: Revision(10),
            facts: vec![],
        },
    ]));
    match l.next_action() {
        Some(Action::Watch { starts }) => assert_eq!(
            starts,
            [("in/".into(), Revision(11)), ("out/".into(), Revision(11))]
        ),
        other => panic!("expected watch, got {other:?}"),
    }
    l
}

fn expect_reconcile(l: &mut ControllerLoop) -> crate::FactView {
    match l.next_action() {
        Some(Action::Reconcile { view }) => view,
        other => panic!("expected reconcile, got {other:?}"),
    }
}

fn expect_commit(l: &mut ControllerLoop) -> crate::Txn {
    match l.next_action() {
        Some(Action::Commit { txn }) => txn,
        other => panic!("expected commit, got {other:?}"),
    }
}

fn expect_failed(l: &mut ControllerLoop) -> (String, Duration) {
    match l.next_action() {
        Some(Action::Failed { reason, retry_in }) => (reason, retry_in),
        other => panic!("expected failure, got {other:?}"),
    }
}

/// Each compare of `txn`: its key and what it expects.
fn guards(txn: &crate::Txn) -> Vec<(&str, CompareTarget)> {
    txn.compares
        .iter()
        .map(|c| (c.key.as_str(), c.target.clone()))
        .collect()
}

fn ok(revision: u64) -> Result<TxnResponse, StoreError> {
    Ok(TxnResponse {
        succeeded: true,
        revision: Revision(revision),
    })
}

fn conflict() -> Result<TxnResponse, StoreError> {
    Ok(TxnResponse {
        succeeded: false,
        revision: Revision(99),
    })
}

#[test]
fn nested_prefixes_are_watched_once() {
    let l = ControllerLoop::new(
        vec!["a/".into(), "a/b/".into(), "c".into()],
        vec!["a/b/".into()],
        LoopConfig::default(),
        0,
    );
    assert_eq!(l.prefixes(), ["a/", "c"]);
}

#[test]
fn lists_watches_then_reconciles_the_listed_view() {
    let mut l = live_loop();
    let view = expect_reconcile(&mut l);
    assert_eq!(view.revision(), Revision(10));
    assert!(view.contains("in/a"));
    l.reconciled(Ok(vec![]));
    assert!(l.next_action().is_none());
    assert!(l.is_idle());
}

#[test]
fn a_burst_of_events_makes_one_reconcile() {
    let mut l = live_loop();
    expect_reconcile(&mut l);
    for (i, k) in ["in/b", "in/c", "in/d"].into_iter().enumerate() {
        l.event(put_event(k, "x", 11 + i as u64));
    }
    l.reconciled(Ok(vec![]));
    let view = expect_reconcile(&mut l);
    assert_eq!(view.len(), 4);
    assert_eq!(view.revision(), Revision(13));
    l.reconciled(Ok(vec![]));
    assert!(
        l.next_action().is_none(),
        "one reconcile for the whole burst"
    );
    assert_eq!(l.stats().reconciles, 2);
}

#[test]
fn commits_are_guarded_by_the_revisions_read_and_read_back_at_once() {
    let mut l = live_loop();
    l.event(put_event("out/a", "old", 11));
    expect_reconcile(&mut l);
    l.reconciled(Ok(vec![
        Change::put(key("out/a"), "new"),
        Change::put(key("out/b"), "fresh"),
        Change::delete(key("out/missing")), // no-op: dropped
    ]));
    let txn = expect_commit(&mut l);
    assert_eq!(
        guards(&txn),
        [
            ("out/a", CompareTarget::ModRevision(Revision(11))),
            ("out/b", CompareTarget::ModRevision(Revision::ZERO)),
        ]
    );
    assert_eq!(txn.then.len(), 2);
    l.committed(ok(12));
    let view = l.view();
    assert_eq!(view.get("out/a").unwrap().value, "new");
    assert_eq!(view.get("out/a").unwrap().version, 2);
    assert_eq!(view.get("out/b").unwrap().create_revision, Revision(12));
    // The watch echoes our own commit: nothing new to do.
    l.event(put_event("out/a", "new", 12));
    l.event(put_event("out/b", "fresh", 12));
    assert!(
        l.next_action().is_none(),
        "echoes of our own commit are ignored"
    );
    assert_eq!(l.stats().changes, 2);
}

/// Events that arrive while a reconcile runs move the live view, not the one the pass was
/// planned on: its changes keep the guards of what it read, so a key that moved meanwhile is a
/// conflict. Guarded by the live view instead, a put of a key deleted meanwhile was guarded by
/// "absent" and landed, a placement planned on a stale view (seed 2 of the stateful regression
/// in the simulation, once reconciles took their time: one identity on two nodes).
#[test]
fn changes_are_guarded_by_the_view_planned_on_not_by_events_that_came_meanwhile() {
    let mut l = live_loop();
    l.event(put_event("out/a", "old", 11));
    expect_reconcile(&mut l);
    l.event(WatchEvent {
        kind: EventKind::Delete,
        fact: fact("out/a", "old", 12),
        prev: None,
    });
    l.event(put_event("out/b", "new", 13));
    l.reconciled(Ok(vec![
        Change::put(key("out/a"), "planned"),
        Change::put(key("out/b"), "new"), // a no-op only by the live view: kept
    ]));
    let txn = expect_commit(&mut l);
    assert_eq!(
        guards(&txn),
        [
            ("out/a", CompareTarget::ModRevision(Revision(11))),
            ("out/b", CompareTarget::ModRevision(Revision::ZERO)),
        ]
    );
}

#[test]
fn the_echo_of_our_own_delete_reconciles_nothing() {
    let mut l = live_loop();
    expect_reconcile(&mut l);
    l.reconciled(Ok(vec![Change::put(key("out/x"), "1")]));
    expect_commit(&mut l);
    l.committed(ok(11));
    l.event(put_event("out/x", "1", 11));
    l.event(put_event("in/a", "2", 12));
    expect_reconcile(&mut l);
    l.reconciled(Ok(vec![Change::delete(key("out/x"))]));
    expect_commit(&mut l);
    l.committed(ok(13));
    l.event(WatchEvent {
        kind: EventKind::Delete,
        fact: fact("out/x", "", 13),
        prev: Some(fact("out/x", "1", 11)),
    });
    assert!(l.next_action().is_none(), "a delete's echo is ignored too");
    assert_eq!(l.stats().reconciles, 2);
}

#[test]
fn putting_the_value_already_held_commits_nothing() {
    let mut l = live_loop();
    l.event(put_event("out/a", "same", 11));
    expect_reconcile(&mut l);
    l.reconciled(Ok(vec![Change::put(key("out/a"), "same")]));
    assert!(l.next_action().is_none());
    assert_eq!(l.stats().commits, 0);
}

#[test]
fn writes_outside_the_domain_are_rejected_whole_and_restart_with_backoff() {
    let mut l = live_loop();
    expect_reconcile(&mut l);
    l.reconciled(Ok(vec![
        Change::put(key("out/ok"), "1"),
        Change::put(key("in/a"), "hijack"),
    ]));
    let (reason, retry_in) = expect_failed(&mut l);
    assert!(
        reason.contains("in/a") && reason.contains("write domain"),
        "{reason}"
    );
    assert_eq!(retry_in, ms(100));
    assert!(l.next_action().is_none());
    assert_eq!(l.stats().rejected, 1);
    l.tick(ms(99));
    assert!(l.next_action().is_none(), "not before the delay");
    l.tick(ms(100));
    assert!(matches!(l.next_action(), Some(Action::List { .. })));
}

#[test]
fn a_reconcile_that_writes_a_key_twice_is_rejected() {
    let mut l = live_loop();
    expect_reconcile(&mut l);
    l.reconciled(Ok(vec![
        Change::put(key("out/a"), "1"),
        Change::delete(key("out/a")),
    ]));
    let (reason, _) = expect_failed(&mut l);
    assert!(reason.contains("twice"), "{reason}");
}

#[test]
fn failures_restart_on_the_documented_schedule_and_success_resets_it() {
    let mut l = live_loop();
    let mut now = Duration::ZERO;
    let mut delays = Vec::new();
    for _ in 0..7 {
        expect_reconcile(&mut l);
        l.reconciled(Err(ReconcileFailure::Error(ReconcileError::failed("boom"))));
        let (_, retry_in) = expect_failed(&mut l);
        delays.push(retry_in.as_millis());
        now += retry_in;
        l.tick(now);
        assert!(matches!(l.next_action(), Some(Action::List { .. })));
        l.listed(Ok(vec![Scan::default(), Scan::default()]));
        assert!(matches!(l.next_action(), Some(Action::Watch { .. })));
    }
    assert_eq!(delays, [100, 500, 1000, 2000, 5000, 30000, 30000]);
    expect_reconcile(&mut l);
    l.reconciled(Ok(vec![]));
    l.event(put_event("in/z", "1", 20));
    expect_reconcile(&mut l);
    l.reconciled(Err(ReconcileFailure::Panicked("oops".into())));
    let (reason, retry_in) = expect_failed(&mut l);
    assert!(reason.contains("panicked: oops"));
    assert_eq!(retry_in, ms(100), "a success resets the schedule");
}

#[test]
fn a_store_that_answers_again_starts_the_restart_schedule_over() {
    let mut l = live_loop();
    let mut now = Duration::ZERO;
    let mut delays = Vec::new();
    let mut wait = |l: &mut ControllerLoop, delays: &mut Vec<u128>| {
        let (_, retry_in) = expect_failed(l);
        delays.push(retry_in.as_millis());
        now += retry_in;
        l.tick(now);
        assert!(matches!(l.next_action(), Some(Action::List { .. })));
    };
    expect_reconcile(&mut l);
    l.reconciled(Ok(vec![Change::put(key("out/x"), "1")]));
    expect_commit(&mut l);
    l.committed(Err(StoreError::unavailable("overloaded")));
    wait(&mut l, &mut delays);
    for _ in 0..2 {
        l.listed(Err(StoreError::unavailable("overloaded")));
        wait(&mut l, &mut delays);
    }
    assert_eq!(delays, [100, 500, 1000], "a store down: the schedule grows");
    l.listed(Ok(vec![Scan::default(), Scan::default()]));
    assert!(matches!(l.next_action(), Some(Action::Watch { .. })));
    expect_reconcile(&mut l);
    l.reconciled(Ok(vec![Change::put(key("out/x"), "1")]));
    expect_commit(&mut l);
    l.committed(Err(StoreError::unavailable("overloaded")));
    let (_, retry_in) = expect_failed(&mut l);
    assert_eq!(retry_in, ms(100), "the store answered a list in between");
}

#[test]
fn conflicts_retry_with_jittered_growing_delays_then_relist() {
    let mut l = live_loop();
    let mut now = Duration::ZERO;
    let mut waits = Vec::new();
    for attempt in 1..=5 {
        expect_reconcile(&mut l);
        l.reconciled(Ok(vec![Change::put(key("out/x"), "1")]));
        expect_commit(&mut l);
        l.committed(conflict());
        if attempt == 5 {
            break;
        }
        assert!(l.next_action().is_none(), "waits before retrying");
        let until = l.deadline().unwrap();
        waits.push(until - now);
        now = until;
        l.tick(now);
    }
    assert!(
        matches!(l.next_action(), Some(Action::List { .. })),
        "relists after 5 conflicts"
    );
    assert_eq!(l.stats().conflicts, 5);
    for (i, wait) in waits.iter().enumerate() {
        let full = ms(5) * (1 << i);
        assert!(*wait >= full / 2 && *wait < full, "attempt {i}: {wait:?}");
    }
}

#[test]
fn the_same_seed_gives_the_same_jitter() {
    let run = || {
        let mut l = live_loop();
        expect_reconcile(&mut l);
        l.reconciled(Ok(vec![Change::put(key("out/x"), "1")]));
        expect_commit(&mut l);
        l.committed(conflict());
        l.deadline()
    };
    assert_eq!(run(), run());
}

/// The deadline of the next resync, checked to be within the interval (30 s) of `listed_at`
/// and shorter by at most a tenth.
fn next_resync(l: &ControllerLoop, listed_at: Duration) -> Duration {
    let at = l.deadline().expect("a live loop always has a resync ahead");
    let wait = at - listed_at;
    let every = Duration::from_secs(30);
    assert!(
        wait <= every && wait >= every * 9 / 10,
        "resync after {wait:?}"
    );
    at
}

#[test]
fn resyncs_within_every_thirty_seconds() {
    let mut l = live_loop();
    expect_reconcile(&mut l);
    l.reconciled(Ok(vec![]));
    let at = next_resync(&l, Duration::ZERO);
    l.tick(at - ms(1));
    assert!(l.next_action().is_none());
    l.tick(at);
    assert!(matches!(l.next_action(), Some(Action::List { .. })));
    assert_eq!(l.stats().lists, 2);
}

#[test]
fn loops_started_together_spread_their_resyncs() {
    let resyncs: BTreeSet<Duration> = (0..20)
        .map(|seed| {
            let mut l =
                ControllerLoop::new(vec!["in/".into()], vec![], LoopConfig::default(), seed);
            assert!(matches!(l.next_action(), Some(Action::List { .. })));
            l.listed(Ok(vec![Scan {
                revision: Revision(1),
                facts: vec![],
            }]));
            next_resync(&l, Duration::ZERO)
        })
        .collect();
    assert!(resyncs.len() > 10, "{resyncs:?}");
}

/// The resync of [`live_loop`] at `at`, listing `in_a` and nothing under `out/`.
fn resync_listing(l: &mut ControllerLoop, at: Duration, in_a: Fact, revision: u64) {
    l.tick(at);
    assert!(matches!(l.next_action(), Some(Action::List { .. })));
    l.listed(Ok(vec![
        Scan {
            revision: Revision(revision),
            facts: vec![in_a],
        },
        Scan {
            revision: Revision(revision),
            facts: vec![],
        },
    ]));
    assert!(matches!(l.next_action(), Some(Action::Watch { .. })));
}

#[test]
fn a_resync_that_finds_the_facts_already_held_reconciles_nothing() {
    let mut l = live_loop();
    expect_reconcile(&mut l);
    l.reconciled(Ok(vec![]));
    // Writes elsewhere in the store moved its revision; nothing this loop reads changed.
    let first = next_resync(&l, Duration::ZERO);
    resync_listing(&mut l, first, fact("in/a", "1", 5), 40);
    assert!(l.next_action().is_none(), "no pass: nothing new to plan on");
    assert_eq!((l.stats().reconciles, l.stats().quiet_resyncs), (1, 1));
    assert_eq!(l.view().revision(), Revision(40));
    let second = next_resync(&l, first);

    // A change the watch missed is found by the next resync, and planned on.
    resync_listing(&mut l, second, fact("in/a", "2", 41), 42);
    let view = expect_reconcile(&mut l);
    assert_eq!(view.get("in/a").map(|f| f.mod_revision), Some(Revision(41)));
    assert_eq!(l.stats().quiet_resyncs, 1);
}

#[test]
fn a_pass_asked_for_comes_by_then_without_any_change() {
    let mut l = live_loop();
    let view = expect_reconcile(&mut l);
    l.tick(ms(10));
    l.reconciled_step(Reconciled {
        result: Ok(vec![]),
        events: Vec::new(),
        requeue: Some(Duration::from_secs(5)),
    });
    assert_eq!(l.deadline(), Some(ms(5_010)), "before the resync");
    l.tick(ms(5_009));
    assert!(l.next_action().is_none());
    l.tick(ms(5_010));
    let again = expect_reconcile(&mut l);
    assert!(again.holds_same_facts(&view), "on the view as it is");
    // That pass asks for nothing more: only the resync is left.
    l.reconciled(Ok(vec![]));
    assert!(next_resync(&l, Duration::ZERO) > ms(5_010));
}

#[test]
fn a_compacted_watch_relists_at_once_and_other_watch_errors_back_off() {
    let mut l = live_loop();
    expect_reconcile(&mut l);
    l.reconciled(Ok(vec![]));
    l.watch_failed(StoreError::Compacted {
        requested: Revision(11),
        earliest: Revision(50),
    });
    assert!(matches!(l.next_action(), Some(Action::List { .. })));

    let mut l = live_loop();
    expect_reconcile(&mut l);
    l.reconciled(Ok(vec![]));
    l.watch_failed(StoreError::unavailable("connection reset"));
    let (reason, retry_in) = expect_failed(&mut l);
    assert!(reason.contains("connection reset"));
    assert_eq!(retry_in, ms(100));
}

#[test]
fn a_watch_failure_during_a_reconcile_relists_after_it() {
    let mut l = live_loop();
    expect_reconcile(&mut l);
    l.watch_failed(StoreError::Compacted {
        requested: Revision(11),
        earliest: Revision(50),
    });
    l.reconciled(Ok(vec![]));
    assert!(matches!(l.next_action(), Some(Action::List { .. })));
}

#[test]
fn more_changes_than_one_transaction_takes_are_committed_in_consecutive_transactions() {
    let mut l = marked_loop();
    l.set_max_changes(3);
    expect_reconcile(&mut l);
    let all: Vec<Change> = (0..5)
        .map(|i| Change::put(key(&format!("out/{i}")), "v"))
        .collect();
    l.reconciled(Ok(all));
    // Meanwhile another writer moves a key of the pass: the view follows, the guard does not.
    l.event(put_event("out/4", "theirs", 15));
    let mut revision = 20;
    let mut txns = Vec::new();
    while let Some(Action::Commit { txn }) = l.next_action() {
        revision += 1;
        txns.push(txn);
        l.committed(ok(revision));
    }
    assert_eq!(
        txns.len(),
        3,
        "two changes and the marker per transaction: {txns:?}"
    );
    assert_eq!(
        l.stats().reconciles,
        2,
        "one reconcile for the whole pass, then one for the other writer's change"
    );
    assert_eq!(l.stats().changes, 5);
    let guard = |txn: &crate::Txn, k: &str| {
        txn.compares
            .iter()
            .find(|c| c.key.as_str() == k)
            .map(|c| c.target.clone())
    };
    assert_eq!(
        guard(&txns[0], "runner/commit/c"),
        Some(CompareTarget::ModRevision(Revision(7)))
    );
    assert_eq!(
        guard(&txns[2], "out/4"),
        Some(CompareTarget::ModRevision(Revision::ZERO)),
        "guarded by the reconciled view, not the live one"
    );
    assert_eq!(
        guard(&txns[1], "runner/commit/c"),
        Some(CompareTarget::ModRevision(Revision(21))),
        "the marker is guarded by the pass's own transaction before"
    );
}

#[test]
fn a_conflict_drops_the_rest_of_a_pass() {
    let mut l = live_loop();
    l.set_max_changes(2);
    expect_reconcile(&mut l);
    let all: Vec<Change> = (0..4)
        .map(|i| Change::put(key(&format!("out/{i}")), "v"))
        .collect();
    l.reconciled(Ok(all));
    expect_commit(&mut l);
    l.committed(ok(21));
    expect_commit(&mut l);
    l.committed(conflict());
    assert!(l.next_action().is_none(), "waits for the conflict delay");
    l.tick(Duration::from_secs(2));
    let view = expect_reconcile(&mut l);
    assert!(
        view.contains("out/1") && !view.contains("out/2"),
        "{view:?}"
    );
}

#[test]
fn a_fatal_error_stops_the_loop() {
    let mut l = live_loop();
    expect_reconcile(&mut l);
    l.reconciled(Err(ReconcileFailure::Error(ReconcileError::fatal(
        "corrupt",
    ))));
    assert!(matches!(l.next_action(), Some(Action::Fatal { message }) if message == "corrupt"));
    assert!(l.is_stopped());
    l.event(put_event("in/q", "1", 30));
    assert!(l.next_action().is_none());
}

#[test]
fn stale_events_do_not_overwrite_newer_facts() {
    let mut l = live_loop();
    expect_reconcile(&mut l);
    l.reconciled(Ok(vec![]));
    l.event(put_event("in/a", "stale", 4));
    assert!(l.next_action().is_none());
    assert_eq!(l.view().get("in/a").unwrap().value, "1");
    l.event(WatchEvent {
        kind: EventKind::Delete,
        fact: fact("in/a", "", 12),
        prev: Some(fact("in/a", "1", 5)),
    });
    assert!(!l.view().contains("in/a"));
    expect_reconcile(&mut l);
}

/// A loop over `in/` writing `out/` with the commit marker of controller `c`, listed at revision
/// 10 with the marker last written at 7.
fn marked_loop() -> ControllerLoop {
    let mut l = ControllerLoop::new(
        vec!["in/".into()],
        vec!["out/".into()],
        LoopConfig::default(),
        1,
    );
    l.set_commit_marker(commit_marker("c").unwrap());
    let Some(Action::List { prefixes }) = l.next_action() else {
        panic!("expected a list");
    };
    assert_eq!(prefixes, ["in/", "out/", "runner/commit/c"]);
    let scan = |facts| Scan {
        revision: Revision(10),
        facts,
    };
    l.listed(Ok(vec![
        scan(vec![fact("in/a", "1", 5)]),
        scan(vec![]),
        scan(vec![fact("runner/commit/c", "commit", 7)]),
    ]));
    assert!(matches!(l.next_action(), Some(Action::Watch { .. })));
    l
}

fn marker_guard(txn: &crate::Txn) -> Option<Revision> {
    txn.compares.iter().find_map(|c| match c.target {
        CompareTarget::ModRevision(rev) if c.key.as_str() == "runner/commit/c" => Some(rev),
        _ => None,
    })
}

#[test]
fn every_commit_rewrites_the_marker_guarded_by_its_revision() {
    let mut l = marked_loop();
    expect_reconcile(&mut l);
    l.reconciled(Ok(vec![Change::put(key("out/x"), "1")]));
    let txn = expect_commit(&mut l);
    assert_eq!(marker_guard(&txn), Some(Revision(7)));
    assert!(
        txn.then
            .iter()
            .any(|op| op.key().as_str() == "runner/commit/c"),
        "the commit moves the marker"
    );
    l.committed(ok(11));
    // Our own commit moved it: the next commit is guarded by 11, and the echo changes nothing.
    l.event(put_event("runner/commit/c", "commit", 11));
    assert!(l.next_action().is_none(), "an echo does not reconcile");
    l.event(put_event("in/a", "2", 12));
    expect_reconcile(&mut l);
    l.reconciled(Ok(vec![Change::put(key("out/x"), "2")]));
    assert_eq!(marker_guard(&expect_commit(&mut l)), Some(Revision(11)));
}

#[test]
fn a_late_commit_of_an_earlier_loop_makes_the_next_one_reconcile_again() {
    let mut l = marked_loop();
    expect_reconcile(&mut l);
    // Planned on a view without the earlier loop's late write...
    l.reconciled(Ok(vec![Change::put(key("out/y"), "mine")]));
    let txn = expect_commit(&mut l);
    assert_eq!(marker_guard(&txn), Some(Revision(7)));
    // ...which landed meanwhile and moved the marker: the store refuses the commit.
    l.committed(conflict());
    l.event(put_event("out/x", "theirs", 12));
    l.event(put_event("runner/commit/c", "commit", 12));
    l.tick(Duration::from_secs(2));
    let view = expect_reconcile(&mut l);
    assert!(view.get("out/x").is_some(), "the retry sees the late write");
    l.reconciled(Ok(vec![Change::put(key("out/y"), "mine")]));
    assert_eq!(marker_guard(&expect_commit(&mut l)), Some(Revision(12)));
}

#[test]
fn events_ride_in_the_commit_of_their_changes_under_the_events_lease() {
    let mut l = live_loop();
    l.set_event_writer("c");
    let _ = expect_reconcile(&mut l);
    let placed = || crate::Event::new("web-1", crate::event::reasons::PLACED, "on n1");

    // No lease yet: the changes commit, the event is dropped.
    l.reconciled_with(Ok(vec![Change::put(key("out/x"), "1")]), vec![placed()]);
    let txn = expect_commit(&mut l);
    assert_eq!(txn.then.len(), 1);
    assert_eq!(l.stats().events_dropped, 1);
    l.committed(ok(11));

    // With a lease: one more put, attached to it, in the ring of web-1, naming its writer.
    l.set_events_lease(Some(crate::LeaseId(7)));
    l.event(put_event("in/b", "2", 12));
    let _ = expect_reconcile(&mut l);
    l.reconciled_with(Ok(vec![Change::put(key("out/y"), "1")]), vec![placed()]);
    let txn = expect_commit(&mut l);
    let Some(crate::Op::Put {
        key: k,
        value,
        lease,
    }) = txn.then.last()
    else {
        panic!("expected the event's put last: {txn:?}");
    };
    assert_eq!(k.as_str(), "event/web-1/c/00");
    assert_eq!(*lease, Some(crate::LeaseId(7)));
    let event: crate::Event = serde_json::from_slice(value).unwrap();
    assert_eq!(
        (event.source.as_str(), event.message.as_str()),
        ("c", "on n1")
    );
    assert!(
        txn.compares.iter().all(|c| !c.key.has_prefix("event/")),
        "events are not guarded"
    );
    l.committed(ok(13));

    // A reconcile that changes nothing writes no event.
    l.event(put_event("in/c", "3", 14));
    let _ = expect_reconcile(&mut l);
    l.reconciled_with(Ok(vec![]), vec![placed()]);
    assert!(l.next_action().is_none());
    assert_eq!(l.stats().events_written, 1);
}

/// The fence of a leader of term 42 on `leader`.
fn fence() -> crate::Compare {
    crate::Compare::new(
        key("leader"),
        crate::CmpOp::Equal,
        CompareTarget::CreateRevision(Revision(42)),
    )
}

#[test]
fn every_commit_carries_the_fences_and_leaves_room_for_them() {
    let mut l = live_loop();
    l.set_fences(vec![fence()]);
    l.set_max_changes(3);
    expect_reconcile(&mut l);
    let changes = ["out/a", "out/b", "out/c"].map(|k| Change::put(key(k), "1"));
    l.reconciled(Ok(changes.to_vec()));
    let txn = expect_commit(&mut l);
    assert!(txn.compares.contains(&fence()), "{txn:?}");
    assert_eq!(
        txn.then.len() + 1,
        3,
        "two changes and the fence fill an op limit of 3"
    );
}

#[test]
fn a_conflict_under_fences_that_hold_is_a_lost_race() {
    let mut l = live_loop();
    l.set_fences(vec![fence()]);
    expect_reconcile(&mut l);
    l.reconciled(Ok(vec![Change::put(key("out/x"), "1")]));
    expect_commit(&mut l);
    l.committed(conflict());
    let Some(Action::CheckFences { txn }) = l.next_action() else {
        panic!("a conflict under fences checks them");
    };
    assert_eq!(txn.compares, [fence()]);
    assert!(txn.then.is_empty() && txn.otherwise.is_empty());
    l.fences_checked(ok(12));
    assert_eq!(l.stats().conflicts, 1);
    l.tick(Duration::from_secs(2));
    expect_reconcile(&mut l);
}

#[test]
fn a_conflict_under_fences_that_fail_deposes_the_loop() {
    let mut l = live_loop();
    l.set_fences(vec![fence()]);
    expect_reconcile(&mut l);
    l.reconciled(Ok(vec![Change::put(key("out/x"), "1")]));
    expect_commit(&mut l);
    l.committed(conflict());
    assert!(matches!(l.next_action(), Some(Action::CheckFences { .. })));
    l.fences_checked(conflict());
    assert!(matches!(l.next_action(), Some(Action::Deposed)));
    assert!(l.is_stopped());
    l.event(put_event("in/a", "9", 20));
    l.tick(Duration::from_secs(60));
    assert!(
        l.next_action().is_none(),
        "a deposed loop does nothing more"
    );
    assert_eq!(l.stats().conflicts, 0, "not a lost race");
}

#[test]
fn a_loop_without_fences_takes_a_conflict_for_a_lost_race_at_once() {
    let mut l = live_loop();
    expect_reconcile(&mut l);
    l.reconciled(Ok(vec![Change::put(key("out/x"), "1")]));
    expect_commit(&mut l);
    l.committed(conflict());
    assert!(l.next_action().is_none(), "waits for the conflict delay");
    assert_eq!(l.stats().conflicts, 1);
}
