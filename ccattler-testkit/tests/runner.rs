//! The tokio runner end to end on MemoryStore, on tokio's paused (virtual) clock.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ccattler_core::runner::{
    LeaderElection, LeaseElection, LeaseElectionConfig, RunnerError, TokioRunner,
};
use ccattler_core::{
    Change, Controller, FactStore, FactView, Key, ManualClock, Op, ReconcileContext,
    ReconcileError, Revision, Runner, Txn,
};
use ccattler_store::{MemoryConfig, MemoryStore};
use ccattler_testkit::faulty::FaultyStore;
use ccattler_testkit::toy::{INSTANCES, ReplicaController};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

type RunHandle = (oneshot::Sender<()>, JoinHandle<Result<(), RunnerError>>);

fn start<R: Runner + Send + 'static>(
    runner: R,
) -> (oneshot::Sender<()>, JoinHandle<Result<(), R::Error>>) {
    let (stop, stopped) = oneshot::channel::<()>();
    let handle = tokio::spawn(runner.run(async move {
        let _ = stopped.await;
    }));
    (stop, handle)
}

async fn stop((stop, handle): RunHandle) {
    let _ = stop.send(());
    let result = tokio::time::timeout(Duration::from_secs(10), handle)
        .await
        .expect("the runner stops within its shutdown timeout")
        .expect("the runner task does not panic");
    result.expect("a graceful shutdown returns Ok");
}

async fn set_desired(store: &MemoryStore, group: &str, count: usize) {
    store
        .put(
            &ReplicaController::desired_key(group),
            count.to_string().into(),
        )
        .await
        .expect("put the desired count");
}

async fn instances(store: &impl FactStore, group: &str) -> Vec<String> {
    let scan = store
        .scan(&format!("{INSTANCES}{group}/"))
        .await
        .expect("scan instances");
    scan.facts.into_iter().map(|f| f.key.to_string()).collect()
}

/// Waits (in virtual time) until `group` has exactly `count` instances.
async fn converge(store: &impl FactStore, group: &str, count: usize) -> Vec<String> {
    for _ in 0..6000 {
        let now = instances(store, group).await;
        if now.len() == count {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "group {group} did not converge to {count} instances in 60 virtual seconds: {:?}",
        instances(store, group).await
    );
}

/// Lets the runner work for `d` of virtual time.
async fn idle(d: Duration) {
    tokio::time::sleep(d).await;
}

#[tokio::test(start_paused = true)]
async fn converges_and_follows_changes() {
    let store = MemoryStore::new();
    let run = start(TokioRunner::new(store.clone()).controller(ReplicaController));
    set_desired(&store, "web", 3).await;
    converge(&store, "web", 3).await;
    set_desired(&store, "web", 1).await;
    converge(&store, "web", 1).await;
    set_desired(&store, "api", 200).await; // more than one transaction takes (128)
    converge(&store, "api", 200).await;
    idle(Duration::from_secs(1)).await;
    assert_eq!(
        instances(&store, "api").await.len(),
        200,
        "no over-creation"
    );
    stop(run).await;
}

#[tokio::test(start_paused = true)]
async fn a_restarted_runner_over_the_same_store_creates_nothing() {
    let store = MemoryStore::new();
    set_desired(&store, "web", 4).await;
    let first = start(TokioRunner::new(store.clone()).controller(ReplicaController));
    let created = converge(&store, "web", 4).await;
    idle(Duration::from_millis(100)).await;
    stop(first).await;
    let revision = store.revision().await.unwrap();

    let second = start(TokioRunner::new(store.clone()).controller(ReplicaController));
    idle(Duration::from_secs(65)).await; // two resyncs
    assert_eq!(instances(&store, "web").await, created);
    assert_eq!(
        store.revision().await.unwrap(),
        revision,
        "nothing was written"
    );
    stop(second).await;
}

#[tokio::test(start_paused = true)]
async fn conflicts_are_retried_until_the_commit_lands() {
    let inner = MemoryStore::new();
    let store = FaultyStore::new(inner.clone());
    store.lose_races(3);
    let run = start(
        TokioRunner::new(store.clone())
            .controller(ReplicaController)
            .seed(7),
    );
    // The intruder's writes land under toy/instance/web/, so they count as instances too.
    set_desired(&inner, "web", 2).await;
    converge(&store, "web", 2).await;
    set_desired(&inner, "web", 6).await;
    converge(&store, "web", 6).await;
    idle(Duration::from_secs(1)).await;
    assert_eq!(store.races_left(), 0, "every race was injected");
    assert_eq!(store.failed_txns(), 3, "three commits lost their race");
    assert_eq!(
        instances(&store, "web").await.len(),
        6,
        "and the runner still converged"
    );
    stop(run).await;
}

/// Writes `out/mine` and, wrongly, `in/theirs`; counts its reconciles.
struct Trespasser {
    calls: Arc<AtomicUsize>,
}

impl Controller for Trespasser {
    fn name(&self) -> &str {
        "trespasser"
    }
    fn watches(&self) -> Vec<String> {
        vec!["in/".into()]
    }
    fn write_domain(&self) -> Vec<String> {
        vec!["out/".into()]
    }
    fn reconcile(
        &self,
        _: &FactView,
        _: &mut ReconcileContext<'_>,
    ) -> Result<Vec<Change>, ReconcileError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Ok(vec![
            Change::put(Key::new("out/mine")?, "ok"),
            Change::put(Key::new("in/theirs")?, "hijack"),
        ])
    }
}

#[tokio::test(start_paused = true)]
async fn writes_outside_the_write_domain_are_rejected_and_nothing_is_written() {
    let store = MemoryStore::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let run = start(TokioRunner::new(store.clone()).controller(Trespasser {
        calls: calls.clone(),
    }));
    idle(Duration::from_secs(2)).await;
    assert_eq!(
        store.revision().await.unwrap(),
        Revision::ZERO,
        "nothing was written"
    );
    assert!(
        store
            .get(&Key::new("out/mine").unwrap())
            .await
            .unwrap()
            .is_none()
    );
    // Restarted after 100 ms, 500 ms and 1 s: four attempts in two seconds.
    assert_eq!(calls.load(Ordering::SeqCst), 4);
    stop(run).await;
}

/// Panics on its first `panics` reconciles, then behaves like [`ReplicaController`].
struct Flaky {
    panics: AtomicUsize,
}

impl Controller for Flaky {
    fn name(&self) -> &str {
        "flaky"
    }
    fn watches(&self) -> Vec<String> {
        ReplicaController.watches()
    }
    fn write_domain(&self) -> Vec<String> {
        ReplicaController.write_domain()
    }
    fn reconcile(
        &self,
        facts: &FactView,
        ctx: &mut ReconcileContext<'_>,
    ) -> Result<Vec<Change>, ReconcileError> {
        if self
            .panics
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            panic!("flaky controller panics on purpose");
        }
        ReplicaController.reconcile(facts, ctx)
    }
}

#[tokio::test(start_paused = true)]
async fn a_panicking_controller_is_restarted_and_converges() {
    let store = MemoryStore::new();
    set_desired(&store, "web", 2).await;
    let run = start(TokioRunner::new(store.clone()).controller(Flaky {
        panics: AtomicUsize::new(2),
    }));
    converge(&store, "web", 2).await;
    stop(run).await;
}

struct Doomed;

impl Controller for Doomed {
    fn name(&self) -> &str {
        "doomed"
    }
    fn watches(&self) -> Vec<String> {
        vec!["doom/".into()]
    }
    fn write_domain(&self) -> Vec<String> {
        vec!["doom/".into()]
    }
    fn reconcile(
        &self,
        facts: &FactView,
        _: &mut ReconcileContext<'_>,
    ) -> Result<Vec<Change>, ReconcileError> {
        if facts.contains("doom/now") {
            return Err(ReconcileError::fatal("the doom key appeared"));
        }
        Ok(vec![])
    }
}

#[tokio::test(start_paused = true)]
async fn a_fatal_error_stops_every_controller() {
    let store = MemoryStore::new();
    let (_stop, handle) = start(
        TokioRunner::new(store.clone())
            .controller(ReplicaController)
            .controller(Doomed),
    );
    set_desired(&store, "web", 1).await;
    converge(&store, "web", 1).await;
    store
        .put(&Key::new("doom/now").unwrap(), "1".into())
        .await
        .unwrap();
    let result = tokio::time::timeout(Duration::from_secs(10), handle)
        .await
        .unwrap()
        .unwrap();
    match result {
        Err(RunnerError::Fatal {
            controller,
            message,
        }) => {
            assert_eq!(controller, "doomed");
            assert!(message.contains("doom key"));
        }
        other => panic!("expected a fatal error, got {other:?}"),
    }
    // The replica controller was stopped too: a new desire goes unanswered.
    set_desired(&store, "web", 3).await;
    idle(Duration::from_secs(5)).await;
    assert_eq!(instances(&store, "web").await.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn two_controllers_with_one_write_domain_are_refused() {
    let store = MemoryStore::new();
    let runner = TokioRunner::new(store)
        .controller(ReplicaController)
        .controller(Flaky {
            panics: AtomicUsize::new(0),
        });
    let result = runner.run(std::future::pending()).await;
    assert!(matches!(result, Err(RunnerError::Setup(_))), "{result:?}");
}

fn election(store: &MemoryStore, identity: &str) -> LeaseElection<MemoryStore> {
    let config = LeaseElectionConfig::new(Key::new("toy/leader").expect("valid key"), identity)
        .ttl(Duration::from_secs(3));
    LeaseElection::new(store.clone(), config)
}

#[tokio::test(start_paused = true)]
async fn two_racing_runners_behind_fenced_election_create_exactly_once() {
    let store = MemoryStore::new();
    set_desired(&store, "web", 5).await;
    let a = start(
        TokioRunner::new(store.clone())
            .controller(ReplicaController)
            .with_election(election(&store, "a")),
    );
    let b = start(
        TokioRunner::new(store.clone())
            .controller(ReplicaController)
            .with_election(election(&store, "b")),
    );
    converge(&store, "web", 5).await;
    idle(Duration::from_secs(2)).await;
    assert_eq!(
        instances(&store, "web").await.len(),
        5,
        "created exactly once"
    );

    // Stop the leader: the other takes over and keeps creating exactly once.
    let leader = store
        .get(&Key::new("toy/leader").unwrap())
        .await
        .unwrap()
        .unwrap();
    let (leader_run, follower_run) = if leader.value == "a" { (a, b) } else { (b, a) };
    stop(leader_run).await;
    set_desired(&store, "web", 8).await;
    converge(&store, "web", 8).await;
    idle(Duration::from_secs(2)).await;
    assert_eq!(instances(&store, "web").await.len(), 8);
    let new_leader = store
        .get(&Key::new("toy/leader").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_ne!(new_leader.value, leader.value);
    stop(follower_run).await;
}

#[tokio::test(flavor = "current_thread")]
async fn a_deposed_leader_that_wakes_up_late_cannot_commit() {
    let clock = ManualClock::new();
    let store = MemoryStore::with_config(MemoryConfig::default().clock(Arc::new(clock.clone())));
    let mut old = election(&store, "old").campaign().await.unwrap();
    // The old leader stalls (its keep-alive task gets no chance to run on this thread) past its
    // lease, which expires; a new leader is elected.
    clock.advance(Duration::from_secs(4));
    store.expire_leases();
    let new = election(&store, "new").campaign().await.unwrap();
    assert_ne!(old.fences(), new.fences());

    // The old leader resumes and tries to commit: the fence rejects it and nothing is written.
    let key = Key::new("toy/instance/web/late").unwrap();
    let mut late = Txn::new().then(Op::put(key.clone(), "web"));
    late.compares.extend(old.fences().iter().cloned());
    let response = store.txn(late).await.unwrap();
    assert!(
        !response.succeeded,
        "the deposed leader's commit is rejected"
    );
    assert!(store.get(&key).await.unwrap().is_none());
    tokio::time::timeout(Duration::from_secs(5), old.lost())
        .await
        .expect("the old leader learns that it lost");

    let mut current = Txn::new().then(Op::put(key.clone(), "web"));
    current.compares.extend(new.fences().iter().cloned());
    assert!(
        store.txn(current).await.unwrap().succeeded,
        "the new leader commits"
    );
}
