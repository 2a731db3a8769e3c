//! ProcessRuntime: from `ensure_running` to observed running, and `observe` over 1,000 running
//! processes.
//!
//! `cargo bench -p ccattler-benches --bench runtime`
//!
//! Targets: start to running at most 20 ms; observe of 1,000 processes at most 50 ms.

use std::time::{Duration, Instant};

use ccattler_core::{InstanceSpec, InstanceState, Runtime};
use ccattler_runtime::process::ProcessRuntime;
use criterion::{Criterion, criterion_group, criterion_main};

const PROCESSES: usize = 1_000;

fn sleeper(id: &str) -> InstanceSpec {
    InstanceSpec::new(id, "").command(["sleep", "1000"])
}

/// Observes until `id` runs.
async fn until_running(runtime: &ProcessRuntime, id: &str) {
    loop {
        let seen = runtime.observe().await.expect("observe");
        if seen
            .iter()
            .any(|i| i.id == id && i.state == InstanceState::Running)
        {
            return;
        }
        tokio::task::yield_now().await;
    }
}

fn runtime_benches(c: &mut Criterion) {
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let dir = tempfile::tempdir().expect("temporary directory");
    let mut group = c.benchmark_group("runtime");

    let starts = ProcessRuntime::new(dir.path().join("starts")).expect("runtime");
    let mut n = 0u64;
    group.bench_function("process_start_to_running", |b| {
        b.iter_custom(|iters| {
            let mut measured = Duration::ZERO;
            for _ in 0..iters {
                n += 1;
                let id = format!("start-{n}");
                tokio.block_on(async {
                    let begun = Instant::now();
                    starts.ensure_running(&sleeper(&id)).await.expect("start");
                    until_running(&starts, &id).await;
                    measured += begun.elapsed();
                    starts
                        .ensure_stopped(&id, Duration::ZERO)
                        .await
                        .expect("stop");
                    starts.remove(&id).await.expect("remove");
                });
            }
            measured
        })
    });
    starts.kill_all();

    let many = ProcessRuntime::new(dir.path().join("many")).expect("runtime");
    tokio.block_on(async {
        for i in 0..PROCESSES {
            many.ensure_running(&sleeper(&format!("many-{i:04}")))
                .await
                .expect("start");
        }
    });
    group.sample_size(20);
    group.bench_function("process_observe_1000", |b| {
        b.iter(|| {
            let seen = tokio.block_on(many.observe()).expect("observe");
            assert_eq!(seen.len(), PROCESSES);
            seen
        })
    });
    many.kill_all();
    group.finish();
}

criterion_group!(benches, runtime_benches);
criterion_main!(benches);
