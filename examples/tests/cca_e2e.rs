//! The reference cluster as separate processes, as a user runs it: `cca server` on etcd, two
//! `cca agent`s (process runtime) enrolled with one-time tokens, `cca apply`, and a `curl`
//! following `/changes`. Then `kill -9` of one agent (its instances must run on the other node
//! within the lease TTL plus 2 s) and a restart of the server (workloads untouched).
//!
//! Needs the shared test etcd and curl: without them the test fails under CI and says it was
//! skipped when run by hand.
#![cfg(feature = "etcd")]

mod processes;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ccattler_store::etcd::server::skip_or_fail;
use hyper::Method;
use processes::{
    Children, Workloads, admin_token, api_client, apply, cca, enrollment_token, etcd_store_flags,
    free_port, marked_pids, read_log, running, start_agent, start_server, terminate, unique,
    wait_for,
};

const LEASE_TTL: Duration = Duration::from_secs(4);
const INSTANCES: usize = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_two_agents_kill_and_restart() {
    let Some(store) = etcd_store_flags("server_two_agents_kill_and_restart") else {
        return;
    };
    if Command::new("curl").arg("--version").output().is_err() {
        skip_or_fail(
            "server_two_agents_kill_and_restart",
            "curl is not installed",
        );
        return;
    }
    let tempdir = tempfile::tempdir().expect("tempdir");
    let dir: PathBuf = tempdir.path().to_owned();
    let marker = unique("cca-e2e-marker");
    // Dropped in reverse order: the processes first, then the workloads they left.
    let _workloads = Workloads(marker.clone());
    let mut children = Children::default();

    // A fixed port, so that the restarted server is found where the agents look.
    let listen = format!("127.0.0.1:{}", free_port());
    let (server, url) = start_server(&dir, &listen, &store, 1);
    children.0.push(server);
    let admin = admin_token(&dir);
    let client = api_client(&url, Some(&admin));

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
    let ttl = format!("{}s", LEASE_TTL.as_secs());
    let flags = [
        "--cpu",
        "4",
        "--memory",
        "4Gi",
        "--stop-grace",
        "1s",
        "--lease-ttl",
        &ttl,
    ];
    for node in ["a", "b"] {
        let token = enrollment_token(&url, &admin);
        children
            .0
            .push(start_agent(&dir, &url, node, &token, &flags));
    }
    // A reused enrollment token is refused.
    let token = enrollment_token(&url, &admin);
    let enroll = |node: &str| serde_json::json!({ "token": token, "node": node }).to_string();
    let first = client.json(Method::POST, "/api/enroll", enroll("c")).await;
    assert!(matches!(first, Ok(Ok(_))), "{first:?}");
    let again = client.json(Method::POST, "/api/enroll", enroll("d")).await;
    assert!(matches!(&again, Ok(Err(f)) if f.status == 401), "{again:?}");

    let doc = format!(
        "service sleeper {{\n    image busybox\n    command \"sh -c 'while true; do sleep 1; done' {marker}\"\n    instances {INSTANCES}\n    resources {{\n        cpu 100m\n        memory 16Mi\n    }}\n}}\n"
    );
    apply(&dir, &url, &admin, &doc, &[]);

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
    children.0.push(curl);
    wait_for("curl connected", Duration::from_secs(10), async || {
        read_log(&dir, "curl.out")
            .contains("event: ready")
            .then_some(())
    })
    .await;

    // kill -9 agent a (children[1]): its instances must run on b within the lease TTL + 2 s.
    children.0[1].kill().expect("kill -9 agent a");
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
    // Only the instances placed after the kill: b's first ones were written before curl
    // connected, and an observation is rewritten only when its state changes.
    let replacements: Vec<&String> = on_b
        .keys()
        .filter(|id| !spread.get("b").is_some_and(|first| first.contains_key(*id)))
        .collect();
    assert!(!replacements.is_empty(), "no replacement on b: {on_b:?}");
    wait_for(
        "curl saw b's new instances",
        Duration::from_secs(5),
        async || {
            let seen = read_log(&dir, "curl.out");
            replacements
                .iter()
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
    terminate(&mut children.0[0]);
    children.0[0] = start_server(&dir, &listen, &store, 2).0;
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
}
