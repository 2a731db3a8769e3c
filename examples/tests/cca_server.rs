//! `cca server` as a binary, with the client commands: on a MemoryStore, and on etcd.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use common::DOC;
use serde_json::Value;

/// Kills the server even when an assertion fails.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn cca_server_apply_status_and_get() {
    exercise(&[]);
}

/// The same on the shared test etcd, under a prefix of its own.
#[cfg(feature = "etcd")]
#[test]
fn cca_server_on_etcd() {
    use ccattler_store::etcd::server::{shared_endpoints, skip_or_fail};
    let Some(endpoints) = shared_endpoints() else {
        skip_or_fail("cca_server_on_etcd", "no shared test etcd");
        return;
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let prefix = format!("cca-server-test-{}-{nanos}/", std::process::id());
    let endpoints = endpoints.join(",");
    exercise(&[
        "--store",
        "etcd",
        "--etcd",
        &endpoints,
        "--etcd-prefix",
        &prefix,
    ]);
}

/// Starts `cca server` with `extra` arguments, applies, reads the status and the facts.
fn exercise(extra: &[&str]) {
    let cca = env!("CARGO_BIN_EXE_cca");
    let dir = tempfile::tempdir().expect("tempdir");
    let token_file = dir.path().join("token");
    let doc = dir.path().join("app.cca");
    std::fs::write(&doc, DOC).expect("write doc");
    let log = std::fs::File::create(dir.path().join("server.log")).expect("log file");
    let mut child = Command::new(cca)
        .args(["server", "--listen", "127.0.0.1:0", "--token-file"])
        .arg(&token_file)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .expect("cca server starts");
    let stdout = child.stdout.take().expect("stdout");
    let server = Server(child);
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("read line");
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| {
            let log = std::fs::read_to_string(dir.path().join("server.log")).unwrap_or_default();
            panic!("no URL in {line:?}; the server said: {log}")
        })
        .to_owned();
    let token = std::fs::read_to_string(&token_file).expect("token file");
    let run = |args: &[&str]| {
        Command::new(cca)
            .args(args)
            .args(["--server", &url])
            .env("CCATTLER_TOKEN", token.trim())
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
