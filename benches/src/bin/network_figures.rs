//! Prints the network figures that need real time or a real kernel:
//!
//! 1. **Endpoint after readiness**: the standard controllers on the tokio runner over a
//!    `MemoryStore`; a service scaled up one instance at a time; as soon as the new instance
//!    is placed, its ready report is written as its agent would, and the time until its entry
//!    is in `endpoint/service/` is measured.
//! 2. **`nft -f`**: one node's table applied by `Nftables` in a network namespace of its own,
//!    for the busiest node of 1,000 services x 10 endpoints on 1,000 nodes (every service
//!    guarded, called by two others), and for one node holding 10,000 guarded ports.
//! 3. **One endpoint change**: the network controller on the runner and a `FirewallKeeper`
//!    (with `Nftables` in the namespace) over that cluster; a caller instance moves to another
//!    node, and the time until the guarded node's report names the new rule set (derived,
//!    committed, watched, applied by `nft`, reported) is measured.
//!
//! `cargo run --release -p ccattler-benches --bin network_figures [-- RUNS]` (default 20 runs
//! each; medians printed). Parts 2 and 3 need root, `ip` and `nft`, and are skipped (saying so)
//! without them.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use ccattler_benches::policy::{self, TARGET};
use ccattler_controllers::standard::{self, NetworkController, NetworkInputs};
use ccattler_core::runner::TokioRunner;
use ccattler_core::schema::{
    self, Cpu, Endpoints, Expose, Health, InstanceObservation, Memory, NetworkReport, NodeRules,
    NodeStatus, ObservedState, PortGuard, Protocol, Resources, ServiceSpec, keys,
};
use ccattler_core::{FactStore, Runner};
use ccattler_runtime::firewall::{Firewall, FirewallKeeper, Nftables};
use ccattler_store::MemoryStore;

type Error = Box<dyn std::error::Error>;

fn main() -> Result<(), Error> {
    let runs: usize = match std::env::args().nth(1) {
        Some(runs) => runs.parse()?,
        None => 20,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let ready = runtime.block_on(endpoint_after_readiness(runs))?;
    println!(
        "endpoint in the store after the ready report: median {:.1} ms over {runs} instances",
        median_ms(ready)
    );
    let Some(namespace) = Namespace::new()? else {
        println!("nft figures skipped: they need root, `ip` and `nft`");
        return Ok(());
    };
    let nft = Nftables::new("bench").program(&namespace.nft);
    let mut inputs = NetworkInputs::default();
    for fact in policy::facts(TARGET) {
        inputs.apply(&fact.key, Some(&fact));
    }
    let busiest = inputs
        .rules()
        .into_values()
        .max_by_key(|rules| rules.guards.len())
        .ok_or("no node has rules")?;
    let times = runtime.block_on(apply_times(&nft, &busiest, runs))?;
    println!(
        "nft -f, busiest node ({} guarded ports): median {:.1} ms over {runs} runs",
        busiest.guards.len(),
        median_ms(times)
    );
    let crowded = crowded_node();
    let times = runtime.block_on(apply_times(&nft, &crowded, runs.min(5)))?;
    println!(
        "nft -f, one node with {} guarded ports: median {:.1} ms over {} runs",
        crowded.guards.len(),
        median_ms(times),
        runs.min(5)
    );
    let changes = runtime.block_on(one_endpoint_change(&namespace, runs))?;
    println!(
        "one endpoint change, derived to applied by nft and reported: median {:.1} ms over {runs} changes",
        median_ms(changes)
    );
    Ok(())
}

fn median_ms(mut times: Vec<Duration>) -> f64 {
    times.sort();
    times[times.len() / 2].as_secs_f64() * 1e3
}

/// A service scaled up `runs` times by one instance; each new instance is reported ready as
/// soon as it is placed. Returns the time from each report to its endpoint.
async fn endpoint_after_readiness(runs: usize) -> Result<Vec<Duration>, Error> {
    let store = MemoryStore::new();
    let lease = store.grant_lease(Duration::from_secs(3600)).await?;
    store
        .put_with_lease(&keys::node_lease("n1")?, "n1".into(), lease.id)
        .await?;
    let status = NodeStatus {
        name: "n1".into(),
        cpu: Cpu::from_millis(64_000),
        memory: Memory::from_bytes(256 << 30),
        architecture: "amd64".into(),
        address: "10.0.0.1".into(),
        ..NodeStatus::default()
    };
    store
        .put(&keys::node("n1")?, schema::encode(&status))
        .await?;
    let mut runner = TokioRunner::new(store.clone());
    for controller in standard::all() {
        runner = runner.controller_arc(controller);
    }
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(runner.run(async {
        let _ = stopped.await;
    }));
    let mut times = Vec::new();
    for count in 1..=runs {
        let spec = ServiceSpec {
            name: "web".into(),
            image: "busybox".into(),
            instances: u32::try_from(count)?,
            expose: vec![Expose {
                port: 8080,
                protocol: Protocol::default(),
                external: false,
                fixed: false,
            }],
            resources: Resources {
                cpu: Cpu::from_millis(100),
                memory: Memory::from_bytes(32 << 20),
            },
            ..ServiceSpec::default()
        };
        store
            .put(&keys::service("web")?, schema::encode(&spec))
            .await?;
        let (id, port) = wait(|| async {
            let placed = store.scan(&keys::node_placements("n1")?).await?;
            let reported = store.scan(&keys::node_observations("n1")?).await?;
            Ok(placed.facts.iter().find_map(|fact| {
                let assignment: schema::Assignment = schema::decode(fact).ok()?;
                let id = assignment.instance;
                let fresh = !reported.facts.iter().any(|r| r.key.as_str().ends_with(&id));
                let port = assignment.ports.first()?.host;
                fresh.then_some((id, port))
            }))
        })
        .await?;
        let report = InstanceObservation {
            node: "n1".into(),
            service: "web".into(),
            state: ObservedState::Running,
            address: Some(format!("10.0.0.1:{port}")),
            health: Health::Healthy,
            ready: true,
            lease: Some(lease.id.0),
            ..InstanceObservation::default()
        };
        let started = Instant::now();
        store
            .put(
                &keys::observed_instance("n1", &id)?,
                schema::encode(&report),
            )
            .await?;
        wait(|| async {
            let Some(fact) = store.get(&keys::endpoints("web")?).await? else {
                return Ok(None);
            };
            let endpoints: Endpoints = schema::decode(&fact)?;
            Ok(endpoints
                .endpoints
                .iter()
                .any(|e| e.instance == id)
                .then_some(()))
        })
        .await?;
        times.push(started.elapsed());
    }
    let _ = stop.send(());
    running.await??;
    Ok(times)
}

/// Polls `check` every 100 us until it gives a value (at most 30 s).
async fn wait<T, F, Fut>(mut check: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>, Error>>,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(value) = check().await? {
            return Ok(value);
        }
        if Instant::now() > deadline {
            return Err("waited 30 s".into());
        }
        tokio::time::sleep(Duration::from_micros(100)).await;
    }
}

/// How long `nft -f` takes to replace the table by `rules`, `runs` times.
async fn apply_times(
    nft: &Nftables,
    rules: &NodeRules,
    runs: usize,
) -> Result<Vec<Duration>, Error> {
    let mut times = Vec::new();
    for _ in 0..runs {
        let started = Instant::now();
        nft.apply(rules).await?;
        times.push(started.elapsed());
    }
    nft.remove().await?;
    Ok(times)
}

/// One node holding 10,000 guarded ports (20000-29999), each letting three addresses through.
fn crowded_node() -> NodeRules {
    let mut rules = NodeRules::default();
    for i in 0..10_000u16 {
        let set = (0..3)
            .map(|k| format!("10.{}.{}.{}", k, i >> 8, i & 255))
            .collect();
        rules.sets.push(set);
        rules.guards.push(PortGuard {
            port: 20_000 + i,
            instance: format!("svc-{i}-0"),
            service: format!("svc-{i}"),
            declared: policy::DECLARED,
            allow: usize::from(i),
        });
    }
    rules
}

/// The network controller and one node's firewall keeper over the target cluster; a caller
/// of a service guarded on that node moves back and forth between two nodes, `runs` times.
async fn one_endpoint_change(namespace: &Namespace, runs: usize) -> Result<Vec<Duration>, Error> {
    let store = MemoryStore::new();
    for fact in policy::facts(TARGET) {
        store.put(&fact.key, fact.value).await?;
    }
    let runner = TokioRunner::new(store.clone()).controller(NetworkController::new());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(runner.run(async {
        let _ = stopped.await;
    }));
    // Service 1's instance 0 is on node 1 (placed round-robin); it may call service 0, whose
    // instance 0 is on node 0: node 0's rules follow it.
    let node = policy::node(0);
    let nft = Nftables::new(&node).program(&namespace.nft);
    let keeper = FirewallKeeper::new(store.clone(), &node, nft)?;
    let (stop_keeper, keeper_stopped) = tokio::sync::oneshot::channel::<()>();
    let keeping = tokio::spawn(keeper.run(async {
        let _ = keeper_stopped.await;
    }));
    let rules_key = keys::node_rules(&node)?;
    let report_key = keys::network_report(&node)?;
    let applied = |revision: u64| {
        let store = store.clone();
        let report_key = report_key.clone();
        async move {
            wait(|| async {
                let Some(fact) = store.get(&report_key).await? else {
                    return Ok(None);
                };
                let report: NetworkReport = schema::decode(&fact)?;
                Ok((report.revision >= revision).then_some(()))
            })
            .await
        }
    };
    let first = wait(|| async { Ok(store.get(&rules_key).await?) }).await?;
    applied(first.mod_revision.0).await?;
    let mut times = Vec::new();
    for run in 0..runs {
        let (from, to) = if run % 2 == 0 { (1, 500) } else { (500, 1) };
        let before = store.get(&rules_key).await?.ok_or("node 0 has no rules")?;
        let (old, _) = policy::placement(1, 0, &policy::node(from), 0);
        let (new, value) = policy::placement(1, 0, &policy::node(to), 20_999);
        let started = Instant::now();
        store.delete(&old).await?;
        store.put(&new, value).await?;
        let changed = wait(|| async {
            let fact = store.get(&rules_key).await?;
            Ok(fact.filter(|f| f.mod_revision > before.mod_revision))
        })
        .await?;
        applied(changed.mod_revision.0).await?;
        times.push(started.elapsed());
    }
    let _ = stop_keeper.send(());
    keeping.await?;
    let _ = stop.send(());
    running.await??;
    Ok(times)
}

/// A network namespace of this program's own, and an `nft` that runs in it.
struct Namespace {
    name: String,
    nft: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Namespace {
    /// `None` when this machine cannot make one or has no `nft`.
    fn new() -> Result<Option<Namespace>, Error> {
        let name = format!("cca-bench-{}", std::process::id());
        let made = Command::new("ip")
            .args(["netns", "add", &name])
            .output()
            .is_ok_and(|o| o.status.success());
        let has_nft = Command::new("nft").arg("--version").output().is_ok();
        if !made || !has_nft {
            return Ok(None);
        }
        let dir = tempfile::tempdir()?;
        let nft = dir.path().join("nft");
        write_script(&nft, &name)?;
        Ok(Some(Namespace {
            name,
            nft,
            _dir: dir,
        }))
    }
}

fn write_script(path: &Path, namespace: &str) -> Result<(), Error> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(
        path,
        format!("#!/bin/sh\nexec ip netns exec {namespace} nft \"$@\"\n"),
    )?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))?;
    Ok(())
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}
