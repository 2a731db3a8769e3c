//! The object-safe forms behave as the backends they box: the store conformance suite through
//! `Arc<dyn DynFactStore>` over MemoryStore, the runtime conformance suite through
//! `Arc<dyn DynRuntime>` over SimulatorRuntime, the provided methods (`limits`,
//! `network_probe`) forwarded, and a node agent running on both dyn forms.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ccattler_core::schema::{self, Assignment, DesiredState, ServiceSpec};
use ccattler_core::{
    DynFactStore, DynRuntime, ExecOutput, FactStore, InstanceSpec, InstanceState, InstanceStats,
    ManualClock, ObservedInstance, Runtime, RuntimeError, StoreLimits,
};
use ccattler_runtime::agent::{AgentConfig, NodeAgent};
use ccattler_runtime::simulator::SimulatorRuntime;
use ccattler_store::{MemoryConfig, MemoryStore};
use ccattler_testkit::conformance::{StoreHarness, run_store_conformance};
use ccattler_testkit::runtime_conformance::{SimulatorHarness, run_runtime_conformance};

/// A new MemoryStore per check, handed out as `Arc<dyn DynFactStore>`; the harness keeps the
/// concrete store to reap its leases when time passes.
#[derive(Debug, Default)]
struct DynMemoryHarness {
    clock: ManualClock,
    current: Mutex<Option<MemoryStore>>,
}

impl StoreHarness for DynMemoryHarness {
    type Store = Arc<dyn DynFactStore>;

    async fn fresh(&self) -> Arc<dyn DynFactStore> {
        let store =
            MemoryStore::with_config(MemoryConfig::default().clock(Arc::new(self.clock.clone())));
        *self.current.lock().expect("harness lock poisoned") = Some(store.clone());
        Arc::new(store)
    }

    async fn advance(&self, d: Duration) {
        self.clock.advance(d);
        let current = self.current.lock().expect("harness lock poisoned").clone();
        if let Some(store) = current {
            store.expire_leases();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dyn_memory_store_conforms() {
    run_store_conformance(&DynMemoryHarness::default()).await;
}

#[tokio::test]
async fn dyn_simulator_conforms() {
    let harness = SimulatorHarness::wrapping(|sim| Arc::new(sim) as Arc<dyn DynRuntime>);
    run_runtime_conformance(&harness).await;
}

#[test]
fn limits_are_forwarded() {
    let limits = StoreLimits {
        max_txn_ops: 7,
        ..StoreLimits::default()
    };
    let store: Arc<dyn DynFactStore> = Arc::new(MemoryStore::with_config(
        MemoryConfig::default().limits(limits),
    ));
    assert_eq!(store.limits(), limits);
    assert_ne!(
        StoreLimits::default().max_txn_ops,
        7,
        "the test needs a non-default limit"
    );
}

/// A runtime that keeps the default `network_probe` (it answers `None`), forwarding the rest to
/// a simulator.
struct DefaultProbe(SimulatorRuntime);

impl Runtime for DefaultProbe {
    async fn ensure_running(&self, spec: &InstanceSpec) -> Result<(), RuntimeError> {
        self.0.ensure_running(spec).await
    }

    async fn ensure_stopped(&self, id: &str, grace: Duration) -> Result<(), RuntimeError> {
        self.0.ensure_stopped(id, grace).await
    }

    async fn remove(&self, id: &str) -> Result<(), RuntimeError> {
        self.0.remove(id).await
    }

    async fn observe(&self) -> Result<Vec<ObservedInstance>, RuntimeError> {
        self.0.observe().await
    }

    async fn stats(&self, id: &str) -> Result<InstanceStats, RuntimeError> {
        self.0.stats(id).await
    }

    async fn logs(&self, id: &str, lines: usize) -> Result<String, RuntimeError> {
        self.0.logs(id, lines).await
    }

    async fn exec(
        &self,
        id: &str,
        command: &[String],
        timeout: Duration,
    ) -> Result<ExecOutput, RuntimeError> {
        self.0.exec(id, command, timeout).await
    }
}

#[tokio::test]
async fn network_probe_is_forwarded_both_ways() {
    let sim = SimulatorRuntime::new();
    let spec = InstanceSpec::new("web-1", "sim").command(["sleep", "1000"]);
    sim.ensure_running(&spec).await.expect("start");
    let answering: Arc<dyn DynRuntime> = Arc::new(sim.clone());
    assert_eq!(answering.network_probe("web-1").await, Some(Ok(())));
    sim.faults().fail_probes("web-1");
    let direct = sim.network_probe("web-1").await;
    assert!(
        matches!(direct, Some(Err(_))),
        "the simulator fails the probe: {direct:?}"
    );
    assert_eq!(answering.network_probe("web-1").await, direct);

    let silent: Arc<dyn DynRuntime> = Arc::new(DefaultProbe(SimulatorRuntime::new()));
    assert_eq!(silent.network_probe("web-1").await, None);
}

#[test]
fn debug_names_the_backend() {
    let store: Arc<dyn DynFactStore> = Arc::new(MemoryStore::new());
    let runtime: Arc<dyn DynRuntime> = Arc::new(SimulatorRuntime::new());
    let (store, runtime) = (format!("{store:?}"), format!("{runtime:?}"));
    assert!(store.contains("MemoryStore"), "{store}");
    assert!(runtime.contains("SimulatorRuntime"), "{runtime}");
}

/// A node agent generic over `S: FactStore` and `R: Runtime` runs on the dyn forms unchanged:
/// it starts what is placed on its node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_agent_runs_on_dyn_forms() {
    let sim = SimulatorRuntime::new();
    let store: Arc<dyn DynFactStore> = Arc::new(MemoryStore::new());
    let runtime: Arc<dyn DynRuntime> = Arc::new(sim.clone());
    let dir = tempfile::tempdir().expect("temp dir");
    let config = AgentConfig::new("n1", dir.path()).sync_interval(Duration::from_millis(20));
    let agent = NodeAgent::new(store.clone(), Arc::new(runtime), config).expect("agent");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(agent.run(async {
        let _ = stopped.await;
    }));

    let spec = ServiceSpec {
        name: "web".into(),
        image: "sim".into(),
        command: vec!["sleep".into(), "1000".into()],
        instances: 1,
        ..ServiceSpec::default()
    };
    let assignment = Assignment {
        instance: "web-1".into(),
        service: spec.name.clone(),
        node: "n1".into(),
        version: spec.version(),
        state: DesiredState::Running,
        ports: Vec::new(),
        volumes: Vec::new(),
    };
    let service_key = schema::keys::service(&spec.name).expect("key");
    store
        .put(&service_key, schema::encode(&spec))
        .await
        .expect("put spec");
    let placement_key = schema::keys::placement("n1", "web-1").expect("key");
    store
        .put(&placement_key, schema::encode(&assignment))
        .await
        .expect("put placement");

    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while sim.state("web-1") != Some(InstanceState::Running) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the agent never started web-1: {:?}",
            sim.state("web-1")
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _ = stop.send(());
    task.await.expect("agent task").expect("agent run");
}
