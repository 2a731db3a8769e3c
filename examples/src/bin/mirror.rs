//! The "embed it in your platform" example of README.md, as a program CI builds.
//!
//! Run it with `cargo run -p ccattler-examples --bin mirror`; it mirrors `input/` to `output/`
//! until Ctrl-C.

use ccattler_core::runner::TokioRunner;
use ccattler_core::{
    Change, Controller, FactStore, FactView, Key, ReconcileContext, ReconcileError, Runner,
};
use ccattler_store::MemoryStore;

struct Mirror;

impl Controller for Mirror {
    fn name(&self) -> &str {
        "mirror"
    }
    fn watches(&self) -> Vec<String> {
        vec!["input/".into()]
    }
    fn write_domain(&self) -> Vec<String> {
        vec!["output/".into()]
    }
    fn reconcile(
        &self,
        facts: &FactView,
        _ctx: &mut ReconcileContext<'_>,
    ) -> Result<Vec<Change>, ReconcileError> {
        let mut changes = Vec::new();
        for fact in facts.scan("input/") {
            let out = Key::join(
                "output/",
                [fact.key.strip_prefix("input/").unwrap_or_default()],
            )?;
            changes.push(Change::put(out, fact.value.clone())); // unchanged values are skipped
        }
        Ok(changes)
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let store = MemoryStore::new();
    store
        .put(&Key::new("input/greeting")?, "hello".into())
        .await?;
    let runner = TokioRunner::new(store.clone()).controller(Mirror);
    runner
        .run(async {
            tokio::signal::ctrl_c().await.ok();
        })
        .await?;
    Ok(())
}
