//! The standard controllers end to end: a [`TestCluster`] (MemoryStore, TokioRunner, the real node
//! agents over simulated runtimes) on tokio's paused clock, so every wait is virtual time and
//! nothing flakes.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use ccattler_controllers::apply::ApplyOptions;
use ccattler_core::FactStore;
use ccattler_core::schema::{Cpu, DesiredState, Memory, ObservedState, ServiceStatus};
use ccattler_core::{Clock, EventKind, Key, Revision};
use ccattler_store::{MemoryConfig, MemoryStore};
use ccattler_testkit::cluster::{Snapshot, TestCluster, TokioClock};
use futures_util::{FutureExt, StreamExt};

const WAIT: Duration = Duration::from_secs(60);

fn service(name: &str, instances: u32) -> String {
    format!(
        "service {name} {{\n    image nginx:1.28\n    instances {instances}\n    expose 8080\n    \
         resources {{\n        cpu 100m\n        memory 64Mi\n    }}\n}}\n"
    )
}

async fn cluster(nodes: usize) -> TestCluster {
    TestCluster::builder()
        .nodes(nodes, Cpu::from_millis(4_000), Memory::from_bytes(8 << 30))
        .build()
        .await
}

fn ids(snapshot: &Snapshot, svc: &str) -> BTreeSet<String> {
    snapshot
        .instances(svc)
        .iter()
        .map(|i| i.id.clone())
        .collect()
}

fn spread(pairs: &[(&str, usize)]) -> BTreeMap<String, usize> {
    pairs.iter().map(|(n, c)| ((*n).to_owned(), *c)).collect()
}

/// Desired instances of `svc` that should run (not asked to stop).
fn wanted(snapshot: &Snapshot, svc: &str) -> usize {
    snapshot
        .instances(svc)
        .iter()
        .filter(|i| i.desired.state == DesiredState::Running)
        .count()
}

#[tokio::test(start_paused = true)]
async fn applied_services_are_placed_running_ready_and_reachable() {
    let cluster = TestCluster::builder()
        .nodes(3, Cpu::from_millis(4_000), Memory::from_bytes(8 << 30))
        .zones(["a", "b", "c"])
        .labels([("disk", "ssd")])
        .build()
        .await;
    let web = "service web {\n    image nginx:1.28\n    instances 3\n    expose 8080 http\n    \
               readiness {\n        http /healthz\n    }\n    placement {\n        zone spread\n    \
               }\n}\n";
    let db = "service db {\n    image postgres:16\n    instances 1\n    placement {\n        \
              require disk = ssd\n    }\n}\n";
    let doc = format!("{web}{db}{}", service("api", 2));
    cluster.apply(&doc).await.expect("a valid document");
    let state = cluster.wait_converged(WAIT).await.expect("converges");

    for (svc, n, exposed) in [("web", 3, true), ("db", 1, false), ("api", 2, true)] {
        let status = state.status(svc).expect("a status");
        assert_eq!(
            status,
            ServiceStatus {
                desired: n,
                present: n,
                running: n,
                ready: n,
                deleting: false
            }
        );
        let mut addresses = Vec::new();
        for instance in state.instances(svc) {
            let node = instance.node.as_deref().expect("placed");
            let observed = state.observed(node, &instance.id).expect("observed");
            assert_eq!(observed.state, ObservedState::Running);
            assert!(observed.ready);
            let running = cluster.simulator(node).expect("a node").running_of(svc);
            assert!(
                running.contains(&instance.id),
                "it runs in {node}'s simulator"
            );
            if exposed {
                // Each instance serves on its node's address, on a port of its own.
                let address = observed.address.expect("an address");
                assert!(address.starts_with(&format!("{node}:")), "{address}");
                addresses.push(address);
            } else {
                assert_eq!(observed.address, None, "{svc} exposes no port");
            }
        }
        addresses.sort();
        assert_eq!(
            state.endpoints(svc).expect("endpoints").addresses(),
            addresses
        );
    }
    assert_eq!(
        state.spread("web"),
        spread(&[("n1", 1), ("n2", 1), ("n3", 1)]),
        "zone spread"
    );
    assert_eq!(state.placements().values().sum::<usize>(), 6);
    cluster.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_killed_node_is_replaced_and_the_spread_evens_out_when_it_returns() {
    let mut cluster = cluster(2).await;
    cluster.apply(&service("web", 4)).await.expect("valid");
    let before = cluster.wait_converged(WAIT).await.expect("converges");
    assert_eq!(before.spread("web"), spread(&[("n1", 2), ("n2", 2)]));
    let on_n2: BTreeSet<String> = before
        .instances("web")
        .iter()
        .filter(|i| i.node.as_deref() == Some("n2"))
        .map(|i| i.id.clone())
        .collect();

    cluster.kill_node("n2").await;
    let failed_over = cluster
        .wait_until(WAIT, |s| {
            // Status and endpoints are written by two controllers: wait for both.
            s.spread("web") == spread(&[("n1", 4)])
                && s.status("web")
                    .is_some_and(|st| st.running == 4 && st.ready == 4)
                && s.endpoints("web").is_some_and(|e| e.endpoints.len() == 4)
        })
        .await
        .expect("n2's instances are replaced on n1");
    let endpoints = failed_over.endpoints("web").expect("endpoints").addresses();
    assert!(
        endpoints.iter().all(|a| a.starts_with("n1:")),
        "{endpoints:?}"
    );
    assert_eq!(endpoints.len(), 4);
    for id in &on_n2 {
        assert!(
            failed_over.observed("n2", id).is_some(),
            "a crashed node's facts stay"
        );
    }
    let n2 = cluster.simulator("n2").expect("a node").clone();
    let still_running: BTreeSet<String> = n2.running_of("web").into_iter().collect();
    assert_eq!(
        still_running, on_n2,
        "the agent process died, its workloads did not"
    );

    cluster.restart_node("n2");
    let after = cluster
        .wait_until(WAIT, |s| s.is_converged() && s.spread("web").len() == 2)
        .await
        .expect("the surplus is stopped");
    assert_eq!(after.spread("web"), spread(&[("n1", 2), ("n2", 2)]));
    let kept: BTreeSet<String> = ids(&after, "web")
        .into_iter()
        .filter(|id| on_n2.contains(id))
        .collect();
    assert_eq!(
        kept, on_n2,
        "n2's instances were re-adopted; n1's surplus went"
    );
    for id in &on_n2 {
        let observed = after.observed("n2", id).expect("reported again");
        assert_eq!(
            (observed.state, observed.restarts),
            (ObservedState::Running, 0),
            "{id} was adopted as it ran, not restarted"
        );
    }
    cluster.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_partitioned_node_is_replaced_once_its_lease_expires() {
    let mut cluster = TestCluster::builder()
        .nodes(2, Cpu::from_millis(4_000), Memory::from_bytes(8 << 30))
        .lease_ttl(Duration::from_secs(6))
        .build()
        .await;
    cluster.apply(&service("web", 4)).await.expect("valid");
    let before = cluster.wait_converged(WAIT).await.expect("converges");
    assert_eq!(before.spread("web"), spread(&[("n1", 2), ("n2", 2)]));
    let started = tokio::time::Instant::now();
    cluster.partition_node("n2").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let during = cluster.snapshot().await;
    assert!(during.node_alive("n2"), "the lease still holds");
    assert!(!cluster.agent_running("n2"));
    assert_eq!(during.spread("web"), spread(&[("n1", 2), ("n2", 2)]));
    assert_eq!(
        cluster
            .simulator("n2")
            .expect("a node")
            .running_of("web")
            .len(),
        2,
        "a partitioned node's workloads keep running"
    );
    cluster
        .wait_until(WAIT, |s| s.spread("web") == spread(&[("n1", 4)]))
        .await
        .expect("replaced after the lease expired");
    assert!(
        started.elapsed() >= Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    cluster.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_deleted_service_shows_deleting_until_its_instances_are_gone() {
    let cluster = TestCluster::builder()
        .nodes(2, Cpu::from_millis(4_000), Memory::from_bytes(8 << 30))
        .stop_delay(Duration::from_secs(2))
        .build()
        .await;
    let web = service("web", 2);
    cluster
        .apply(&format!("{web}{}", service("api", 3)))
        .await
        .expect("valid");
    cluster.wait_converged(WAIT).await.expect("converges");
    let recording = cluster
        .record(|s| (s.status("api"), s.instances("api").len()))
        .await;

    let report = cluster
        .apply_with(&web, ApplyOptions::default().prune(true))
        .await
        .expect("valid");
    assert_eq!(report.plan.removed.len(), 1);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let stopping = cluster.snapshot().await;
    assert!(
        stopping.status("api").is_some_and(|s| s.deleting),
        "{}",
        stopping.summary()
    );
    assert_eq!(
        stopping.instances("api").len(),
        3,
        "instances take 2 s to stop"
    );

    let done = cluster.wait_converged(WAIT).await.expect("deleted");
    assert_eq!(done.status("api"), None);
    assert_eq!(done.endpoints("api"), None);
    assert!(done.instances("api").is_empty());
    assert_eq!(done.placements().values().sum::<usize>(), 2, "web's only");
    let history = recording.finish().await;
    for (revision, (status, instances)) in &history {
        if *instances > 0 {
            assert!(
                status.is_some(),
                "at {revision}: instances remain but no status"
            );
        }
    }
    assert!(
        history
            .iter()
            .any(|(_, (s, n))| *n > 0 && s.as_ref().is_some_and(|s| s.deleting))
    );
    assert_eq!(history.last().map(|(_, v)| v.clone()), Some((None, 0)));
    cluster.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn scale_down_follows_the_stop_order_and_nothing_is_over_created() {
    let cluster = TestCluster::builder()
        .nodes(2, Cpu::from_millis(4_000), Memory::from_bytes(8 << 30))
        .start_delay(Duration::from_secs(3)) // slow starts must not cause more creations
        .build()
        .await;
    let recording = cluster.record(|s| (wanted(s, "web"), ids(s, "web"))).await;
    cluster.apply(&service("web", 6)).await.expect("valid");
    let full = cluster.wait_converged(WAIT).await.expect("converges");

    // The documented order among running, ready instances: most crowded node first, then the
    // highest id first.
    let mut order: Vec<_> = full.instances("web");
    let crowd = full.spread("web");
    order.sort_by_key(|i| {
        let node = i.node.clone().unwrap_or_default();
        (
            Reverse(crowd.get(&node).copied().unwrap_or(0)),
            Reverse(i.id.clone()),
        )
    });
    let expected: BTreeSet<String> = order[4..].iter().map(|i| i.id.clone()).collect();

    cluster.apply(&service("web", 2)).await.expect("valid");
    let scaled = cluster.wait_converged(WAIT).await.expect("scales down");
    assert_eq!(ids(&scaled, "web"), expected);

    let history = recording.finish().await;
    let most = history.iter().map(|(_, (n, _))| *n).max().unwrap_or(0);
    assert!(most <= 6 + 1, "at most desired + max_extra: {most}");
    let ever: BTreeSet<&String> = history.iter().flat_map(|(_, (_, ids))| ids).collect();
    assert_eq!(ever.len(), 6, "six instances were ever created");
    cluster.shutdown().await;
}

/// The observed state and restart count of instance `id`, wherever it is placed.
fn seen(snapshot: &Snapshot, id: &str) -> Option<(ObservedState, u32)> {
    let instance = snapshot.cluster().instances.get(id)?;
    let observed = snapshot.observed(instance.node.as_deref()?, id)?;
    Some((observed.state, observed.restarts))
}

#[tokio::test(start_paused = true)]
async fn crashed_instances_follow_their_restart_policy() {
    let cluster = cluster(2).await;
    let keep = "service batch {\n    image busybox\n    instances 2\n    restart never\n}\n";
    let done = "service job {\n    image busybox\n    instances 1\n    restart on_failure\n}\n";
    cluster
        .apply(&format!("{}{keep}{done}", service("web", 2)))
        .await
        .expect("valid");
    let before = cluster.wait_converged(WAIT).await.expect("converges");
    let web_ids = ids(&before, "web");
    let crashed = web_ids.first().expect("an instance").clone();
    let kept = ids(&before, "batch").first().expect("an instance").clone();
    let ended = ids(&before, "job").first().expect("an instance").clone();
    let watched = crashed.clone();
    let recording = cluster
        .record(move |s| (seen(s, &watched), ids(s, "web")))
        .await;
    for (id, state) in [
        (&crashed, ObservedState::Failed),
        (&kept, ObservedState::Failed),
        (&ended, ObservedState::Exited),
    ] {
        assert!(cluster.set_instance_state(id, state).await, "{id} crashes");
    }
    assert!(
        !cluster
            .set_instance_state(&crashed, ObservedState::Running)
            .await,
        "only an end can be injected"
    );

    // restart always: its agent reports the crash and starts it again in place.
    let back = cluster
        .wait_until(WAIT, |s| {
            s.status("web")
                .is_some_and(|st| st.running == 2 && st.ready == 2)
                && s.status("batch").is_some_and(|st| st.running == 1)
                && s.status("job").is_some_and(|st| st.running == 0)
        })
        .await
        .expect("web is whole again, batch and job are not restarted");
    tokio::time::sleep(Duration::from_secs(10)).await;
    let later = cluster.snapshot().await;
    let whole = ServiceStatus {
        desired: 2,
        present: 2,
        running: 2,
        ready: 2,
        deleting: false,
    };
    assert_eq!(later.status("web"), Some(whole), "{}", later.summary());
    assert_eq!(ids(&later, "web"), ids(&back, "web"), "nothing churns");
    let history = recording.finish().await;
    let reports: Vec<(ObservedState, u32)> = history.iter().filter_map(|(_, (o, _))| *o).collect();
    assert!(
        reports.contains(&(ObservedState::Failed, 0)),
        "the crash was reported: {reports:?}"
    );
    assert!(
        reports.contains(&(ObservedState::Running, 1)),
        "and the agent restarted it in place: {reports:?}"
    );
    let ever: BTreeSet<&String> = history.iter().flat_map(|(_, (_, ids))| ids).collect();
    assert!(
        ever.len() <= 3,
        "at most one replacement besides the restart: {ever:?}"
    );

    // restart never: stays failed and still counts, so it is not recreated.
    assert_eq!(ids(&later, "batch"), ids(&before, "batch"), "kept");
    assert_eq!(seen(&later, &kept), Some((ObservedState::Failed, 0)));
    let batch = later.status("batch").expect("status");
    assert_eq!((batch.desired, batch.present, batch.running), (2, 2, 1));
    // restart on_failure: a clean exit is done, not restarted and not replaced.
    assert_eq!(ids(&later, "job"), ids(&before, "job"), "kept");
    assert_eq!(seen(&later, &ended), Some((ObservedState::Exited, 0)));
    let job = later.status("job").expect("status");
    assert_eq!((job.desired, job.present, job.running), (1, 1, 0));
    cluster.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_slow_start_reports_starting_until_its_delay_passes() {
    let cluster = TestCluster::builder()
        .nodes(1, Cpu::from_millis(4_000), Memory::from_bytes(8 << 30))
        .start_delay(Duration::from_secs(5))
        .sync_interval(Duration::from_millis(500))
        .build()
        .await;
    let applied = tokio::time::Instant::now();
    cluster.apply(&service("web", 2)).await.expect("valid");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let starting = cluster.snapshot().await;
    for instance in starting.instances("web") {
        let observed = starting.observed("n1", &instance.id).expect("reported");
        assert_eq!(observed.state, ObservedState::Starting);
        assert!(!observed.ready);
    }
    assert_eq!(starting.status("web").map(|s| s.running), Some(0));
    let running = cluster.wait_converged(WAIT).await.expect("converges");
    let took = applied.elapsed();
    assert!(
        took >= Duration::from_secs(5) && took <= Duration::from_millis(5_600),
        "running once the delay passed, within one sync interval: {took:?}"
    );
    assert_eq!(running.status("web").map(|s| s.ready), Some(2));
    cluster.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn an_agent_restarted_within_its_lease_resumes_it_and_replaces_nothing() {
    let mut cluster = cluster(2).await;
    cluster.apply(&service("web", 4)).await.expect("valid");
    let before = cluster.wait_converged(WAIT).await.expect("converges");
    let web = ids(&before, "web");
    let lease_key = Key::new("lease/node/n2").expect("key");
    let lease = |cluster: &TestCluster| {
        let (store, key) = (cluster.store().clone(), lease_key.clone());
        async move { store.get(&key).await.expect("get").and_then(|f| f.lease) }
    };
    let held = lease(&cluster).await;
    assert!(held.is_some());
    let recording = cluster
        .record(|s| (s.node_alive("n2"), ids(s, "web")))
        .await;
    cluster.partition_node("n2").await;
    tokio::time::sleep(Duration::from_secs(3)).await; // less than the 10 s TTL
    cluster.restart_node("n2");
    assert!(cluster.agent_running("n2"));
    tokio::time::sleep(Duration::from_secs(30)).await;
    let after = cluster.snapshot().await;
    assert!(after.is_converged(), "{}", after.summary());
    assert_eq!(ids(&after, "web"), web);
    assert_eq!(lease(&cluster).await, held, "the cached lease was resumed");
    let history = recording.finish().await;
    assert!(
        history
            .iter()
            .all(|(_, (alive, ids))| *alive && ids == &web),
        "n2 was never seen dead, and nothing was created or stopped"
    );
    cluster.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_restarted_runner_over_the_same_store_creates_nothing() {
    let mut cluster = cluster(3).await;
    cluster
        .apply(&format!("{}{}", service("web", 5), service("api", 3)))
        .await
        .expect("valid");
    let before = cluster.wait_converged(WAIT).await.expect("converges");
    // Past one telemetry interval: each node has written what its running instances use,
    // which does not change while they idle.
    tokio::time::sleep(Duration::from_secs(11)).await;
    let revision = cluster.store().revision().await.expect("revision");

    cluster.restart_runner().await;
    tokio::time::sleep(Duration::from_secs(65)).await; // two resyncs
    assert_eq!(
        cluster.store().revision().await.expect("revision"),
        revision,
        "nothing written"
    );
    let after = cluster.snapshot().await;
    assert!(after.is_converged());
    assert_eq!(ids(&after, "web"), ids(&before, "web"));

    // The new runner works: it follows the next change.
    cluster.apply(&service("web", 6)).await.expect("valid");
    let grown = cluster.wait_converged(WAIT).await.expect("converges");
    assert_eq!(ids(&grown, "web").len(), 6);
    cluster.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn the_store_clock_follows_virtual_time_and_the_reaper_expires_leases() {
    let clock = TokioClock::new();
    let store =
        MemoryStore::with_config(MemoryConfig::default().clock(std::sync::Arc::new(clock.clone())));
    let cluster = TestCluster::builder()
        .nodes(1, Cpu::from_millis(1_000), Memory::from_bytes(1 << 30))
        .build()
        .await;
    // The cluster's own store expires leases on its reaper; this one shows the clock alone.
    let lease = store
        .grant_lease(Duration::from_secs(5))
        .await
        .expect("grant");
    let key = Key::new("lease/node/x").expect("key");
    store
        .put_with_lease(&key, "x".into(), lease.id)
        .await
        .expect("put");
    let mut watch = store.watch("lease/", Revision::ZERO).await.expect("watch");
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(clock.now() >= Duration::from_secs(6));
    assert!(
        watch.next().now_or_never().is_none(),
        "no reaper on this store: nothing yet"
    );
    store.expire_leases();
    let event = watch.next().now_or_never().flatten().expect("an event");
    assert_eq!(event.expect("no error").kind, EventKind::Delete);

    // The cluster's node lease lives on through keep-alives, far beyond its TTL.
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert!(cluster.snapshot().await.node_alive("n1"));
    cluster.shutdown().await;
}
