//! The FactStore conformance suite against `HttpStore` talking, over a real loopback TCP
//! connection, to the store protocol's server (`ccattler_store::http_server::router`) with a
//! fresh MemoryStore behind it for each check; and the node credential rules end to end.

use std::sync::Mutex;
use std::time::Duration;

use ccattler_core::{FactStore, Key, StoreError};
use ccattler_store::MemoryStore;
use ccattler_store::http::HttpStore;
use ccattler_store::http_server::{Principal, StaticTokens, router};
use ccattler_testkit::conformance::{StoreHarness, run_store_conformance};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

const ADMIN: &str = "admin-token";
const NODE_1: &str = "n1-token";

/// One server per check, each on its own loopback port; aborted when the harness drops.
#[derive(Debug, Default)]
struct HttpHarness {
    servers: Mutex<Vec<JoinHandle<()>>>,
}

impl HttpHarness {
    /// Serves the protocol over `store` on a free loopback port; returns its base URL.
    async fn serve(&self, store: MemoryStore) -> String {
        let tokens = StaticTokens::new()
            .with(ADMIN, Principal::Admin)
            .with(NODE_1, Principal::Node("n1".to_owned()));
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port");
        let addr = listener.local_addr().expect("the bound address");
        let app = router(store, tokens);
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.expect("the server runs");
        });
        self.servers.lock().expect("harness lock").push(task);
        format!("http://{addr}")
    }
}

impl Drop for HttpHarness {
    fn drop(&mut self) {
        if let Ok(servers) = self.servers.get_mut() {
            for task in servers.drain(..) {
                task.abort();
            }
        }
    }
}

impl StoreHarness for HttpHarness {
    type Store = HttpStore;

    async fn fresh(&self) -> HttpStore {
        HttpStore::new(self.serve(MemoryStore::new()).await, ADMIN)
    }

    async fn advance(&self, d: Duration) {
        // The MemoryStore behind the server runs on the real clock.
        tokio::time::sleep(d).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_store_over_the_protocol_server_conforms() {
    run_store_conformance(&HttpHarness::default()).await;
}

#[tokio::test]
async fn a_node_credential_writes_only_its_own_facts_over_the_wire() {
    let harness = HttpHarness::default();
    let backing = MemoryStore::new();
    let url = harness.serve(backing.clone()).await;
    let node = HttpStore::new(url.clone(), NODE_1);
    let key = |k: &str| Key::new(k).expect("key");

    node.put(&key("observed/node/n1"), "{}".into())
        .await
        .expect("its own record");
    node.put(&key("observed/instance/n1/web-1"), "{}".into())
        .await
        .expect("its own observation");
    let before = backing.revision().await.expect("revision");
    for refused in [
        "observed/node/n10",
        "observed/instance/n10/web-1",
        "observed/instance/n1/../n2/web-1",
        "lease/node/n2",
        "desired/service/web",
        "auth/lease/1",
    ] {
        let result = node.put(&key(refused), "{}".into()).await;
        assert!(
            matches!(result, Err(StoreError::Denied(_))),
            "{refused}: {result:?}"
        );
    }
    assert!(matches!(
        node.compact(before).await,
        Err(StoreError::Denied(_))
    ));
    assert_eq!(backing.revision().await.expect("revision"), before);

    let stranger = HttpStore::new(url, "not-a-token");
    assert!(matches!(
        stranger.revision().await,
        Err(StoreError::Denied(_))
    ));
}
