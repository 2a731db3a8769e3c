//! The in-process harness of the API tests: MemoryStore, the standard controllers, a server on
//! 127.0.0.1:0 and an admin client.

#![allow(dead_code)]

use std::net::SocketAddr;

use axum::body::Bytes;
use ccattler_controllers::standard;
use ccattler_core::runner::TokioRunner;
use ccattler_core::{FactStore, Runner};
use ccattler_examples::cca::api::auth::{self, Role};
use ccattler_examples::cca::api::{ApiConfig, ServerHandle};
use ccattler_examples::cca::client::{ApiClient, ClientArgs};
use ccattler_store::MemoryStore;
use hyper::{Method, StatusCode};
use serde_json::Value;

pub(crate) const DOC: &str = "service web {\n    image nginx:1.28\n    instances 2\n}\n\
                   service api {\n    image api:1\n}\n";

pub(crate) struct Harness {
    pub store: MemoryStore,
    pub server: ServerHandle,
    pub admin: ApiClient,
    stop_runner: tokio::sync::oneshot::Sender<()>,
}

impl Harness {
    pub(crate) async fn start() -> Harness {
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

    pub(crate) fn as_token(&self, token: Option<&str>) -> ApiClient {
        client(&self.server.url(), token)
    }

    pub(crate) async fn revision(&self) -> u64 {
        self.store.revision().await.expect("revision").get()
    }

    /// The store's revision once the controllers have done what the last write asks of them
    /// (it stayed put for 300 ms): a later "nothing was written" compares with this.
    pub(crate) async fn settled(&self) -> u64 {
        let mut last = self.revision().await;
        loop {
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            let now = self.revision().await;
            if now == last {
                return now;
            }
            last = now;
        }
    }

    pub(crate) async fn stop(self) {
        let _ = self.stop_runner.send(());
        self.server.shutdown().await;
    }
}

pub(crate) fn client(url: &str, token: Option<&str>) -> ApiClient {
    ApiClient::new(&ClientArgs {
        server: url.to_owned(),
        token: token.map(str::to_owned),
    })
}

/// Sends and returns status and JSON body (every answer of the API is JSON).
pub(crate) async fn call(
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

pub(crate) fn keys(answer: &Value) -> Vec<String> {
    answer["facts"]
        .as_array()
        .expect("facts")
        .iter()
        .map(|f| f["key"].as_str().expect("key").to_owned())
        .collect()
}
