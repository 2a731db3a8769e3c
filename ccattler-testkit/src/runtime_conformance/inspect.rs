//! Checks of asking about instances: their logs, commands run inside them, their resource use,
//! and what happens with a command or an id that does not exist.

use std::time::Duration;

use ccattler_core::{InstanceState, Runtime, RuntimeError};

use super::RuntimeHarness;
use super::support::{err, find, ok, start, teardown, wait_for_line, wait_running};

/// `logs(id, n)` returns the last `n` lines the instance printed, in order.
pub async fn logs_tail<H: RuntimeHarness>(h: &H) {
    const CHECK: &str = "logs_tail";
    let rt = h.fresh().await;
    start(&rt, &h.printing("talk-1", &["one", "two", "three"]), CHECK).await;
    wait_for_line(&rt, "talk-1", "three", CHECK).await;
    let two = ok(rt.logs("talk-1", 2).await, CHECK, "logs(talk-1, 2)");
    let lines: Vec<&str> = two.lines().collect();
    assert_eq!(
        lines,
        ["two", "three"],
        "{CHECK}: logs(talk-1, 2) = {two:?}"
    );
    let all = ok(rt.logs("talk-1", 100).await, CHECK, "logs(talk-1, 100)");
    let lines: Vec<&str> = all.lines().collect();
    assert_eq!(
        lines,
        ["one", "two", "three"],
        "{CHECK}: logs(talk-1, 100) = {all:?}"
    );
    teardown(&rt, CHECK).await;
}

/// `exec` in a running instance returns the command's exit code and what it printed.
pub async fn exec_returns_code_and_output<H: RuntimeHarness>(h: &H) {
    const CHECK: &str = "exec_returns_code_and_output";
    let rt = h.fresh().await;
    start(&rt, &h.long_running("probe-1"), CHECK).await;
    wait_running(&rt, "probe-1", CHECK).await;
    let timeout = Duration::from_secs(10);
    for (text, code) in [("hello", 0), ("failing", 3)] {
        let command = h.exec_command(text, code);
        let what = format!("exec(probe-1, {command:?})");
        let out = ok(rt.exec("probe-1", &command, timeout).await, CHECK, &what);
        assert_eq!(out.code, code, "{CHECK}: {what} returned {out:?}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            stdout.trim_end(),
            text,
            "{CHECK}: {what} printed {stdout:?}"
        );
    }
    teardown(&rt, CHECK).await;
}

/// A running instance reports some resident memory.
pub async fn stats_report_memory<H: RuntimeHarness>(h: &H) {
    const CHECK: &str = "stats_report_memory";
    let rt = h.fresh().await;
    start(&rt, &h.long_running("busy-1"), CHECK).await;
    wait_running(&rt, "busy-1", CHECK).await;
    let stats = ok(rt.stats("busy-1").await, CHECK, "stats(busy-1)");
    assert!(
        stats.memory.bytes() > 0,
        "{CHECK}: stats of a running instance: {stats:?}"
    );
    teardown(&rt, CHECK).await;
}

/// A command that does not exist is reported: `ensure_running` fails with
/// [`RuntimeError::CommandNotFound`], or the instance is observed `Failed` with a reason. It is
/// never observed running.
pub async fn missing_command_is_reported<H: RuntimeHarness>(h: &H) {
    const CHECK: &str = "missing_command_is_reported";
    let rt = h.fresh().await;
    let result = rt.ensure_running(&h.missing_command("ghost-1")).await;
    let typed = match &result {
        Err(RuntimeError::CommandNotFound { command }) => {
            assert!(
                !command.is_empty(),
                "{CHECK}: CommandNotFound names no command"
            );
            true
        }
        Err(e) => panic!("{CHECK}: ensure_running failed with {e:?}, expected CommandNotFound"),
        Ok(()) => false,
    };
    let seen = find(&rt, "ghost-1", CHECK).await.map(|i| i.state);
    match seen {
        Some(InstanceState::Failed { reason }) => {
            assert!(!reason.is_empty(), "{CHECK}: Failed without a reason");
        }
        None if typed => {}
        other => panic!("{CHECK}: a missing command is observed as {other:?}, result {result:?}"),
    }
    teardown(&rt, CHECK).await;
}

/// `stats`, `logs` and `exec` on an id the runtime does not know fail with `NotFound`.
pub async fn unknown_ids_are_not_found<H: RuntimeHarness>(h: &H) {
    const CHECK: &str = "unknown_ids_are_not_found";
    let rt = h.fresh().await;
    let is_not_found = |e: &RuntimeError| matches!(e, RuntimeError::NotFound(id) if id == "nobody");
    let e = err(rt.stats("nobody").await, CHECK, "stats(nobody)");
    assert!(is_not_found(&e), "{CHECK}: stats(nobody) failed with {e:?}");
    let e = err(rt.logs("nobody", 10).await, CHECK, "logs(nobody)");
    assert!(is_not_found(&e), "{CHECK}: logs(nobody) failed with {e:?}");
    let command = h.exec_command("x", 0);
    let e = err(
        rt.exec("nobody", &command, Duration::from_secs(5)).await,
        CHECK,
        "exec(nobody)",
    );
    assert!(is_not_found(&e), "{CHECK}: exec(nobody) failed with {e:?}");
    teardown(&rt, CHECK).await;
}
