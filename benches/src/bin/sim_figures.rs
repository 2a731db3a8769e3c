//! Prints what the seeded simulation costs: many seeds of a small cluster under every fault,
//! and one seed of a large cluster.
//!
//! `cargo run --release -p ccattler-benches --bin sim_figures [-- --seeds N] [--large-only]`
//!
//! - 1,000 seeds (or N) x 60 s of virtual time, 5 nodes, 20 instances, every fault kind of one runner
//!   at their default rates, on two threads: wall time, and the median time of one seed.
//! - One seed of 1,000 nodes and 10,000 instances, 60 s of virtual time, every fault kind of one runner:
//!   wall time, events handled, the resident memory of the process afterwards, and what its
//!   work cost: the virtual time the simulation charged its reconciles and its agents' actions
//!   beside the real time they took (per fact read, per action), the check on its model of
//!   work, and how long reconciles waited for a core.

use std::time::{Duration, Instant};

use ccattler_benches::resident_bytes;
use ccattler_controllers::apply::DesiredFacts;
use ccattler_controllers::lang::{self, SourceFile};
use ccattler_core::schema::{Cpu, Memory};
use ccattler_testkit::sim::{Chaos, FaultRates, Simulation};

fn desired(text: &str) -> Result<DesiredFacts, Box<dyn std::error::Error>> {
    let file = SourceFile::new("figures.cca", text);
    Ok(lang::check(&file).map_err(|d| d.to_string())?.to_facts())
}

fn document(web: u32, worker: u32) -> String {
    format!(
        "service web {{\n  image example/web:1\n  instances {web}\n  expose 8080 http\n  resources {{\n    cpu 250m\n    memory 128Mi\n  }}\n  readiness {{\n    http /\n    every 1s\n  }}\n}}\n\
         service worker {{\n  image example/worker:1\n  instances {worker}\n  resources {{\n    cpu 100m\n    memory 64Mi\n  }}\n}}\n"
    )
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let seeds: u64 = match args.iter().position(|a| a == "--seeds") {
        Some(i) => args.get(i + 1).ok_or("--seeds needs a number")?.parse()?,
        None => 1_000,
    };
    if !args.iter().any(|a| a == "--large-only") {
        let builder = Simulation::builder(desired(&document(12, 8))?)
            .nodes(5, Cpu::from_millis(2_000), Memory::from_bytes(2 << 30))
            .faults(FaultRates::default())
            .duration(Duration::from_secs(60));
        let started = Instant::now();
        let times = std::sync::Mutex::new(Vec::new());
        let summary = Chaos::new(builder.clone(), 0..seeds).run(|_, _| {});
        let wall = started.elapsed();
        // The time of one seed alone, on one thread, for the median.
        for seed in 0..seeds.min(101) {
            let one = Instant::now();
            let _ = builder.clone().seed(seed).run();
            if let Ok(mut times) = times.lock() {
                times.push(one.elapsed());
            }
        }
        let mut times = times.into_inner().unwrap_or_default();
        times.sort();
        let median = times.get(times.len() / 2).copied().unwrap_or_default();
        println!(
            "{seeds} seeds x 60 s, 5 nodes, 20 instances, all faults, 2 threads: {:.1} s wall \
             ({} passed); one seed alone: median {:.1} ms",
            wall.as_secs_f64(),
            summary.runs.iter().filter(|r| r.passed).count(),
            median.as_secs_f64() * 1e3
        );
    }
    let before = resident_bytes().unwrap_or(0);
    let started = Instant::now();
    // Applied once the nodes have registered (2 s): applied at once, the first nodes to
    // register take what fits, and evening that out moves instances one at a time (max_extra 1)
    // for far longer than the run.
    let report = Simulation::builder(desired("")?)
        .then_apply(Duration::from_secs(2), desired(&document(6_000, 4_000))?)
        .seed(1)
        .nodes(1_000, Cpu::from_millis(8_000), Memory::from_bytes(16 << 30))
        .faults(FaultRates::default())
        .duration(Duration::from_secs(60))
        .run();
    let wall = started.elapsed();
    let after = resident_bytes().unwrap_or(0);
    println!(
        "1 seed x 60 s, 1,000 nodes, 10,000 instances, all faults: {:.1} s wall, {} events, \
         {} ({}), resident memory {:.0} MB (+{:.0} MB)",
        wall.as_secs_f64(),
        report.steps,
        if report.passed() { "passed" } else { "FAILED" },
        report.time_to_converge().map_or_else(
            || "not converged".to_owned(),
            |d| format!("converged {:.1} s after the faults", d.as_secs_f64())
        ),
        after as f64 / 1e6,
        after.saturating_sub(before) as f64 / 1e6,
    );
    let c = report.compute;
    let per_fact = |d: Duration| d.as_nanos() as f64 / c.facts_read.max(1) as f64;
    println!(
        "its {} reconciles read {} facts: charged {:.2} s of virtual time ({:.0} ns per fact \
         read), took {:.2} s of real time ({:.0} ns per fact read); they waited {:.2} s for a \
         core in all, {:.0} ms at most",
        c.reconciles,
        c.facts_read,
        c.charged.as_secs_f64(),
        per_fact(c.charged),
        c.measured.as_secs_f64(),
        per_fact(c.measured),
        c.waited.as_secs_f64(),
        c.longest_wait.as_secs_f64() * 1e3,
    );
    let per_action = |d: Duration| d.as_nanos() as f64 / c.agent_actions.max(1) as f64 / 1e3;
    println!(
        "its agents handed out {} actions: charged {:.2} s of virtual time ({:.1} us each), \
         took {:.2} s of real time ({:.1} us each)",
        c.agent_actions,
        c.agent_charged.as_secs_f64(),
        per_action(c.agent_charged),
        c.agent_measured.as_secs_f64(),
        per_action(c.agent_measured),
    );
    if !report.passed() {
        println!("{}", report.explain());
    }
    Ok(())
}
