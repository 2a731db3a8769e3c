//! `cca server` as a binary, with the client commands: on a MemoryStore, and on etcd.

mod common;
mod processes;

use std::process::Command;

use common::DOC;
use processes::{Children, admin_token, start_server};
use serde_json::Value;

#[test]
fn cca_server_apply_status_and_get() {
    let defaults: [&str; 0] = [];
    exercise(&defaults);
}

/// The same on the shared test etcd, under a prefix of its own.
#[cfg(feature = "etcd")]
#[test]
fn cca_server_on_etcd() {
    if let Some(store) = processes::etcd_store_flags("cca_server_on_etcd") {
        exercise(&store);
    }
}

/// Starts `cca server` with `store_args`, applies, reads the status and the facts.
fn exercise(store_args: &[impl AsRef<std::ffi::OsStr>]) {
    let cca = env!("CARGO_BIN_EXE_cca");
    let dir = tempfile::tempdir().expect("tempdir");
    let doc = dir.path().join("app.cca");
    std::fs::write(&doc, DOC).expect("write doc");
    // Port 0: the server says which port it got.
    let (server, url) = start_server(dir.path(), "127.0.0.1:0", store_args, 1);
    let server = Children(vec![server]);
    let token = admin_token(dir.path());
    let run = |args: &[&str]| {
        Command::new(cca)
            .args(args)
            .args(["--server", &url])
            .env("CCATTLER_TOKEN", &token)
            .output()
            .expect("cca runs")
    };
    let doc = doc.to_str().expect("utf-8 path");
    let applied = run(&["apply", doc]);
    assert!(applied.status.success(), "{applied:?}");
    assert!(String::from_utf8_lossy(&applied.stdout).contains("+ desired/service/web"));
    let status = run(&["status", "--json"]);
    assert!(status.status.success(), "{status:?}");
    let status: Value = serde_json::from_slice(&status.stdout).expect("status JSON");
    let names: Vec<&str> = status["services"]
        .as_array()
        .expect("services")
        .iter()
        .map(|s| s["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, ["api", "web"]);
    assert_eq!(status["services"][1]["desired"], 2);
    let got = run(&["get", "desired/service/"]);
    let text = String::from_utf8_lossy(&got.stdout);
    assert!(text.contains("desired/service/web {"), "{text}");
    let refused = Command::new(cca)
        .args(["get", "--server", &url, "--token", "cca_wrong"])
        .env_remove("CCATTLER_TOKEN")
        .output()
        .expect("cca runs");
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("401"));
    drop(server);
}

/// Fourteen agents enrolling at once from one address, more than the server's burst of ten:
/// the server refuses some with "retry in N s", and each of those waits as told and enrolls,
/// so every node registers; none exits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_flood_from_one_address_is_admitted_by_retrying() {
    use std::time::Duration;

    use hyper::Method;
    use processes::{api_client, enrollment_token, start_agent, wait_for};

    const AGENTS: usize = 14;
    let dir = tempfile::tempdir().expect("tempdir");
    let defaults: [&str; 0] = [];
    let (server, url) = start_server(dir.path(), "127.0.0.1:0", &defaults, 1);
    let mut children = Children(vec![server]);
    let admin = admin_token(dir.path());
    let tokens: Vec<String> = (0..AGENTS)
        .map(|_| enrollment_token(&url, &admin))
        .collect();
    for (i, token) in tokens.iter().enumerate() {
        let node = format!("n{i}");
        let flags = ["--runtime", "sim", "--local-addr", "127.0.0.1:0"];
        children
            .0
            .push(start_agent(dir.path(), &url, &node, token, &flags));
    }
    let client = api_client(&url, Some(&admin));
    let (registered, took) = wait_for(
        "every agent registered",
        Duration::from_secs(60),
        async || {
            let answer = client
                .json(Method::GET, "/state?prefix=lease/node/", "")
                .await
                .ok()?
                .ok()?;
            let count = answer["facts"].as_array().map_or(0, Vec::len);
            (count == AGENTS).then_some(count)
        },
    )
    .await;
    eprintln!("{registered} agents registered in {took:?}");
    for child in &mut children.0[1..] {
        assert!(
            child.try_wait().expect("the agent's state").is_none(),
            "an agent exited"
        );
    }
    let told_to_wait = (0..AGENTS)
        .filter(|i| {
            std::fs::read_to_string(dir.path().join(format!("agent-n{i}.log")))
                .is_ok_and(|log| log.contains("asking again in"))
        })
        .count();
    assert!(
        told_to_wait > 0,
        "no agent was refused: the flood did not exceed the limit"
    );
}
