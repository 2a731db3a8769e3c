//! `/metrics` of `cca server` and `cca agent`, scraped by a real Prometheus (Debian's
//! `prometheus`) on loopback and queried through its HTTP API; the agent's local port while the
//! server is down; a scrape without a token.
//!
//! Without `prometheus` installed, the Prometheus test fails under CI and says it was skipped
//! when run by hand.

mod common;
mod processes;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use ccattler_examples::cca::api::auth::{self, Role};
use ccattler_examples::cca::client::{ApiClient, encode};
use hyper::{Method, StatusCode};
use processes::{
    Children, admin_token, api_client, apply, enrollment_token, free_port, read_log, running,
    start_agent, start_server, wait_for,
};
use serde_json::Value;

const CHECK: &str = "cca_metrics::prometheus_scrapes_server_and_agent";

/// Three instances that run, one that fits no node (it needs a label the node lacks).
const DOC: &str = "service web {\n    image web:1\n    instances 3\n}\n\n\
                   service db {\n    image db:1\n    placement {\n        require disk = ssd\n    }\n}\n";

/// A PromQL query and what its one value must satisfy.
type Expectation = (&'static str, fn(f64) -> bool);

const AGENT_FLAGS: [&str; 6] = ["--runtime", "sim", "--cpu", "4", "--memory", "4Gi"];

/// A server, one enrolled agent on the simulator with its local port, and the doc applied,
/// waited on until `running` instances run.
async fn cluster(
    dir: &Path,
    children: &mut Children,
    local: &str,
    running_wanted: usize,
) -> String {
    let (server, url) = start_server(dir, "127.0.0.1:0", &["--store", "memory"], 0);
    children.0.push(server);
    let admin = admin_token(dir);
    let enroll = enrollment_token(&url, &admin);
    let mut flags = AGENT_FLAGS.to_vec();
    flags.extend(["--local-addr", local]);
    children
        .0
        .push(start_agent(dir, &url, "n1", &enroll, &flags));
    apply(dir, &url, &admin, DOC, &[]);
    let api = api_client(&url, Some(&admin));
    wait_for("the instances run", Duration::from_secs(30), async || {
        let by_node = running(&api).await;
        let count: usize = by_node.values().map(|ids| ids.len()).sum();
        (count == running_wanted).then_some(())
    })
    .await;
    url
}

/// The value of the single series `query` selects, as Prometheus answers it now.
async fn query(prometheus: &ApiClient, query: &str) -> Option<f64> {
    let path = format!("/api/v1/query?query={}", encode(query));
    let answer: Value = prometheus.ok(Method::GET, &path, "").await.ok()?;
    let result = answer["data"]["result"].as_array()?;
    match result.as_slice() {
        [series] => series["value"][1].as_str()?.parse().ok(),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_server_and_agent() {
    if Command::new("prometheus")
        .arg("--version")
        .output()
        .is_err()
    {
        let why = "prometheus is not installed";
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{CHECK} needs prometheus under CI=true, but {why}; install Debian's `prometheus`"
        );
        eprintln!("SKIPPED {CHECK}: {why} (apt-get install prometheus)");
        return;
    }
    let tempdir = tempfile::tempdir().expect("tempdir");
    let dir = tempdir.path().to_owned();
    let mut children = Children::default();
    let local = format!("127.0.0.1:{}", free_port());
    let url = cluster(&dir, &mut children, &local, 3).await;

    // A scrape without the token is refused.
    let anonymous = api_client(&url, None)
        .send(Method::GET, "/metrics", "", &[])
        .await
        .expect("the server answers");
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);

    let web = format!("127.0.0.1:{}", free_port());
    let config = format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n\
         scrape_configs:\n\
         \x20 - job_name: server\n\
         \x20   authorization:\n\
         \x20     type: Bearer\n\
         \x20     credentials_file: {token}\n\
         \x20   static_configs:\n\
         \x20     - targets: ['{server}']\n\
         \x20 - job_name: agent\n\
         \x20   static_configs:\n\
         \x20     - targets: ['{local}']\n",
        token = dir.join("admin-token").display(),
        server = url.trim_start_matches("http://"),
    );
    std::fs::write(dir.join("prometheus.yml"), config).expect("write the config");
    let log = std::fs::File::create(dir.join("prometheus.log")).expect("log");
    let prometheus = Command::new("prometheus")
        .arg(format!(
            "--config.file={}",
            dir.join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("tsdb").display()
        ))
        .arg(format!("--web.listen-address={web}"))
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("prometheus starts");
    children.0.push(prometheus);
    let prometheus = api_client(&format!("http://{web}"), None);

    // Each metric family, as Prometheus scraped it from the processes.
    let expectations: [Expectation; 8] = [
        ("up{job=\"server\"}", |v| v == 1.0),
        ("up{job=\"agent\"}", |v| v == 1.0),
        // The runner's.
        (
            "ccattler_reconciles_total{job=\"server\",controller=\"scheduler\"}",
            |v| v >= 1.0,
        ),
        // The API's: the apply (APPLY or POST /config) answered 200.
        (
            "sum(ccattler_api_requests_total{job=\"server\",route=\"/config\",status=\"200\"})",
            |v| v >= 1.0,
        ),
        // The store's: the runner commits in transactions.
        (
            "ccattler_store_operations_total{job=\"server\",operation=\"txn\",outcome=\"ok\"}",
            |v| v >= 1.0,
        ),
        // The scheduler's: three placed, one unplaced for a label.
        ("ccattler_scheduler_placed_instances{job=\"server\"}", |v| {
            v == 3.0
        }),
        (
            "ccattler_scheduler_unplaced_instances{job=\"server\",reason=\"label\"}",
            |v| v == 1.0,
        ),
        // The agent's: the applied count runs.
        (
            "ccattler_agent_instances{job=\"agent\",state=\"running\"}",
            |v| v == 3.0,
        ),
    ];
    for (promql, expected) in expectations {
        let what = format!("Prometheus answers {promql} as expected");
        let mut last = None;
        let found = tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                last = query(&prometheus, promql).await;
                if last.is_some_and(expected) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        })
        .await;
        assert!(
            found.is_ok(),
            "{what}: last answer {last:?}; prometheus' log: {}",
            read_log(&dir, "prometheus.log")
        );
    }
    let histogram = "ccattler_agent_pass_duration_seconds_count{job=\"agent\"}";
    let passes = query(&prometheus, histogram).await;
    assert!(passes.is_some_and(|n| n >= 1.0), "{histogram}: {passes:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_answers_locally_while_the_server_is_down() {
    let tempdir = tempfile::tempdir().expect("tempdir");
    let dir = tempdir.path().to_owned();
    let mut children = Children::default();
    let local = format!("127.0.0.1:{}", free_port());
    cluster(&dir, &mut children, &local, 3).await;
    let node = api_client(&format!("http://{local}"), None);
    wait_for(
        "the local port shows the 3 instances",
        Duration::from_secs(30),
        async || {
            let answer = node.ok(Method::GET, "/node", "").await.ok()?;
            let connected = answer["connected"] == true;
            (connected && answer["instances"].as_object()?.len() == 3).then_some(())
        },
    )
    .await;

    // Kill the server (it is the first child) and wait until the agent knows it is alone.
    let server = &mut children.0[0];
    server.kill().expect("kill the server");
    server.wait().expect("the server ends");
    let (snapshot, _) = wait_for(
        "the agent reports itself disconnected",
        Duration::from_secs(30),
        async || {
            let answer = node.ok(Method::GET, "/node", "").await.ok()?;
            (answer["connected"] == false).then_some(answer)
        },
    )
    .await;
    assert_eq!(snapshot["node"], "n1");
    let instances = snapshot["instances"].as_object().expect("instances");
    let healthy = instances
        .values()
        .filter(|i| i["state"] == "running" && i["health"] == "healthy" && i["ready"] == true)
        .count();
    assert_eq!(healthy, 3, "{snapshot}");
    assert_eq!(snapshot["placements"].as_object().map(|p| p.len()), Some(3));
    assert!(
        snapshot.get("specs").is_none(),
        "no spec is shown: {snapshot}"
    );

    // Its metrics answer too, and say it is disconnected.
    let response = node
        .send(Method::GET, "/metrics", "", &[])
        .await
        .expect("the local port answers");
    assert_eq!(response.status(), StatusCode::OK);
    let body = http_body_util::BodyExt::collect(response.into_body())
        .await
        .expect("the body")
        .to_bytes();
    let text = String::from_utf8_lossy(&body);
    assert!(text.contains("ccattler_agent_connected 0"), "{text}");
    assert!(
        text.contains("ccattler_agent_instances{state=\"running\"} 3"),
        "{text}"
    );
    assert!(text.contains("ccattler_agent_store_errors_total"), "{text}");
}

#[tokio::test]
async fn metrics_need_an_admin_token() {
    ccattler_examples::cca::metrics::install().expect("the recorder installs");
    let h = common::Harness::start().await;
    let status = |response: &hyper::Response<hyper::body::Incoming>| response.status();
    let anonymous = h
        .as_token(None)
        .send(Method::GET, "/metrics", "", &[])
        .await;
    assert_eq!(
        anonymous.as_ref().map(status).ok(),
        Some(StatusCode::UNAUTHORIZED)
    );
    let wrong = h
        .as_token(Some("cca_wrong"))
        .send(Method::GET, "/metrics", "", &[])
        .await;
    assert_eq!(
        wrong.as_ref().map(status).ok(),
        Some(StatusCode::UNAUTHORIZED)
    );
    let node_token = auth::generate_token();
    let role = Role::Node {
        node: "n1".to_owned(),
    };
    auth::store_token(&h.store, &node_token, role, None)
        .await
        .expect("node token");
    let node = h
        .as_token(Some(&node_token))
        .send(Method::GET, "/metrics", "", &[])
        .await;
    assert_eq!(node.as_ref().map(status).ok(), Some(StatusCode::FORBIDDEN));

    let admin = h
        .admin
        .send(Method::GET, "/metrics", "", &[])
        .await
        .expect("answers");
    assert_eq!(admin.status(), StatusCode::OK);
    let content_type = admin
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok());
    assert_eq!(
        content_type,
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    let body = http_body_util::BodyExt::collect(admin.into_body())
        .await
        .expect("the body")
        .to_bytes();
    let text = String::from_utf8_lossy(&body);
    // The refused scrapes above were counted by route and status.
    assert!(
        text.contains(
            "ccattler_api_requests_total{route=\"/metrics\",method=\"GET\",status=\"401\"}"
        ),
        "{text}"
    );
    assert!(
        text.contains("ccattler_scheduler_placed_instances 0"),
        "{text}"
    );
    h.stop().await;
}
