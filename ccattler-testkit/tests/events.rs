//! Events end to end on a [`TestCluster`] (MemoryStore, TokioRunner, the real agents over
//! simulated runtimes, tokio's paused clock): what the controllers and the agents record about
//! a service converging, a crash and a scale-down, bounded per object, and gone with the lease.

use std::collections::BTreeMap;
use std::time::Duration;

use ccattler_core::schema::{Cpu, Memory, ObservedState};
use ccattler_core::{Event, FactStore};
use ccattler_testkit::cluster::TestCluster;

const WAIT: Duration = Duration::from_secs(60);

fn service(instances: u32) -> String {
    format!(
        "service web {{\n    image nginx:1.28\n    instances {instances}\n    resources {{\n        \
         cpu 100m\n        memory 64Mi\n    }}\n}}\n"
    )
}

/// Every event in the store, by object, in the order of the store's revisions.
async fn events(cluster: &TestCluster) -> BTreeMap<String, Vec<Event>> {
    let scan = cluster.store().scan("event/").await.expect("scan");
    let mut facts = scan.facts;
    facts.sort_by_key(|f| f.mod_revision);
    let mut by_object: BTreeMap<String, Vec<Event>> = BTreeMap::new();
    for fact in facts {
        let event: Event = serde_json::from_slice(&fact.value).expect("an event");
        by_object
            .entry(event.object.clone())
            .or_default()
            .push(event);
    }
    by_object
}

fn reasons(events: &[Event]) -> Vec<&str> {
    events.iter().map(|e| e.reason.as_str()).collect()
}

#[tokio::test(start_paused = true)]
async fn controllers_and_agents_tell_what_they_did_and_why() {
    let mut cluster = TestCluster::builder()
        .nodes(2, Cpu::from_millis(4_000), Memory::from_bytes(8 << 30))
        .build()
        .await;
    cluster.start_runner();
    cluster.apply(&service(2)).await.expect("apply");
    let snapshot = cluster.wait_converged(WAIT).await.expect("converged");
    let instances: Vec<String> = snapshot
        .instances("web")
        .iter()
        .map(|i| i.id.clone())
        .collect();
    assert_eq!(instances.len(), 2);

    let all = events(&cluster).await;
    for id in &instances {
        let of = all.get(id).map(Vec::as_slice).unwrap_or_default();
        assert_eq!(
            reasons(of),
            ["Created", "Placed", "Started", "Ready"],
            "{id}: {of:#?}"
        );
        assert_eq!(of[0].source, "instances");
        assert_eq!(of[1].source, "scheduler");
        assert!(of[2].source.starts_with("node.n"), "{:?}", of[2].source);
        assert!(of.iter().all(|e| e.service.as_deref() == Some("web")));
        assert!(
            of[1].message.starts_with("placed on n"),
            "{}",
            of[1].message
        );
    }

    // A crash: the agent's events say it failed and was restarted.
    let crashed = &instances[0];
    assert!(
        cluster
            .set_instance_state(crashed, ObservedState::Failed)
            .await
    );
    let mut of = Vec::new();
    for _ in 0..600 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        of = events(&cluster).await.remove(crashed).unwrap_or_default();
        if of.iter().any(|e| e.reason == "Restarted") {
            break;
        }
    }
    let tail: Vec<&str> = reasons(&of).into_iter().skip(4).collect();
    assert!(tail.starts_with(&["Failed"]), "{of:#?}");
    assert!(tail.contains(&"Restarted"), "{of:#?}");

    // Scaling down: the stopped instance's history says why, then its agent's ring goes.
    cluster.apply(&service(1)).await.expect("apply");
    let snapshot = cluster.wait_converged(WAIT).await.expect("scaled down");
    let left: Vec<String> = snapshot
        .instances("web")
        .iter()
        .map(|i| i.id.clone())
        .collect();
    let gone = instances
        .iter()
        .find(|id| !left.contains(id))
        .expect("one stopped");
    let of = events(&cluster).await.remove(gone).unwrap_or_default();
    let stopping = of
        .iter()
        .find(|e| e.reason == "Stopping")
        .expect("a Stopping event");
    assert!(stopping.message.contains("surplus"), "{}", stopping.message);
    assert!(
        of.iter().all(|e| !e.source.starts_with("node.")),
        "the agent deleted its ring of an instance that left its node: {of:#?}"
    );
    cluster.shutdown().await;
}
