//! One runner cycle: a fact changes under a controller that watches 10k facts; measured from the
//! commit of that change to the controller's own commit in response.
//!
//! `cargo bench -p ccattler-benches --bench runner`

use std::time::{Duration, Instant};

use ccattler_core::runner::TokioRunner;
use ccattler_core::{
    Change, Controller, FactStore, FactView, Key, ReconcileContext, ReconcileError, Revision,
    Runner,
};
use ccattler_store::MemoryStore;
use criterion::{Criterion, criterion_group, criterion_main};
use futures_util::StreamExt;

const FACTS: usize = 10_000;

/// Writes `sum/total` = the number of `in/` facts and the sum of their value lengths: a
/// reconcile that reads every fact it watches.
struct Summary;

impl Controller for Summary {
    fn name(&self) -> &str {
        "summary"
    }
    fn watches(&self) -> Vec<String> {
        vec!["in/".into()]
    }
    fn write_domain(&self) -> Vec<String> {
        vec!["sum/".into()]
    }
    fn reconcile(
        &self,
        facts: &FactView,
        _ctx: &mut ReconcileContext<'_>,
    ) -> Result<Vec<Change>, ReconcileError> {
        let (count, bytes) = facts
            .scan("in/")
            .fold((0usize, 0usize), |(n, b), f| (n + 1, b + f.value.len()));
        Ok(vec![Change::put(
            Key::new("sum/total")?,
            format!("{count} {bytes}"),
        )])
    }
}

fn runner_cycle(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let store = MemoryStore::new();
    let keys: Vec<Key> = (0..FACTS)
        .map(|i| Key::new(format!("in/{i:06}")).expect("key"))
        .collect();
    let (stop, mut results) = rt.block_on(async {
        for key in &keys {
            store.put(key, "v".into()).await.expect("put");
        }
        // Watch before the runner starts, so its first summary is not missed.
        let results = store.watch("sum/", Revision::ZERO).await.expect("watch");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let runner = TokioRunner::new(store.clone()).controller(Summary);
        tokio::spawn(runner.run(async move {
            let _ = stopped.await;
        }));
        (stop, results)
    });
    // Wait for the first summary.
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(10), results.next())
            .await
            .expect("the controller writes its first summary");
    });

    let mut i = 0usize;
    c.bench_function("runner/commit_to_next_commit_10k_facts", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    i += 1;
                    // Every round over the keys flips each value's length, so every put changes the sum.
                    let value = "v".repeat(2 + (i / FACTS) % 2);
                    let started = Instant::now();
                    store
                        .put(&keys[i % FACTS], value.into())
                        .await
                        .expect("put");
                    let event = results
                        .next()
                        .await
                        .expect("watch open")
                        .expect("no watch error");
                    total += started.elapsed();
                    std::hint::black_box(event);
                }
                total
            })
        })
    });
    let _ = stop.send(());
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30);
    targets = runner_cycle
}
criterion_main!(benches);
