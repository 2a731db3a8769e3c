//! Leader election on etcd with fencing: runner replicas in separate processes against one
//! etcd, failover when the leader's process is killed or its lease revoked, a paused leader
//! whose late commit the fence rejects, and two racing runners that never over-create (the
//! two-controller race of seed 003).
//!
//! Uses the shared etcd of `scripts/etcd-up`, each test under a prefix of its own. Without etcd
//! these tests fail when `CI=true` and say they were skipped otherwise.

use std::fs::File;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ccattler_core::runner::{LeaderElection, LeaseElection, LeaseElectionConfig, TokioRunner};
use ccattler_core::{Fact, FactStore, Key, Op, Runner, Txn};
use ccattler_store::etcd::server::{ENDPOINTS_ENV, shared_endpoints, shared_store_or_skip};
use ccattler_store::etcd::{EtcdConfig, EtcdStore};
use ccattler_testkit::toy::{INSTANCES, ReplicaController};

/// The lease TTL of every election here.
const TTL: Duration = Duration::from_secs(3);
/// Slack over the TTL: etcd checks lease expiry every 500 ms, and the watch must deliver.
const SLACK: Duration = Duration::from_millis(1500);

const REPLICA_ENV: &str = "CCATTLER_TEST_REPLICA";
const PREFIX_ENV: &str = "CCATTLER_TEST_PREFIX";

fn run_prefix(test: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("ccattler-test/{test}-{}-{nanos}/", std::process::id())
}

fn leader_key() -> Key {
    Key::new("toy/leader").expect("valid key")
}

fn election<S: FactStore + Clone>(store: &S, identity: &str) -> LeaseElection<S> {
    let config = LeaseElectionConfig::new(leader_key(), identity)
        .ttl(TTL)
        .retry(Duration::from_millis(200));
    LeaseElection::new(store.clone(), config)
}

async fn instances(store: &EtcdStore, group: &str) -> usize {
    let scan = store.scan(&format!("{INSTANCES}{group}/")).await;
    scan.map_or(0, |s| s.facts.len())
}

/// Waits (real time, up to 30 s) until `group` has `count` instances, then checks that it keeps
/// exactly that many for one more second (no over-creation).
async fn converge(store: &EtcdStore, group: &str, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while instances(store, group).await != count {
        assert!(
            Instant::now() < deadline,
            "group {group} did not converge to {count} instances in 30 s (has {})",
            instances(store, group).await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        instances(store, group).await,
        count,
        "over-creation in {group}"
    );
}

async fn set_desired(store: &EtcdStore, group: &str, count: usize) {
    let key = ReplicaController::desired_key(group);
    store
        .put(&key, count.to_string().into())
        .await
        .expect("put the desired count");
}

/// Waits until the leader key shows a leader that `is_next` accepts, returning it and how long
/// it took. On timeout the panic says what the replica processes did.
async fn next_leader(
    store: &EtcdStore,
    is_next: impl Fn(&Fact) -> bool,
    replicas: &mut Replicas,
) -> (Fact, Duration) {
    let start = Instant::now();
    loop {
        let answer = store.get(&leader_key()).await;
        if let Ok(Some(fact)) = &answer
            && is_next(fact)
        {
            return (fact.clone(), start.elapsed());
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no new leader within 30 s; the leader key: {answer:?}; replicas: {}",
            replicas.report()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The body of one replica process: a runner with the toy controller behind a lease election,
/// until killed. Not a test of its own: without the replica's environment it returns at once.
#[test]
#[ignore = "the body of the replica processes the failover test starts"]
fn replica_process() {
    let (Ok(identity), Ok(prefix)) = (std::env::var(REPLICA_ENV), std::env::var(PREFIX_ENV)) else {
        return;
    };
    tracing_subscriber::fmt()
        .with_env_filter("info")
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    runtime.block_on(async move {
        let endpoints = shared_endpoints().expect("the parent passes the endpoints");
        let store = EtcdStore::connect(EtcdConfig::new(endpoints).prefix(prefix))
            .await
            .expect("connect to etcd");
        let runner = TokioRunner::new(store.clone())
            .controller(ReplicaController)
            .with_election(election(&store, &identity));
        let result = runner.run(std::future::pending()).await;
        panic!("replica {identity} stopped: {result:?}");
    });
}

/// Replica processes, killed when dropped (also when the test panics). Each one logs to a file
/// of its own, whose end [`Replicas::report`] shows when a check fails.
struct Replicas {
    children: Vec<(String, Option<Child>)>,
    logs: tempfile::TempDir,
}

impl Replicas {
    fn start(names: &[&str], prefix: &str, endpoints: &str) -> Replicas {
        let exe = std::env::current_exe().expect("the test binary's path");
        let logs = tempfile::tempdir().expect("a directory for the replicas' logs");
        let children = names
            .iter()
            .map(|name| {
                let log = File::create(logs.path().join(name)).expect("a replica's log file");
                let child = Command::new(&exe)
                    .args(["--exact", "replica_process", "--ignored", "--nocapture"])
                    .env(REPLICA_ENV, name)
                    .env(PREFIX_ENV, prefix)
                    .env(ENDPOINTS_ENV, endpoints)
                    .stdout(Stdio::null())
                    .stderr(log)
                    .spawn()
                    .expect("start a replica process");
                ((*name).to_owned(), Some(child))
            })
            .collect();
        Replicas { children, logs }
    }

    /// Each replica's state (running, killed, or its exit status) and the end of its log.
    fn report(&mut self) -> String {
        let mut lines = Vec::new();
        for (name, child) in &mut self.children {
            let state = match child.as_mut().map(Child::try_wait) {
                None => "killed by the test".to_owned(),
                Some(Ok(None)) => "running".to_owned(),
                Some(Ok(Some(status))) => format!("exited {status}"),
                Some(Err(err)) => format!("unknown ({err})"),
            };
            let log =
                std::fs::read_to_string(self.logs.path().join(name.as_str())).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(8).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            lines.push(format!("\n{name}: {state}\n    {}", tail.join("\n    ")));
        }
        lines.concat()
    }

    fn kill(&mut self, name: &str) {
        for (n, child) in &mut self.children {
            if n == name
                && let Some(mut child) = child.take()
            {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

impl Drop for Replicas {
    fn drop(&mut self) {
        let names: Vec<String> = self.children.iter().map(|(n, _)| n.clone()).collect();
        for name in names {
            self.kill(&name);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_fail_over_when_the_leader_is_revoked_or_killed() {
    const CHECK: &str = "replicas_fail_over_when_the_leader_is_revoked_or_killed";
    let prefix = run_prefix("failover");
    let Some(store) = shared_store_or_skip(CHECK, |c| c.prefix(prefix.clone())).await else {
        return;
    };
    let endpoints = store.config().endpoints.join(",");
    set_desired(&store, "web", 5).await;
    let mut replicas = Replicas::start(&["a", "b", "c"], &prefix, &endpoints);
    let (first, _) = next_leader(&store, |_| true, &mut replicas).await;
    converge(&store, "web", 5).await;

    // The leader's lease is revoked: a new term starts within the TTL. The deposed replica may
    // win it again; it campaigns like the others.
    let lease = first.lease.expect("the leader key is on a lease");
    store
        .revoke_lease(lease)
        .await
        .expect("revoke the leader's lease");
    let newer = |fact: &Fact| fact.create_revision > first.create_revision;
    let (second, took) = next_leader(&store, newer, &mut replicas).await;
    eprintln!("{CHECK}: lease revoked, {second:?} leads after {took:?}");
    assert!(took <= TTL, "failover after revoke took {took:?}");
    set_desired(&store, "web", 7).await;
    converge(&store, "web", 7).await;

    // The new leader's process is killed: its lease expires and a third replica leads.
    let second_name = second.value_str().unwrap_or_default().to_owned();
    replicas.kill(&second_name);
    let other = |fact: &Fact| fact.value_str() != Some(second_name.as_str());
    let (third, took) = next_leader(&store, other, &mut replicas).await;
    eprintln!("{CHECK}: leader process killed, {third:?} leads after {took:?}");
    assert!(took <= TTL + SLACK, "failover after kill took {took:?}");
    set_desired(&store, "web", 9).await;
    converge(&store, "web", 9).await;
    drop(replicas);
    for fact in store.scan("").await.expect("cleanup scan").facts {
        let _ = store.delete(&fact.key).await;
    }
}

#[test]
fn a_paused_leader_past_its_lease_has_its_commit_rejected() {
    const CHECK: &str = "a_paused_leader_past_its_lease_has_its_commit_rejected";
    let prefix = run_prefix("paused");
    let main = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let Some(store) = main.block_on(shared_store_or_skip(CHECK, |c| c.prefix(prefix.clone())))
    else {
        return;
    };
    let late_key = Key::new("toy/instance/web/late").expect("valid key");

    // The old leader lives on a runtime of its own; pausing its thread pauses all of it
    // (keep-alive task and connection included), like a stopped process.
    let (fences_tx, fences_rx) = std::sync::mpsc::channel();
    let config = store.config().clone();
    let key = late_key.clone();
    let old = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let store = runtime
            .block_on(EtcdStore::connect(config))
            .expect("connect");
        let leadership = runtime
            .block_on(election(&store, "old").campaign())
            .expect("old leads");
        fences_tx
            .send(leadership.fences().to_vec())
            .expect("main waits");
        std::thread::sleep(TTL * 2 + SLACK); // paused well past its lease
        let mut late = Txn::new().then(Op::put(key, "web"));
        late.compares.extend(leadership.fences().iter().cloned());
        eprintln!("{CHECK}: the resumed old leader commits {late:?}");
        runtime.block_on(store.txn(late))
    });

    let old_fences = fences_rx.recv().expect("old leader's fences");
    let started = Instant::now();
    let new = main
        .block_on(election(&store, "new").campaign())
        .expect("new leads");
    eprintln!("{CHECK}: new leader after {:?}", started.elapsed());
    assert_ne!(old_fences, new.fences());

    let response = old
        .join()
        .expect("old leader thread")
        .expect("the txn reaches etcd");
    eprintln!("{CHECK}: etcd answered the old leader's commit with {response:?}");
    assert!(
        !response.succeeded,
        "the fence rejects the deposed leader's write"
    );
    main.block_on(async {
        assert!(
            store.get(&late_key).await.expect("get").is_none(),
            "nothing written"
        );
        let mut current = Txn::new().then(Op::put(late_key.clone(), "web"));
        current.compares.extend(new.fences().iter().cloned());
        let response = store.txn(current).await.expect("txn");
        assert!(response.succeeded, "the new leader commits");
        drop(new);
        for fact in store.scan("").await.expect("cleanup scan").facts {
            let _ = store.delete(&fact.key).await;
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_racing_runners_never_over_create() {
    const CHECK: &str = "two_racing_runners_never_over_create";
    let prefix = run_prefix("race");
    let Some(store) = shared_store_or_skip(CHECK, |c| c.prefix(prefix.clone())).await else {
        return;
    };
    set_desired(&store, "web", 5).await;
    let runners: Vec<_> = ["a", "b"]
        .into_iter()
        .map(|name| {
            let runner = TokioRunner::new(store.clone())
                .controller(ReplicaController)
                .with_election(election(&store, name));
            tokio::spawn(runner.run(std::future::pending()))
        })
        .collect();
    converge(&store, "web", 5).await;
    set_desired(&store, "web", 12).await;
    converge(&store, "web", 12).await;
    for runner in runners {
        runner.abort();
    }
    for fact in store.scan("").await.expect("cleanup scan").facts {
        let _ = store.delete(&fact.key).await;
    }
}
