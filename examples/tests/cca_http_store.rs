//! `HttpStore` is a faithful `FactStore`: the whole store conformance suite passes over the
//! store protocol of an in-process `cca server` API (each check on a fresh MemoryStore).

use std::net::SocketAddr;
use std::time::Duration;

use ccattler_examples::cca::api::auth::{self, Role};
use ccattler_examples::cca::api::{ApiConfig, ServerHandle};
use ccattler_store::MemoryStore;
use ccattler_store::http::HttpStore;
use ccattler_testkit::conformance::{StoreHarness, run_store_conformance};
use parking_lot::Mutex;

#[derive(Default)]
struct HttpHarness {
    servers: Mutex<Vec<ServerHandle>>,
}

impl StoreHarness for HttpHarness {
    type Store = HttpStore;

    async fn fresh(&self) -> HttpStore {
        let store = MemoryStore::new();
        let token = auth::generate_token();
        auth::store_token(&store, &token, Role::Admin, None)
            .await
            .expect("admin token");
        let addr: SocketAddr = "127.0.0.1:0".parse().expect("addr");
        let server = ServerHandle::start(store, ApiConfig::default(), addr)
            .await
            .expect("server starts");
        let http = HttpStore::new(server.url(), token);
        self.servers.lock().push(server);
        http
    }

    async fn advance(&self, d: Duration) {
        tokio::time::sleep(d).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_store_conforms() {
    run_store_conformance(&HttpHarness::default()).await;
}
