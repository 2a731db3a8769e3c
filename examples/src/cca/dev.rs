//! `cca dev FILE.cca`: a whole cluster in one process, converging before your eyes.
//!
//! # Expected flow
//!
//! 1. The file is checked first: with any error, every diagnostic is printed, nothing starts and
//!    the exit code is 1.
//! 2. A [`DevCluster`] starts: an embedded `MemoryStore`, the standard controllers on the tokio
//!    runner, and `--nodes` local agents (`n1`..`nN`, 3 by default) over the process runtime or
//!    the simulator, each with `--node-cpu`/`--node-memory`, a zone from `--zones`
//!    (round-robin) and every `--labels`.
//! 3. Once every node has registered, the file is applied in one transaction, and the status of
//!    each service (desired, placed, running, ready, and why instances are unplaced) is shown
//!    live: redrawn in place on a terminal, one line per change otherwise.
//! 4. The cluster runs until Ctrl-C or SIGTERM. With `--until-converged` it stops as soon as
//!    observed state matches desired (exit 0), or after `--timeout` (exit 2), printing the
//!    final status either way.
//! 5. Stopping stops the controllers and the agents, then every workload: unlike a production
//!    agent, `cca dev` owns its processes and leaves none behind.
//!
//! With `--api ADDR` the cluster also serves the HTTP API of `cca server` there (an admin token
//! is printed), so `cca apply`, `cca get`, `cca status`, ... work against it until Ctrl-C.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use ccattler_controllers::lang::{Compiled, SourceFile};
use ccattler_core::schema::format_duration;
use tokio::signal::unix::{Signal, SignalKind, signal};

use super::check::compile_or_report;
use super::cluster::{DevCluster, DevConfig, RuntimeKind};
use super::display::Display;
use super::flags::parse_time;
use super::progress::{ClusterStatus, StatusFollower};
use super::shape::ShapeArgs;
use super::{CliError, EXIT_FAILURE, EXIT_TIMEOUT, read_source};

/// Arguments of `cca dev`.
#[derive(Debug, clap::Args)]
#[command(
    long_about = "Run a whole cluster in this process: an embedded store, the standard \
    controllers and local node agents. Applies FILE, shows every service converge (desired, \
    placed, running, ready) and keeps running until Ctrl-C, which stops the controllers, the \
    agents and every workload they started. With --api ADDR it also serves the HTTP API of \
    `cca server` there."
)]
pub struct DevArgs {
    /// The .cca file to apply.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// The runtime of the local agents: `process` runs each instance's command as a real
    /// process (the image is ignored); `sim` runs nothing and simulates instances in memory.
    #[arg(long, value_enum, default_value_t = RuntimeKind::Process)]
    pub runtime: RuntimeKind,
    /// The local nodes: how many, their capacity, zones and labels.
    #[command(flatten)]
    pub shape: ShapeArgs,
    /// Exit 0 (printing the final status) as soon as observed state matches desired: every
    /// service has as many running and ready instances as desired, and none is unplaced.
    #[arg(long)]
    pub until_converged: bool,
    /// With --until-converged: give up after this long (`60s`, `2m`), print the status and
    /// exit 2.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_time)]
    pub timeout: Duration,
    /// Put the nodes' state (instance directories with their logs, agent caches) in this
    /// directory instead of a temporary one removed at exit. Instance directories are removed
    /// when the cluster stops its workloads.
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// How long each workload gets between SIGTERM and SIGKILL when the cluster stops.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_time)]
    pub stop_grace: Duration,
    /// Also serve the HTTP API at this address (`127.0.0.1:7420`); an admin token is printed.
    #[arg(long, value_name = "ADDR")]
    pub api: Option<std::net::SocketAddr>,
}

impl DevArgs {
    /// The cluster these arguments describe.
    pub fn config(&self) -> DevConfig {
        DevConfig {
            runtime: self.runtime,
            nodes: self.shape.nodes,
            cpu: self.shape.node_cpu,
            memory: self.shape.node_memory,
            storage: self.shape.node_storage,
            zones: self.shape.zones.clone(),
            labels: self.shape.labels.clone(),
            state_dir: self.state_dir.clone(),
            stop_grace: self.stop_grace,
        }
    }
}

/// How following the cluster ended.
#[derive(Debug)]
enum Outcome {
    Converged(Duration),
    TimedOut,
    Interrupted,
    Failed(String),
}

/// Runs `cca dev`; see the [module docs](self).
///
/// # Errors
///
/// [`CliError`] when the file cannot be read or the cluster cannot start or fails.
pub fn run(args: &DevArgs) -> Result<ExitCode, CliError> {
    let file = read_source(&args.file)?;
    let Some(compiled) = compile_or_report(&file, "started") else {
        return Ok(ExitCode::from(EXIT_FAILURE));
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|err| CliError::Start(format!("the async runtime: {err}")))?;
    let code = runtime.block_on(dev(args, &file, &compiled));
    // A reconcile of a large cluster may still run on the blocking pool: its result is not
    // needed, so the process does not wait for it.
    runtime.shutdown_timeout(Duration::from_millis(200));
    code
}

async fn dev(args: &DevArgs, file: &SourceFile, compiled: &Compiled) -> Result<ExitCode, CliError> {
    let mut signals = Signals::new()?;
    if args.api.is_some() {
        // Before anything runs, so that `/metrics` counts from the start.
        super::metrics::install().map_err(|err| CliError::Start(err.to_string()))?;
    }
    let mut cluster = DevCluster::start(args.config()).await?;
    println!(
        "cca dev: {} node{} ({} runtime; each with cpu {} and memory {}), state in {}",
        args.shape.nodes,
        if args.shape.nodes == 1 { "" } else { "s" },
        match args.runtime {
            RuntimeKind::Process => "process",
            RuntimeKind::Sim => "simulator",
        },
        args.shape.node_cpu,
        args.shape.node_memory,
        cluster.state_dir().display()
    );
    if let Err(err) = cluster.wait_for_nodes(cluster.registration_timeout()).await {
        cluster.shutdown().await;
        return Err(err);
    }
    let started = Instant::now();
    match cluster.apply(file).await {
        Ok(report) => println!(
            "applied {}: {} service{}, {} volume{} ({} added, {} changed)",
            file.name(),
            compiled.services.len(),
            if compiled.services.len() == 1 {
                ""
            } else {
                "s"
            },
            compiled.volumes.len(),
            if compiled.volumes.len() == 1 { "" } else { "s" },
            report.plan.added.len(),
            report.plan.changed.len(),
        ),
        Err(err) => {
            cluster.shutdown().await;
            return Err(CliError::Cluster(format!(
                "applying {}: {err}",
                file.name()
            )));
        }
    }
    let api = match args.api {
        Some(addr) => match serve_api(&cluster, addr).await {
            Ok(api) => Some(api),
            Err(err) => {
                cluster.shutdown().await;
                return Err(err);
            }
        },
        None => None,
    };
    if !args.until_converged {
        println!("Ctrl-C stops the cluster and every workload it started");
    }

    let mut display = Display::new(started);
    let outcome = follow(&mut cluster, args, started, &mut display, &mut signals).await;
    display.finish();
    let code = match &outcome {
        Outcome::Converged(after) => {
            print_final(&cluster).await;
            println!("converged in {:.3} s", after.as_secs_f64());
            ExitCode::SUCCESS
        }
        Outcome::TimedOut => {
            print_final(&cluster).await;
            eprintln!("not converged after {}", format_duration(args.timeout));
            ExitCode::from(EXIT_TIMEOUT)
        }
        Outcome::Interrupted => ExitCode::SUCCESS,
        Outcome::Failed(reason) => {
            eprintln!("error: {reason}");
            ExitCode::from(EXIT_FAILURE)
        }
    };
    if let Some(api) = api {
        api.shutdown().await;
    }
    eprintln!("stopping the controllers, the agents and every workload...");
    let stopped = cluster.shutdown().await;
    eprintln!(
        "stopped {stopped} running instance{}; bye",
        if stopped == 1 { "" } else { "s" }
    );
    Ok(code)
}

/// Serves the API over the cluster's store and prints where, with a new admin token.
async fn serve_api(
    cluster: &DevCluster,
    addr: std::net::SocketAddr,
) -> Result<super::api::ServerHandle, CliError> {
    use super::api::{ApiConfig, ServerHandle, auth};
    let token = auth::generate_token();
    auth::store_token(cluster.store(), &token, auth::Role::Admin, None)
        .await
        .map_err(|err| CliError::Start(format!("the admin token: {err}")))?;
    let api = ServerHandle::start(cluster.store().clone(), ApiConfig::default(), addr)
        .await
        .map_err(|err| CliError::Start(format!("serving the API on {addr}: {err}")))?;
    println!("API on {} (admin token: {token})", api.url());
    Ok(api)
}

/// Shows the status on every change until converged (with `--until-converged`), timed out,
/// interrupted, or failed.
async fn follow(
    cluster: &mut DevCluster,
    args: &DevArgs,
    started: Instant,
    display: &mut Display,
    signals: &mut Signals,
) -> Outcome {
    let mut follower = match StatusFollower::new(cluster.store()).await {
        Ok(follower) => follower,
        Err(err) => return Outcome::Failed(format!("watching the store: {err}")),
    };
    let deadline = tokio::time::Instant::from_std(started + args.timeout);
    loop {
        let redraw_at = display.pending_until().map(tokio::time::Instant::from_std);
        tokio::select! {
            status = follower.next() => match status {
                Ok(status) => {
                    display.show(&status);
                    if args.until_converged && status.is_converged() {
                        return Outcome::Converged(started.elapsed());
                    }
                }
                Err(err) => return Outcome::Failed(format!("reading the store: {err}")),
            },
            () = signals.recv() => return Outcome::Interrupted,
            reason = cluster.failure() => return Outcome::Failed(reason),
            () = tokio::time::sleep_until(deadline), if args.until_converged => {
                return Outcome::TimedOut;
            }
            () = sleep_until_some(redraw_at), if redraw_at.is_some() => display.flush(),
        }
    }
}

async fn sleep_until_some(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Prints the status table as the store holds it now.
async fn print_final(cluster: &DevCluster) {
    match ClusterStatus::read(cluster.store()).await {
        Ok(status) => print!("final status:\n{}", status.table()),
        Err(err) => eprintln!("cannot read the final status: {err}"),
    }
}

/// SIGINT (Ctrl-C) and SIGTERM, caught from the start so that neither kills the process before
/// its workloads are stopped.
#[derive(Debug)]
struct Signals {
    interrupt: Signal,
    terminate: Signal,
}

impl Signals {
    fn new() -> Result<Self, CliError> {
        let listen = |kind| {
            signal(kind).map_err(|err| CliError::Start(format!("listening for signals: {err}")))
        };
        Ok(Signals {
            interrupt: listen(SignalKind::interrupt())?,
            terminate: listen(SignalKind::terminate())?,
        })
    }

    async fn recv(&mut self) {
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ccattler_core::schema::{Cpu, Memory};

    #[test]
    fn flags_parse_into_a_cluster_config() {
        use clap::Parser;
        let cli = super::super::Cli::try_parse_from([
            "cca",
            "dev",
            "x.cca",
            "--nodes",
            "2",
            "--node-cpu",
            "500m",
            "--node-memory",
            "1Gi",
            "--zones",
            "a,b",
            "--labels",
            "disk=ssd,tier=web",
            "--until-converged",
            "--timeout",
            "5s",
        ])
        .expect("valid flags");
        let super::super::Command::Dev(args) = cli.command else {
            panic!("dev");
        };
        let config = args.config();
        assert_eq!(config.nodes, 2);
        assert_eq!(config.cpu, Cpu::from_millis(500));
        assert_eq!(config.memory, Memory::from_bytes(1 << 30));
        assert_eq!(config.zones, ["a", "b"]);
        assert_eq!(config.labels[1], ("tier".to_owned(), "web".to_owned()));
        assert_eq!(args.timeout, Duration::from_secs(5));
    }

    #[test]
    fn bad_flags_are_rejected_with_a_message() {
        use clap::Parser;
        for bad in [
            ["cca", "dev", "x.cca", "--labels", "novalue"],
            ["cca", "dev", "x.cca", "--node-cpu", "lots"],
            ["cca", "dev", "x.cca", "--nodes", "0"],
            ["cca", "dev", "x.cca", "--timeout", "soon"],
        ] {
            assert!(super::super::Cli::try_parse_from(bad).is_err(), "{bad:?}");
        }
    }
}
