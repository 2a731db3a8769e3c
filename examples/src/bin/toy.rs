//! The toy cluster: two controllers converge desired counts into instances on MemoryStore.
//!
//! Run it with:
//!
//! ```text
//! cargo run -p ccattler-examples --bin toy
//! ```
//!
//! It applies desired counts for three groups, waits until the controllers have converged, scales
//! one group down, waits again, and prints the facts it converged to. `RUST_LOG=debug` shows the
//! runner's reconcile spans.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use ccattler_core::runner::TokioRunner;
use ccattler_core::{
    Change, Controller, FactStore, FactView, Key, Op, ReconcileContext, ReconcileError, Runner, Txn,
};
use ccattler_store::MemoryStore;
use ccattler_testkit::toy::{DESIRED, INSTANCES, ReplicaController};

/// Writes `toy/status/{group}` = "present/desired" for every desired group: a second controller
/// that meets the first only in the store.
struct StatusController;

const STATUS: &str = "toy/status/";

impl Controller for StatusController {
    fn name(&self) -> &str {
        "toy-status"
    }

    fn watches(&self) -> Vec<String> {
        vec![DESIRED.into(), INSTANCES.into()]
    }

    fn write_domain(&self) -> Vec<String> {
        vec![STATUS.into()]
    }

    fn reconcile(
        &self,
        facts: &FactView,
        _ctx: &mut ReconcileContext<'_>,
    ) -> Result<Vec<Change>, ReconcileError> {
        let mut present: BTreeMap<String, usize> = BTreeMap::new();
        for fact in facts.scan(INSTANCES) {
            *present
                .entry(fact.value_str().unwrap_or_default().to_owned())
                .or_default() += 1;
        }
        let mut changes = Vec::new();
        for fact in facts.scan(DESIRED) {
            let group = fact.key.strip_prefix(DESIRED).unwrap_or_default();
            let desired = fact.value_str().unwrap_or_default();
            let count = present.get(group).copied().unwrap_or(0);
            let status = format!("{count}/{desired}");
            let key = Key::join(STATUS, [group])?;
            if facts.get(key.as_str()).and_then(|f| f.value_str()) != Some(status.as_str()) {
                changes.push(Change::put(key, status));
            }
        }
        for fact in facts.scan(STATUS) {
            let group = fact.key.strip_prefix(STATUS).unwrap_or_default();
            if !facts.contains(ReplicaController::desired_key(group).as_str()) {
                changes.push(Change::delete(fact.key.clone()));
            }
        }
        Ok(changes)
    }
}

/// Applies desired counts in one transaction, as a user's apply would.
async fn apply(
    store: &MemoryStore,
    desired: &[(&str, usize)],
) -> Result<(), Box<dyn std::error::Error>> {
    let mut txn = Txn::new();
    for (group, count) in desired {
        txn = txn.then(Op::put(
            ReplicaController::desired_key(group),
            count.to_string(),
        ));
    }
    store.txn(txn).await?;
    Ok(())
}

/// Waits until every desired group's status reads "n/n", or fails after `limit`.
async fn converged(store: &MemoryStore, limit: Duration) -> Result<Duration, String> {
    let started = Instant::now();
    loop {
        let desired = store.scan(DESIRED).await.map_err(|e| e.to_string())?;
        let status = store.scan(STATUS).await.map_err(|e| e.to_string())?;
        let done = desired.facts.iter().all(|d| {
            let group = d.key.strip_prefix(DESIRED).unwrap_or_default();
            let want = format!("{0}/{0}", d.value_str().unwrap_or_default());
            status.facts.iter().any(|s| {
                s.key.strip_prefix(STATUS) == Some(group) && s.value_str() == Some(want.as_str())
            })
        });
        if done && status.facts.len() == desired.facts.len() {
            return Ok(started.elapsed());
        }
        if started.elapsed() > limit {
            return Err(format!("not converged after {limit:?}"));
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .init();

    let store = MemoryStore::new();
    let runner = TokioRunner::new(store.clone())
        .controller(ReplicaController)
        .controller(StatusController);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(runner.run(async move {
        let _ = stopped.await;
    }));

    apply(&store, &[("web", 3), ("api", 2), ("worker", 5)]).await?;
    let took = converged(&store, Duration::from_secs(10)).await?;
    println!("applied web=3 api=2 worker=5: converged in {took:?}");

    apply(&store, &[("web", 1), ("worker", 0)]).await?;
    let took = converged(&store, Duration::from_secs(10)).await?;
    println!("applied web=1 worker=0: converged in {took:?}");

    let _ = stop.send(());
    running.await??;

    let facts = store.scan("toy/").await?;
    println!("\nconverged state at revision {}:", facts.revision);
    for fact in &facts.facts {
        println!(
            "  {} = {}",
            fact.key,
            fact.value_str().unwrap_or("<binary>")
        );
    }
    Ok(())
}
