//! One run, start to end: servers, the flood of agents, the apply, the figures, the ceiling.
//! The run is observed straight from etcd (an `EtcdStore` on the run's prefix), so that
//! watching it costs the servers nothing.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ccattler_core::{EventKind, FactStore, Revision};
use ccattler_store::etcd::server::EtcdCluster;
use ccattler_store::etcd::{EtcdConfig, EtcdStore};
use futures_util::StreamExt;
use hyper::Method;
use serde_json::Value as Json;

use super::ceiling;
use super::cluster::{self, AgentProcess, Servers};
use super::probe::{self, EtcdStatus};

pub(crate) use ccattler_benches::kept::Figures;

/// After every instance runs, how long the cluster settles before the steady window.
const STEADY_SETTLE: Duration = Duration::from_secs(10);
/// How long the steady state is measured.
const STEADY_WINDOW: Duration = Duration::from_secs(20);

/// Every figure, in the order printed (see the program's docs).
pub(crate) const FIGURES: [&str; 28] = [
    "enroll_s",
    "refusals",
    "register_s",
    "lost_registrations",
    "conns_per_agent",
    "watches_per_agent",
    "server_kb_per_agent",
    "running_s",
    "writes_s",
    "watch_events_s",
    "server_cpu_s",
    "etcd_cpu_s",
    "agents_cpu_s",
    "others_cpu_s",
    "steady_requests_s",
    "steady_writes_s",
    "steady_server_cores",
    "steady_etcd_cores",
    "lapses",
    "server_peak_mb",
    "etcd_db_mb",
    "etcd_db_in_use_mb",
    "agent_writes",
    "agent_writes_s",
    "ceiling_s",
    "ceiling_writes_s",
    "agents_ended_badly",
    "enroll_failures",
];

/// What to run.
#[derive(Clone, Debug)]
pub(crate) struct Config {
    /// etcd's client URL; ignored with `fresh_etcd`.
    pub(crate) etcd: String,
    /// Each run on an etcd of its own, started for it (one member on loopback ports, as
    /// `scripts/etcd-up` starts one) and removed after it: every run starts from an empty
    /// database.
    pub(crate) fresh_etcd: bool,
    pub(crate) cca: PathBuf,
    pub(crate) agents: usize,
    pub(crate) instances: usize,
    pub(crate) servers: usize,
    pub(crate) processes: usize,
    pub(crate) enroll_addresses: usize,
    pub(crate) ceiling_tasks: usize,
    pub(crate) timeout: Duration,
    /// Where each run keeps its servers' and agents' logs (a new directory each); in a
    /// temporary directory removed at the end when `None`.
    pub(crate) logs: Option<PathBuf>,
}

/// Every agent process's counters, now.
fn stats(children: &mut [AgentProcess]) -> Result<Vec<Json>, String> {
    children.iter_mut().map(AgentProcess::stats).collect()
}

/// Sums a counter over the agents' processes.
fn total(stats: &[Json], name: &str) -> f64 {
    stats.iter().filter_map(|s| s[name].as_f64()).sum()
}

/// Runs once; see the program's docs.
pub(crate) async fn measure(config: &Config) -> Result<Figures, String> {
    let mut figures = Figures::new();
    let temp = tempfile::tempdir().map_err(|err| err.to_string())?;
    let dir = match &config.logs {
        Some(logs) => {
            std::fs::create_dir_all(logs).map_err(|err| format!("{}: {err}", logs.display()))?;
            tempfile::Builder::new()
                .prefix("run-")
                .tempdir_in(logs)
                .map_err(|err| err.to_string())?
                .keep()
        }
        None => temp.path().to_owned(),
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let prefix = format!("etcd-figures-{nanos}/");
    let fresh = match config.fresh_etcd {
        true => Some(EtcdCluster::start(1).await?),
        false => None,
    };
    let url = match &fresh {
        Some(cluster) => cluster.endpoints().concat(),
        None => config.etcd.clone(),
    };
    let etcd = etcd_client::Client::connect([url.as_str()], None)
        .await
        .map_err(|err| format!("etcd at {url}: {err}"))?;
    let observer = EtcdStore::connect(EtcdConfig::new([url.clone()]).prefix(prefix.clone()))
        .await
        .map_err(|err| format!("etcd at {url}: {err}"))?;
    let servers = Servers::start(&config.cca, config.servers, &url, &prefix, dir.as_path())?;
    // The servers settle: a leader is elected, the controllers list the (empty) store.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let resident_before = servers.resident();
    let (connections_before, watches_before) = (servers.connections(), servers.watches().await);

    // The flood: every agent enrolls and registers at once.
    let tokens = cluster::enrollment_tokens(&servers.admin_client(), config.agents).await?;
    let mut shares = vec![String::new(); config.processes];
    for (i, token) in tokens.iter().enumerate() {
        let address = cluster::source_address(i, config.enroll_addresses);
        let _ = writeln!(shares[i % config.processes], "a{i:04} {token} {address}");
    }
    let started = Instant::now();
    let mut children = Vec::new();
    for (k, share) in shares.iter().enumerate() {
        children.push(AgentProcess::start(
            k,
            &servers.urls(),
            dir.as_path(),
            share,
        )?);
    }
    let mut enrolled = Vec::new();
    for child in &children {
        enrolled.push(child.expect("enrolled", config.timeout.max(Duration::from_secs(600)))?);
    }
    figures.insert("enroll_s".into(), max(&enrolled, "enroll_s"));
    figures.insert("refusals".into(), total(&enrolled, "refusals"));
    figures.insert("enroll_failures".into(), total(&enrolled, "failures"));
    if total(&enrolled, "failures") > 0.0 {
        let log = std::fs::read_to_string(dir.as_path().join("agents-0.log")).unwrap_or_default();
        let first: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("failed"))
            .take(3)
            .collect();
        return Err(format!(
            "enrollments failed, among them: {}",
            first.join("; ")
        ));
    }
    let (registered, leases, nodes) =
        registrations(&observer, config.agents, started, config.timeout).await?;
    figures.insert("register_s".into(), registered);
    let present = leases.min(nodes);
    figures.insert(
        "lost_registrations".into(),
        config.agents.saturating_sub(present) as f64,
    );

    // Registered and idle: what each agent costs the servers.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let per_agent = |now: f64, before: f64| (now - before) / config.agents.max(1) as f64;
    figures.insert(
        "conns_per_agent".into(),
        per_agent(servers.connections() as f64, connections_before as f64),
    );
    figures.insert(
        "watches_per_agent".into(),
        per_agent(servers.watches().await, watches_before),
    );
    figures.insert(
        "server_kb_per_agent".into(),
        per_agent(servers.resident() as f64, resident_before as f64) / 1024.0,
    );

    // The apply, until every instance is reported running.
    let lapses = Arc::new(AtomicU64::new(0));
    let counting_lapses = count_lapses(&observer, Arc::clone(&lapses)).await?;
    let mut running = observer
        .watch("observed/instance/", Revision::ZERO)
        .await
        .map_err(|err| err.to_string())?;
    let before = stats(&mut children)?;
    let status_before = probe::etcd_status(&etcd).await?;
    let etcd_pid = probe::etcd_pid(&url);
    let agent_pids: Vec<u32> = children.iter().map(AgentProcess::pid).collect();
    let cpu_of =
        |pids: &[u32]| -> f64 { pids.iter().filter_map(|&pid| probe::cpu_seconds(pid)).sum() };
    let own_pid = std::process::id();
    let etcd_before = cpu_of(etcd_pid.as_slice());
    let agents_before = cpu_of(&agent_pids);
    let own_before = cpu_of(&[own_pid]);
    let busy_before = probe::machine_busy_seconds().unwrap_or(f64::NAN);
    let cpu_before = servers.cpu_seconds();
    let applied = Instant::now();
    apply(&servers, config.instances).await?;
    let mut states: HashMap<String, bool> = HashMap::new();
    let mut count = 0;
    let deadline = tokio::time::sleep(config.timeout);
    tokio::pin!(deadline);
    while count < config.instances {
        let event = tokio::select! {
            event = running.next() => event,
            () = &mut deadline => {
                eprintln!("not all running within {:?}: {count} of {}", config.timeout, config.instances);
                break;
            }
        };
        let Some(Ok(event)) = event else {
            return Err(format!("the watch of running instances ended: {event:?}"));
        };
        let is_running = event.kind == EventKind::Put
            && serde_json::from_slice::<Json>(&event.fact.value)
                .is_ok_and(|v| v["state"] == "running");
        let was = states.insert(event.fact.key.as_str().to_owned(), is_running);
        count = count + usize::from(is_running) - usize::from(was == Some(true));
    }
    let running_s = applied.elapsed().as_secs_f64();
    let cpu = servers.cpu_seconds() - cpu_before;
    let etcd_cpu = cpu_of(etcd_pid.as_slice()) - etcd_before;
    let agents_cpu = cpu_of(&agent_pids) - agents_before;
    let own_cpu = cpu_of(&[own_pid]) - own_before;
    let busy = probe::machine_busy_seconds().unwrap_or(f64::NAN) - busy_before;
    figures.insert(
        "etcd_cpu_s".into(),
        if etcd_pid.is_some() {
            etcd_cpu
        } else {
            f64::NAN
        },
    );
    figures.insert("agents_cpu_s".into(), agents_cpu);
    // What else ran on the machine meanwhile (a build, tests): a run with much of it shares
    // the cores and is not comparable.
    figures.insert(
        "others_cpu_s".into(),
        (busy - cpu - etcd_cpu - agents_cpu - own_cpu).max(0.0),
    );
    let status_after = probe::etcd_status(&etcd).await?;
    let after = stats(&mut children)?;
    figures.insert("running_s".into(), running_s);
    figures.insert("server_cpu_s".into(), cpu);
    let rate = |now: f64, then: f64| (now - then) / running_s;
    figures.insert(
        "writes_s".into(),
        rate(status_after.revision as f64, status_before.revision as f64),
    );
    figures.insert(
        "watch_events_s".into(),
        rate(
            total(&after, "watch_events"),
            total(&before, "watch_events"),
        ),
    );
    figures.insert(
        "agent_writes_s".into(),
        rate(total(&after, "writes"), total(&before, "writes")),
    );

    // Steady: every instance running and nothing applied. What keeping the agents alive costs.
    tokio::time::sleep(STEADY_SETTLE).await;
    let before = stats(&mut children)?;
    let revision_before = probe::etcd_status(&etcd).await?.revision;
    let (server_before, etcd_before) = (servers.cpu_seconds(), cpu_of(etcd_pid.as_slice()));
    tokio::time::sleep(STEADY_WINDOW).await;
    let after = stats(&mut children)?;
    let seconds = STEADY_WINDOW.as_secs_f64();
    let steady = |now: f64, then: f64| (now - then) / seconds;
    figures.insert(
        "steady_requests_s".into(),
        steady(total(&after, "requests"), total(&before, "requests")),
    );
    figures.insert(
        "steady_writes_s".into(),
        steady(
            probe::etcd_status(&etcd).await?.revision as f64,
            revision_before as f64,
        ),
    );
    figures.insert(
        "steady_server_cores".into(),
        steady(servers.cpu_seconds(), server_before),
    );
    figures.insert(
        "steady_etcd_cores".into(),
        match etcd_pid {
            Some(_) => steady(cpu_of(etcd_pid.as_slice()), etcd_before),
            None => f64::NAN,
        },
    );
    counting_lapses.abort();
    figures.insert("lapses".into(), lapses.load(Ordering::Relaxed) as f64);
    figures.insert(
        "server_peak_mb".into(),
        servers.peak_resident() as f64 / 1e6,
    );
    record_db(&mut figures, &status_after);
    servers.save_metrics(&dir).await;

    // The agents stop; their writes go straight to etcd.
    let mut ended_badly = 0.0;
    for child in &mut children {
        child.tell("stop")?;
        ended_badly += child.expect("stopped", Duration::from_secs(60))?["ended_badly"]
            .as_f64()
            .unwrap_or(f64::NAN);
    }
    figures.insert("agents_ended_badly".into(), ended_badly);
    drop(children);
    drop(servers);
    let writes = ceiling::read_writes(dir.as_path(), config.processes)?;
    let replayed = ceiling::replay(&etcd, &prefix, writes, config.ceiling_tasks).await?;
    figures.insert("agent_writes".into(), replayed.writes as f64);
    figures.insert("ceiling_s".into(), replayed.seconds);
    figures.insert(
        "ceiling_writes_s".into(),
        replayed.writes as f64 / replayed.seconds.max(f64::MIN_POSITIVE),
    );
    ceiling::delete_prefix(&etcd, &prefix).await?;
    Ok(figures)
}

fn max(stats: &[Json], name: &str) -> f64 {
    stats
        .iter()
        .filter_map(|s| s[name].as_f64())
        .fold(0.0, f64::max)
}

fn record_db(figures: &mut Figures, status: &EtcdStatus) {
    figures.insert("etcd_db_mb".into(), status.db_bytes as f64 / 1e6);
    figures.insert(
        "etcd_db_in_use_mb".into(),
        status.db_in_use_bytes as f64 / 1e6,
    );
}

/// Waits until every node's lease and node record are in etcd (or `timeout`): the seconds
/// since `started`, and how many leases and node records there are then.
async fn registrations(
    observer: &EtcdStore,
    agents: usize,
    started: Instant,
    timeout: Duration,
) -> Result<(f64, usize, usize), String> {
    let deadline = Instant::now() + timeout;
    loop {
        let leases = observer
            .scan("lease/node/")
            .await
            .map_err(|e| e.to_string())?;
        let nodes = observer
            .scan("observed/node/")
            .await
            .map_err(|e| e.to_string())?;
        let (leases, nodes) = (leases.facts.len(), nodes.facts.len());
        if (leases >= agents && nodes >= agents) || Instant::now() > deadline {
            return Ok((started.elapsed().as_secs_f64(), leases, nodes));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Counts node leases that expire (deleted `lease/node/` keys) from now on.
async fn count_lapses(
    observer: &EtcdStore,
    lapses: Arc<AtomicU64>,
) -> Result<tokio::task::JoinHandle<()>, String> {
    let mut leases = observer
        .watch("lease/node/", Revision::ZERO)
        .await
        .map_err(|err| err.to_string())?;
    Ok(tokio::spawn(async move {
        while let Some(Ok(event)) = leases.next().await {
            if event.kind == EventKind::Delete {
                lapses.fetch_add(1, Ordering::Relaxed);
            }
        }
    }))
}

/// Applies ten services summing to `instances` (100m cpu, 64Mi each) through `APPLY /config`.
async fn apply(servers: &Servers, instances: usize) -> Result<(), String> {
    let services = 10;
    let mut text = String::new();
    for s in 0..services {
        let count = instances / services + usize::from(s < instances % services);
        let _ = write!(
            text,
            "service svc{s} {{\n    image busybox\n    instances {count}\n    resources {{\n        \
             cpu 100m\n        memory 64Mi\n    }}\n}}\n",
        );
    }
    servers
        .admin_client()
        .ok(Method::POST, "/config?name=etcd-figures.cca", text)
        .await
        .map(|_| ())
        .map_err(|err| format!("the apply: {err}"))
}
