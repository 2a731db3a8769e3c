//! ContainerdRuntime against a real containerd (start it with `scripts/containerd-up`).
//!
//! The socket comes from `CCATTLER_CONTAINERD_SOCKET`, else the path `scripts/containerd-up`
//! wrote to `/tmp/ccattler-containerd/socket-path`. Without an answering containerd every test
//! that needs one fails when `CI=true`, and prints that it was skipped otherwise.
#![cfg(feature = "containerd")]

use std::path::Path;
use std::time::{Duration, Instant};

use ccattler_core::{InstanceSpec, InstanceState, ObservedInstance, Runtime, RuntimeError};
use ccattler_runtime::containerd::test_image::{self, DEBIAN_BUSYBOX, write_busybox_archive};
use ccattler_runtime::containerd::{ContainerdConfig, ContainerdRuntime, PullPolicy};
use ccattler_testkit::runtime_conformance::{RuntimeHarness, run_runtime_conformance};
use tokio::sync::OnceCell;

const NAMESPACE: &str = "ccattler-test";
const IMAGE: &str = "local/ccattler-busybox:1";
const SCRIPT: &str = "echo hello; echo oops >&2; trap 'exit 143' TERM; sleep 1000 & wait";
const LONG: [&str; 3] = ["sh", "-c", SCRIPT];

fn config() -> ContainerdConfig {
    // Imported images only: a missing one is ImageNotFound, not a pull (tests/containerd_pull.rs).
    ContainerdConfig::default()
        .state_dir(std::env::temp_dir().join("ccattler-containerd-tests"))
        .pull_policy(PullPolicy::Never)
}

/// Connects and makes sure the busybox image is imported; `None` (after saying so) when
/// containerd is not running and this is not CI.
async fn setup() -> Option<ContainerdRuntime> {
    static IMPORTED: OnceCell<()> = OnceCell::const_new();
    setup_in(NAMESPACE, &IMPORTED).await
}

async fn setup_in(namespace: &str, imported: &OnceCell<()>) -> Option<ContainerdRuntime> {
    let socket = test_image::test_socket();
    let runtime = match ContainerdRuntime::connect(&socket, namespace, config()).await {
        Ok(runtime) => runtime,
        Err(e) => {
            let why = format!("containerd not running at {} ({e})", socket.display());
            if std::env::var("CI").as_deref() == Ok("true") {
                panic!("containerd tests need containerd (run scripts/containerd-up): {why}");
            }
            // Straight to stderr, past the test harness's capture, so that the skip is seen.
            let line = format!("SKIPPED: {why} (run scripts/containerd-up)\n");
            let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
            return None;
        }
    };
    imported
        .get_or_init(|| async {
            let archive =
                std::env::temp_dir().join(format!("ccattler-busybox-{}.tar", std::process::id()));
            write_busybox_archive(Path::new(DEBIAN_BUSYBOX), IMAGE, &archive).unwrap_or_else(|e| {
                panic!("cannot build the busybox image from {DEBIAN_BUSYBOX}: {e}")
            });
            let imported = runtime.import_oci_archive(&archive, None).await;
            let _ = std::fs::remove_file(&archive);
            assert_eq!(imported.ok().as_deref(), Some(IMAGE));
        })
        .await;
    Some(runtime)
}

fn spec(id: &str, argv: &[&str]) -> InstanceSpec {
    let mut spec = InstanceSpec::new(id, IMAGE).command(argv.iter().copied());
    spec.service = "tests".to_owned();
    spec
}

async fn state_of(runtime: &ContainerdRuntime, id: &str) -> Option<ObservedInstance> {
    let observed = runtime
        .observe()
        .await
        .unwrap_or_else(|e| panic!("observe: {e}"));
    observed.into_iter().find(|o| o.id == id)
}

/// Polls until the instance is in a state that `done` accepts, for up to 10 s.
async fn wait_for(
    runtime: &ContainerdRuntime,
    id: &str,
    done: impl Fn(&InstanceState) -> bool,
) -> InstanceState {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let state = state_of(runtime, id).await.map(|o| o.state);
        match state {
            Some(state) if done(&state) => return state,
            other if Instant::now() > deadline => panic!("{id} never got there; last {other:?}"),
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

fn must(result: Result<(), RuntimeError>, what: &str) {
    if let Err(e) = result {
        panic!("{what}: {e}");
    }
}

/// Whether `ctr snapshots ls` still lists a snapshot `id` in our namespace.
fn has_snapshot(id: &str) -> bool {
    let socket = test_image::test_socket().to_string_lossy().into_owned();
    let args = ["-a", &socket, "-n", NAMESPACE, "snapshots", "ls"];
    let out = std::process::Command::new("ctr").args(args).output();
    let prefix = format!("{id} ");
    out.is_ok_and(|o| {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .any(|l| l.starts_with(&prefix))
    })
}

#[tokio::test]
async fn runs_logs_stops_politely_restarts_and_removes() {
    let Some(rt) = setup().await else { return };
    let id = "polite";
    let _ = rt.remove(id).await;
    must(rt.ensure_running(&spec(id, &LONG)).await, "start");
    must(
        rt.ensure_running(&spec(id, &LONG)).await,
        "idempotent start",
    );
    assert_eq!(
        wait_for(&rt, id, |s| *s == InstanceState::Running).await,
        InstanceState::Running
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut logs = String::new();
    while !(logs.contains("hello") && logs.contains("oops")) && Instant::now() < deadline {
        logs = rt
            .logs(id, 10)
            .await
            .unwrap_or_else(|e| panic!("logs: {e}"));
    }
    // Both streams land in one file; their relative order is not kept.
    let mut lines: Vec<&str> = logs.lines().collect();
    lines.sort_unstable();
    assert_eq!(lines, ["hello", "oops"]);

    let started = Instant::now();
    must(rt.ensure_stopped(id, Duration::from_secs(20)).await, "stop");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "TERM was handled, no grace needed"
    );
    assert_eq!(
        state_of(&rt, id).await.map(|o| o.state),
        Some(InstanceState::Stopped)
    );
    must(
        rt.ensure_stopped(id, Duration::from_secs(1)).await,
        "idempotent stop",
    );

    must(rt.ensure_running(&spec(id, &LONG)).await, "restart");
    wait_for(&rt, id, |s| *s == InstanceState::Running).await;
    assert_eq!(state_of(&rt, id).await.map(|o| o.restarts), Some(1));

    must(rt.remove(id).await, "remove");
    assert_eq!(state_of(&rt, id).await, None);
    assert!(!has_snapshot(id), "snapshot left");
}

#[tokio::test]
async fn a_pid_1_without_a_term_handler_is_killed_after_the_grace_period() {
    let Some(rt) = setup().await else { return };
    let id = "stubborn";
    let _ = rt.remove(id).await;
    must(
        rt.ensure_running(&spec(id, &["sleep", "1000"])).await,
        "start",
    );
    wait_for(&rt, id, |s| *s == InstanceState::Running).await;
    let started = Instant::now();
    must(
        rt.ensure_stopped(id, Duration::from_millis(500)).await,
        "stop",
    );
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(500) && took < Duration::from_secs(5),
        "took {took:?}"
    );
    assert_eq!(
        state_of(&rt, id).await.map(|o| o.state),
        Some(InstanceState::Stopped)
    );
    must(rt.remove(id).await, "remove");
}

#[tokio::test]
async fn a_new_runtime_object_adopts_running_containers() {
    let Some(first) = setup().await else { return };
    let id = "adopted";
    let _ = first.remove(id).await;
    must(first.ensure_running(&spec(id, &LONG)).await, "start");
    drop(first);
    let second = ContainerdRuntime::connect(test_image::test_socket(), NAMESPACE, config())
        .await
        .unwrap_or_else(|e| panic!("reconnect: {e}"));
    assert_eq!(
        wait_for(&second, id, |s| *s == InstanceState::Running).await,
        InstanceState::Running
    );
    must(
        second.ensure_running(&spec(id, &LONG)).await,
        "adopted start is a no-op",
    );
    assert_eq!(state_of(&second, id).await.map(|o| o.restarts), Some(0));
    must(
        second.ensure_stopped(id, Duration::from_secs(5)).await,
        "stop",
    );
    must(second.remove(id).await, "remove");
}

#[tokio::test]
async fn files_env_exec_and_stats() {
    let Some(rt) = setup().await else { return };
    let id = "configured";
    let _ = rt.remove(id).await;
    let mut spec = spec(id, &LONG).env("GREETING", "hi there");
    spec.files.push(ccattler_core::runtime::FileSpec {
        path: "/etc/app.conf".to_owned(),
        content: b"answer=42\n".to_vec(),
        mode: 0o644,
    });
    must(rt.ensure_running(&spec).await, "start");
    wait_for(&rt, id, |s| *s == InstanceState::Running).await;
    let argv = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    let out = rt
        .exec(
            id,
            &argv(&[
                "sh",
                "-c",
                "cat /etc/app.conf; echo \"$GREETING\"; echo e >&2; exit 4",
            ]),
            Duration::from_secs(10),
        )
        .await
        .unwrap_or_else(|e| panic!("exec: {e}"));
    assert_eq!(
        (out.code, out.stdout.as_slice(), out.stderr.as_slice()),
        (4, &b"answer=42\nhi there\n"[..], &b"e\n"[..])
    );
    let missing = rt
        .exec(id, &argv(&["/bin/nope"]), Duration::from_secs(10))
        .await;
    assert!(
        matches!(missing, Err(RuntimeError::CommandNotFound { .. })),
        "{missing:?}"
    );
    let slow = rt
        .exec(id, &argv(&["sleep", "100"]), Duration::from_millis(300))
        .await;
    assert!(
        matches!(slow, Err(RuntimeError::Timeout { .. })),
        "{slow:?}"
    );
    let stats = rt.stats(id).await.unwrap_or_else(|e| panic!("stats: {e}"));
    assert!(stats.memory.bytes() > 0, "{stats:?}");
    must(rt.remove(id).await, "remove running");
    assert!(matches!(rt.stats(id).await, Err(RuntimeError::NotFound(_))));
}

#[tokio::test]
async fn a_missing_image_is_image_not_found_and_observed_failed() {
    let Some(rt) = setup().await else { return };
    let id = "no-image";
    let mut spec = spec(id, &["true"]);
    spec.image = "local/missing:1".to_owned();
    let result = rt.ensure_running(&spec).await;
    assert!(
        matches!(&result, Err(RuntimeError::ImageNotFound { image }) if image == "local/missing:1"),
        "{result:?}"
    );
    let state = state_of(&rt, id).await.map(|o| o.state);
    assert!(
        matches!(&state, Some(InstanceState::Failed { reason }) if reason.contains("local/missing:1")),
        "{state:?}"
    );
    must(rt.remove(id).await, "remove");
    assert_eq!(state_of(&rt, id).await, None);
}

#[tokio::test]
async fn a_missing_program_is_command_not_found_and_leaves_nothing() {
    let Some(rt) = setup().await else { return };
    let id = "no-program";
    let result = rt.ensure_running(&spec(id, &["/bin/nonexistent"])).await;
    assert!(
        matches!(&result, Err(RuntimeError::CommandNotFound { command }) if command == "/bin/nonexistent"),
        "{result:?}"
    );
    assert!(matches!(
        state_of(&rt, id).await.map(|o| o.state),
        Some(InstanceState::Failed { .. })
    ));
    assert!(!has_snapshot(id), "snapshot left");
    must(rt.remove(id).await, "remove");
}

#[tokio::test]
async fn a_socket_without_containerd_is_unreachable() {
    let dir = std::env::temp_dir().join(format!("ccattler-no-containerd-{}", std::process::id()));
    let result = ContainerdRuntime::connect(dir.join("containerd.sock"), NAMESPACE, config()).await;
    assert!(
        matches!(result, Err(RuntimeError::Unreachable { .. })),
        "{result:?}"
    );
}

/// The testkit's runtime conformance suite, in a namespace of its own.
struct ContainerdHarness;

const CONFORMANCE_NAMESPACE: &str = "ccattler-conformance";

fn busybox(id: &str, script: &str, args: &[&str]) -> InstanceSpec {
    let argv = ["sh", "-c", script, "sh"]
        .into_iter()
        .chain(args.iter().copied());
    InstanceSpec::new(id, IMAGE).command(argv)
}

impl RuntimeHarness for ContainerdHarness {
    type Runtime = ContainerdRuntime;

    async fn fresh(&self) -> ContainerdRuntime {
        static IMPORTED: OnceCell<()> = OnceCell::const_new();
        let Some(rt) = setup_in(CONFORMANCE_NAMESPACE, &IMPORTED).await else {
            panic!("containerd went away during the conformance run");
        };
        // A check that panicked leaves its instances: start each check from an empty namespace.
        for instance in rt.observe().await.unwrap_or_default() {
            must(rt.remove(&instance.id).await, "cleanup");
        }
        rt
    }

    async fn reopen(&self, _runtime: &ContainerdRuntime) -> Option<ContainerdRuntime> {
        ContainerdRuntime::connect(test_image::test_socket(), CONFORMANCE_NAMESPACE, config())
            .await
            .ok()
    }

    fn takes_real_time(&self) -> bool {
        true
    }

    fn long_running(&self, id: &str) -> InstanceSpec {
        busybox(id, "trap 'exit 143' TERM; sleep 1000 & wait", &[])
    }

    fn exiting(&self, id: &str, code: i32) -> InstanceSpec {
        busybox(id, "exit $1", &[&code.to_string()])
    }

    fn printing(&self, id: &str, lines: &[&str]) -> InstanceSpec {
        let script =
            r#"for l in "$@"; do echo "$l"; done; trap 'exit 143' TERM; sleep 1000 & wait"#;
        busybox(id, script, lines)
    }

    fn ignoring_term(&self, id: &str) -> InstanceSpec {
        busybox(id, "trap '' TERM; echo ready; sleep 1000 & wait", &[])
    }

    fn missing_command(&self, id: &str) -> InstanceSpec {
        InstanceSpec::new(id, IMAGE).command(["/bin/no-such-command"])
    }

    fn exec_command(&self, stdout: &str, code: i32) -> Vec<String> {
        let argv = [
            "sh",
            "-c",
            "echo \"$1\"; exit $2",
            "sh",
            stdout,
            &code.to_string(),
        ];
        argv.iter().map(|s| (*s).to_owned()).collect()
    }

    fn read_file_command(&self, path: &str) -> Option<Vec<String>> {
        Some(vec!["cat".to_owned(), path.to_owned()])
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn containerd_runtime_conforms() {
    if setup().await.is_none() {
        return;
    }
    run_runtime_conformance(&ContainerdHarness).await;
}
