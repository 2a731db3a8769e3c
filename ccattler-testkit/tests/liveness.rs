//! Liveness is never starved by work: controllers whose passes take seconds share one process
//! (and a runtime of two worker threads, as on a 2-core machine) with the node agents, and no
//! node lease lapses. Real time, multi-threaded: what is measured is the executor itself.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ccattler_core::schema::{self, Cpu, Memory};
use ccattler_core::{
    Change, Controller, EventKind, FactStore, FactView, ReconcileContext, ReconcileError, Revision,
};
use ccattler_testkit::cluster::TestCluster;
use futures_util::{FutureExt, StreamExt};

/// Stands in for a controller with heavy passes: each holds its thread for `pass` (a sleep
/// holds a thread exactly as computing would) and proposes nothing. It watches what changes
/// all the time, so it is always reconciling.
struct Slow {
    name: &'static str,
    pass: Duration,
    passes: Arc<AtomicUsize>,
}

impl Controller for Slow {
    fn name(&self) -> &str {
        self.name
    }

    fn watches(&self) -> Vec<String> {
        vec![
            schema::DESIRED_INSTANCES.into(),
            schema::OBSERVED_INSTANCES.into(),
            schema::NODE_LEASES.into(),
        ]
    }

    fn write_domain(&self) -> Vec<String> {
        vec![format!("slow/{}/", self.name)]
    }

    fn reconcile(
        &self,
        _facts: &FactView,
        _ctx: &mut ReconcileContext<'_>,
    ) -> Result<Vec<Change>, ReconcileError> {
        std::thread::sleep(self.pass);
        self.passes.fetch_add(1, Ordering::Relaxed);
        Ok(Vec::new())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controllers_with_passes_of_seconds_never_let_a_node_lease_lapse()
-> Result<(), Box<dyn std::error::Error>> {
    let passes = Arc::new(AtomicUsize::new(0));
    let slow = |name| Slow {
        name,
        pass: Duration::from_secs(2),
        passes: Arc::clone(&passes),
    };
    // Three controllers busy for 2 s at a time, more than the two worker threads; leases of
    // 1 s, renewed every third of it.
    let cluster = TestCluster::builder()
        .nodes(4, Cpu::from_millis(4_000), Memory::from_bytes(8 << 30))
        .lease_ttl(Duration::from_secs(1))
        .controller(slow("slow-a"))
        .controller(slow("slow-b"))
        .controller(slow("slow-c"))
        .build()
        .await;
    let mut leases = cluster
        .store()
        .watch(schema::NODE_LEASES, Revision::ZERO)
        .await?;
    cluster
        .apply(
            "service web {\n    image nginx\n    instances 8\n    resources {\n        \
             cpu 100m\n        memory 64Mi\n    }\n}\n",
        )
        .await?;
    cluster.wait_converged(Duration::from_secs(30)).await?;
    // Several more passes of each slow controller, the cluster steady meanwhile.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let mut lapsed = Vec::new();
    while let Some(Some(event)) = leases.next().now_or_never() {
        let event = event?;
        if event.kind == EventKind::Delete {
            lapsed.push(event.key().as_str().to_owned());
        }
    }
    let passes = passes.load(Ordering::Relaxed);
    assert!(
        passes >= 6,
        "the slow controllers were not busy: {passes} passes"
    );
    assert!(lapsed.is_empty(), "node leases lapsed: {lapsed:?}");
    let state = cluster.wait_converged(Duration::from_secs(5)).await?;
    assert!(
        cluster.node_names().iter().all(|n| state.node_alive(n)),
        "a node was declared dead"
    );
    cluster.shutdown().await;
    Ok(())
}
