//! The node agent with real processes: it starts what is placed, restarts what crashes, keeps
//! workloads running while the store is unreachable, adopts them after its own restart,
//! reports probe results, and keeps a persistent volume's data for the next instance (through a
//! kill and an agent restart) while deleting the data of other volumes with their instance.

use std::sync::Arc;
use std::time::Duration;

use ccattler_core::FactStore;
use ccattler_core::schema::{
    self, Assignment, DesiredState, Expose, Health, InstanceObservation, ObservedState, Probe,
    ProbeCheck, ServiceSpec, VolumeMount, VolumeSpec,
};
use ccattler_runtime::agent::{AgentConfig, NodeAgent};
use ccattler_runtime::process::ProcessRuntime;
use ccattler_store::MemoryStore;
use ccattler_testkit::faulty::FaultyStore;
use futures_util::StreamExt;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

const NODE: &str = "n1";

struct Node {
    store: FaultyStore<MemoryStore>,
    dir: tempfile::TempDir,
    agent: Option<(oneshot::Sender<()>, JoinHandle<()>)>,
    runtime: Option<Arc<ProcessRuntime>>,
}

impl Node {
    fn new() -> Self {
        Node {
            store: FaultyStore::new(MemoryStore::new()),
            dir: tempfile::tempdir().expect("temp dir"),
            agent: None,
            runtime: None,
        }
    }

    /// Starts an agent (and a runtime object) over the same directories as any before it.
    fn start(&mut self) {
        self.start_with(|config| config);
    }

    /// [`start`](Self::start), with the agent's config changed by `change`.
    fn start_with(&mut self, change: impl FnOnce(AgentConfig) -> AgentConfig) {
        let runtime =
            Arc::new(ProcessRuntime::new(self.dir.path().join("runtime")).expect("runtime"));
        let config = change(
            AgentConfig::new(NODE, self.dir.path().join("agent"))
                .sync_interval(Duration::from_millis(50))
                .lease_ttl(Duration::from_secs(3))
                .stop_grace(Duration::from_millis(500))
                .max_backoff(Duration::from_millis(200)),
        );
        let agent = NodeAgent::new(self.store.clone(), runtime.clone(), config).expect("agent");
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            agent
                .run(async {
                    let _ = stopped.await;
                })
                .await
                .expect("the agent runs until told to stop");
        });
        self.agent = Some((stop, task));
        self.runtime = Some(runtime);
    }

    async fn stop(&mut self) {
        if let Some((stop, task)) = self.agent.take() {
            let _ = stop.send(());
            task.await.expect("agent task");
        }
    }

    fn runtime(&self) -> &ProcessRuntime {
        self.runtime.as_deref().expect("started")
    }

    /// Declares a service and places one instance of it on the node.
    async fn place(&self, id: &str, spec: &ServiceSpec, state: DesiredState) {
        self.place_with(id, spec, state, Vec::new()).await;
    }

    /// [`place`](Self::place), with the volumes its placement carries.
    async fn place_with(
        &self,
        id: &str,
        spec: &ServiceSpec,
        state: DesiredState,
        volumes: Vec<VolumeSpec>,
    ) {
        let store = self.store.inner();
        store
            .put(
                &schema::keys::service(&spec.name).expect("key"),
                schema::encode(spec),
            )
            .await
            .expect("put spec");
        let assignment = Assignment {
            instance: id.into(),
            service: spec.name.clone(),
            node: NODE.into(),
            version: spec.version(),
            state,
            ports: Vec::new(),
            volumes,
        };
        store
            .put(
                &schema::keys::placement(NODE, id).expect("key"),
                schema::encode(&assignment),
            )
            .await
            .expect("put placement");
    }

    /// Takes instance `id`'s placement away: the agent stops and removes it.
    async fn unplace(&self, id: &str) {
        let key = schema::keys::placement(NODE, id).expect("key");
        self.store
            .inner()
            .delete(&key)
            .await
            .expect("delete placement");
    }

    /// Waits (real time, at most 20 s) until instance `id` is removed: its report deleted
    /// and the runtime holding nothing of it.
    async fn wait_for_gone(&self, id: &str) {
        for _ in 0..400 {
            let listed = self.runtime().pid(id).is_some();
            if self.observation(id).await.is_none() && !listed {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("{id} was never removed: {:?}", self.observation(id).await);
    }

    /// Places `sleep 1000` as instance `id` of a service named `service`, waits until it runs,
    /// and returns its pid.
    async fn run_sleeper(&self, id: &str, service_name: &str) -> u32 {
        self.place(
            id,
            &service(service_name, &["sleep", "1000"]),
            DesiredState::Running,
        )
        .await;
        self.wait_for(id, "running", running).await;
        self.runtime().pid(id).expect("a pid")
    }

    async fn observation(&self, id: &str) -> Option<InstanceObservation> {
        let key = schema::keys::observed_instance(NODE, id).expect("key");
        let fact = self.store.inner().get(&key).await.expect("get")?;
        schema::decode(&fact).ok()
    }

    /// Waits (real time, at most 20 s) until the instance's observation satisfies `check`.
    /// Every write of the observation is looked at, through a watch, so that a state the agent
    /// reports for one pass only (such as unhealthy, just before a restart) is not missed.
    async fn wait_for(
        &self,
        id: &str,
        what: &str,
        check: impl Fn(&InstanceObservation) -> bool,
    ) -> InstanceObservation {
        let store = self.store.inner();
        let key = schema::keys::observed_instance(NODE, id).expect("key");
        let from = store.revision().await.expect("revision").next();
        let mut watch = store.watch(key.as_str(), from).await.expect("watch");
        if let Some(o) = self.observation(id).await
            && check(&o)
        {
            return o;
        }
        let seen = tokio::time::timeout(Duration::from_secs(20), async {
            while let Some(event) = watch.next().await {
                let event = event.expect("the watch delivers");
                if event.key() == &key
                    && let Ok(o) = schema::decode::<InstanceObservation>(&event.fact)
                    && check(&o)
                {
                    return Some(o);
                }
            }
            None
        })
        .await;
        match seen {
            Ok(Some(o)) => o,
            _ => panic!(
                "{id} never became {what}: last observation {:?}",
                self.observation(id).await
            ),
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        // No process outlives the test.
        if let Some(runtime) = &self.runtime {
            let ids: Vec<String> = ["sleeper", "web", "sick", "crashy", "db-a", "db-b", "db-c"]
                .into_iter()
                .map(String::from)
                .collect();
            for id in ids {
                if let Some(pid) = runtime.pid(&id) {
                    let _ = nix::sys::signal::killpg(
                        nix::unistd::Pid::from_raw(pid as i32),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
            }
        }
    }
}

fn service(name: &str, command: &[&str]) -> ServiceSpec {
    ServiceSpec {
        name: name.into(),
        image: "none".into(),
        command: command.iter().map(|s| (*s).to_owned()).collect(),
        instances: 1,
        ..ServiceSpec::default()
    }
}

fn running(o: &InstanceObservation) -> bool {
    o.state == ObservedState::Running
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_what_is_placed_and_reports_it() {
    let mut node = Node::new();
    node.start();
    node.place(
        "sleeper",
        &service("sleep", &["sleep", "1000"]),
        DesiredState::Running,
    )
    .await;
    let mut web = service(
        "web",
        &["python3", "-m", "http.server", "--bind", "127.0.0.1"],
    );
    web.command = vec![
        "sh".into(),
        "-c".into(),
        "exec python3 -m http.server --bind 127.0.0.1 $PORT".into(),
    ];
    web.expose = vec![Expose {
        port: 8080,
        protocol: Default::default(),
        external: false,
        fixed: false,
    }];
    let mut readiness = Probe::new(ProbeCheck::Http { path: "/".into() });
    readiness.every = Duration::from_millis(200);
    readiness.timeout = Duration::from_secs(1);
    web.readiness = Some(readiness);
    node.place("web", &web, DesiredState::Running).await;

    node.wait_for("sleeper", "running", running).await;
    let web_seen = node
        .wait_for("web", "running and ready", |o| running(o) && o.ready)
        .await;
    assert!(
        web_seen
            .address
            .as_deref()
            .is_some_and(|a| a.starts_with("127.0.0.1:"))
    );
    let node_status = node
        .store
        .inner()
        .get(&schema::keys::node(NODE).expect("key"))
        .await
        .expect("get");
    assert!(node_status.is_some(), "the node registered its status");

    // Asked to stop: it stops, and the observation says so.
    node.place(
        "sleeper",
        &service("sleep", &["sleep", "1000"]),
        DesiredState::Stopped,
    )
    .await;
    node.wait_for("sleeper", "stopped", |o| o.state == ObservedState::Stopped)
        .await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_workload_is_restarted_per_policy_and_reported() {
    let mut node = Node::new();
    node.start();
    let pid = node.run_sleeper("crashy", "crashy").await;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill -9");
    let seen = node
        .wait_for("crashy", "restarted", |o| running(o) && o.restarts >= 1)
        .await;
    assert_eq!(seen.restarts, 1);
    assert_ne!(node.runtime().pid("crashy"), Some(pid), "a new process");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workloads_keep_running_while_the_store_is_unreachable() {
    let mut node = Node::new();
    node.start();
    let pid = node.run_sleeper("sleeper", "sleep").await;

    node.store.partition();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        node.runtime().pid("sleeper"),
        Some(pid),
        "still the same process"
    );
    assert!(
        std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "still alive"
    );

    // The agent restarts too, while the store is still down: it adopts, restarts nothing.
    node.stop().await;
    node.start();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        node.runtime().pid("sleeper"),
        Some(pid),
        "adopted, not restarted"
    );

    node.store.heal();
    let seen = node.wait_for("sleeper", "reported again", running).await;
    assert_eq!(seen.restarts, 0);
    assert_eq!(node.runtime().pid("sleeper"), Some(pid));
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_agent_adopts_the_same_processes() {
    let mut node = Node::new();
    node.start();
    let pid = node.run_sleeper("sleeper", "sleep").await;
    node.stop().await;
    node.start();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        node.runtime().pid("sleeper"),
        Some(pid),
        "the same pid keeps running"
    );
    let seen = node.wait_for("sleeper", "running", running).await;
    assert_eq!(seen.restarts, 0, "nothing was restarted");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_probe_is_reported_unhealthy() {
    let mut node = Node::new();
    node.start();
    let mut sick = service("sick", &["sleep", "1000"]);
    sick.restart = schema::RestartPolicy::Never;
    let mut liveness = Probe::new(ProbeCheck::Exec {
        command: "exit 3".into(),
    });
    liveness.every = Duration::from_millis(100);
    liveness.failure_threshold = 2;
    sick.liveness = Some(liveness);
    node.place("sick", &sick, DesiredState::Running).await;
    node.wait_for("sick", "unhealthy", |o| {
        running(o) && o.health == Health::Unhealthy
    })
    .await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_does_not_exist_is_a_reported_failure() {
    let mut node = Node::new();
    node.start();
    node.place(
        "ghost",
        &service("ghost", &["/no/such/program"]),
        DesiredState::Running,
    )
    .await;
    let seen = node
        .wait_for("ghost", "failed", |o| o.state == ObservedState::Failed)
        .await;
    assert!(
        seen.reason
            .as_deref()
            .is_some_and(|r| r.contains("/no/such/program")),
        "{seen:?}"
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_steps_run_in_order_before_the_main_process() {
    let mut node = Node::new();
    node.start();
    let mut spec = service("prepared", &["sleep", "1000"]);
    spec.volumes = vec![schema::VolumeMount {
        volume: "data".into(),
        path: "/data".into(),
    }];
    spec.init = vec![
        schema::InitStep::new("echo one >> data/order"),
        schema::InitStep::new("echo two >> data/order"),
    ];
    node.place("prepared", &spec, DesiredState::Running).await;
    let seen = node.wait_for("prepared", "running", running).await;
    assert_eq!(seen.init_done, 2);
    let order =
        std::fs::read_to_string(node.dir.path().join("agent/volumes/persistent/data/order"))
            .expect("written by the init steps");
    assert_eq!(order, "one\ntwo\n");

    // A failing step is tried again in place, with what it printed in the report; the
    // instance is starting, never failed (which would have it replaced).
    let mut broken = service("broken", &["sleep", "1000"]);
    broken.init = vec![schema::InitStep::new(
        "echo migrating; echo 'cannot reach the database' >&2; exit 7",
    )];
    node.place("broken", &broken, DesiredState::Running).await;
    let seen = node
        .wait_for("broken", "failed twice in its init step", |o| {
            o.init_failures >= 2 && o.init_output.is_some()
        })
        .await;
    assert_eq!(seen.state, ObservedState::Starting, "{seen:?}");
    assert!(
        seen.reason
            .as_deref()
            .is_some_and(|r| r.starts_with("init step 1 of 1 exited with 7")),
        "{seen:?}"
    );
    let output = seen.init_output.as_deref().unwrap_or_default();
    assert!(
        output.contains("migrating") && output.contains("cannot reach the database"),
        "{output}"
    );
    assert!(
        node.runtime().pid("broken").is_none(),
        "the main process never started"
    );
    node.runtime().kill_all();
    node.stop().await;
}

/// An agent whose cache is not persisted writes nothing where the cache would go, and still
/// runs what is placed; one whose cache is persisted has it on disk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_without_a_persisted_cache_writes_no_file() {
    let mut node = Node::new();
    node.start_with(|config| config.persist_cache(false));
    node.run_sleeper("sleeper", "sleep").await;
    node.stop().await;
    assert!(!node.dir.path().join("agent").exists());

    node.start();
    node.wait_for("sleeper", "running", running).await;
    node.stop().await;
    assert!(node.dir.path().join("agent/desired.json").exists());
}

/// A service whose instances append their id to `data/log` (on the volume mounted at
/// `/data`), copy what they found to `data/seen-by-{id}`, then sleep.
fn writer(volume: &str) -> ServiceSpec {
    let mut spec = service(
        "db",
        &[
            "sh",
            "-c",
            "touch data/log; cp data/log data/seen-by-$CCATTLER_INSTANCE; \
             echo $CCATTLER_INSTANCE >> data/log; exec sleep 1000",
        ],
    );
    spec.volumes = vec![VolumeMount {
        volume: volume.into(),
        path: "/data".into(),
    }];
    spec
}

fn data_volume(persistent: bool) -> VolumeSpec {
    VolumeSpec {
        name: "data".into(),
        size: "1Gi".parse().expect("size"),
        persistent,
    }
}

/// Waits (at most 10 s) until `path` holds `text`.
async fn wait_for_file(path: &std::path::Path, text: &str) {
    for _ in 0..200 {
        if std::fs::read_to_string(path).is_ok_and(|t| t == text) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "{} never held {text:?}: {:?}",
        path.display(),
        std::fs::read_to_string(path)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persistent_volume_keeps_its_data_through_a_kill_a_replacement_and_an_agent_restart() {
    let mut node = Node::new();
    node.start();
    let spec = writer("data");
    let volume = node.dir.path().join("agent/volumes/persistent/data");
    node.place_with(
        "db-a",
        &spec,
        DesiredState::Running,
        vec![data_volume(true)],
    )
    .await;
    node.wait_for("db-a", "running", running).await;
    wait_for_file(&volume.join("log"), "db-a\n").await;

    // Killed, and started again in place: it finds what it wrote.
    let pid = node.runtime().pid("db-a").expect("a pid");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill -9");
    node.wait_for("db-a", "restarted", |o| running(o) && o.restarts >= 1)
        .await;
    wait_for_file(&volume.join("log"), "db-a\ndb-a\n").await;

    // Replaced by another instance: the replacement reads the data back.
    node.unplace("db-a").await;
    node.wait_for_gone("db-a").await;
    node.place_with(
        "db-b",
        &spec,
        DesiredState::Running,
        vec![data_volume(true)],
    )
    .await;
    node.wait_for("db-b", "running", running).await;
    wait_for_file(&volume.join("seen-by-db-b"), "db-a\ndb-a\n").await;

    // The agent restarts between two instances: the data is still there for the third.
    node.unplace("db-b").await;
    node.wait_for_gone("db-b").await;
    node.stop().await;
    node.start();
    node.place_with(
        "db-c",
        &spec,
        DesiredState::Running,
        vec![data_volume(true)],
    )
    .await;
    node.wait_for("db-c", "running", running).await;
    wait_for_file(&volume.join("seen-by-db-c"), "db-a\ndb-a\ndb-b\n").await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_volume_that_is_not_persistent_is_deleted_with_its_instance() {
    let mut node = Node::new();
    node.start();
    let spec = writer("data");
    let data = node.dir.path().join("agent/volumes/instance/db-a/data");
    node.place_with(
        "db-a",
        &spec,
        DesiredState::Running,
        vec![data_volume(false)],
    )
    .await;
    node.wait_for("db-a", "running", running).await;
    wait_for_file(&data.join("log"), "db-a\n").await;
    assert!(!node.dir.path().join("agent/volumes/persistent").exists());

    node.unplace("db-a").await;
    node.wait_for_gone("db-a").await;
    for _ in 0..100 {
        if !data.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        !node.dir.path().join("agent/volumes/instance/db-a").exists(),
        "the instance's data goes with it"
    );
    node.stop().await;
}
