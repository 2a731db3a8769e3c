//! In-process convergence: from applying 10 services x 100 instances to all 1,000 running on 50
//! nodes, with the real runner, MemoryStore, the standard controllers and one real node agent per
//! node over a simulated runtime (the testkit's `TestCluster`; each agent keeps its cache on
//! disk, in a temporary directory), in real time on a two-worker runtime. (The earlier Go
//! implementation took 24 to 54 s for the same shape; the target here is at most 1 s.)
//!
//! `cargo bench -p ccattler-benches --bench cluster`; `..._no_events` is the same run with no
//! events recorded (runner and agents), the baseline of what events cost.

use std::time::{Duration, Instant};

use ccattler_core::schema::{Cpu, Memory};
use ccattler_testkit::cluster::TestCluster;
use criterion::{Criterion, criterion_group, criterion_main};

const SERVICES: usize = 10;
const INSTANCES: u32 = 100;
const NODES: usize = 50;

fn document() -> String {
    (0..SERVICES)
        .map(|i| {
            format!(
                "service svc{i} {{\n    image app:{i}\n    instances {INSTANCES}\n    expose 8080\n    \
                 resources {{\n        cpu 100m\n        memory 64Mi\n    }}\n}}\n"
            )
        })
        .collect()
}

/// One run: a fresh cluster, then the time from apply to every service reporting all its
/// instances running.
async fn converge_once(doc: &str, events: bool) -> Duration {
    let cluster = TestCluster::builder()
        .nodes(
            NODES,
            Cpu::from_millis(32_000),
            Memory::from_bytes(64 << 30),
        )
        .events(events)
        .build()
        .await;
    let names: Vec<String> = (0..SERVICES).map(|i| format!("svc{i}")).collect();
    let started = Instant::now();
    cluster.apply(doc).await.expect("a valid document");
    cluster
        .wait_until(Duration::from_secs(120), |s| {
            names.iter().all(|n| {
                s.status(n)
                    .is_some_and(|st| st.desired == INSTANCES && st.running == INSTANCES)
            })
        })
        .await
        .expect("the cluster converges");
    let elapsed = started.elapsed();
    cluster.shutdown().await;
    elapsed
}

fn converge(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let doc = document();
    let mut group = c.benchmark_group("cluster");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(20));
    group.bench_function("converge_1000_instances_50_nodes", |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| rt.block_on(converge_once(&doc, true)))
                .sum::<Duration>()
        });
    });
    // The same without events (runner and agents), to measure what they cost.
    group.bench_function("converge_1000_instances_50_nodes_no_events", |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| rt.block_on(converge_once(&doc, false)))
                .sum::<Duration>()
        });
    });
    group.finish();
}

criterion_group!(benches, converge);
criterion_main!(benches);
