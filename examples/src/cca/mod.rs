//! The `cca` command line: one module per subcommand.
//!
//! | command | module | what it does |
//! |---|---|---|
//! | `cca dev FILE.cca` | [`dev`] | a whole cluster in one process: store, controllers, local agents; applies the file and shows it converge |
//! | `cca chaos FILE.cca` | [`chaos`] | the seeded simulation of the cluster under random faults, seed after seed, with a replay command per failing seed |
//! | `cca check FILE...` | [`check`] | validates files offline and prints every diagnostic |
//! | `cca fmt FILE` | [`fmt`] | prints (or writes, or checks) the canonical format |
//! | `cca completions SHELL` | [`completions`] | shell completions |
//! | `cca server` | [`server`] | the HTTP API ([`api`]) and the standard controllers over one store; its replica record ([`replica`]) and leadership log ([`leadership`]) |
//! | `cca agent` | [`agent`] | one node's agent over the API's store protocol (`ccattler_store::http::HttpStore`) |
//! | `cca apply`, `get`, `query`, `watch`, `status`, `nodes`, `token create` | [`remote`] | clients of the API ([`client`], and the store crate's event-stream reader) |
//! | `cca rollout status\|pause\|resume\|undo SERVICE` | [`rollout`] | a service's rollout through the API |
//!
//! The dev cluster itself is [`cluster::DevCluster`]; [`progress`] reads and draws the cluster's
//! status from the store's facts; [`flags`] parses the values `dev` and `agent` share;
//! [`shape`] holds the cluster shape flags of `dev` and `chaos`; [`metrics`] is the Prometheus
//! exporter of `server` and `agent`, and [`local`] the agent's local port (`/metrics`, `/node`);
//! [`spawned`] starts `cca server` as a child process for the programs that measure one.
//!
//! # Exit codes
//!
//! | code | meaning |
//! |---|---|
//! | 0 | success (for `cca dev`: converged with `--until-converged`, or stopped by Ctrl-C) |
//! | 1 | invalid input (diagnostics printed), an unformatted file under `fmt --check`, a `chaos` seed that failed, or a failure |
//! | 2 | `cca dev --until-converged` timed out (the status is printed), or bad command-line usage |

pub mod agent;
pub mod api;
pub mod chaos;
pub mod check;
pub mod client;
pub mod cluster;
pub mod completions;
pub mod dev;
pub mod dev_ports;
pub mod display;
pub mod events;
pub mod flags;
pub mod fmt;
pub mod leadership;
pub mod local;
pub mod metrics;
pub mod progress;
pub mod remote;
pub mod replica;
pub mod rollout;
pub mod route;
pub mod server;
pub mod shape;
pub mod spawned;
mod tally;

use std::io;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use ccattler_controllers::lang::SourceFile;
use clap::{Parser, Subcommand};

/// Exit code of a failure or of invalid input.
pub const EXIT_FAILURE: u8 = 1;
/// Exit code of `cca dev --until-converged` when the cluster did not converge in time.
pub const EXIT_TIMEOUT: u8 = 2;

/// `cca`: the reference cluster of CCattler.
#[derive(Debug, Parser)]
#[command(
    name = "cca",
    version,
    about = "The CCattler reference cluster: run, check and format .cca files",
    long_about = "The CCattler reference cluster.\n\n\
        Start with `cca dev examples/hello.cca`: one process runs the store, the standard \
        controllers and three local node agents, applies the file and shows it converge.\n\n\
        Logs go to stderr; set RUST_LOG (for example RUST_LOG=debug) to see more."
)]
pub struct Cli {
    /// How logs are written to stderr: `text` for people, `json` (one object per line, with
    /// the fields of every enclosing span) for log pipelines.
    #[arg(
        long,
        global = true,
        value_enum,
        env = "CCATTLER_LOG_FORMAT",
        default_value = "text"
    )]
    pub log_format: LogFormat,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The format of the logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// The subcommands, one module each.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a whole cluster in this process, apply FILE and show it converge.
    Dev(dev::DevArgs),
    /// Simulate the cluster running FILE under random faults, for many seeds.
    Chaos(chaos::ChaosArgs),
    /// Validate .cca files offline and print every diagnostic.
    Check(check::CheckArgs),
    /// Print a .cca file in canonical format (or rewrite it, or check it).
    Fmt(fmt::FmtArgs),
    /// Print shell completions for cca.
    Completions(completions::CompletionsArgs),
    /// Serve the HTTP API and run the standard controllers.
    Server(server::ServerArgs),
    /// Run one node's agent against `cca server`.
    Agent(Box<agent::AgentArgs>),
    /// Apply a .cca file through the API (all of it or nothing).
    Apply(remote::ApplyArgs),
    /// Print the facts under a key prefix (never secrets).
    Get(remote::GetArgs),
    /// Print the facts under a prefix whose JSON values match every --where predicate.
    Query(remote::QueryArgs),
    /// Follow the changes under a key prefix.
    Watch(remote::WatchArgs),
    /// Per service: desired, present, running and ready instances, and why any are unplaced.
    Status(remote::StatusArgs),
    /// The nodes: alive or not, their capacity, and the network rules each enforces.
    Nodes(remote::StatusArgs),
    /// Enrollment tokens for new nodes.
    Token(remote::TokenArgs),
    /// What the controllers and agents did and why, for a service, an instance or everything.
    Events(events::EventsArgs),
    /// A service's rollout: its status, or pause, resume, undo.
    Rollout(rollout::RolloutArgs),
}

/// Why a command failed (beyond invalid input, which is reported as diagnostics).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CliError {
    /// A file could not be read.
    #[error("cannot read {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// A file or directory could not be written.
    #[error("cannot write {}", path.display())]
    Write {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// The dev cluster could not start.
    #[error("cannot start the dev cluster: {0}")]
    Start(String),
    /// `cca server` could not start.
    #[error("cannot start the server (--listen {listen}): {reason}")]
    ServerStart {
        /// The address it was to listen on.
        listen: std::net::SocketAddr,
        /// What failed, and what to do.
        reason: String,
    },
    /// `cca agent` could not start.
    #[error("cannot start the agent of node {node}: {reason}")]
    AgentStart {
        /// The node it runs.
        node: String,
        /// What failed, and what to do.
        reason: String,
    },
    /// A part of the dev cluster (or of the server) failed while it ran.
    #[error("the dev cluster failed: {0}")]
    Cluster(String),
    /// The API server could not be reached or refused a request.
    #[error("{0}")]
    Api(String),
}

/// Parses the command line, runs the command and returns the process's exit code. Errors are
/// printed to stderr with their causes.
pub fn run() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(cli.log_format);
    quiet_on_closed_stdout();
    let outcome = std::panic::catch_unwind(|| execute(cli));
    match outcome {
        Ok(Ok(code)) => code,
        Ok(Err(err)) => {
            report(&err);
            ExitCode::from(EXIT_FAILURE)
        }
        Err(payload) if is_closed_stdout(&*payload) => ExitCode::from(EXIT_CLOSED_PIPE),
        Err(payload) => std::panic::resume_unwind(payload),
    }
}

/// The exit code when whoever read the output went away (`cca get ... | head -1`): what a
/// shell reports for a process ended by SIGPIPE, 128 + 13.
pub const EXIT_CLOSED_PIPE: u8 = 141;

/// A closed standard output (its reader exited) makes `println!` panic: that panic is not a
/// bug, so it prints nothing, and [`run`] ends the command quietly. Every other panic is
/// reported as usual.
fn quiet_on_closed_stdout() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !is_closed_stdout(info.payload()) {
            default(info);
        }
    }));
}

/// Whether a panic is the standard library's on writing to a closed standard output.
fn is_closed_stdout(payload: &(dyn std::any::Any + Send)) -> bool {
    let message = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or_default();
    message.starts_with("failed printing to stdout") && message.contains("Broken pipe")
}

/// Runs one parsed command line.
///
/// # Errors
///
/// [`CliError`] when a file cannot be read or written, or the dev cluster fails. Invalid input
/// is not an error here: its diagnostics are printed and the exit code says so.
pub fn execute(cli: Cli) -> Result<ExitCode, CliError> {
    match cli.command {
        Command::Dev(args) => dev::run(&args),
        Command::Chaos(args) => chaos::run(&args),
        Command::Check(args) => Ok(check::run(&args)),
        Command::Fmt(args) => fmt::run(&args),
        Command::Completions(args) => Ok(completions::run(&args)),
        Command::Server(args) => server::run(&args),
        Command::Agent(args) => agent::run(&args),
        Command::Apply(args) => remote::apply(&args),
        Command::Get(args) => remote::get(&args),
        Command::Query(args) => remote::query(&args),
        Command::Watch(args) => remote::watch(&args),
        Command::Status(args) => remote::status(&args),
        Command::Nodes(args) => remote::nodes(&args),
        Command::Token(args) => remote::token(&args),
        Command::Events(args) => events::run(&args),
        Command::Rollout(args) => rollout::run(&args),
    }
}

/// Prints an error and its chain of causes to stderr.
pub fn report(err: &dyn std::error::Error) {
    let mut message = format!("error: {err}");
    let mut source = err.source();
    while let Some(cause) = source {
        message.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    eprintln!("{message}");
}

/// Reads a `.cca` file; the file's name in diagnostics is the path as given.
///
/// # Errors
///
/// [`CliError::Read`] when the file cannot be read or is not UTF-8.
pub fn read_source(path: &Path) -> Result<SourceFile, CliError> {
    let text = std::fs::read_to_string(path).map_err(|source| CliError::Read {
        path: path.to_owned(),
        source,
    })?;
    Ok(SourceFile::new(path.display().to_string(), text))
}

/// The log filter without `RUST_LOG`: warnings and errors, and the servers' leadership changes
/// ([`leadership`]) at info.
pub const DEFAULT_LOG_FILTER: &str = "warn,ccattler_examples::cca::leadership=info";

/// Logs to stderr in `format`, filtered by `RUST_LOG` (tracing's directive syntax, such as
/// `info,ccattler_core::runner=debug`; default: [`DEFAULT_LOG_FILTER`]). A `RUST_LOG` that does
/// not parse is reported and the default used, rather than silently ignored.
pub fn init_tracing(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter = match std::env::var(EnvFilter::DEFAULT_ENV) {
        Ok(directives) if !directives.trim().is_empty() => EnvFilter::try_new(&directives)
            .unwrap_or_else(|err| {
                eprintln!(
                    "warning: RUST_LOG={directives:?} is not a valid filter ({err}); \
                     logging with the default {DEFAULT_LOG_FILTER:?}"
                );
                EnvFilter::new(DEFAULT_LOG_FILTER)
            }),
        _ => EnvFilter::new(DEFAULT_LOG_FILTER),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .try_init(),
    };
}
