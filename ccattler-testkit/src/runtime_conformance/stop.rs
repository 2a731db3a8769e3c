//! Checks of stops: polite, forced after the grace period, and idempotent.

use std::time::{Duration, Instant};

use ccattler_core::{InstanceState, Runtime};

use super::RuntimeHarness;
use super::support::{find, ok, start, teardown, wait_for_line, wait_running};

/// The observed state of `id`, which must be listed.
async fn state_of<R: Runtime>(rt: &R, id: &str, check: &str) -> InstanceState {
    match find(rt, id, check).await {
        Some(seen) => seen.state,
        None => panic!("{check}: {id} is not observed"),
    }
}

/// An instance that honours SIGTERM stops well within a long grace period, and is `Stopped`.
pub async fn stop_honours_term<H: RuntimeHarness>(h: &H) {
    const CHECK: &str = "stop_honours_term";
    let rt = h.fresh().await;
    start(&rt, &h.long_running("term-1"), CHECK).await;
    wait_running(&rt, "term-1", CHECK).await;
    let grace = Duration::from_secs(20);
    let begun = Instant::now();
    ok(
        rt.ensure_stopped("term-1", grace).await,
        CHECK,
        "ensure_stopped(term-1, 20 s)",
    );
    let took = begun.elapsed();
    assert!(took < grace / 2, "{CHECK}: a polite stop took {took:?}");
    let state = state_of(&rt, "term-1", CHECK).await;
    assert_eq!(state, InstanceState::Stopped, "{CHECK}: after the stop");
    teardown(&rt, CHECK).await;
}

/// An instance that ignores SIGTERM is killed once the grace period is over, and is `Stopped`.
pub async fn stop_forces_after_grace<H: RuntimeHarness>(h: &H) {
    const CHECK: &str = "stop_forces_after_grace";
    let rt = h.fresh().await;
    start(&rt, &h.ignoring_term("stubborn-1"), CHECK).await;
    wait_running(&rt, "stubborn-1", CHECK).await;
    wait_for_line(&rt, "stubborn-1", "ready", CHECK).await;
    let grace = Duration::from_millis(300);
    let begun = Instant::now();
    let what = "ensure_stopped(stubborn-1, 300 ms)";
    ok(rt.ensure_stopped("stubborn-1", grace).await, CHECK, what);
    let took = begun.elapsed();
    if h.takes_real_time() {
        assert!(
            took >= grace,
            "{CHECK}: stopped after {took:?}, before the grace period"
        );
    }
    assert!(
        took < Duration::from_secs(10),
        "{CHECK}: the forced stop took {took:?}"
    );
    let state = state_of(&rt, "stubborn-1", CHECK).await;
    assert_eq!(
        state,
        InstanceState::Stopped,
        "{CHECK}: after the forced stop"
    );
    teardown(&rt, CHECK).await;
}

/// Stopping an unknown, a stopped or an exited instance succeeds and changes nothing.
pub async fn stop_is_idempotent<H: RuntimeHarness>(h: &H) {
    const CHECK: &str = "stop_is_idempotent";
    let rt = h.fresh().await;
    let zero = Duration::ZERO;
    ok(
        rt.ensure_stopped("nobody", zero).await,
        CHECK,
        "ensure_stopped(unknown)",
    );
    let listed = find(&rt, "nobody", CHECK).await;
    assert!(
        listed.is_none(),
        "{CHECK}: stopping an unknown id made {listed:?}"
    );

    start(&rt, &h.long_running("twice-1"), CHECK).await;
    wait_running(&rt, "twice-1", CHECK).await;
    ok(
        rt.ensure_stopped("twice-1", zero).await,
        CHECK,
        "first ensure_stopped",
    );
    ok(
        rt.ensure_stopped("twice-1", zero).await,
        CHECK,
        "second ensure_stopped",
    );
    let state = state_of(&rt, "twice-1", CHECK).await;
    assert_eq!(state, InstanceState::Stopped, "{CHECK}: after two stops");

    start(&rt, &h.exiting("done-1", 5), CHECK).await;
    let exited = |s: &InstanceState| *s == InstanceState::Exited { code: 5 };
    super::support::wait_for(&rt, "done-1", exited, "Exited { code: 5 }", CHECK).await;
    ok(
        rt.ensure_stopped("done-1", zero).await,
        CHECK,
        "ensure_stopped(exited)",
    );
    let state = state_of(&rt, "done-1", CHECK).await;
    assert_eq!(
        state,
        InstanceState::Exited { code: 5 },
        "{CHECK}: a stop rewrote the exit"
    );
    teardown(&rt, CHECK).await;
}
