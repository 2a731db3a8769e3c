//! Checks of the life of an instance: start, observe, exit, restart, remove, adoption.

use std::collections::BTreeSet;

use ccattler_core::{InstanceState, Runtime};

use super::RuntimeHarness;
use super::support::{find, ok, start, teardown, wait_for, wait_running};

/// Starting an instance twice starts it once: one instance, running, no restart.
pub async fn ensure_running_is_idempotent<H: RuntimeHarness>(h: &H) {
    const CHECK: &str = "ensure_running_is_idempotent";
    let rt = h.fresh().await;
    let spec = h.long_running("idem-1");
    start(&rt, &spec, CHECK).await;
    let first = wait_running(&rt, "idem-1", CHECK).await;
    start(&rt, &spec, CHECK).await;
    let seen = ok(rt.observe().await, CHECK, "observe()");
    let ours: Vec<_> = seen.iter().filter(|i| i.id == "idem-1").collect();
    assert_eq!(ours.len(), 1, "{CHECK}: observe() lists {ours:?}");
    assert_eq!(ours[0].state, InstanceState::Running, "{CHECK}: {ours:?}");
    assert_eq!(
        ours[0].restarts, 0,
        "{CHECK}: a second ensure_running restarted it"
    );
    assert_eq!(*ours[0], first, "{CHECK}: the observation changed");
    teardown(&rt, CHECK).await;
}

/// A started instance is observed running, with no address when it asks for no port, and a
/// fresh runtime observes nothing. Observing some ids shows those of them the runtime knows,
/// as observing every instance does.
pub async fn observe_shows_running<H: RuntimeHarness>(h: &H) {
    const CHECK: &str = "observe_shows_running";
    let rt = h.fresh().await;
    let empty = ok(rt.observe().await, CHECK, "observe() of a fresh runtime");
    assert!(
        empty.is_empty(),
        "{CHECK}: a fresh runtime observes {empty:?}"
    );
    start(&rt, &h.long_running("obs-1"), CHECK).await;
    start(&rt, &h.long_running("obs-2"), CHECK).await;
    let one = wait_running(&rt, "obs-1", CHECK).await;
    wait_running(&rt, "obs-2", CHECK).await;
    assert_eq!(one.restarts, 0, "{CHECK}: {one:?}");
    assert!(one.address.is_none(), "{CHECK}: no port asked, got {one:?}");
    let ids = BTreeSet::from(["obs-1".to_owned(), "obs-unknown".to_owned()]);
    let some = ok(rt.observe_some(&ids).await, CHECK, "observe_some()");
    assert_eq!(
        some,
        vec![one],
        "{CHECK}: observe_some() of obs-1 and an unknown id"
    );
    teardown(&rt, CHECK).await;
}

/// An instance that ends on its own is observed `Exited` with its exit code, and stays listed.
pub async fn exit_code_is_captured<H: RuntimeHarness>(h: &H) {
    const CHECK: &str = "exit_code_is_captured";
    let rt = h.fresh().await;
    start(&rt, &h.exiting("exit-3", 3), CHECK).await;
    start(&rt, &h.exiting("exit-0", 0), CHECK).await;
    let three = |s: &InstanceState| *s == InstanceState::Exited { code: 3 };
    wait_for(&rt, "exit-3", three, "Exited { code: 3 }", CHECK).await;
    let zero = |s: &InstanceState| *s == InstanceState::Exited { code: 0 };
    wait_for(&rt, "exit-0", zero, "Exited { code: 0 }", CHECK).await;
    let again = find(&rt, "exit-3", CHECK).await;
    assert!(again.is_some(), "{CHECK}: an exited instance vanished");
    teardown(&rt, CHECK).await;
}

/// `ensure_running` on an ended instance starts it again and counts one restart per start.
pub async fn restart_after_exit_is_counted<H: RuntimeHarness>(h: &H) {
    const CHECK: &str = "restart_after_exit_is_counted";
    let rt = h.fresh().await;
    let spec = h.exiting("again-1", 4);
    let exited = |s: &InstanceState| *s == InstanceState::Exited { code: 4 };
    start(&rt, &spec, CHECK).await;
    wait_for(&rt, "again-1", exited, "Exited { code: 4 }", CHECK).await;
    for expected in 1..=2 {
        start(&rt, &spec, CHECK).await;
        let seen = wait_for(&rt, "again-1", exited, "Exited { code: 4 }", CHECK).await;
        assert_eq!(
            seen.restarts, expected,
            "{CHECK}: after restart {expected}: {seen:?}"
        );
    }
    let stopped = h.long_running("again-2");
    start(&rt, &stopped, CHECK).await;
    wait_running(&rt, "again-2", CHECK).await;
    ok(
        rt.ensure_stopped("again-2", std::time::Duration::ZERO)
            .await,
        CHECK,
        "ensure_stopped(again-2)",
    );
    start(&rt, &stopped, CHECK).await;
    let seen = wait_running(&rt, "again-2", CHECK).await;
    assert_eq!(seen.restarts, 1, "{CHECK}: a start after a stop: {seen:?}");
    teardown(&rt, CHECK).await;
}

/// A removed instance is no longer observed, and its id can start afresh (no restarts).
pub async fn remove_forgets<H: RuntimeHarness>(h: &H) {
    const CHECK: &str = "remove_forgets";
    let rt = h.fresh().await;
    let spec = h.long_running("gone-1");
    start(&rt, &spec, CHECK).await;
    wait_running(&rt, "gone-1", CHECK).await;
    let zero = std::time::Duration::ZERO;
    ok(
        rt.ensure_stopped("gone-1", zero).await,
        CHECK,
        "ensure_stopped",
    );
    ok(rt.remove("gone-1").await, CHECK, "remove(gone-1)");
    let left = find(&rt, "gone-1", CHECK).await;
    assert!(
        left.is_none(),
        "{CHECK}: still observed after remove: {left:?}"
    );
    start(&rt, &spec, CHECK).await;
    let fresh = wait_running(&rt, "gone-1", CHECK).await;
    assert_eq!(fresh.restarts, 0, "{CHECK}: a removed id kept its restarts");
    teardown(&rt, CHECK).await;
}

/// A second runtime object over the same state (an agent restart) sees the running instance as
/// it was, and can stop it. Skipped when the harness cannot reopen.
pub async fn adoption_keeps_identity<H: RuntimeHarness>(h: &H) {
    const CHECK: &str = "adoption_keeps_identity";
    let rt = h.fresh().await;
    start(&rt, &h.long_running("adopt-1"), CHECK).await;
    let before = wait_running(&rt, "adopt-1", CHECK).await;
    let Some(again) = h.reopen(&rt).await else {
        eprintln!("{CHECK}: skipped, the harness cannot reopen a runtime");
        teardown(&rt, CHECK).await;
        return;
    };
    let after = find(&again, "adopt-1", CHECK).await;
    assert_eq!(after.as_ref(), Some(&before), "{CHECK}: after reopening");
    start(&again, &h.long_running("adopt-1"), CHECK).await;
    let still = find(&again, "adopt-1", CHECK).await;
    assert_eq!(
        still,
        Some(before),
        "{CHECK}: ensure_running on an adopted instance"
    );
    let grace = std::time::Duration::from_secs(5);
    ok(
        again.ensure_stopped("adopt-1", grace).await,
        CHECK,
        "ensure_stopped(adopt-1)",
    );
    let stopped = find(&again, "adopt-1", CHECK).await.map(|i| i.state);
    assert_eq!(
        stopped,
        Some(InstanceState::Stopped),
        "{CHECK}: after the stop"
    );
    teardown(&again, CHECK).await;
    teardown(&rt, CHECK).await;
}
