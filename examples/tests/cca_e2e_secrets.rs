//! Secrets through the real agent path, as separate processes: `cca server` (memory store) and
//! one `cca agent --runtime process`. A service that names a secret nobody set stays pending with
//! the reason (never started with an empty value); once set, it runs with it; a changed file
//! secret is rewritten in place (no restart), a changed environment secret restarts it.
//!
//! The workload copies what it sees (its secret file and its environment variable) into a
//! volume every 100 ms, where the test reads it; `/api/status` then shows the volume attached
//! to the instance with the disk its data uses, as the agent measured it.

mod processes;

use std::path::Path;
use std::time::Duration;

use ccattler_examples::cca::client::ApiClient;
use hyper::Method;
use processes::{
    Children, Workloads, admin_token, api_client, apply, enrollment_token, start_agent,
    start_server, unique, wait_for,
};

fn service(marker: &str) -> String {
    format!(
        r#"service app {{
    image busybox
    command "sh -c 'm={marker}; while true; do cat run/secrets/db > out/db.new && mv out/db.new out/db; echo \"$API_TOKEN\" > out/env.new && mv out/env.new out/env; sleep 0.1; done'"
    instances 1
    secret db-pass /run/secrets/db
    secret api-token
    volume out /out
}}

volume out {{
    size 1Mi
    persistent true
}}
"#
    )
}

/// What the workload last wrote into its volume.
fn seen(volume: &Path, file: &str) -> Option<String> {
    std::fs::read_to_string(volume.join(file))
        .ok()
        .map(|s| s.trim_end().to_owned())
}

async fn set_secret(client: &ApiClient, name: &str, value: &str) {
    let response = client
        .send(
            Method::PUT,
            &format!("/state/secret/{name}"),
            value.to_owned(),
            &[],
        )
        .await
        .expect("the server answers");
    assert!(
        response.status().is_success(),
        "PUT secret/{name}: {response:?}"
    );
}

/// The one observation of `app`: (state, reason, restarts, instance id).
async fn observation(client: &ApiClient) -> Option<(String, String, u64, String)> {
    let answer = client
        .json(Method::GET, "/state?prefix=observed/instance/", "")
        .await
        .ok()?
        .ok()?;
    let fact = answer["facts"].as_array()?.first()?.clone();
    let value = &fact["value"];
    Some((
        value["state"].as_str()?.to_owned(),
        value["reason"].as_str().unwrap_or_default().to_owned(),
        value["restarts"].as_u64().unwrap_or(0),
        fact["key"].as_str()?.rsplit('/').next()?.to_owned(),
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_are_never_empty_and_changes_reach_the_running_instance() {
    let tempdir = tempfile::tempdir().expect("tempdir");
    let dir = tempdir.path().to_owned();
    let marker = unique("cca-secrets-marker");
    let _workloads = Workloads(marker.clone());
    let mut children = Children::default();
    let (server, url) = start_server(&dir, "127.0.0.1:0", &["--store", "memory"], 1);
    children.0.push(server);
    let admin = admin_token(&dir);
    let client = api_client(&url, Some(&admin));
    let token = enrollment_token(&url, &admin);
    let flags = ["--runtime", "process", "--stop-grace", "1s"];
    let mut flags = flags.to_vec();
    flags.extend(["--secret-refresh", "300ms"]);
    children
        .0
        .push(start_agent(&dir, &url, "n1", &token, &flags));
    let volume = dir.join("n1/agent/volumes/persistent/out");

    // Neither secret exists: pending, with the reason, and nothing runs.
    apply(&dir, &url, &admin, &service(&marker), &[]);
    let ((state, reason, _, _), _) = wait_for(
        "the instance reported waiting for its secret",
        Duration::from_secs(30),
        async || {
            observation(&client)
                .await
                .filter(|o| o.1.contains("missing secret"))
        },
    )
    .await;
    assert_eq!(state, "pending", "{reason}");
    assert!(reason.contains("db-pass"), "{reason}");
    assert_eq!(seen(&volume, "db"), None, "it never ran");

    // Set: it starts with both values.
    set_secret(&client, "db-pass", "one").await;
    set_secret(&client, "api-token", "tok-1").await;
    wait_for(
        "the workload sees both secrets",
        Duration::from_secs(30),
        async || {
            (seen(&volume, "db").as_deref() == Some("one")
                && seen(&volume, "env").as_deref() == Some("tok-1"))
            .then_some(())
        },
    )
    .await;
    let (state, _, restarts, id) = observation(&client).await.expect("observed");
    assert_eq!((state.as_str(), restarts), ("running", 0));

    // A file secret changes: rewritten in place, the same process goes on.
    set_secret(&client, "db-pass", "two").await;
    let (_, took) = wait_for(
        "the new file content",
        Duration::from_secs(30),
        async || (seen(&volume, "db").as_deref() == Some("two")).then_some(()),
    )
    .await;
    eprintln!("a changed file secret reached the instance after {took:?}");
    let after = observation(&client).await.expect("observed");
    assert_eq!(
        (after.2, after.3.as_str()),
        (0, id.as_str()),
        "not restarted"
    );

    // An environment secret changes: the instance restarts with it (same id).
    set_secret(&client, "api-token", "tok-2").await;
    let (_, took) = wait_for("the new environment", Duration::from_secs(30), async || {
        (seen(&volume, "env").as_deref() == Some("tok-2")).then_some(())
    })
    .await;
    eprintln!("a changed environment secret reached the instance after {took:?}");
    let after = observation(&client).await.expect("observed");
    assert_eq!(after.3, id, "the same instance, restarted in place");
    assert_eq!(after.2, 1, "one restart");

    // The volume's data, measured by the agent at its telemetry interval (10 s).
    let (attached, took) = wait_for(
        "the volume's disk use in the status",
        Duration::from_secs(45),
        async || {
            let answer = client
                .json(Method::GET, "/api/status", "")
                .await
                .ok()?
                .ok()?;
            let attached = answer["volumes"]["attached"].as_array()?.first()?.clone();
            attached["used"].as_u64().filter(|used| *used > 0)?;
            Some(attached)
        },
    )
    .await;
    eprintln!("the volume's use was reported after {took:?}: {attached}");
    assert_eq!(attached["volume"], "out");
    assert_eq!(attached["node"], "n1");
    assert_eq!(attached["instance"].as_str(), Some(id.as_str()));
    assert_eq!(attached["size"], "1Mi");
}
