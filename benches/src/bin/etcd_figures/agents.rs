//! One process of agents (`etcd_figures --agents-child`): enrolls its share of the nodes, each
//! from its own loopback source address, all at once, then runs a real [`NodeAgent`] per node
//! over the [`SimulatorRuntime`], each with its own [`HttpStore`] and credential, until told to
//! stop.
//!
//! It talks with the parent in lines. Its stdin gives `stats` (answered on stdout with
//! `stats JSON`) and `stop` (the agents stop, every agent's writes go to `{dir}/writes-{k}.txt`,
//! one agent a block, and it answers `stopped JSON`). It says `enrolled JSON` on stdout once
//! every node of its share enrolled or failed to. Its share is in `{dir}/nodes-{k}.txt`, one
//! node a line: `NAME ENROLLMENT_TOKEN SOURCE_ADDRESS`.

use std::io::{BufRead, Write as _};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use ccattler_core::schema::{Cpu, Memory};
use ccattler_examples::cca::agent::enroll;
use ccattler_runtime::agent::{AgentConfig, NodeAgent};
use ccattler_runtime::simulator::SimulatorRuntime;
use ccattler_store::http::HttpStore;
use serde_json::json;

use super::counting::{Counted, Tally};

/// One node of this process's share.
struct Node {
    name: String,
    enrollment: String,
    source: IpAddr,
}

/// The nodes of `{dir}/nodes-{k}.txt`.
fn read_share(file: &Path) -> Result<Vec<Node>, String> {
    let text = std::fs::read_to_string(file)
        .map_err(|err| format!("reading {}: {err}", file.display()))?;
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let mut words = line.split_whitespace();
            let (Some(name), Some(enrollment), Some(source)) =
                (words.next(), words.next(), words.next())
            else {
                return Err(format!("a malformed line in {}: {line:?}", file.display()));
            };
            let source = source
                .parse()
                .map_err(|err| format!("{source:?} in {}: {err}", file.display()))?;
            Ok(Node {
                name: name.to_owned(),
                enrollment: enrollment.to_owned(),
                source,
            })
        })
        .collect()
}

/// The servers in the order node `index` prefers them: the list turned by `index`, so that
/// agents spread over the servers as behind a load balancer, each keeping all of them to fail
/// over to.
fn preference(servers: &[String], index: usize) -> Vec<String> {
    let mut turned = servers.to_vec();
    if !turned.is_empty() {
        let by = index % turned.len();
        turned.rotate_left(by);
    }
    turned
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Runs process `k` of agents; see the module docs.
pub(crate) fn run(k: usize, servers: &[String], dir: &Path) -> Result<(), String> {
    // The agents' warnings (a store unreachable, a lease lost) go to this process's log.
    ccattler_examples::cca::init_tracing(ccattler_examples::cca::LogFormat::Text);
    let nodes = read_share(&dir.join(format!("nodes-{k}.txt")))?;
    let runtime = tokio::runtime::Runtime::new().map_err(|err| err.to_string())?;
    runtime.block_on(agents(k, servers, dir, nodes))
}

async fn agents(k: usize, servers: &[String], dir: &Path, nodes: Vec<Node>) -> Result<(), String> {
    let started = Instant::now();
    let enrollments = nodes.iter().enumerate().map(|(i, node)| {
        let servers = preference(servers, i);
        let (name, enrollment, source) = (node.name.clone(), node.enrollment.clone(), node.source);
        tokio::spawn(async move {
            let got = enroll(&servers, &enrollment, &name, Some(source)).await;
            (name, servers, got)
        })
    });
    let enrollments: Vec<_> = enrollments.collect();
    let (mut enrolled, mut refusals, mut failures) = (Vec::new(), 0, Vec::new());
    for task in enrollments {
        match task.await {
            Ok((name, servers, Ok(got))) => {
                refusals += got.refusals;
                enrolled.push((name, servers, got.token));
            }
            Ok((name, _, Err(err))) => failures.push(format!("{name}: {err}")),
            Err(err) => failures.push(err.to_string()),
        }
    }
    let enroll_s = started.elapsed().as_secs_f64();
    for failure in &failures {
        eprintln!("enrollment failed: {failure}");
    }
    say(&format!(
        "enrolled {}",
        json!({
            "enrolled": enrolled.len(),
            "refusals": refusals,
            "failures": failures.len(),
            "enroll_s": enroll_s,
        })
    ));

    let tally = Arc::new(Tally::default());
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut running = Vec::new();
    for (name, servers, token) in enrolled {
        let store = Counted::new(
            HttpStore::with_endpoints(servers, token),
            Arc::clone(&tally),
        );
        let mut config = AgentConfig::new(name.clone(), dir.join("agents").join(&name));
        config.cpu = Cpu::from_millis(16_000);
        config.memory = Memory::from_bytes(64 << 30);
        // A simulated node's workloads end with this process, so there is nothing to adopt
        // after a restart, and a thousand agents syncing their caches to the one disk etcd
        // syncs its log to would measure that disk, not the store: each real node has its own.
        config.persist_cache = false;
        // A runtime per node, as every node has its own (one shared would show each agent the
        // instances of all the others).
        let runtime = Arc::new(SimulatorRuntime::new());
        let agent = NodeAgent::new(store.clone(), runtime, config)
            .map_err(|err| format!("agent {name}: {err}"))?;
        let mut stopped = stopped.clone();
        let task = tokio::spawn(agent.run(async move {
            let _ = stopped.wait_for(|stop| *stop).await;
        }));
        running.push((store, task));
    }

    // The parent's commands, read on a thread of their own (stdin blocks).
    let (commands_tx, mut commands) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if commands_tx.send(line.trim().to_owned()).is_err() {
                break;
            }
        }
    });
    let stats = |tally: &Tally| {
        json!({
            "watch_events": tally.watch_events.load(Ordering::Relaxed),
            "requests": tally.requests.load(Ordering::Relaxed),
            "writes": tally.writes.load(Ordering::Relaxed),
        })
    };
    while let Some(command) = commands.recv().await {
        match command.as_str() {
            "stats" => say(&format!("stats {}", stats(&tally))),
            "stop" => break,
            other => eprintln!("unknown command {other:?}"),
        }
    }
    let _ = stop.send(true);
    let mut ended_badly = 0;
    let mut text = String::new();
    for (store, task) in running {
        match tokio::time::timeout(Duration::from_secs(5), task).await {
            Ok(Ok(Ok(()))) => {}
            _ => ended_badly += 1,
        }
        text.push_str("agent\n");
        for line in store.writes() {
            text.push_str(&line);
            text.push('\n');
        }
    }
    let file: PathBuf = dir.join(format!("writes-{k}.txt"));
    std::fs::write(&file, text).map_err(|err| format!("writing {}: {err}", file.display()))?;
    let mut last = stats(&tally);
    last["ended_badly"] = json!(ended_badly);
    say(&format!("stopped {last}"));
    Ok(())
}
