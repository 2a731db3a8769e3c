//! The harness of the end-to-end tests that run `cca` as separate processes, as a user does:
//! starting `cca server` and `cca agent`, enrolling agents, waiting on the API, and killing
//! every process the test started when it ends, pass or fail.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ccattler_examples::cca::client::{ApiClient, ClientArgs};
use hyper::Method;

/// The `cca` binary under test.
pub(crate) fn cca() -> Command {
    Command::new(env!("CARGO_BIN_EXE_cca"))
}

/// A loopback port nobody listens on right now, and never handed out before in this test
/// binary: the tests of one binary run at once, and the system may give a port just let go
/// to the next asker.
pub(crate) fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let mut given = GIVEN
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

/// `cca server`'s flags for the shared test etcd, under a prefix of `test`'s own; `None`
/// (after failing under CI, or saying the test skipped) without that etcd.
#[cfg(feature = "etcd")]
pub(crate) fn etcd_store_flags(test: &str) -> Option<Vec<String>> {
    use ccattler_store::etcd::server::{shared_endpoints, skip_or_fail};
    let Some(endpoints) = shared_endpoints() else {
        skip_or_fail(test, "no shared test etcd");
        return None;
    };
    let prefix = format!("{}/", unique(test));
    let flags = [
        "--store",
        "etcd",
        "--etcd",
        &endpoints.join(","),
        "--etcd-prefix",
        &prefix,
    ];
    Some(flags.map(str::to_owned).to_vec())
}

/// A name no other run of the tests uses: `{what}-{pid}-{nanos}`.
pub(crate) fn unique(what: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{what}-{}-{nanos}", std::process::id())
}

/// Every workload started with the test's marker in its command line, killed when dropped
/// (they outlive a killed agent, as on a real node).
pub(crate) struct Workloads(pub String);

impl Drop for Workloads {
    fn drop(&mut self) {
        for pid in marked_pids(&self.0) {
            let _ = Command::new("kill").args(["-9", &pid]).status();
        }
    }
}

/// The ids of the processes whose command line contains `marker`: the workloads' shells
/// (their `sleep` children do not carry it).
pub(crate) fn marked_pids(marker: &str) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids: Vec<String> = entries
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|pid| pid.bytes().all(|b| b.is_ascii_digit()))
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            String::from_utf8_lossy(&cmdline).contains(marker)
        })
        .collect();
    pids.sort();
    pids
}

/// A client of the API at `url` with `token` (the admin's, a node's, or none).
pub(crate) fn api_client(url: &str, token: Option<&str>) -> ApiClient {
    ApiClient::new(&ClientArgs {
        server: url.to_owned(),
        token: token.map(str::to_owned),
    })
}

/// Child processes killed (SIGKILL) when dropped.
#[derive(Default)]
pub(crate) struct Children(pub Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Starts `cca server` listening on `listen` (such as `127.0.0.1:0`) with `store_args` (such
/// as `--store memory`), its admin token written to `{dir}/admin-token` and its log to
/// `{dir}/server-{n}.log`; waits for its "listening on URL" line and returns it with the URL.
pub(crate) fn start_server(
    dir: &Path,
    listen: &str,
    store_args: &[impl AsRef<OsStr>],
    n: u32,
) -> (Child, String) {
    start_server_with(dir, listen, store_args, n, &[])
}

/// [`start_server`] with environment variables set (`RUST_LOG`...).
pub(crate) fn start_server_with(
    dir: &Path,
    listen: &str,
    store_args: &[impl AsRef<OsStr>],
    n: u32,
    env: &[(&str, &str)],
) -> (Child, String) {
    let mut command = cca();
    command.envs(env.iter().copied());
    spawn_server(command, dir, listen, store_args, n)
}

/// [`start_server`] with `command` as the `cca` to run (another host's, see `hosts`).
pub(crate) fn spawn_server(
    mut command: Command,
    dir: &Path,
    listen: &str,
    args: &[impl AsRef<OsStr>],
    n: u32,
) -> (Child, String) {
    let log_name = format!("server-{n}.log");
    let log = std::fs::File::create(dir.join(&log_name)).expect("log");
    let mut child = command
        .args(["server", "--listen", listen])
        .args(args)
        .arg("--token-file")
        .arg(dir.join("admin-token"))
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .expect("cca server starts");
    let mut line = String::new();
    let stdout = child.stdout.take().expect("stdout");
    BufReader::new(stdout).read_line(&mut line).expect("read");
    let url = line
        .split_whitespace()
        .find(|word| word.starts_with("http://"))
        .unwrap_or_else(|| {
            let _ = child.kill();
            panic!(
                "the server did not start: {line:?}; its log: {}",
                read_log(dir, &log_name)
            )
        })
        .to_owned();
    (child, url)
}

/// The admin token `start_server` wrote into `dir`.
pub(crate) fn admin_token(dir: &Path) -> String {
    read_log(dir, "admin-token").trim().to_owned()
}

/// A fresh one-time enrollment token, from `cca token create`.
pub(crate) fn enrollment_token(url: &str, admin: &str) -> String {
    let out = cca()
        .args(["token", "create", "--server", url, "--token", admin])
        .output()
        .expect("cca token create");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Starts `cca agent` for `node`, enrolled with `enroll`, its state in `{dir}/{node}` and its
/// log in `{dir}/agent-{node}.log`; `extra` adds flags (runtime, capacity, lease TTL...).
pub(crate) fn start_agent(
    dir: &Path,
    url: &str,
    node: &str,
    enroll: &str,
    extra: &[&str],
) -> Child {
    start_agent_with(dir, url, node, enroll, extra, &[])
}

/// [`start_agent`] with environment variables set (`RUST_LOG`...).
pub(crate) fn start_agent_with(
    dir: &Path,
    url: &str,
    node: &str,
    enroll: &str,
    extra: &[&str],
    env: &[(&str, &str)],
) -> Child {
    let mut command = cca();
    command.envs(env.iter().copied());
    spawn_agent(command, dir, url, node, enroll, extra)
}

/// [`start_agent`] with `command` as the `cca` to run (another host's, see `hosts`).
pub(crate) fn spawn_agent(
    mut command: Command,
    dir: &Path,
    url: &str,
    node: &str,
    enroll: &str,
    extra: &[&str],
) -> Child {
    let log = std::fs::File::create(dir.join(format!("agent-{node}.log"))).expect("log");
    command
        .args(["agent", "--server", url, "--node", node, "--enroll", enroll])
        .arg("--state-dir")
        .arg(dir.join(node))
        .args(extra)
        .env_remove("CCATTLER_NODE_TOKEN")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("cca agent starts")
}

/// `cca apply` of `doc` (written to `{dir}/app.cca`) against `url`; panics when it fails.
pub(crate) fn apply(dir: &Path, url: &str, admin: &str, doc: &str, extra: &[&str]) {
    let path = dir.join("app.cca");
    std::fs::write(&path, doc).expect("write the file");
    let applied = cca()
        .args(["apply", "--server", url, "--token", admin])
        .args(extra)
        .arg(&path)
        .output()
        .expect("cca apply");
    assert!(applied.status.success(), "{applied:?}");
}

/// Stops a child the way Ctrl-C or a service manager does (SIGTERM) and waits for it.
pub(crate) fn terminate(child: &mut Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
}

/// Running instances by node, from the API: `{node: {instance id: create revision}}`.
pub(crate) async fn running(client: &ApiClient) -> BTreeMap<String, BTreeMap<String, u64>> {
    let mut by_node: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    let Ok(Ok(answer)) = client
        .json(Method::GET, "/state?prefix=observed/instance/", "")
        .await
    else {
        return by_node;
    };
    for fact in answer["facts"].as_array().into_iter().flatten() {
        if fact["value"]["state"] == "running" {
            let node = fact["value"]["node"].as_str().unwrap_or("?").to_owned();
            let key = fact["key"].as_str().unwrap_or("?");
            let id = key.rsplit('/').next().unwrap_or(key).to_owned();
            let created = fact["create_revision"].as_u64().unwrap_or(0);
            by_node.entry(node).or_default().insert(id, created);
        }
    }
    by_node
}

/// Polls `probe` every 100 ms until it returns something; panics after `timeout`.
pub(crate) async fn wait_for<T>(
    what: &str,
    timeout: Duration,
    mut probe: impl AsyncFnMut() -> Option<T>,
) -> (T, Duration) {
    let start = Instant::now();
    loop {
        if let Some(found) = probe().await {
            return (found, start.elapsed());
        }
        assert!(start.elapsed() < timeout, "{what}: not within {timeout:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The content of `{dir}/{name}`, or nothing.
pub(crate) fn read_log(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap_or_default()
}

/// Whether `tool` runs (`tool --version` or `tool -v`); when it does not, `test` fails under CI
/// (`CI=true`: scripts/test installs it) and says it was skipped when run by hand.
pub(crate) fn has_tool(test: &str, tool: &str) -> bool {
    let runs = |flag: &str| Command::new(tool).arg(flag).output().is_ok();
    if runs("--version") || runs("-v") {
        return true;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{test} needs {tool}, which is not installed (scripts/test installs it)"
    );
    eprintln!("SKIPPED {test}: {tool} is not installed");
    false
}
