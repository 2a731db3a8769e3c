//! Events through the API and `cca events`, as separate processes: `cca server` (memory store)
//! and one simulator agent. A service converging leaves Created, Placed, Started and Ready for
//! each instance; `cca events SVC` and `cca events INSTANCE` filter them; `--follow` prints new
//! ones as they are written; a missing secret is an event on the instance.

mod processes;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::Duration;

use hyper::Method;
use processes::{
    Children, admin_token, api_client, apply, cca, enrollment_token, running, start_agent,
    start_server, wait_for,
};

const AGENT_FLAGS: [&str; 6] = ["--runtime", "sim", "--cpu", "4", "--memory", "4Gi"];

fn service(instances: u32) -> String {
    format!(
        "service web {{\n    image nginx:1.28\n    instances {instances}\n    resources {{\n        \
         cpu 100m\n        memory 64Mi\n    }}\n}}\n\nservice vault {{\n    image app:1\n    \
         instances 1\n    secret db-pass /run/db\n}}\n"
    )
}

/// `cca events ARGS...` printed lines.
fn events(url: &str, admin: &str, args: &[&str]) -> Vec<String> {
    let out = cca()
        .args(["events", "--server", url, "--token", admin])
        .args(args)
        .output()
        .expect("cca events runs");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_tell_what_happened_to_a_service_and_follow_new_ones() {
    let tempdir = tempfile::tempdir().expect("tempdir");
    let dir = tempdir.path().to_owned();
    let mut children = Children::default();
    let (server, url) = start_server(&dir, "127.0.0.1:0", &["--store", "memory"], 1);
    children.0.push(server);
    let admin = admin_token(&dir);
    let client = api_client(&url, Some(&admin));
    let token = enrollment_token(&url, &admin);
    children
        .0
        .push(start_agent(&dir, &url, "n1", &token, &AGENT_FLAGS));
    apply(&dir, &url, &admin, &service(2), &[]);
    let (ids, _) = wait_for(
        "2 web instances ready",
        Duration::from_secs(30),
        async || {
            let answer = client
                .json(Method::GET, "/api/events?object=web", "")
                .await
                .ok()?
                .ok()?;
            let ready = answer["events"]
                .as_array()?
                .iter()
                .filter(|e| e["reason"] == "Ready")
                .count();
            let on_n1 = running(&client).await.remove("n1").unwrap_or_default();
            let web: Vec<String> = on_n1
                .into_keys()
                .filter(|id| id.starts_with("web-"))
                .collect();
            (ready == 2 && web.len() == 2).then_some(web)
        },
    )
    .await;

    // The service's history holds each instance's, in order; an instance's only its own.
    let lines = events(&url, &admin, &["web"]);
    for id in &ids {
        let of: Vec<&String> = lines.iter().filter(|l| l.contains(id.as_str())).collect();
        // Unplaced first when the apply beat the agent's registration.
        let reasons: Vec<&str> = of
            .iter()
            .filter_map(|l| l.split_whitespace().nth(2))
            .filter(|r| *r != "Unplaced")
            .collect();
        assert_eq!(
            reasons,
            ["Created", "Placed", "Started", "Ready"],
            "{lines:#?}"
        );
    }
    assert!(
        lines
            .iter()
            .any(|l| l.contains("placed on n1") && l.contains("(scheduler)"))
    );
    let own = events(&url, &admin, &[&ids[0]]);
    assert!((4..=5).contains(&own.len()), "{own:#?}");
    assert!(own.iter().all(|l| l.contains(ids[0].as_str())));

    // A missing secret: the instance waits, and its history says for what.
    let vault = events(&url, &admin, &["vault"]);
    assert!(
        vault
            .iter()
            .any(|l| l.contains("Waiting") && l.contains("missing secret db-pass")),
        "{vault:#?}"
    );

    // `cca status` names the instance in trouble and why.
    let status = processes::cca()
        .args(["status", "--server", &url, "--token", &admin])
        .output()
        .expect("cca status");
    let status = String::from_utf8_lossy(&status.stdout).into_owned();
    assert!(
        status
            .lines()
            .any(|l| l.starts_with("vault: vault-")
                && l.contains("is pending: missing secret db-pass")),
        "{status}"
    );

    // --follow prints what comes next.
    let mut follower = cca()
        .args(["events", "web", "--follow", "--json", "--limit", "0"])
        .args(["--server", &url, "--token", &admin])
        .stdout(Stdio::piped())
        .spawn()
        .expect("cca events --follow");
    let stdout = follower.stdout.take().expect("piped");
    let (lines_tx, lines_rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                return;
            }
        }
    });
    children.0.push(follower);
    tokio::time::sleep(Duration::from_millis(500)).await;
    apply(&dir, &url, &admin, &service(3), &[]);
    let (created, _) = wait_for(
        "a followed Created event",
        Duration::from_secs(30),
        async || {
            let line = lines_rx.try_recv().ok()?;
            let event: serde_json::Value = serde_json::from_str(&line).ok()?;
            (event["reason"] == "Created").then_some(event)
        },
    )
    .await;
    assert_eq!(created["service"], "web");
    assert!(created["revision"].as_u64().is_some(), "{created}");
    assert!(!ids.contains(&created["object"].as_str().unwrap_or_default().to_owned()));
}
