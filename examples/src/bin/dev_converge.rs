//! The `cca dev` figure: how long 100 instances take from apply to all running, over three
//! local agents with the process runtime (each instance a real `sleep` process).
//!
//! Run it with:
//!
//! ```text
//! cargo run --release -p ccattler-examples --bin dev_converge [-- INSTANCES [RUNS]]
//! ```
//!
//! Each run starts a fresh dev cluster (store, controllers, three agents) exactly as `cca dev`
//! does, waits for the nodes to register, applies one service of INSTANCES (default 100)
//! instances, and measures until the status shows every instance running and ready; then it
//! stops everything. It prints every run and the median of RUNS (default 5). Target: <= 3 s.

use std::time::{Duration, Instant};

use ccattler_controllers::lang::SourceFile;
use ccattler_examples::cca::cluster::{DevCluster, DevConfig};
use ccattler_examples::cca::progress::StatusFollower;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let instances: u32 = args.next().map(|n| n.parse()).transpose()?.unwrap_or(100);
    let runs: usize = args.next().map(|n| n.parse()).transpose()?.unwrap_or(5);
    let file = SourceFile::new(
        "sleepers.cca",
        format!(
            "service sleepers {{\n    image busybox:stable\n    command \"sleep 3600\"\n    \
             instances {instances}\n}}\n"
        ),
    );
    let mut times = Vec::new();
    for run in 1..=runs.max(1) {
        let cluster = DevCluster::start(DevConfig::default()).await?;
        cluster
            .wait_for_nodes(cluster.registration_timeout())
            .await?;
        let mut follower = StatusFollower::new(cluster.store()).await?;
        let started = Instant::now();
        cluster.apply(&file).await?;
        let converged = tokio::time::timeout(Duration::from_secs(60), async {
            loop {
                if follower.next().await?.is_converged() {
                    return Ok::<_, ccattler_core::StoreError>(started.elapsed());
                }
            }
        })
        .await;
        let stopped = cluster.shutdown().await;
        let elapsed = converged.map_err(|_| "not converged within 60 s")??;
        println!(
            "run {run}: {instances} instances over 3 agents, apply -> all running in {:.3} s \
             ({stopped} stopped after)",
            elapsed.as_secs_f64()
        );
        times.push(elapsed);
    }
    times.sort();
    let median = times[times.len() / 2];
    println!(
        "median of {} runs: {:.3} s (target <= 3 s)",
        times.len(),
        median.as_secs_f64()
    );
    Ok(())
}
