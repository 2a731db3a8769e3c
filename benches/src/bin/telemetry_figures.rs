//! Prints what the agents' telemetry costs the store: `cca dev`'s cluster (an embedded
//! `MemoryStore`, the standard controllers, one node agent per node) over the process runtime,
//! with 1,000 idle instances (`sleep`) on 10 nodes. Once every instance runs and is ready, it
//! counts the store's writes over a window of several telemetry intervals, and among them the
//! writes of `telemetry/node/`, and prints both per second. A last line says how many nodes
//! hold a telemetry record, and the instances they count.
//!
//! `cargo run --release -p ccattler-benches --bin telemetry_figures [-- INSTANCES NODES WINDOW_S]`
//! (defaults 1000, 10 and 60).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ccattler_controllers::lang::SourceFile;
use ccattler_core::schema::{self, Cpu, Memory, NodeTelemetry};
use ccattler_core::{EventKind, FactStore};
use ccattler_examples::cca::cluster::{DevCluster, DevConfig, RuntimeKind};
use ccattler_examples::cca::progress::StatusFollower;
use futures_util::StreamExt;

type Error = Box<dyn std::error::Error>;

fn main() -> Result<(), Error> {
    let arg = |n: usize, default: u64| -> Result<u64, Error> {
        Ok(match std::env::args().nth(n) {
            Some(value) => value.parse()?,
            None => default,
        })
    };
    let (instances, nodes, window) = (arg(1, 1000)?, arg(2, 10)?, arg(3, 60)?);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(measure(
        instances,
        nodes as u32,
        Duration::from_secs(window),
    ))
}

async fn measure(instances: u64, nodes: u32, window: Duration) -> Result<(), Error> {
    let cluster = DevCluster::start(DevConfig {
        runtime: RuntimeKind::Process,
        nodes,
        cpu: Cpu::from_millis(64_000),
        memory: Memory::from_bytes(256 << 30),
        ..DevConfig::default()
    })
    .await?;
    cluster
        .wait_for_nodes(cluster.registration_timeout())
        .await?;
    let store = cluster.store().clone();
    let text = format!(
        "service idle {{\n    image \"example/idle:1\"\n    command \"sleep 86400\"\n    \
         instances {instances}\n    resources {{\n        cpu 10m\n        memory 8Mi\n    }}\n}}\n"
    );
    let mut follower = StatusFollower::new(&store).await?;
    let started = Instant::now();
    ccattler_controllers::apply::apply_file(
        &store,
        &SourceFile::new("idle.cca", &text),
        Default::default(),
    )
    .await?;
    tokio::time::timeout(Duration::from_secs(300), async {
        while !follower.next().await?.is_converged() {}
        Ok::<_, Error>(())
    })
    .await
    .map_err(|_| "the instances did not all run within 300 s")??;
    println!(
        "{instances} idle instances on {nodes} nodes running and ready in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    // Let the first telemetry of the running instances land, then count.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let from = store.revision().await?;
    let mut watch = store.watch(schema::TELEMETRY, from.next()).await?;
    let puts = Arc::new(AtomicU64::new(0));
    let counted_puts = Arc::clone(&puts);
    let counting = tokio::spawn(async move {
        while let Some(Ok(event)) = watch.next().await {
            if event.kind == EventKind::Put {
                counted_puts.fetch_add(1, Ordering::Relaxed);
            }
        }
    });
    tokio::time::sleep(window).await;
    let to = store.revision().await?;
    let records = store.scan(schema::TELEMETRY).await?;
    let counted: u32 = records
        .facts
        .iter()
        .filter_map(|f| schema::decode::<NodeTelemetry>(f).ok())
        .map(|t| t.instances)
        .sum();
    counting.abort();
    let telemetry = puts.load(Ordering::Relaxed);
    let seconds = window.as_secs_f64();
    println!(
        "steady over {seconds:.0} s: {:.2} store writes/s in all, {:.2} telemetry writes/s",
        (to.0 - from.0) as f64 / seconds,
        telemetry as f64 / seconds
    );
    println!(
        "{} nodes hold a telemetry record, counting {counted} running instances",
        records.facts.len()
    );
    cluster.shutdown().await;
    Ok(())
}
