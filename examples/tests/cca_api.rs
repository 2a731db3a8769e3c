//! The HTTP API in process (MemoryStore, the standard controllers, a server on 127.0.0.1:0),
//! and `cca server` with the client commands as a binary.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use axum::body::Bytes;
use ccattler_controllers::standard;
use ccattler_core::runner::TokioRunner;
use ccattler_core::{FactStore, Key, Runner};
use ccattler_examples::cca::api::auth::{self, Role, TokenRecord};
use ccattler_examples::cca::api::{ApiConfig, ServerHandle};
use ccattler_examples::cca::client::{ApiClient, ClientArgs};
use ccattler_examples::cca::sse::{EventReader, SseEvent};
use ccattler_store::MemoryStore;
use hyper::{Method, StatusCode};
use serde_json::{Value, json};

const DOC: &str = "service web {\n    image nginx:1.28\n    instances 2\n}\n\
                   service api {\n    image api:1\n}\n";

struct Harness {
    store: MemoryStore,
    server: ServerHandle,
    admin: ApiClient,
    stop_runner: tokio::sync::oneshot::Sender<()>,
}

impl Harness {
    async fn start() -> Harness {
        let store = MemoryStore::new();
        let mut runner = TokioRunner::new(store.clone());
        for controller in standard::all() {
            runner = runner.controller_arc(controller);
        }
        let (stop_runner, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let _ = runner
                .run(async {
                    let _ = stopped.await;
                })
                .await;
        });
        let token = auth::generate_token();
        auth::store_token(&store, &token, Role::Admin, None)
            .await
            .expect("admin token");
        let addr: SocketAddr = "127.0.0.1:0".parse().expect("addr");
        let server = ServerHandle::start(store.clone(), ApiConfig::default(), addr)
            .await
            .expect("server starts");
        let admin = client(&server.url(), Some(&token));
        Harness {
            store,
            server,
            admin,
            stop_runner,
        }
    }

    fn as_token(&self, token: Option<&str>) -> ApiClient {
        client(&self.server.url(), token)
    }

    async fn revision(&self) -> u64 {
        self.store.revision().await.expect("revision").get()
    }

    async fn stop(self) {
        let _ = self.stop_runner.send(());
        self.server.shutdown().await;
    }
}

fn client(url: &str, token: Option<&str>) -> ApiClient {
    ApiClient::new(&ClientArgs {
        server: url.to_owned(),
        token: token.map(str::to_owned),
    })
}

/// Sends and returns status and JSON body (every answer of the API is JSON).
async fn call(
    client: &ApiClient,
    method: &str,
    path: &str,
    body: impl Into<Bytes>,
) -> (StatusCode, Value) {
    let method = Method::from_bytes(method.as_bytes()).expect("method");
    match client
        .json(method, path, body)
        .await
        .expect("server answers")
    {
        Ok(json) => (StatusCode::OK, json),
        Err(failure) => {
            assert!(
                failure.body["error"].is_string(),
                "JSON error body: {}",
                failure.body
            );
            (failure.status, failure.body)
        }
    }
}

fn keys(answer: &Value) -> Vec<String> {
    answer["facts"]
        .as_array()
        .expect("facts")
        .iter()
        .map(|f| f["key"].as_str().expect("key").to_owned())
        .collect()
}

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
    let before = h.revision().await;
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
    let before = h.revision().await;
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
async fn missing_or_wrong_tokens_get_401_and_write_nothing() {
    let h = Harness::start().await;
    let before = h.revision().await;
    for client in [h.as_token(None), h.as_token(Some("cca_wrong"))] {
        assert_eq!(
            call(&client, "POST", "/config", DOC).await.0,
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(
            call(&client, "PUT", "/state/app/x", "1").await.0,
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(
            call(&client, "GET", "/state", Bytes::new()).await.0,
            StatusCode::UNAUTHORIZED
        );
    }
    assert_eq!(h.revision().await, before);
    h.stop().await;
}

#[tokio::test]
async fn enrollment_tokens_are_single_use_and_expire_and_node_credentials_stay_in_their_prefixes() {
    let h = Harness::start().await;
    let (status, created) = call(&h.admin, "POST", "/api/tokens", r#"{"ttl": "10m"}"#).await;
    assert_eq!(status, StatusCode::OK, "{created}");
    let enrollment = created["token"].as_str().expect("token").to_owned();
    // An enrollment token is no bearer token.
    assert_eq!(
        call(
            &h.as_token(Some(&enrollment)),
            "GET",
            "/state",
            Bytes::new()
        )
        .await
        .0,
        StatusCode::UNAUTHORIZED
    );
    let body = json!({"token": enrollment, "node": "n1"}).to_string();
    let anonymous = h.as_token(None);
    let (status, enrolled) = call(&anonymous, "POST", "/api/enroll", body.clone()).await;
    assert_eq!(status, StatusCode::OK, "{enrolled}");
    let (status, _) = call(&anonymous, "POST", "/api/enroll", body).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "reused");

    let expired = auth::generate_token();
    let record = TokenRecord {
        role: Role::Enroll,
        expires_at: Some(auth::now_secs() - 10),
    };
    h.store
        .put(
            &auth::token_key(&expired),
            serde_json::to_vec(&record).expect("json").into(),
        )
        .await
        .expect("put");
    let body = json!({"token": expired, "node": "n2"}).to_string();
    assert_eq!(
        call(&anonymous, "POST", "/api/enroll", body).await.0,
        StatusCode::UNAUTHORIZED
    );

    let node = h.as_token(enrolled["token"].as_str());
    for own in [
        "lease/node/n1",
        "observed/node/n1",
        "observed/instance/n1/i-1",
    ] {
        let (status, answer) = call(&node, "PUT", &format!("/state/{own}"), "{}").await;
        assert_eq!(status, StatusCode::OK, "{own}: {answer}");
    }
    let before = h.revision().await;
    for other in [
        "observed/node/n2",
        "observed/instance/n2/i-1",
        "desired/service/x",
        "auth/token/x",
    ] {
        assert_eq!(
            call(&node, "PUT", &format!("/state/{other}"), "{}").await.0,
            StatusCode::FORBIDDEN,
            "{other}"
        );
        assert_eq!(
            call(&node, "DELETE", &format!("/state/{other}"), Bytes::new())
                .await
                .0,
            StatusCode::FORBIDDEN
        );
    }
    assert_eq!(
        call(&node, "POST", "/config", DOC).await.0,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        call(&node, "POST", "/api/tokens", "{}").await.0,
        StatusCode::FORBIDDEN
    );
    assert_eq!(h.revision().await, before);
    assert_eq!(
        call(&node, "GET", "/state?prefix=observed/", Bytes::new())
            .await
            .0,
        StatusCode::OK
    );
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
    let cca = env!("CARGO_BIN_EXE_cca");
    let dir = tempfile::tempdir().expect("tempdir");
    let token_file = dir.path().join("token");
    let doc = dir.path().join("app.cca");
    std::fs::write(&doc, DOC).expect("write doc");
    let mut child = Command::new(cca)
        .args(["server", "--listen", "127.0.0.1:0", "--token-file"])
        .arg(&token_file)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
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
        .unwrap_or_else(|| panic!("no URL in {line:?}"))
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
