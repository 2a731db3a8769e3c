//! A highly available control plane as operators run it: three `cca server --store etcd` on
//! one etcd, two `cca agent`s (simulator runtime) each given all three servers (in different
//! orders, so they start on different servers), and a service of 4 instances. Each server is
//! killed in turn (`kill -9`, the leader included) and restarted before the next; throughout,
//! polled every 100 ms, no node lease lapses (the `lease/node/...` keys stay, with the same
//! create revision), the instance ids on each node never change, and never more than 4
//! instances run. `cca status` shows the replicas and the leader, and the servers log who
//! leads.
//!
//! Needs the shared test etcd: without it the test fails under CI and says it was skipped when
//! run by hand.
#![cfg(feature = "etcd")]

mod processes;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use ccattler_examples::cca::client::ApiClient;
use hyper::Method;
use processes::{
    Children, admin_token, apply, cca, enrollment_token, etcd_store_flags, free_port, read_log,
    running, start_agent, start_server, wait_for,
};

const INSTANCES: usize = 4;
/// Short, so that a lapse would show within the watch after each kill.
const LEASE_TTL: &str = "4s";
/// How long each kill is watched before the server is restarted: past the agents' lease TTL,
/// and past the leader's election TTL (10 s) when the leader was killed.
const WATCH_AFTER_KILL: Duration = Duration::from_secs(12);

type Spread = BTreeMap<String, BTreeSet<String>>;

/// The node leases: `{node: create revision}` (a lapsed and re-granted lease has a new one).
async fn leases(client: &ApiClient) -> Option<BTreeMap<String, u64>> {
    let answer = client
        .json(Method::GET, "/state?prefix=lease/node/", "")
        .await
        .ok()?
        .ok()?;
    let mut leases = BTreeMap::new();
    for fact in answer["facts"].as_array()? {
        let key = fact["key"].as_str()?;
        let created = fact["create_revision"].as_u64()?;
        leases.insert(key.to_owned(), created);
    }
    Some(leases)
}

/// The running instance ids per node.
async fn spread(client: &ApiClient) -> Spread {
    running(client)
        .await
        .into_iter()
        .map(|(node, ids)| (node, ids.into_keys().collect()))
        .collect()
}

/// The control plane of `/api/status`.
async fn control_plane(client: &ApiClient) -> Option<serde_json::Value> {
    let status = client.ok(Method::GET, "/api/status", "").await.ok()?;
    Some(status["control_plane"].clone())
}

/// Watches the cluster through `client` for `period`, every 100 ms: the leases and the spread
/// stay as they were, and no more than 4 instances run. A failed read is retried, not taken as
/// a lapse (the server it goes to may be the one restarting).
async fn hold(
    what: &str,
    client: &ApiClient,
    period: Duration,
    leases0: &BTreeMap<String, u64>,
    spread0: &Spread,
    dir: &Path,
) {
    let start = Instant::now();
    while start.elapsed() < period {
        if let Some(now) = leases(client).await {
            assert_eq!(
                &now,
                leases0,
                "{what}: a node lease lapsed after {:?}; agent logs: a: {} b: {}",
                start.elapsed(),
                read_log(dir, "agent-a.log"),
                read_log(dir, "agent-b.log")
            );
            let spread = spread(client).await;
            let total: usize = spread.values().map(BTreeSet::len).sum();
            assert!(
                total <= INSTANCES,
                "{what}: {total} instances running: {spread:?}"
            );
            assert_eq!(
                &spread,
                spread0,
                "{what}: the instances moved after {:?}",
                start.elapsed()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_servers_on_one_etcd_lose_each_in_turn_without_a_lapse() {
    let Some(store) = etcd_store_flags("three_servers_on_one_etcd_lose_each_in_turn") else {
        return;
    };
    let tempdir = tempfile::tempdir().expect("tempdir");
    let dir = tempdir.path().to_owned();
    let mut children = Children::default();

    // Fixed ports, so that a restarted server is found where the agents look.
    let listens: Vec<String> = (0..3)
        .map(|_| format!("127.0.0.1:{}", free_port()))
        .collect();
    let mut urls = Vec::new();
    for (n, listen) in listens.iter().enumerate() {
        let (child, url) = start_server(&dir, listen, &store, n as u32);
        children.0.push(child);
        urls.push(url);
    }
    let admin = admin_token(&dir);
    let clients: Vec<ApiClient> = urls
        .iter()
        .map(|url| processes::api_client(url, Some(&admin)))
        .collect();
    let (plane, _) = wait_for("a leader", Duration::from_secs(20), async || {
        let plane = control_plane(&clients[0]).await?;
        (plane["up"] == 3 && plane["leader"].is_string()).then_some(plane)
    })
    .await;
    eprintln!("control plane: {plane}");

    let flags = [
        "--runtime",
        "sim",
        "--cpu",
        "4",
        "--memory",
        "4Gi",
        "--lease-ttl",
        LEASE_TTL,
    ];
    for (node, first) in [("a", 0), ("b", 1)] {
        let order: Vec<&str> = (0..3).map(|i| urls[(first + i) % 3].as_str()).collect();
        let token = enrollment_token(&urls[first], &admin);
        children
            .0
            .push(start_agent(&dir, &order.join(","), node, &token, &flags));
    }
    let doc = format!(
        "service sleeper {{\n    image busybox\n    command \"sleep 1000\"\n    instances {INSTANCES}\n    resources {{\n        cpu 100m\n        memory 16Mi\n    }}\n}}\n"
    );
    apply(&dir, &urls[0], &admin, &doc, &[]);
    // Settled: 2 on each node (the scheduler rebalances a lopsided start, briefly running one
    // extra instance per move), and unchanged for 3 s.
    let mut settled: Option<(Spread, Instant)> = None;
    let (spread0, took) = wait_for(
        "2 instances running on each of a and b, for 3 s",
        Duration::from_secs(60),
        async || {
            let spread = spread(&clients[0]).await;
            let balanced = spread.len() == 2 && spread.values().all(|ids| ids.len() == 2);
            match &settled {
                Some((seen, since)) if balanced && *seen == spread => {
                    (since.elapsed() >= Duration::from_secs(3)).then_some(spread)
                }
                _ => {
                    settled = balanced.then(|| (spread, Instant::now()));
                    None
                }
            }
        },
    )
    .await;
    eprintln!("converged in {took:?}: {spread0:?}");
    let (leases0, _) = wait_for("both node leases", Duration::from_secs(10), async || {
        leases(&clients[0]).await.filter(|l| l.len() == 2)
    })
    .await;

    // The leader first, then the others in order.
    let leader = plane["leader"].as_str().unwrap_or_default().to_owned();
    let leader_at = plane["replicas"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| r["id"] == leader.as_str())
        .and_then(|r| urls.iter().position(|u| r["url"] == u.as_str()))
        .expect("the leader is one of the three");
    let order = [leader_at, (leader_at + 1) % 3, (leader_at + 2) % 3];
    for (round, victim) in order.into_iter().enumerate() {
        let watcher = &clients[(victim + 1) % 3];
        let what = format!("round {round}: {} killed", urls[victim]);
        let child: &mut Child = &mut children.0[victim];
        child.kill().expect("kill -9 a server");
        let _ = child.wait();
        hold(&what, watcher, WATCH_AFTER_KILL, &leases0, &spread0, &dir).await;
        let (restarted, _) = start_server(&dir, &listens[victim], &store, 10 + victim as u32);
        children.0[victim] = restarted;
        wait_for(
            "the restarted server answers",
            Duration::from_secs(10),
            async || control_plane(&clients[victim]).await,
        )
        .await;
        hold(
            &what,
            watcher,
            Duration::from_secs(2),
            &leases0,
            &spread0,
            &dir,
        )
        .await;
    }

    // Everyone is back, some replica leads, and the servers logged who leads.
    let (plane, _) = wait_for(
        "3 replicas and a leader",
        Duration::from_secs(20),
        async || {
            let plane = control_plane(&clients[0]).await?;
            (plane["up"] == 3 && plane["leader"].is_string()).then_some(plane)
        },
    )
    .await;
    let status = cca()
        .args(["status", "--server", &urls[0], "--token", &admin])
        .output()
        .expect("cca status");
    let printed = String::from_utf8_lossy(&status.stdout);
    assert!(
        printed.contains("control plane: 3 replicas up")
            && printed.contains(&format!(
                "leader: {}",
                plane["leader"].as_str().unwrap_or("?")
            )),
        "{printed}"
    );
    let logs: String = (0..3)
        .flat_map(|n| [n, 10 + n])
        .map(|n| read_log(&dir, &format!("server-{n}.log")))
        .collect();
    assert!(logs.contains("now leads the controllers"), "{logs}");
    assert!(logs.contains(&format!("replica {leader} leads")), "{logs}");
    let agents = read_log(&dir, "agent-a.log") + &read_log(&dir, "agent-b.log");
    assert!(agents.contains("failing over"), "{agents}");
}
