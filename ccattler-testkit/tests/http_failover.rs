//! `HttpStore` over several servers of one shared store: the conformance suite with a dead
//! first endpoint (every operation fails over), and a lease and a watch that outlive the
//! server they were opened through (its connections cut, as a killed process's are).

use std::sync::Mutex;
use std::time::Duration;

use ccattler_core::{FactStore, Key, Revision};
use ccattler_store::MemoryStore;
use ccattler_store::http::HttpStore;
use ccattler_store::http_server::{Principal, StaticTokens, router};
use ccattler_testkit::conformance::{StoreHarness, run_store_conformance};
use futures_util::StreamExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

const ADMIN: &str = "admin-token";
const NODE_1: &str = "n1-token";

fn tokens() -> StaticTokens {
    StaticTokens::new()
        .with(ADMIN, Principal::Admin)
        .with(NODE_1, Principal::Node("n1".to_owned()))
}

/// Serves the protocol over `store` on a free loopback port; returns its base URL.
async fn serve(store: MemoryStore, tasks: &Mutex<Vec<JoinHandle<()>>>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("the bound address");
    let app = router(store, tokens());
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.expect("the server runs");
    });
    tasks.lock().expect("lock").push(task);
    format!("http://{addr}")
}

/// A URL nobody listens on.
async fn dead_url() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("the bound address");
    drop(listener);
    format!("http://{addr}")
}

/// A TCP relay in front of a server: killing it closes its port and every connection through
/// it at once, as the death of the server's process does.
struct Relay {
    url: String,
    tasks: std::sync::Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Relay {
    async fn start(target: &str) -> Relay {
        let target = target.trim_start_matches("http://").to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let tasks = std::sync::Arc::new(Mutex::new(Vec::new()));
        let spawned = std::sync::Arc::clone(&tasks);
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let target = target.clone();
                let pipe = tokio::spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                spawned.lock().expect("lock").push(pipe);
            }
        });
        tasks.lock().expect("lock").push(accept);
        Relay { url, tasks }
    }

    fn kill(&self) {
        for task in self.tasks.lock().expect("lock").drain(..) {
            task.abort();
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Each check's store: a dead endpoint first, then a live server.
#[derive(Debug, Default)]
struct DeadFirst {
    servers: Mutex<Vec<JoinHandle<()>>>,
}

impl Drop for DeadFirst {
    fn drop(&mut self) {
        if let Ok(servers) = self.servers.get_mut() {
            for task in servers.drain(..) {
                task.abort();
            }
        }
    }
}

impl StoreHarness for DeadFirst {
    type Store = HttpStore;

    async fn fresh(&self) -> HttpStore {
        let live = serve(MemoryStore::new(), &self.servers).await;
        HttpStore::with_endpoints(vec![dead_url().await, live], ADMIN)
    }

    async fn advance(&self, d: Duration) {
        tokio::time::sleep(d).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_store_conforms_through_a_dead_first_endpoint() {
    run_store_conformance(&DeadFirst::default()).await;
}

/// The key of the watch's next event, within 5 s.
async fn next(watch: &mut <HttpStore as FactStore>::Watch) -> String {
    match tokio::time::timeout(Duration::from_secs(5), watch.next()).await {
        Ok(Some(Ok(event))) => event.key().to_string(),
        other => panic!("no event: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_and_a_watch_outlive_the_server_they_were_opened_through() {
    let tasks = Mutex::new(Vec::new());
    let shared = MemoryStore::new();
    let first = Relay::start(&serve(shared.clone(), &tasks).await).await;
    let second = serve(shared.clone(), &tasks).await;
    let node = HttpStore::with_endpoints(vec![first.url.clone(), second.clone()], NODE_1);
    let key = |k: &str| Key::new(k).expect("key");

    let lease = node
        .grant_lease(Duration::from_secs(5))
        .await
        .expect("grant");
    node.put_with_lease(&key("lease/node/n1"), "{}".into(), lease.id)
        .await
        .expect("the node's lease key");
    let mut watch = node
        .watch("observed/", Revision::ZERO)
        .await
        .expect("watch");
    // Two keys in one revision, the connection cut between them is covered by Resume's test;
    // here the server goes away between two revisions.
    node.put(&key("observed/node/n1"), "1".into())
        .await
        .expect("put");
    assert_eq!(next(&mut watch).await, "observed/node/n1");
    assert_eq!(node.preferred(), first.url);

    first.kill();
    shared
        .put(&key("observed/instance/n1/a"), "2".into())
        .await
        .expect("a write the watch must see");
    shared
        .put(&key("observed/instance/n1/b"), "3".into())
        .await
        .expect("another");
    assert_eq!(next(&mut watch).await, "observed/instance/n1/a");
    assert_eq!(next(&mut watch).await, "observed/instance/n1/b");
    node.keep_alive(lease.id)
        .await
        .expect("the lease renews through the other server");
    assert_eq!(node.preferred(), second);
    assert!(
        shared
            .get(&key("lease/node/n1"))
            .await
            .expect("get")
            .is_some()
    );
    for task in tasks.lock().expect("lock").drain(..) {
        task.abort();
    }
}
