//! The node's lease is renewed where work cannot delay it: with every worker thread of the
//! agent's runtime held for longer than the lease's TTL, again and again, the lease renewed
//! from the liveness thread never lapses; renewed on that runtime, it does (the control, which
//! shows the hold really starves the runtime). Real time, a runtime of two worker threads, as
//! on a 2-core machine.

use std::sync::Arc;
use std::time::Duration;

use ccattler_core::{EventKind, FactStore, Revision, schema};
use ccattler_runtime::agent::{AgentConfig, NodeAgent, RenewOn};
use ccattler_runtime::simulator::SimulatorRuntime;
use ccattler_store::MemoryStore;
use futures_util::{FutureExt, StreamExt};

const TTL: Duration = Duration::from_secs(1);

/// How many times the lease of node `n1` was deleted (it lapsed) while every worker thread of
/// the runtime was held for twice the TTL, three times over.
async fn lapses_while_the_runtime_is_held(on: RenewOn) -> usize {
    let store = MemoryStore::new();
    let dir = tempfile::tempdir().expect("temp dir");
    let config = AgentConfig::new("n1", dir.path().join("agent"))
        .lease_ttl(TTL)
        .renew_on(on);
    let agent = NodeAgent::new(store.clone(), Arc::new(SimulatorRuntime::new()), config)
        .expect("a valid node name");
    let agent = tokio::spawn(agent.run(std::future::pending()));
    let lease_key = schema::keys::node_lease("n1").expect("key");
    for _ in 0..200 {
        if store.get(&lease_key).await.expect("get").is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    if store.get(&lease_key).await.expect("get").is_none() {
        let ended = agent.is_finished().then(|| agent.now_or_never());
        panic!("the agent never registered (it ended: {ended:?})");
    }
    let mut leases = store
        .watch(schema::NODE_LEASES, Revision::ZERO)
        .await
        .expect("watch");
    for _ in 0..3 {
        // Both worker threads busy at once (a sleep holds a thread as computing would).
        let holds: Vec<_> = (0..2)
            .map(|_| tokio::spawn(async { std::thread::sleep(TTL * 2) }))
            .collect();
        for hold in holds {
            hold.await.expect("hold");
        }
        tokio::time::sleep(TTL / 2).await;
    }
    let mut lapses = 0;
    while let Some(Some(event)) = leases.next().now_or_never() {
        if event.expect("a lease event").kind == EventKind::Delete {
            lapses += 1;
        }
    }
    agent.abort();
    lapses
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_held_longer_than_the_lease_ttl_never_lets_the_lease_lapse() {
    let lapses = lapses_while_the_runtime_is_held(RenewOn::LivenessThread).await;
    assert_eq!(
        lapses, 0,
        "renewed from the liveness thread, the lease lapsed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewed_on_the_held_runtime_the_lease_lapses() {
    let lapses = lapses_while_the_runtime_is_held(RenewOn::AgentRuntime).await;
    assert!(
        lapses > 0,
        "the hold did not starve the runtime: the control shows nothing"
    );
}
