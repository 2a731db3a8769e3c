//! The HTTP API in process: state, queries, apply, watch, bad input.

mod common;

use std::time::Duration;

use axum::body::Bytes;
use ccattler_core::{FactStore, Key};
use ccattler_examples::cca::client::ApiClient;
use ccattler_store::http::sse::{EventReader, SseEvent};
use common::{DOC, Harness, call, keys};
use hyper::{Method, StatusCode};
use serde_json::{Value, json};

#[tokio::test]
async fn apply_then_get_state_hides_secrets() {
    let h = Harness::start().await;
    let (status, answer) = call(&h.admin, "POST", "/config", DOC).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(
        answer["added"],
        json!(["desired/service/api", "desired/service/web"])
    );
    h.store
        .put(&Key::new("secret/db").expect("key"), "hunter2".into())
        .await
        .expect("put");
    let (_, all) = call(&h.admin, "GET", "/state", Bytes::new()).await;
    let all_keys = keys(&all);
    assert!(all_keys.contains(&"desired/service/web".to_owned()));
    assert!(
        all_keys
            .iter()
            .all(|k| !k.starts_with("secret/") && !k.starts_with("auth/"))
    );
    assert!(!all.to_string().contains("hunter2"));
    let (_, secrets) = call(&h.admin, "GET", "/state?prefix=secret/", Bytes::new()).await;
    assert_eq!(keys(&secrets), Vec::<String>::new());
    let (_, services) = call(
        &h.admin,
        "GET",
        "/state?prefix=desired/service/",
        Bytes::new(),
    )
    .await;
    assert_eq!(
        keys(&services),
        ["desired/service/api", "desired/service/web"]
    );
    assert_eq!(services["facts"][1]["value"]["image"], "nginx:1.28");
    assert!(services["revision"].as_u64().expect("revision") >= 1);
    h.stop().await;
}

#[tokio::test]
async fn query_filters_on_value_fields() {
    let h = Harness::start().await;
    for (key, value) in [
        (
            "observed/instance/n1/a",
            json!({"state": "running", "cpu": 500}),
        ),
        (
            "observed/instance/n1/b",
            json!({"state": "exited", "cpu": 100}),
        ),
        (
            "observed/instance/n2/c",
            json!({"state": "running", "cpu": 100}),
        ),
    ] {
        let path = format!("/state/{key}");
        assert_eq!(
            call(&h.admin, "PUT", &path, value.to_string()).await.0,
            StatusCode::OK
        );
    }
    let query = json!({"prefix": "observed/instance/", "where": [
        {"field": "state", "op": "==", "value": "running"},
        {"field": "cpu", "op": ">=", "value": 200},
    ]});
    let (status, answer) = call(&h.admin, "QUERY", "/state", query.to_string()).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(keys(&answer), ["observed/instance/n1/a"]);
    let running = json!({"prefix": "observed/", "where": [{"field": "state", "op": "==", "value": "running"}]});
    let (_, answer) = call(&h.admin, "POST", "/state/query", running.to_string()).await;
    assert_eq!(
        keys(&answer),
        ["observed/instance/n1/a", "observed/instance/n2/c"]
    );
    let bad = json!({"where": [{"field": "state", "op": "~=", "value": 1}]});
    assert_eq!(
        call(&h.admin, "QUERY", "/state", bad.to_string()).await.0,
        StatusCode::BAD_REQUEST
    );
    h.stop().await;
}

#[tokio::test]
async fn apply_with_errors_answers_every_diagnostic_and_applies_nothing() {
    let h = Harness::start().await;
    let before = h.settled().await;
    let bad = "service web {\n    image nginx\n    bogus 1\n}\nservice api {\n    instances 2\n}\n";
    let (status, answer) = call(&h.admin, "APPLY", "/config", bad).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let codes: Vec<&str> = answer["diagnostics"]
        .as_array()
        .expect("diagnostics")
        .iter()
        .map(|d| d["code"].as_str().expect("code"))
        .collect();
    assert!(codes.contains(&"cca::unknown-field"), "{codes:?}");
    assert!(codes.contains(&"cca::missing-image"), "{codes:?}");
    assert_eq!(answer["diagnostics"][0]["line"], 3);
    assert!(
        answer["rendered"]
            .as_str()
            .expect("rendered")
            .contains("bogus")
    );
    assert_eq!(h.revision().await, before);
    h.stop().await;
}

#[tokio::test]
async fn dry_run_writes_nothing_and_prune_removes_undeclared() {
    let h = Harness::start().await;
    assert_eq!(
        call(&h.admin, "POST", "/config", DOC).await.0,
        StatusCode::OK
    );
    let only_web = "service web {\n    image nginx:1.28\n    instances 2\n}\n";
    let before = h.settled().await;
    let (_, plan) = call(
        &h.admin,
        "POST",
        "/config?dry_run=true&prune=true",
        only_web,
    )
    .await;
    assert_eq!(plan["removed"], json!(["desired/service/api"]));
    assert_eq!(plan["revision"], Value::Null);
    assert_eq!(h.revision().await, before);
    let (_, kept) = call(&h.admin, "POST", "/config", only_web).await;
    assert_eq!(
        kept["revision"],
        Value::Null,
        "without prune nothing changes: {kept}"
    );
    let (_, pruned) = call(&h.admin, "POST", "/config?prune=true", only_web).await;
    assert!(pruned["revision"].is_u64());
    let (_, services) = call(
        &h.admin,
        "GET",
        "/state?prefix=desired/service/",
        Bytes::new(),
    )
    .await;
    assert_eq!(keys(&services), ["desired/service/web"]);
    h.stop().await;
}

async fn open_watch(client: &ApiClient, path: &str, last_id: Option<&str>) -> EventReader {
    let mut headers = vec![("accept", "text/event-stream")];
    if let Some(id) = last_id {
        headers.push(("last-event-id", id));
    }
    let response = client
        .send(Method::GET, path, Bytes::new(), &headers)
        .await
        .expect("watch");
    assert_eq!(response.status(), StatusCode::OK);
    EventReader::new(response.into_body())
}

async fn next(events: &mut EventReader) -> SseEvent {
    tokio::time::timeout(Duration::from_secs(5), events.next())
        .await
        .expect("an event in time")
        .expect("stream ok")
        .expect("stream open")
}

#[tokio::test]
async fn watch_streams_changes_and_resumes_from_last_event_id() {
    let h = Harness::start().await;
    let mut events = open_watch(&h.admin, "/changes?prefix=app/", None).await;
    assert_eq!(next(&mut events).await.event, "ready");
    h.store
        .put(&Key::new("secret/x").expect("key"), "s".into())
        .await
        .expect("put");
    for i in 1..=3 {
        let path = format!("/state/app/k{i}");
        call(&h.admin, "PUT", &path, format!("{{\"n\":{i}}}")).await;
    }
    let mut ids = Vec::new();
    for i in 1..=3 {
        let event = next(&mut events).await;
        assert_eq!(event.event, "put");
        let data: Value = serde_json::from_str(&event.data).expect("json");
        assert_eq!(data["key"], format!("app/k{i}"));
        assert_eq!(data["value"]["n"], i);
        ids.push(event.id);
    }
    drop(events);
    // Resume after the first event: the second and third follow, nothing else.
    let mut resumed = open_watch(&h.admin, "/changes?prefix=app/", Some(&ids[0])).await;
    assert_eq!(next(&mut resumed).await.event, "ready");
    assert_eq!(next(&mut resumed).await.id, ids[1]);
    assert_eq!(next(&mut resumed).await.id, ids[2]);
    // WATCH works like GET; a compacted resume point asks the client to list again.
    h.store
        .compact(h.store.revision().await.expect("rev"))
        .await
        .expect("compact");
    let response = h
        .admin
        .send(
            Method::from_bytes(b"WATCH").expect("method"),
            "/changes",
            Bytes::new(),
            &[("last-event-id", "1")],
        )
        .await
        .expect("watch");
    let mut compacted = EventReader::new(response.into_body());
    let mut event = next(&mut compacted).await;
    if event.event == "ready" {
        event = next(&mut compacted).await;
    }
    assert_eq!(event.event, "error");
    assert!(event.data.contains("\"relist\":true"), "{}", event.data);
    h.stop().await;
}

#[tokio::test]
async fn bad_requests_get_json_errors() {
    let h = Harness::start().await;
    let huge = vec![b'#'; 2 << 20];
    assert_eq!(
        call(&h.admin, "POST", "/config", huge).await.0,
        StatusCode::PAYLOAD_TOO_LARGE
    );
    assert_eq!(
        call(&h.admin, "POST", "/state/query", "{not json").await.0,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        call(&h.admin, "POST", "/api/enroll", "[1,2").await.0,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        call(&h.admin, "POST", "/config", vec![0xff, 0xfe]).await.0,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        call(&h.admin, "GET", "/nowhere", Bytes::new()).await.0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        call(&h.admin, "PATCH", "/state", Bytes::new()).await.0,
        StatusCode::METHOD_NOT_ALLOWED
    );
    assert_eq!(
        call(&h.admin, "GET", "/state?prefix=/abs", Bytes::new())
            .await
            .0,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        call(&h.admin, "PUT", "/state/a//b", "1").await.0,
        StatusCode::BAD_REQUEST
    );
    // Still serving.
    assert_eq!(
        call(&h.admin, "GET", "/api/status", Bytes::new()).await.0,
        StatusCode::OK
    );
    h.stop().await;
}
