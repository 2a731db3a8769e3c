//! A real etcd under a thousand agents: `cca server --store etcd` (one or three) on loopback,
//! real node agents speaking the store protocol over HTTP from a few processes, and the
//! figures of the run beside those kept in `benches/figures/etcd.txt`.
//!
//! ```sh
//! scripts/etcd-up
//! cargo build --release -p ccattler-examples --features etcd --bin cca
//! cargo build --release -p ccattler-benches --features etcd --bin etcd_figures
//! target/release/etcd_figures [--etcd URL | --fresh-etcd] [--agents 1000] [--instances 10000]
//!     [--servers 1] [--agent-processes 4] [--enroll-addresses N] [--ceiling-tasks 8]
//!     [--timeout 120] [--runs 3] [--logs DIR] [--cca PATH] [--keep]
//! ```
//!
//! The etcd is `--etcd`, else the one `scripts/etcd-up` started; with `--fresh-etcd` each run
//! starts one of its own (one member on loopback ports, removed after the run), so that every
//! run begins on an empty database. Each run starts the servers (`--cca`, by default the `cca`
//! next to this program) on a fresh etcd prefix, then `--agent-processes` processes of agents
//! (this program again, with a hidden `--agents-child`; see `etcd_figures/agents.rs`): each
//! agent is a real `NodeAgent` over a simulator runtime of its own, with its own `HttpStore`
//! to every server (each agent prefers the next server in turn) and its own node credential,
//! and without a cache on disk (a simulated node has nothing to adopt after a restart, and a
//! thousand agents syncing files to the disk etcd syncs its log to would measure that disk).
//! `--logs DIR` keeps each run's logs, the servers' `/metrics` at the end and the agents'
//! recorded writes in a directory of its own under `DIR`. The agents enroll all at once, each
//! from its own loopback address (`--enroll-addresses` fewer to share addresses, so that the
//! servers' rate limit of 30 a minute in bursts of 10 per address refuses some with "retry in
//! N s", which they honour). Then the admin applies ten services summing to `--instances`
//! (100m cpu, 64Mi each; nodes of 16 cpu and 64Gi) and the run waits until etcd holds every
//! instance reported running. Figures:
//!
//! - `enroll_s`: the flood of enrollments, from the agents' start to the last credential;
//!   `refusals`: "retry in N s" answers the agents waited out; `register_s`: from the agents'
//!   start to every node's lease and node record in etcd; `lost_registrations`: nodes without
//!   either then (must be 0);
//! - per agent, registered and idle: `conns_per_agent` (established TCP connections to the
//!   servers), `watches_per_agent` (store watches open in the servers,
//!   `ccattler_store_watches`), `server_kb_per_agent` (servers' resident memory then minus
//!   before any agent);
//! - `running_s`: from the apply to every instance reported running; during it,
//!   `writes_s` (etcd revisions a second), `watch_events_s` (events delivered on the agents'
//!   watches a second), `server_cpu_s`, `etcd_cpu_s`, `agents_cpu_s` (CPU time of the
//!   servers, of etcd, of the agents' processes) and `others_cpu_s` (of everything else on
//!   the machine: a run beside a build or tests shares the cores and is not comparable);
//! - steady, 10 s after the last instance runs, over 20 s with nothing applied:
//!   `steady_requests_s` (the agents' requests to the servers a second: lease renewals, and
//!   reports if anything changes), `steady_writes_s` (etcd revisions a second),
//!   `steady_server_cores` and `steady_etcd_cores` (CPU seconds a second of the servers and
//!   of etcd); `lapses`: node leases that expired from the apply to the end of this window;
//! - at the end: `server_peak_mb` (the largest server's peak resident memory), `etcd_db_mb` and
//!   `etcd_db_in_use_mb` (etcd's database file, and the part in use; on a shared etcd, its
//!   whole database, earlier runs included);
//! - the ceiling: `agent_writes` (the agents' write requests: grants, keep-alives, puts,
//!   transactions, from enrollment to the end), sent again straight to etcd with `etcd-client`
//!   from `--ceiling-tasks` tasks (8): `ceiling_s`, `ceiling_writes_s`, beside the
//!   `agent_writes_s` they made through the servers while the instances started.
//!
//! With `--runs N` it prints every run and the median. `--keep` writes the medians into the
//! kept file, under the run's shape (`AGENTSxINSTANCESxSERVERS`).

#[path = "etcd_figures/agents.rs"]
mod agents;
#[path = "etcd_figures/ceiling.rs"]
mod ceiling;
#[path = "etcd_figures/cluster.rs"]
mod cluster;
#[path = "etcd_figures/counting.rs"]
mod counting;
#[path = "etcd_figures/probe.rs"]
mod probe;
#[path = "etcd_figures/run.rs"]
mod run;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use ccattler_benches::kept::{self, Figures};
use ccattler_store::etcd::server::shared_endpoints;
use run::{Config, FIGURES};

const KEPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/figures/etcd.txt");

fn main() -> ExitCode {
    match main_inner() {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("etcd_figures: {err}");
            ExitCode::FAILURE
        }
    }
}

fn main_inner() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .map(String::as_str)
    };
    let number = |name: &str, default: usize| -> Result<usize, String> {
        flag(name).map_or(Ok(default), |v| {
            v.parse()
                .map_err(|_| format!("{name} takes a number, not {v:?}"))
        })
    };
    if let Some(k) = flag("--agents-child") {
        let k = k.parse().map_err(|_| format!("--agents-child {k:?}"))?;
        let servers: Vec<String> = flag("--server-urls")
            .unwrap_or_default()
            .split(',')
            .map(str::to_owned)
            .collect();
        let dir = PathBuf::from(flag("--dir").ok_or("--agents-child needs --dir")?);
        return agents::run(k, &servers, &dir);
    }
    let fresh_etcd = args.iter().any(|a| a == "--fresh-etcd");
    let etcd = match (flag("--etcd"), fresh_etcd) {
        (Some(url), _) => url.to_owned(),
        (None, true) => String::new(),
        (None, false) => shared_endpoints().and_then(|e| e.first().cloned()).ok_or(
            "no etcd: give --etcd URL, or --fresh-etcd, or start one with scripts/etcd-up",
        )?,
    };
    let agents = number("--agents", 1000)?;
    let cca = match flag("--cca") {
        Some(path) => PathBuf::from(path),
        None => std::env::current_exe()
            .map_err(|err| err.to_string())?
            .with_file_name("cca"),
    };
    let config = Config {
        etcd,
        fresh_etcd,
        cca,
        agents,
        instances: number("--instances", 10_000)?,
        servers: number("--servers", 1)?,
        processes: number("--agent-processes", 4)?.max(1),
        enroll_addresses: number("--enroll-addresses", agents)?.max(1),
        ceiling_tasks: number("--ceiling-tasks", 8)?,
        timeout: Duration::from_secs(u64::try_from(number("--timeout", 120)?).unwrap_or(120)),
        logs: flag("--logs").map(PathBuf::from),
    };
    let runs = number("--runs", 1)?.max(1);
    let shape = format!("{}x{}x{}", config.agents, config.instances, config.servers);
    println!(
        "{shape}: {} agents in {} processes ({} enrollment addresses), {} instances, {} server(s), etcd {}",
        config.agents,
        config.processes,
        config.enroll_addresses,
        config.instances,
        config.servers,
        if config.fresh_etcd {
            "of its own each run"
        } else {
            &config.etcd
        }
    );
    let runtime = tokio::runtime::Runtime::new().map_err(|err| err.to_string())?;
    let mut measured = Vec::new();
    for run in 1..=runs {
        let figures = runtime.block_on(run::measure(&config))?;
        println!("run {run}: {}", kept::render(&figures));
        measured.push(figures);
    }
    let medians = medians(&measured);
    let kept_rows = kept::read(Path::new(KEPT));
    println!("{:<22} {:>12} {:>12}", "figure", "median", "kept");
    for name in FIGURES {
        let now = medians.get(name).copied().unwrap_or(f64::NAN);
        let then = kept_rows
            .get(&shape)
            .and_then(|k| k.get(name))
            .map_or_else(|| "-".to_owned(), |v| kept::short(*v));
        println!("{name:<22} {:>12} {then:>12}", kept::short(now));
    }
    if args.iter().any(|a| a == "--keep") {
        let mut all = kept_rows;
        all.insert(shape, medians);
        kept::write(
            Path::new(KEPT),
            "A real etcd under many agents, as last kept (etcd_figures --keep): medians, one \
             shape (AGENTSxINSTANCESxSERVERS) a line.",
            &all,
        )
        .map_err(|err| format!("{KEPT}: {err}"))?;
        println!("kept in {KEPT}");
    }
    Ok(())
}

/// Each figure's median over the runs (the lower middle one for an even count).
fn medians(runs: &[Figures]) -> Figures {
    let mut out = Figures::new();
    for name in FIGURES {
        let mut values: Vec<f64> = runs.iter().filter_map(|f| f.get(name).copied()).collect();
        values.sort_by(f64::total_cmp);
        if let Some(v) = values.get(values.len().saturating_sub(1) / 2) {
            out.insert(name.to_owned(), *v);
        }
    }
    out
}
