//! The API's figures: `GET /state` of 10,000 facts, and 1,000 concurrent `/changes` watchers
//! held by one server.
//!
//! ```text
//! cargo run --release -p ccattler-examples --bin api_figures
//! ```
//!
//! Both run in one process over loopback: a `MemoryStore`, the API server, and clients using
//! the `cca` client (hyper, HTTP/1.1). Times are measured at the client, body read included.
//! Targets: `GET /state` of 10,000 facts at most 50 ms; 1,000 watchers all receive an event.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use ccattler_core::{FactStore, Key};
use ccattler_examples::cca::api::auth::{self, Role};
use ccattler_examples::cca::api::{ApiConfig, ServerHandle};
use ccattler_examples::cca::client::{ApiClient, ClientArgs};
use ccattler_store::MemoryStore;
use ccattler_store::http::sse::EventReader;
use hyper::Method;

const FACTS: usize = 10_000;
const RUNS: usize = 11;
const WATCHERS: usize = 1_000;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let store = MemoryStore::new();
    let token = auth::generate_token();
    auth::store_token(&store, &token, Role::Admin, None).await?;
    for i in 0..FACTS {
        let key = Key::new(format!("observed/instance/n{}/web-{i}", i % 50))?;
        let value = format!(
            r#"{{"id":"web-{i}","service":"web","node":"n{}","state":"running","health":"ready","version":"a1b2c3d4","restarts":0,"port":{}}}"#,
            i % 50,
            20_000 + i
        );
        store.put(&key, value.into()).await?;
    }
    let addr: SocketAddr = "127.0.0.1:0".parse()?;
    let server = ServerHandle::start(store.clone(), ApiConfig::default(), addr).await?;
    let client = ApiClient::new(&ClientArgs {
        server: server.url(),
        token: Some(token.clone()),
    });

    let mut times = Vec::with_capacity(RUNS);
    let mut count = 0;
    for _ in 0..RUNS {
        let started = Instant::now();
        let answer = client
            .ok(Method::GET, "/state?prefix=observed/", Bytes::new())
            .await?;
        times.push(started.elapsed());
        count = answer["facts"].as_array().map_or(0, Vec::len);
    }
    times.sort();
    println!(
        "GET /state of {count} facts: median {:.1} ms (min {:.1}, max {:.1}; {RUNS} runs; target <= 50 ms)",
        ms(times[RUNS / 2]),
        ms(times[0]),
        ms(times[RUNS - 1]),
    );

    // 1,000 watchers, each on its own connection, all established before the write.
    let started = Instant::now();
    let mut readers = Vec::with_capacity(WATCHERS);
    for _ in 0..WATCHERS {
        let response = client
            .send(Method::GET, "/changes?prefix=figures/", Bytes::new(), &[])
            .await?;
        let mut events = EventReader::new(response.into_body());
        match events.next().await? {
            Some(event) if event.event == "ready" => readers.push(events),
            other => return Err(format!("expected a ready event, got {other:?}").into()),
        }
    }
    let connected = started.elapsed();
    let mut tasks = tokio::task::JoinSet::new();
    for mut events in readers {
        tasks.spawn(async move {
            match tokio::time::timeout(Duration::from_secs(30), events.next()).await {
                Ok(Ok(Some(event))) if event.event == "put" => Some(Instant::now()),
                _ => None,
            }
        });
    }
    let written = Instant::now();
    store.put(&Key::new("figures/ping")?, "1".into()).await?;
    let mut received = 0;
    let mut last = written;
    while let Some(result) = tasks.join_next().await {
        if let Ok(Some(at)) = result {
            received += 1;
            last = last.max(at);
        }
    }
    println!(
        "{WATCHERS} concurrent /changes watchers on one server: connected in {:.0} ms; \
         {received}/{WATCHERS} received the event, the last {:.1} ms after the write",
        ms(connected),
        ms(last - written),
    );
    server.shutdown().await;
    if received == WATCHERS {
        Ok(())
    } else {
        Err("not every watcher received the event".into())
    }
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}
