//! `GET /metrics` of `cca server` over HTTP on loopback, with 10,000 instances in its store: what
//! a Prometheus scrape costs (the scheduler's gauges counted from the store, then everything the
//! process recorded rendered). The target is at most 50 ms.
//!
//! The store is a `Metered<MemoryStore>` holding, for 10,000 instances on 100 nodes, each one's
//! desired instance, placement and observation, and 50 unschedulable reasons; the runner's
//! series of the five standard controllers and the API's of a few routes are recorded first.
//!
//! `cargo bench -p ccattler-benches --bench metrics`

use std::net::SocketAddr;

use ccattler_core::schema::{
    self, Assignment, DesiredInstance, DesiredState, InstanceObservation, ObservedState,
    Unschedulable,
};
use ccattler_core::{FactStore, Key, Op, Txn};
use ccattler_examples::cca::api::auth::{self, Role};
use ccattler_examples::cca::api::{ApiConfig, ServerHandle};
use ccattler_examples::cca::client::{ApiClient, ClientArgs};
use ccattler_store::{MemoryStore, Metered};
use criterion::{Criterion, criterion_group, criterion_main};
use http_body_util::BodyExt;
use hyper::{Method, StatusCode};

const INSTANCES: usize = 10_000;
const NODES: usize = 100;
const UNPLACED: usize = 50;
const CONTROLLERS: [&str; 5] = [
    "instances",
    "intent-resolver",
    "scheduler",
    "endpoints",
    "status",
];

/// Writes the facts of [`INSTANCES`] instances, in transactions of 100 puts.
async fn fill(store: &Metered<MemoryStore>) {
    let mut ops = Vec::new();
    for i in 0..INSTANCES {
        let (id, node) = (format!("web-{i:05}"), format!("n{}", i % NODES));
        let desired = DesiredInstance {
            service: "web".to_owned(),
            version: "v1".to_owned(),
            ordinal: None,
            state: DesiredState::Running,
            replaces: None,
        };
        let assignment = Assignment {
            instance: id.clone(),
            service: "web".to_owned(),
            node: node.clone(),
            version: "v1".to_owned(),
            state: DesiredState::Running,
            ports: Vec::new(),
            volumes: Vec::new(),
        };
        let observation = InstanceObservation {
            node: node.clone(),
            service: "web".to_owned(),
            state: ObservedState::Running,
            ready: true,
            image: "web:1".to_owned(),
            ..InstanceObservation::default()
        };
        let put = |key: Result<Key, _>, value| Op::Put {
            key: key.expect("a valid key"),
            value,
            lease: None,
        };
        ops.push(put(schema::keys::instance(&id), schema::encode(&desired)));
        ops.push(put(
            schema::keys::placement(&node, &id),
            schema::encode(&assignment),
        ));
        ops.push(put(
            schema::keys::observed_instance(&node, &id),
            schema::encode(&observation),
        ));
        if ops.len() >= 99 {
            store
                .txn(batch(std::mem::take(&mut ops)))
                .await
                .expect("txn");
        }
    }
    for i in 0..UNPLACED {
        let reason = Unschedulable {
            service: "db".to_owned(),
            reason: "0/100 nodes can run it: 100 lack label disk=ssd".to_owned(),
        };
        let key = schema::keys::unschedulable(&format!("db-{i}")).expect("key");
        ops.push(Op::Put {
            key,
            value: schema::encode(&reason),
            lease: None,
        });
    }
    store.txn(batch(ops)).await.expect("txn");
}

fn batch(then: Vec<Op>) -> Txn {
    Txn {
        then,
        ..Txn::default()
    }
}

/// The runner's series, as five controllers running for a while record them.
fn record_runner() {
    for controller in CONTROLLERS {
        for i in 0..200u32 {
            metrics::counter!("ccattler_reconciles_total", "controller" => controller).increment(1);
            metrics::histogram!("ccattler_reconcile_duration_seconds", "controller" => controller)
                .record(f64::from(i) * 1e-4);
            metrics::counter!("ccattler_changes_committed_total", "controller" => controller)
                .increment(3);
        }
        metrics::gauge!("ccattler_queue_depth", "controller" => controller).set(0.0);
    }
    metrics::gauge!("ccattler_leader").set(1.0);
}

async fn body(client: &ApiClient, path: &str) -> (StatusCode, usize) {
    let response = client
        .send(Method::GET, path, "", &[])
        .await
        .expect("the server answers");
    let status = response.status();
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("the body")
        .to_bytes();
    (status, bytes.len())
}

fn scrape(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let handle = ccattler_examples::cca::metrics::install().expect("the recorder installs");
    let (client, server) = rt.block_on(async {
        let store = Metered::new(MemoryStore::new());
        fill(&store).await;
        record_runner();
        let token = auth::generate_token();
        auth::store_token(&store, &token, Role::Admin, None)
            .await
            .expect("token");
        let addr: SocketAddr = "127.0.0.1:0".parse().expect("addr");
        let server = ServerHandle::start(store, ApiConfig::default(), addr)
            .await
            .expect("starts");
        let client = ApiClient::new(&ClientArgs {
            server: server.url(),
            token: Some(token),
        });
        for path in [
            "/api/status",
            "/api/nodes",
            "/state?prefix=desired/",
            "/nope",
        ] {
            body(&client, path).await;
        }
        let (status, size) = body(&client, "/metrics").await;
        assert_eq!(status, StatusCode::OK);
        eprintln!("GET /metrics: {size} bytes");
        (client, server)
    });
    let mut group = c.benchmark_group("metrics");
    group.sample_size(30);
    group.bench_function("scrape_10k_instances", |b| {
        b.to_async(&rt).iter(|| async {
            let (status, _) = body(&client, "/metrics").await;
            assert_eq!(status, StatusCode::OK);
            handle.run_upkeep();
        })
    });
    group.finish();
    rt.block_on(server.shutdown());
}

criterion_group!(benches, scrape);
criterion_main!(benches);
