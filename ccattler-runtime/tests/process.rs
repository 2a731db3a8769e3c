//! ProcessRuntime beyond the conformance suite: files and secrets, environment and PORT, the log
//! cap, pid reuse after a restart, unwritable directories, limits, exec timeouts, stops that wait
//! for every process of the instance.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use ccattler_core::schema::{Cpu, Memory, PortBinding};
use ccattler_core::{
    FileSpec, InstanceSpec, InstanceState, ObservedInstance, Runtime, RuntimeError,
};
use ccattler_runtime::process::{ProcessConfig, ProcessRuntime};

/// A runtime in a temporary directory that kills its processes when dropped.
struct Fixture {
    dir: tempfile::TempDir,
    runtimes: Vec<ProcessRuntime>,
}

impl Fixture {
    fn new() -> Self {
        Fixture {
            dir: tempfile::tempdir().expect("temporary directory"),
            runtimes: Vec::new(),
        }
    }

    fn root(&self) -> std::path::PathBuf {
        self.dir.path().join("root")
    }

    fn runtime(&mut self, config: ProcessConfig) -> ProcessRuntime {
        let rt = ProcessRuntime::with_config(self.root(), config).expect("runtime");
        self.runtimes.push(rt.clone());
        rt
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        for rt in &self.runtimes {
            rt.kill_all();
        }
    }
}

async fn wait_state(rt: &ProcessRuntime, id: &str, wanted: InstanceState) -> ObservedInstance {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let seen = rt.observe().await.expect("observe");
        let me = seen.into_iter().find(|i| i.id == id);
        match me {
            Some(i) if i.state == wanted => return i,
            other if Instant::now() > deadline => panic!("{id}: wanted {wanted:?}, saw {other:?}"),
            _ => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

fn sh(id: &str, script: &str) -> InstanceSpec {
    InstanceSpec::new(id, "").command(["sh", "-c", script])
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path).expect("metadata").permissions().mode() & 0o777
}

#[tokio::test]
async fn files_land_in_work_with_their_modes() {
    let mut fx = Fixture::new();
    let rt = fx.runtime(ProcessConfig::default());
    let mut spec = sh("files-1", "cat etc/app.conf secrets/token; exec sleep 1000");
    spec.files = vec![
        FileSpec {
            path: "/etc/app.conf".into(),
            content: b"conf\n".to_vec(),
            mode: 0o644,
        },
        FileSpec {
            path: "/secrets/token".into(),
            content: b"s3cret\n".to_vec(),
            mode: 0o600,
        },
    ];
    rt.ensure_running(&spec).await.expect("start");
    wait_state(&rt, "files-1", InstanceState::Running).await;
    let work = rt.work_dir("files-1");
    assert_eq!(mode(&work.join("etc/app.conf")), 0o644);
    assert_eq!(mode(&work.join("secrets/token")), 0o600);
    let state = fx.root().join("instances/files-1/state.json");
    assert_eq!(mode(&state), 0o600, "state.json holds the environment");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        rt.logs("files-1", 10).await.expect("logs"),
        "conf\ns3cret\n"
    );

    let mut escape = sh("files-2", "true");
    escape.files = vec![FileSpec {
        path: "/../outside".into(),
        content: vec![],
        mode: 0o644,
    }];
    let e = rt.ensure_running(&escape).await.expect_err("escaping path");
    assert!(matches!(e, RuntimeError::StartFailed { .. }), "{e:?}");
    assert!(!fx.root().join("instances/outside").exists());
}

#[tokio::test]
async fn env_and_port_are_passed() {
    let mut fx = Fixture::new();
    let rt = fx.runtime(ProcessConfig::default());
    let script = "echo \"$GREETING $PORT $PORT_8080 $PORT_9090\"; exec sleep 1000";
    let mut spec = sh("env-1", script).env("GREETING", "hi");
    spec.ports = vec![
        PortBinding {
            port: 8080,
            host: 28080,
        },
        PortBinding {
            port: 9090,
            host: 28081,
        },
    ];
    rt.ensure_running(&spec).await.expect("start");
    let seen = wait_state(&rt, "env-1", InstanceState::Running).await;
    // Served at the host port given to its first declared port: no port is picked here.
    assert_eq!(seen.address.as_deref(), Some("127.0.0.1:28080"));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let logs = rt.logs("env-1", 1).await.expect("logs");
    assert_eq!(logs, "hi 28080 28080 28081\n");
    let probe = ["sh", "-c", "echo $PORT"].map(String::from);
    let out = rt
        .exec("env-1", &probe, Duration::from_secs(5))
        .await
        .expect("exec");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "28080\n");
}

/// An instance is reported at the node's address the runtime was given, not at loopback.
#[tokio::test]
async fn the_address_names_the_configured_host() {
    let mut fx = Fixture::new();
    let rt = fx.runtime(ProcessConfig::default().host("fd00::7"));
    let mut spec = sh("host-1", "exec sleep 1000");
    spec.ports = vec![PortBinding {
        port: 8080,
        host: 28082,
    }];
    rt.ensure_running(&spec).await.expect("start");
    let seen = wait_state(&rt, "host-1", InstanceState::Running).await;
    let address = seen.address.expect("an address");
    assert_eq!(address, "[fd00::7]:28082", "served at the configured host");
}

#[tokio::test]
async fn logs_are_capped() {
    let mut fx = Fixture::new();
    let rt = fx.runtime(ProcessConfig::default().log_cap(4096));
    let script = "i=0; while [ $i -lt 2000 ]; do echo line-$i; i=$((i+1)); done; exec sleep 1000";
    rt.ensure_running(&sh("chatty-1", script))
        .await
        .expect("start");
    let log = fx.root().join("instances/chatty-1/stdout.log");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let tail = rt.logs("chatty-1", 1).await.expect("logs");
        if tail == "line-1999\n" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never printed everything: {tail:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    rt.observe().await.expect("observe");
    let size = fs::metadata(&log).expect("log").len();
    let old = fs::metadata(log.with_extension("log.1"))
        .expect("rotated log")
        .len();
    assert!(size <= 4096, "stdout.log is {size} bytes");
    assert!(old > 0, "the rotated log is empty");
}

#[tokio::test]
async fn a_reused_pid_is_not_adopted() {
    let mut fx = Fixture::new();
    let rt = fx.runtime(ProcessConfig::default());
    let spec = InstanceSpec::new("reuse-1", "").command(["sleep", "1000"]);
    rt.ensure_running(&spec).await.expect("start");
    wait_state(&rt, "reuse-1", InstanceState::Running).await;
    let pid = rt.pid("reuse-1").expect("pid");
    let path = fx.root().join("instances/reuse-1/state.json");
    let mut state: serde_json::Value =
        serde_json::from_slice(&fs::read(&path).expect("state")).expect("json");
    let start = state["start_time"].as_u64().expect("start time");
    state["start_time"] = serde_json::json!(start + 1);
    fs::write(&path, serde_json::to_vec(&state).expect("json")).expect("write");

    let again = fx.runtime(ProcessConfig::default());
    let seen = wait_state(&again, "reuse-1", InstanceState::Exited { code: -1 }).await;
    assert_eq!(seen.restarts, 0);
    assert_eq!(again.pid("reuse-1"), None);
    again
        .ensure_stopped("reuse-1", Duration::ZERO)
        .await
        .expect("stop");
    assert!(
        Path::new(&format!("/proc/{pid}")).exists(),
        "a stranger's pid was signalled"
    );
    rt.kill_all();
}

#[tokio::test]
async fn an_adopted_process_that_ends_has_an_unknown_code() {
    let mut fx = Fixture::new();
    let rt = fx.runtime(ProcessConfig::default());
    rt.ensure_running(&InstanceSpec::new("a-1", "").command(["sleep", "1000"]))
        .await
        .expect("start");
    let pid = rt.pid("a-1").expect("pid");
    let again = fx.runtime(ProcessConfig::default());
    assert_eq!(again.pid("a-1"), Some(pid), "not adopted");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::SIGKILL,
    )
    .expect("kill");
    wait_state(&again, "a-1", InstanceState::Exited { code: -1 }).await;
    wait_state(&rt, "a-1", InstanceState::Exited { code: 137 }).await;
}

#[tokio::test]
async fn an_unwritable_working_dir_is_a_start_failure() {
    let mut fx = Fixture::new();
    let rt = fx.runtime(ProcessConfig::default());
    // A file where the instance's directory should be: even root cannot create work/ in it.
    fs::create_dir_all(fx.root().join("instances")).expect("mkdir");
    fs::write(fx.root().join("instances/blocked-1"), "not a dir").expect("write");
    let e = rt
        .ensure_running(&InstanceSpec::new("blocked-1", "").command(["sleep", "1"]))
        .await
        .expect_err("start in an unwritable place");
    assert!(
        matches!(&e, RuntimeError::StartFailed { reason, .. } if reason.contains("working directory")),
        "{e:?}"
    );
    let seen = rt.observe().await.expect("observe");
    assert!(
        matches!(&seen[0].state, InstanceState::Failed { reason } if reason.contains("working directory")),
        "{seen:?}"
    );
    rt.remove("blocked-1").await.expect("remove");

    let no_command = rt
        .ensure_running(&InstanceSpec::new("empty-1", "busybox:1"))
        .await;
    assert!(
        matches!(no_command, Err(RuntimeError::StartFailed { .. })),
        "{no_command:?}"
    );
}

#[tokio::test]
async fn limits_never_fail_a_start_and_exec_times_out() {
    let mut fx = Fixture::new();
    let rt = fx.runtime(ProcessConfig::default());
    let mut spec = InstanceSpec::new("limited-1", "").command(["sleep", "1000"]);
    spec.cpu = Cpu::from_millis(500);
    spec.memory = Memory::from_bytes(64 * 1024 * 1024);
    rt.ensure_running(&spec).await.expect("start with limits");
    wait_state(&rt, "limited-1", InstanceState::Running).await;
    // As root, the limits are really applied: the process sits in the instance's cgroup, whose
    // memory limit is the spec's (cgroup v2, or v1 per controller on a hybrid host).
    if nix::unistd::geteuid().is_root() {
        let pid = rt.pid("limited-1").expect("pid");
        let membership = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).expect("cgroup");
        assert!(membership.contains("/ccattler/limited-1"), "{membership}");
        let limit = [
            "/sys/fs/cgroup/ccattler/limited-1/memory.max",
            "/sys/fs/cgroup/memory/ccattler/limited-1/memory.limit_in_bytes",
        ]
        .iter()
        .find_map(|path| std::fs::read_to_string(path).ok())
        .expect("a memory limit file");
        assert_eq!(limit.trim(), (64 * 1024 * 1024).to_string());
    } else {
        eprintln!("not root: limits are skipped, as documented; not checked here");
    }
    let hang = ["sh", "-c", "sleep 1000"].map(String::from);
    let begun = Instant::now();
    let e = rt
        .exec("limited-1", &hang, Duration::from_millis(200))
        .await
        .expect_err("timeout");
    assert!(matches!(e, RuntimeError::Timeout { .. }), "{e:?}");
    assert!(begun.elapsed() < Duration::from_secs(5));
    rt.remove("limited-1").await.expect("remove");
    assert!(!fx.root().join("instances/limited-1").exists());
}

/// Processes whose working directory is under `dir`, zombies aside.
fn live_processes_under(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for entry in fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(cwd) = fs::read_link(entry.path().join("cwd")) else {
            continue;
        };
        let stat = fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let state = stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.trim().chars().next());
        if cwd.starts_with(dir) && !matches!(state, Some('Z' | 'X') | None) {
            let cmdline = fs::read(entry.path().join("cmdline")).unwrap_or_default();
            found.push(String::from_utf8_lossy(&cmdline).replace('\0', " "));
        }
    }
    found
}

#[tokio::test]
async fn a_stop_ends_once_every_process_of_the_instance_has() {
    let mut fx = Fixture::new();
    let rt = fx.runtime(ProcessConfig::default());
    // Children that ignore SIGTERM and spin; as root they share a CPU quota of 1 ms per 100 ms
    // (the instance's cgroup), so they are slow to die even of SIGKILL, after their leader.
    let spin = "(trap '' TERM; while :; do :; done)";
    let mut spec = sh(
        "family-1",
        &format!("{spin} & {spin} & {spin} & exec sleep 1000"),
    );
    spec.cpu = Cpu::from_millis(1);
    rt.ensure_running(&spec).await.expect("start");
    wait_state(&rt, "family-1", InstanceState::Running).await;
    let work = rt.work_dir("family-1");
    let deadline = Instant::now() + Duration::from_secs(10);
    while live_processes_under(&work).len() < 4 {
        assert!(
            Instant::now() < deadline,
            "{:?}",
            live_processes_under(&work)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    rt.ensure_stopped("family-1", Duration::from_millis(100))
        .await
        .expect("stop");
    assert_eq!(live_processes_under(&work), Vec::<String>::new());
}
