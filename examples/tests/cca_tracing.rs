//! Following one change through the logs, as an operator does: `cca server` and a simulator
//! agent logging JSON (`--log-format json`) with `RUST_LOG` turning the runner's and the
//! agent's spans on. The apply names its store revision; the instance controller's commit that
//! created an instance names that instance and a later revision; the scheduler's commit places
//! it; the agent's `ensure_running` span names the same instance and service.

mod processes;

use std::time::Duration;

use processes::{
    Children, admin_token, api_client, apply, enrollment_token, read_log, running,
    start_agent_with, start_server_with, wait_for,
};
use serde_json::Value;

const DOC: &str = "service web {\n    image nginx:1.28\n    instances 1\n}\n";

/// The JSON lines of a log (other lines, such as the server's banner, are skipped).
fn json_lines(log: &str) -> Vec<Value> {
    log.lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

/// Whether any span of a JSON log line is named `name` with `field` = `value`.
fn in_span(line: &Value, name: &str, field: &str, value: &str) -> bool {
    line["spans"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|span| span["name"] == name && span[field] == value)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_change_is_followed_from_the_apply_to_the_agent() {
    let tempdir = tempfile::tempdir().expect("tempdir");
    let dir = tempdir.path().to_owned();
    let mut children = Children::default();
    let server_env = [
        ("RUST_LOG", "info,ccattler_core::runner=debug"),
        ("CCATTLER_LOG_FORMAT", "json"),
    ];
    let (server, url) =
        start_server_with(&dir, "127.0.0.1:0", &["--store", "memory"], 1, &server_env);
    children.0.push(server);
    let admin = admin_token(&dir);
    let client = api_client(&url, Some(&admin));
    let token = enrollment_token(&url, &admin);
    let agent_env = [("RUST_LOG", "warn,ccattler_runtime::agent=info")];
    let flags = ["--runtime", "sim", "--log-format", "json"];
    children.0.push(start_agent_with(
        &dir, &url, "n1", &token, &flags, &agent_env,
    ));
    apply(&dir, &url, &admin, DOC, &[]);
    let (id, _) = wait_for("the instance runs", Duration::from_secs(30), async || {
        running(&client).await.remove("n1")?.into_keys().next()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    let server = json_lines(&read_log(&dir, "server-1.log"));
    let applied = server
        .iter()
        .find(|l| l["fields"]["message"] == "applied")
        .unwrap_or_else(|| panic!("no `applied` line: {server:#?}"));
    let applied_at = applied["fields"]["revision"].as_u64().expect("a revision");
    let created = server
        .iter()
        .find(|l| {
            l["fields"]["message"] == "put"
                && l["fields"]["instance"] == id.as_str()
                && l["fields"]["key"] == format!("desired/instance/{id}")
                && in_span(l, "commit", "controller", "instances")
        })
        .unwrap_or_else(|| panic!("no commit creating {id}: {server:#?}"));
    let created_at: u64 = created["fields"]["revision"]
        .as_str()
        .and_then(|r| r.parse().ok())
        .expect("a revision");
    assert!(created_at > applied_at, "{created_at} after {applied_at}");
    assert!(
        server.iter().any(|l| l["fields"]["message"] == "put"
            && l["fields"]["key"]
                .as_str()
                .is_some_and(|k| k.starts_with("placement/n1/"))
            && l["fields"]["instance"] == id.as_str()
            && in_span(l, "commit", "controller", "scheduler")),
        "no commit placing {id}"
    );

    let agent = json_lines(&read_log(&dir, "agent-n1.log"));
    let started = agent
        .iter()
        .find(|l| in_span(l, "ensure_running", "instance", &id) && l["fields"]["message"] == "done")
        .unwrap_or_else(|| panic!("no ensure_running of {id} in the agent's log: {agent:#?}"));
    assert_eq!(started["span"]["service"], "web");
    assert_eq!(started["span"]["node"], "n1");
}
