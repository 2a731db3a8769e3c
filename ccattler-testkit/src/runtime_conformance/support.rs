//! Helpers the checks share: runtime calls that name the check when they fail, waits on
//! observed state that time out instead of hanging, and teardown.

use std::fmt::Debug;
use std::time::{Duration, Instant};

use ccattler_core::{InstanceSpec, InstanceState, ObservedInstance, Runtime, RuntimeError};

/// How long an instance may take to reach the state a check waits for.
pub const STATE_TIMEOUT: Duration = Duration::from_secs(10);

/// How often waits poll `observe`.
pub const POLL: Duration = Duration::from_millis(10);

/// The value of a successful runtime call; panics naming the check when it failed.
pub fn ok<T>(result: Result<T, RuntimeError>, check: &str, what: &str) -> T {
    match result {
        Ok(value) => value,
        Err(e) => panic!("{check}: {what} failed: {e} ({e:?})"),
    }
}

/// The error of a runtime call that must fail; panics naming the check when it succeeded.
pub fn err<T: Debug>(result: Result<T, RuntimeError>, check: &str, what: &str) -> RuntimeError {
    match result {
        Ok(value) => panic!("{check}: {what} succeeded with {value:?}, expected an error"),
        Err(e) => e,
    }
}

/// Starts an instance; panics naming the check when the start fails.
pub async fn start<R: Runtime>(runtime: &R, spec: &InstanceSpec, check: &str) {
    let what = format!("ensure_running({})", spec.id);
    ok(runtime.ensure_running(spec).await, check, &what);
}

/// What `observe` says about `id`, if it lists it.
pub async fn find<R: Runtime>(runtime: &R, id: &str, check: &str) -> Option<ObservedInstance> {
    let seen = ok(runtime.observe().await, check, "observe()");
    seen.into_iter().find(|i| i.id == id)
}

/// Polls `observe` until `id` is listed in a state that satisfies `wanted`; panics naming the
/// check (and the last state seen) after [`STATE_TIMEOUT`].
pub async fn wait_for<R: Runtime>(
    runtime: &R,
    id: &str,
    wanted: impl Fn(&InstanceState) -> bool,
    expected: &str,
    check: &str,
) -> ObservedInstance {
    let deadline = Instant::now() + STATE_TIMEOUT;
    loop {
        let last = find(runtime, id, check).await;
        match last {
            Some(seen) if wanted(&seen.state) => return seen,
            _ if Instant::now() >= deadline => {
                panic!("{check}: {id} never became {expected}; last seen {last:?}")
            }
            _ => tokio::time::sleep(POLL).await,
        }
    }
}

/// Waits until `id` runs.
pub async fn wait_running<R: Runtime>(runtime: &R, id: &str, check: &str) -> ObservedInstance {
    let running = |s: &InstanceState| *s == InstanceState::Running;
    wait_for(runtime, id, running, "Running", check).await
}

/// Polls `logs(id, 100)` until it holds a line equal to `line`; panics after [`STATE_TIMEOUT`].
pub async fn wait_for_line<R: Runtime>(runtime: &R, id: &str, line: &str, check: &str) {
    let deadline = Instant::now() + STATE_TIMEOUT;
    loop {
        let logs = ok(runtime.logs(id, 100).await, check, &format!("logs({id})"));
        if logs.lines().any(|l| l == line) {
            return;
        }
        if Instant::now() >= deadline {
            panic!("{check}: {id} never printed {line:?}; its logs: {logs:?}");
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Stops and removes every instance the runtime knows of.
pub async fn teardown<R: Runtime>(runtime: &R, check: &str) {
    for seen in ok(runtime.observe().await, check, "observe() at teardown") {
        let what = format!("ensure_stopped({}) at teardown", seen.id);
        ok(
            runtime.ensure_stopped(&seen.id, Duration::ZERO).await,
            check,
            &what,
        );
        let what = format!("remove({}) at teardown", seen.id);
        ok(runtime.remove(&seen.id).await, check, &what);
    }
}
