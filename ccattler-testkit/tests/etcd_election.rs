//! Leader election on etcd with fencing: runner replicas in separate processes against one
//! etcd, failover when the leader's process is killed or its lease revoked, a paused leader
//! whose late commit the runner's own fence rejects, and two racing runners that never
//! over-create (the two-controller race of seed 003).
//!
//! Uses the shared etcd of `scripts/etcd-up`, each test under a prefix of its own. Without etcd
//! these tests fail when `CI=true` and say they were skipped otherwise.

use std::fs::File;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ccattler_core::runner::{LeaderElection, LeaseElection, LeaseElectionConfig, TokioRunner};
use ccattler_core::{
    Change, Controller, Fact, FactStore, FactView, Key, ReconcileContext, ReconcileError, Runner,
};
use ccattler_store::etcd::server::{ENDPOINTS_ENV, shared_endpoints, shared_store_or_skip};
use ccattler_store::etcd::{EtcdConfig, EtcdStore};
use ccattler_testkit::faulty::FaultyStore;
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

/// Writes [`late_key`] from its first reconcile, which it enters and then holds until the
/// test opens the gate: a leader paused between its reconcile and its commit (a long garbage
/// collection, a stopped VM). Later reconciles write the same and do not wait.
struct PausedWriter {
    entered: std::sync::mpsc::Sender<()>,
    /// Told when a reconcile is entered: the old leader's runtime then stops too.
    freeze: std::sync::Arc<tokio::sync::Notify>,
    gate: Gate,
}

/// Opened once by the test; whoever waits on it is held until then.
type Gate = std::sync::Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>;

fn wait_for_gate(gate: &Gate) {
    let (open, opened) = &**gate;
    let mut open = open
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    while !*open {
        open = opened
            .wait(open)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
    }
}

fn late_key() -> Key {
    Key::new("toy/instance/web/late").expect("valid key")
}

impl Controller for PausedWriter {
    fn name(&self) -> &str {
        "paused-writer"
    }

    fn watches(&self) -> Vec<String> {
        vec!["toy/desired/".into()]
    }

    fn write_domain(&self) -> Vec<String> {
        vec!["toy/instance/".into()]
    }

    fn reconcile(
        &self,
        _facts: &FactView,
        _ctx: &mut ReconcileContext<'_>,
    ) -> Result<Vec<Change>, ReconcileError> {
        let _ = self.entered.send(());
        self.freeze.notify_one();
        wait_for_gate(&self.gate);
        Ok(vec![Change::put(late_key(), "web")])
    }
}

/// The tokio runner's own fence keeps a paused leader's late commit out: the test adds no
/// fence, it only pauses the leader inside a reconcile until another replica leads, then lets
/// it commit. The commit reaches etcd and is refused, nothing is written, and the runner stops
/// its controllers (deposed) instead of retrying.
#[test]
fn a_paused_leaders_late_commit_is_rejected_by_the_runner_itself() {
    const CHECK: &str = "a_paused_leaders_late_commit_is_rejected_by_the_runner_itself";
    let prefix = run_prefix("paused");
    let main = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let Some(store) = main.block_on(shared_store_or_skip(CHECK, |c| c.prefix(prefix.clone())))
    else {
        return;
    };

    // The old leader runs on a runtime of its own with one thread. Reconciles run off the
    // runtime (on its blocking pool), so holding the controller inside one pauses nothing
    // else; a task of the test then holds the runtime's one thread too, until the gate
    // opens: all of the old leader is paused (the election's keep-alive included), like a
    // stopped process.
    let (entered_tx, entered_rx) = std::sync::mpsc::channel();
    let gate: Gate = std::sync::Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
    let freeze = std::sync::Arc::new(tokio::sync::Notify::new());
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let config = store.config().clone();
    let controller = PausedWriter {
        entered: entered_tx,
        freeze: freeze.clone(),
        gate: gate.clone(),
    };
    // The runtime's thread thaws only after the reconcile has returned, as a stopped process
    // resumes with its pass done: otherwise which of the two ran first after the pause (the
    // election noticing its lost lease, or the reconcile's end) was a race.
    let thaw: Gate = std::sync::Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
    let frozen = thaw.clone();
    let old = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
        runtime.block_on(async move {
            tokio::spawn(async move {
                freeze.notified().await;
                wait_for_gate(&frozen);
            });
            let store = EtcdStore::connect(config).await.expect("connect");
            let commits = FaultyStore::new(store.clone());
            let runner = TokioRunner::new(commits.clone())
                .controller(controller)
                .with_election(election(&store, "old"));
            let result = runner
                .run(async move {
                    let _ = stop_rx.await;
                })
                .await;
            (result, commits.failed_txns())
        })
    });

    entered_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the old leader reconciles");
    let started = Instant::now();
    let new = main
        .block_on(election(&store, "new").campaign())
        .expect("new leads once the paused leader's lease expired");
    eprintln!("{CHECK}: new leader after {:?}", started.elapsed());

    // The old leader wakes and commits what it planned as leader.
    for opening in [&gate, &thaw] {
        *opening
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = true;
        opening.1.notify_all();
        // The reconcile returns and its result reaches the frozen runtime's queue meanwhile.
        std::thread::sleep(Duration::from_millis(300));
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    main.block_on(async {
        loop {
            let written = store.get(&late_key()).await.expect("get").is_some();
            assert!(!written, "the deposed leader's late commit landed");
            if Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let _ = stop_tx.send(());
    let (result, refused) = old.join().expect("old leader thread");
    eprintln!("{CHECK}: the old runner ended with {result:?}; {refused} transactions refused");
    assert!(result.is_ok(), "{result:?}");
    assert!(
        refused >= 1,
        "the late commit reached etcd and was refused (not merely never sent)"
    );
    main.block_on(async {
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
