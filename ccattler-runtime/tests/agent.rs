//! The node agent with real processes: it starts what is placed, restarts what crashes, keeps
//! workloads running while the store is unreachable, adopts them after its own restart, and
//! reports probe results.

use std::sync::Arc;
use std::time::Duration;

use ccattler_core::FactStore;
use ccattler_core::schema::{
    self, Assignment, DesiredState, Expose, Health, InstanceObservation, ObservedState, Probe,
    ProbeCheck, ServiceSpec,
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
        };
        store
            .put(
                &schema::keys::placement(NODE, id).expect("key"),
                schema::encode(&assignment),
            )
            .await
            .expect("put placement");
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
            let ids: Vec<String> = ["sleeper", "web", "sick", "crashy"]
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
    let order = std::fs::read_to_string(node.dir.path().join("agent/volumes/data/order"))
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
