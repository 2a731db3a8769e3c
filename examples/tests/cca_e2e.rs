//! The reference cluster as separate processes, as a user runs it: `cca server` on etcd, two
//! `cca agent`s (process runtime) enrolled with one-time tokens, `cca apply`, and a `curl`
//! following `/changes`. Then `kill -9` of one agent (its instances must run on the other node
//! within the lease TTL plus 2 s) and a restart of the server (workloads untouched).
//!
//! Needs the shared test etcd and curl: without them the test fails under CI and says it was
//! skipped when run by hand.
#![cfg(feature = "etcd")]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ccattler_examples::cca::client::{ApiClient, ClientArgs};
use ccattler_store::etcd::server::{shared_endpoints, skip_or_fail};
use hyper::Method;

const LEASE_TTL: Duration = Duration::from_secs(4);
const INSTANCES: usize = 4;

/// Child processes killed when the test ends, pass or fail; and every workload started with
/// the test's marker in its command line.
struct Cleanup {
    children: Vec<Child>,
    marker: String,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        kill_marked(&self.marker);
    }
}

/// The ids of the processes whose command line contains `marker`: the workloads' shells
/// (their `sleep` children do not carry it).
fn marked_pids(marker: &str) -> Vec<String> {
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

/// Kills every workload of the test (they outlive a killed agent, as on a real node).
fn kill_marked(marker: &str) {
    for pid in marked_pids(marker) {
        let _ = Command::new("kill").args(["-9", &pid]).status();
    }
}

fn cca() -> Command {
    Command::new(env!("CARGO_BIN_EXE_cca"))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Starts `cca server` and waits for its "listening" line.
fn start_server(dir: &Path, port: u16, endpoints: &str, prefix: &str, n: u32) -> Child {
    let log = std::fs::File::create(dir.join(format!("server-{n}.log"))).expect("log");
    let mut child = cca()
        .args(["server", "--listen", &format!("127.0.0.1:{port}")])
        .args([
            "--store",
            "etcd",
            "--etcd",
            endpoints,
            "--etcd-prefix",
            prefix,
        ])
        .arg("--token-file")
        .arg(dir.join("admin-token"))
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .expect("cca server starts");
    let mut line = String::new();
    let stdout = child.stdout.take().expect("stdout");
    BufReader::new(stdout).read_line(&mut line).expect("read");
    assert!(
        line.contains("listening on"),
        "the server did not start: {line:?}; its log: {}",
        std::fs::read_to_string(dir.join(format!("server-{n}.log"))).unwrap_or_default()
    );
    child
}

fn enrollment_token(url: &str, admin: &str) -> String {
    let out = cca()
        .args(["token", "create", "--server", url, "--token", admin])
        .output()
        .expect("cca token create");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn start_agent(dir: &Path, url: &str, node: &str, enroll: &str) -> Child {
    let state = dir.join(node);
    let log = std::fs::File::create(dir.join(format!("agent-{node}.log"))).expect("log");
    cca()
        .args(["agent", "--server", url, "--node", node, "--enroll", enroll])
        .arg("--state-dir")
        .arg(&state)
        .args(["--cpu", "4", "--memory", "4Gi", "--stop-grace", "1s"])
        .args(["--lease-ttl", &format!("{}s", LEASE_TTL.as_secs())])
        .env_remove("CCATTLER_NODE_TOKEN")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("cca agent starts")
}

/// Running instances by node: `{node: {instance id: create revision}}`.
async fn running(client: &ApiClient) -> BTreeMap<String, BTreeMap<String, u64>> {
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

async fn wait_for<T>(
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

fn read_log(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_two_agents_kill_and_restart() {
    let Some(endpoints) = shared_endpoints() else {
        skip_or_fail("server_two_agents_kill_and_restart", "no shared test etcd");
        return;
    };
    if Command::new("curl").arg("--version").output().is_err() {
        skip_or_fail(
            "server_two_agents_kill_and_restart",
            "curl is not installed",
        );
        return;
    }
    let endpoints = endpoints.join(",");
    let dir = tempfile::tempdir().expect("tempdir");
    let dir: PathBuf = dir.path().to_owned();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let prefix = format!("cca-e2e-{}-{nanos}/", std::process::id());
    let marker = format!("cca-e2e-marker-{}-{nanos}", std::process::id());
    let mut cleanup = Cleanup {
        children: Vec::new(),
        marker: marker.clone(),
    };

    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    cleanup
        .children
        .push(start_server(&dir, port, &endpoints, &prefix, 1));
    let admin = std::fs::read_to_string(dir.join("admin-token")).expect("admin token");
    let admin = admin.trim().to_owned();
    let client = ApiClient::new(&ClientArgs {
        server: url.clone(),
        token: Some(admin.clone()),
    });

    // An agent with a wrong credential stops at once, saying so.
    let refused = cca()
        .args([
            "agent",
            "--server",
            &url,
            "--node",
            "z",
            "--token",
            "cca_wrong",
        ])
        .arg("--state-dir")
        .arg(dir.join("z"))
        .output()
        .expect("cca agent runs");
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("refused"));

    // Two agents, each enrolled with its own one-time token.
    for node in ["a", "b"] {
        let token = enrollment_token(&url, &admin);
        cleanup.children.push(start_agent(&dir, &url, node, &token));
    }
    // A reused enrollment token is refused.
    let token = enrollment_token(&url, &admin);
    let enroll = |node: &str| serde_json::json!({ "token": token, "node": node }).to_string();
    let first = client.json(Method::POST, "/api/enroll", enroll("c")).await;
    assert!(matches!(first, Ok(Ok(_))), "{first:?}");
    let again = client.json(Method::POST, "/api/enroll", enroll("d")).await;
    assert!(matches!(&again, Ok(Err(f)) if f.status == 401), "{again:?}");

    let doc = dir.join("app.cca");
    std::fs::write(
        &doc,
        format!(
            "service sleeper {{\n    image busybox\n    command \"sh -c 'while true; do sleep 1; done' {marker}\"\n    instances {INSTANCES}\n    resources {{\n        cpu 100m\n        memory 16Mi\n    }}\n}}\n"
        ),
    )
    .expect("write the file");
    let applied = cca()
        .args(["apply", "--server", &url, "--token", &admin])
        .arg(&doc)
        .output()
        .expect("cca apply");
    assert!(applied.status.success(), "{applied:?}");

    let (spread, took) = wait_for(
        "4 instances running on a and b",
        Duration::from_secs(30),
        async || {
            let by_node = running(&client).await;
            let total: usize = by_node.values().map(BTreeMap::len).sum();
            (total == INSTANCES && by_node.len() == 2).then_some(by_node)
        },
    )
    .await;
    eprintln!("converged in {took:?}: {spread:?}");

    // A curl client follows /changes from now on.
    let curl_out = dir.join("curl.out");
    let curl = Command::new("curl")
        .args(["-sN", "-H", &format!("Authorization: Bearer {admin}")])
        .arg(format!("{url}/changes?prefix=observed/instance/"))
        .stdout(std::fs::File::create(&curl_out).expect("curl output"))
        .stderr(Stdio::null())
        .spawn()
        .expect("curl starts");
    cleanup.children.push(curl);
    wait_for("curl connected", Duration::from_secs(10), async || {
        read_log(&dir, "curl.out")
            .contains("event: ready")
            .then_some(())
    })
    .await;

    // kill -9 agent a (children[1]): its instances must run on b within the lease TTL + 2 s.
    cleanup.children[1].kill().expect("kill -9 agent a");
    let killed = Instant::now();
    let (on_b, _) = wait_for(
        "every instance running on b",
        LEASE_TTL + Duration::from_secs(10),
        async || {
            let by_node = running(&client).await;
            let on_b = by_node.get("b").cloned().unwrap_or_default();
            (on_b.len() >= INSTANCES).then_some(on_b)
        },
    )
    .await;
    let moved = killed.elapsed();
    eprintln!("after kill -9 of agent a: {INSTANCES} instances running on b after {moved:?}");
    assert!(
        moved <= LEASE_TTL + Duration::from_secs(2),
        "instances of the killed node ran on b only after {moved:?} (lease TTL {LEASE_TTL:?} + 2 s)"
    );
    wait_for(
        "curl saw b's new instances",
        Duration::from_secs(5),
        async || {
            let seen = read_log(&dir, "curl.out");
            on_b.keys()
                .all(|id| seen.contains(&format!("observed/instance/b/{id}")))
                .then_some(())
        },
    )
    .await;
    assert!(read_log(&dir, "curl.out").contains("event: put"));

    // Restart the server: the workloads on b are untouched.
    let before = running(&client).await.get("b").cloned().unwrap_or_default();
    let processes = marked_pids(&marker);
    assert!(
        processes.len() >= INSTANCES,
        "workloads found: {processes:?}"
    );
    let server = &mut cleanup.children[0];
    let _ = Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status();
    let _ = server.wait();
    cleanup.children[0] = start_server(&dir, port, &endpoints, &prefix, 2);
    tokio::time::sleep(LEASE_TTL + Duration::from_secs(2)).await;
    let after = running(&client).await.get("b").cloned().unwrap_or_default();
    assert_eq!(
        after,
        before,
        "the instances on b changed across a server restart; agent b said: {}",
        read_log(&dir, "agent-b.log")
    );
    assert_eq!(
        marked_pids(&marker),
        processes,
        "workload processes were stopped or started across a server restart"
    );
    let status = client
        .ok(Method::GET, "/api/status", "")
        .await
        .expect("status");
    assert_eq!(status["services"][0]["running"], INSTANCES, "{status}");
    drop(cleanup);
}
