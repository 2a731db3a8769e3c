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
