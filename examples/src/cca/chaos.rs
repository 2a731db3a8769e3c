//! `cca chaos FILE.cca`: the seeded simulation of a whole cluster under faults, for many seeds.
//!
//! # Expected flow
//!
//! 1. The file is checked first: with any error, every diagnostic is printed, nothing is
//!    simulated and the exit code is 1.
//! 2. Each seed (`--seed N` for one, else `--seeds N` of them from `--first-seed`, 100 by
//!    default) runs the whole cluster in memory on virtual time: the standard controllers'
//!    loops (of the leader among `--replicas`) and one real agent loop per node (the shape
//!    flags of `cca dev`), the file applied
//!    in the first second, faults (`--faults`, every kind by default) firing during
//!    `--duration` of virtual time, then up to `--settle` for the cluster to converge.
//! 3. Progress goes to stderr while it runs. Then it prints how often each fault kind fired,
//!    the time to converge after the faults stopped (p50, p99, max), and each failing seed with
//!    what failed and the one-line command that replays it.
//! 4. The exit code is 0 only if every seed converged; 1 otherwise. A file that cannot converge
//!    on the nodes (a requirement no node meets, more than they hold) is named as such before
//!    any seed runs, with each service and the scheduler's reason, and exits 1: it is never
//!    reported as a pass. A seed that fails is never retried.
//! 5. `--generate` draws the workload from each seed instead of a file: a cluster of 2 to 7
//!    nodes and services using every feature of the language, with changes while it runs
//!    (`ccattler_testkit::workload`). With `--seed N`, `--print-workload` prints the seed's
//!    cluster and documents, and `--shrink` reduces a failing seed to the smallest workload and
//!    faults that still fail the same way.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use ccattler_core::schema::format_duration;
use ccattler_testkit::cluster::NodeSpec;
use ccattler_testkit::sim::{
    Chaos, FaultKind, FaultRates, Keep, Simulation, SimulationBuilder, Summary,
};
use ccattler_testkit::workload::{Workload, feasibility, feasibility_at_max};

use super::check::compile_or_report;
use super::flags::parse_time;
use super::shape::ShapeArgs;
use super::{CliError, EXIT_FAILURE, read_source};

/// Arguments of `cca chaos`.
#[derive(Debug, Clone, clap::Args)]
#[command(
    long_about = "Simulate a whole cluster running FILE under random faults, seed after seed, \
    on virtual time: the real controller loops and one real agent loop per node, in memory. \
    Prints how often each fault fired, how long convergence took once the faults stopped, and \
    every failing seed with the command that replays it. Exits 0 only if every seed converged."
)]
pub struct ChaosArgs {
    /// The .cca file to apply.
    #[arg(value_name = "FILE", required_unless_present = "generate")]
    pub file: Option<PathBuf>,
    /// Draw each seed's workload (its cluster, services and the changes made while it runs)
    /// from the seed instead of applying a file.
    #[arg(long, conflicts_with_all = ["file", "nodes", "node_cpu", "node_memory", "node_storage", "zones", "labels"])]
    pub generate: bool,
    /// With --generate and --seed: print the seed's workload (its nodes, steps and every
    /// document) before running it.
    #[arg(long, requires_all = ["generate", "seed"])]
    pub print_workload: bool,
    /// With --generate and --seed, when the seed fails: shrink it (take out faults, services,
    /// steps, instances and features while it still fails the same way) and print what is
    /// left: the smallest workload and faults that still fail.
    #[arg(long, requires_all = ["generate", "seed"])]
    pub shrink: bool,
    /// Run this one seed only (and print the end of its trace if it fails).
    #[arg(long, value_name = "N", conflicts_with = "seeds")]
    pub seed: Option<u64>,
    /// How many seeds to run.
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub seeds: u64,
    /// The first of the seeds run by --seeds.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub first_seed: u64,
    /// Virtual time during which faults fire (`60s`, `5m`).
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_time)]
    pub duration: Duration,
    /// How long the cluster has to converge after the last fault.
    #[arg(long, value_name = "DURATION", default_value = "120s", value_parser = parse_time)]
    pub settle: Duration,
    /// The faults: kinds with optional rates (a chance per second, 0 to 1), such as
    /// `node-crash,process-crash=0.2`, or `none`. Kinds: node-crash, network-delay,
    /// process-crash, stale-observation, controller-restart, duplicate-events, lost-messages,
    /// slow-storage, leader-loss (which strikes only with --replicas 2 or more), and load-surge
    /// (which strikes only a service whose scale block has a target). Default: every kind at
    /// its default rate.
    #[arg(long, value_name = "KIND[=RATE],...", value_parser = parse_faults)]
    pub faults: Option<FaultRates>,
    /// Runner replicas under leader election (only the leader's controllers run; with 2 or
    /// more, the leader-loss fault pauses the leader).
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=9))]
    pub replicas: u32,
    /// The nodes' lease TTL (and the replicas' leader lease TTL).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_time)]
    pub lease_ttl: Duration,
    /// Threads that run seeds side by side.
    #[arg(long, value_name = "N", default_value_t = 2,
          value_parser = clap::value_parser!(u32).range(1..=256))]
    pub threads: u32,
    /// With --seed: write the seed's whole trace (every commit, delivery, fault and agent
    /// action, stamped with virtual time) to this file.
    #[arg(long, value_name = "FILE", requires = "seed")]
    pub trace: Option<PathBuf>,
    /// The simulated nodes: how many, their capacity, zones and labels.
    #[command(flatten)]
    pub shape: ShapeArgs,
}

fn parse_faults(text: &str) -> Result<FaultRates, String> {
    if text.trim() == "none" {
        return Ok(FaultRates::none());
    }
    FaultRates::parse(text).map_err(|e| e.to_string())
}

impl ChaosArgs {
    fn rates(&self) -> FaultRates {
        self.faults.clone().unwrap_or_default()
    }

    /// `builder` with these arguments' faults and timing.
    fn configure(&self, builder: SimulationBuilder) -> SimulationBuilder {
        builder
            .faults(self.rates())
            .duration(self.duration)
            .settle(self.settle)
            .lease_ttl(self.lease_ttl)
            .replicas(self.replicas as usize)
            .keep(match (&self.trace, self.seed) {
                (Some(_), _) => Keep::All,
                (None, Some(_)) => Keep::Last(400),
                (None, None) => Keep::Last(60),
            })
    }

    /// The nodes the shape flags describe.
    fn nodes(&self) -> Vec<NodeSpec> {
        let mut nodes = Vec::new();
        for index in 0..self.shape.nodes as usize {
            let mut node = NodeSpec::new(
                format!("n{}", index + 1),
                self.shape.node_cpu,
                self.shape.node_memory,
            )
            .storage(self.shape.node_storage);
            if let Some(zone) = self.shape.zone(index) {
                node = node.zone(zone);
            }
            for (key, value) in &self.shape.labels {
                node = node.label(key, value);
            }
            nodes.push(node);
        }
        nodes
    }

    /// The command line that replays `seed` with the same settings.
    fn replay(&self, seed: u64) -> String {
        let faults: Vec<String> = self
            .rates()
            .iter()
            .map(|(kind, rate)| format!("{kind}={rate}"))
            .collect();
        let faults = if faults.is_empty() {
            "none".to_owned()
        } else {
            faults.join(",")
        };
        let what = match &self.file {
            Some(file) if !self.generate => file.display().to_string(),
            _ => "--generate".to_owned(),
        };
        let shape = if self.generate {
            String::new()
        } else {
            format!(" {}", self.shape.to_flags().join(" "))
        };
        format!(
            "cca chaos {what} --seed {seed} --duration {} --settle {} --lease-ttl {} --replicas {} --faults {faults}{shape}",
            format_duration(self.duration),
            format_duration(self.settle),
            format_duration(self.lease_ttl),
            self.replicas,
        )
    }
}

/// Runs the seeds; see the [module docs](self).
///
/// # Errors
///
/// [`CliError::Read`] when the file cannot be read.
pub fn run(args: &ChaosArgs) -> Result<ExitCode, CliError> {
    let chaos = match (&args.file, args.generate) {
        (Some(path), false) => {
            let file = read_source(path)?;
            let Some(compiled) = compile_or_report(&file, "simulated") else {
                return Ok(ExitCode::from(EXIT_FAILURE));
            };
            let desired = compiled.to_facts();
            let nodes = args.nodes();
            // A load surge takes a service that scales on a metric to its `max`: the cluster
            // must hold it there to converge after one.
            let surges = args
                .rates()
                .iter()
                .any(|(kind, rate)| kind == FaultKind::LoadSurge && rate > 0.0);
            let unsatisfiable = if surges {
                feasibility_at_max(&desired, &nodes)
            } else {
                feasibility(&desired, &nodes)
            };
            if !unsatisfiable.is_empty() {
                println!(
                    "{} cannot converge on {} nodes of {} cpu and {} memory{}; nothing simulated:",
                    path.display(),
                    nodes.len(),
                    args.shape.node_cpu,
                    args.shape.node_memory,
                    if surges {
                        " with its scaled services at their max (where the load-surge fault \
                         takes them; --faults without load-surge judges their counts)"
                    } else {
                        ""
                    }
                );
                for problem in unsatisfiable {
                    println!("  {problem}");
                }
                return Ok(ExitCode::from(EXIT_FAILURE));
            }
            let mut builder = Simulation::builder(desired);
            for node in nodes {
                builder = builder.node(node);
            }
            let builder = args.configure(builder);
            if let (Some(trace), Some(seed)) = (&args.trace, args.seed) {
                write_trace(trace, builder.clone().seed(seed).run())?;
            }
            Chaos::new(builder, seeds(args))
        }
        _ => {
            if let Some(seed) = args.seed {
                let workload = Workload::generate(seed, args.duration);
                if args.print_workload {
                    println!("{workload}");
                }
                if let (Some(trace), Ok(builder)) = (&args.trace, workload.builder()) {
                    write_trace(
                        trace,
                        args.configure(builder)
                            .settle_at_least(workload.settle())
                            .seed(seed)
                            .run(),
                    )?;
                }
                if args.shrink {
                    return Ok(shrink_seed(args, workload, seed));
                }
            }
            let configured = args.clone();
            Chaos::generated(
                args.duration,
                move |builder| configured.configure(builder),
                seeds(args),
            )
        }
    };
    let total = seeds(args).len();
    let started = Instant::now();
    let terminal = std::io::stderr().is_terminal();
    let summary = chaos.threads(args.threads as usize).run(|run, done| {
        let verdict = if run.passed { "ok" } else { "FAILED" };
        if terminal {
            eprint!("\r{done}/{total} seeds (seed {} {verdict})   ", run.seed);
        } else if !run.passed || done % 10 == 0 || done == total {
            eprintln!("{done}/{total} seeds (seed {} {verdict})", run.seed);
        }
    });
    if terminal {
        eprintln!();
    }
    print!("{}", render(args, &summary, started.elapsed()));
    Ok(if summary.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_FAILURE)
    })
}

/// Shrinks the failing run of generated `workload` (its seed `seed`) and prints what is left.
fn shrink_seed(args: &ChaosArgs, workload: Workload, seed: u64) -> ExitCode {
    let build = |w: &Workload| {
        w.builder()
            .ok()
            .map(|b| args.configure(b).settle_at_least(w.settle()).seed(seed))
    };
    let Some(builder) = build(&workload) else {
        println!("seed {seed}: the language refused its workload; nothing to shrink");
        return ExitCode::from(EXIT_FAILURE);
    };
    let first = builder.clone().run();
    if first.passed() {
        println!("seed {seed} passes: nothing to shrink");
        return ExitCode::SUCCESS;
    }
    // The same failure: the same invariant broken, or no convergence.
    let verdict =
        |report: &ccattler_testkit::sim::Report| report.violation.as_ref().map(|v| v.invariant);
    let chased = verdict(&first);
    let fails = |w: &Workload, s: &ccattler_testkit::sim::Schedule| {
        build(w).is_some_and(|b| {
            let report = b.schedule(s.clone()).run();
            !report.passed() && verdict(&report) == chased
        })
    };
    eprintln!(
        "seed {seed} fails ({}); shrinking...",
        first.explain().lines().next().unwrap_or("")
    );
    let (small, faults) = ccattler_testkit::sim::shrink(workload, first.schedule.clone(), fails);
    println!("seed {seed} shrunk to {} faults:", faults.faults.len());
    for fault in &faults.faults {
        println!("  {fault}");
    }
    println!("{small}");
    ExitCode::from(EXIT_FAILURE)
}

/// The seeds the arguments name: `--seed N`, or `--seeds` of them from `--first-seed`.
fn seeds(args: &ChaosArgs) -> Vec<u64> {
    match args.seed {
        Some(seed) => vec![seed],
        None => (args.first_seed..args.first_seed.saturating_add(args.seeds)).collect(),
    }
}

/// Writes one seed's whole trace to `path`.
fn write_trace(
    path: &std::path::Path,
    report: ccattler_testkit::sim::Report,
) -> Result<(), CliError> {
    std::fs::write(path, report.trace.to_string()).map_err(|source| CliError::Write {
        path: path.to_owned(),
        source,
    })?;
    eprintln!(
        "{} lines of trace written to {}",
        report.trace.len(),
        path.display()
    );
    Ok(())
}

/// The report: faults fired, convergence percentiles, failing seeds with their replay command.
fn render(args: &ChaosArgs, summary: &Summary, took: Duration) -> String {
    let mut out = String::new();
    let runs = summary.runs.len();
    let failed: Vec<_> = summary.failed().collect();
    let nodes = if args.generate {
        "generated workloads and clusters".to_owned()
    } else {
        format!("{} nodes", args.shape.nodes)
    };
    out.push_str(&format!(
        "{runs} seeds x {} of virtual time, {nodes}, in {:.1}s: {} passed, {} failed\n",
        format_duration(args.duration),
        took.as_secs_f64(),
        runs - failed.len(),
        failed.len()
    ));
    out.push_str("faults fired:\n");
    for (kind, count) in summary.fired() {
        out.push_str(&format!("  {:<20} {count}\n", kind.name()));
    }
    let show = |p| {
        summary
            .convergence_percentile(p)
            .map_or_else(|| "-".to_owned(), |d| format!("{:.1}s", d.as_secs_f64()))
    };
    // The slowest seed, to replay (`--seed S`) when the tail looks wrong.
    let slowest = summary
        .runs
        .iter()
        .filter_map(|r| Some((r.time_to_converge?, r.seed)))
        .max()
        .map_or_else(String::new, |(_, seed)| format!(" (seed {seed})"));
    out.push_str(&format!(
        "time to converge after the last fault: p50 {}, p99 {}, max {}{slowest}\n",
        show(50),
        show(99),
        show(100)
    ));
    for run in failed {
        out.push_str(&format!("\nseed {} FAILED\n", run.seed));
        if let Some(explanation) = &run.explanation {
            let lines: Vec<&str> = explanation.lines().collect();
            let keep = if args.seed.is_some() { lines.len() } else { 6 };
            for line in lines.iter().take(keep) {
                out.push_str(&format!("  {line}\n"));
            }
        }
        out.push_str(&format!("  replay: {}\n", args.replay(run.seed)));
    }
    out
}
