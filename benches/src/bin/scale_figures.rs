//! Prints the whole loop's figures at several sizes, each beside the figure kept in
//! `benches/figures/scale.txt`, so a change that makes the cluster slower shows the day it is
//! made.
//!
//! `cargo run --release -p ccattler-benches --bin scale_figures [-- --shapes 1000x100,10000x256]
//! [--timeout 120] [--keep]`
//!
//! Each shape `INSTANCESxNODES` runs in a process of its own (so that its peak memory is its
//! own): the cluster `cca dev --runtime sim` runs (an embedded `MemoryStore`, the standard
//! controllers, one real node agent per node over the simulator), real time, nodes of 16 cpu
//! and 64Gi, ten services of 100m cpu sharing the instances. Figures:
//!
//! - `converge_s`: from the apply to every service running and ready (or the timeout);
//! - `peak_mb`: the process's peak resident memory;
//! - `writes`: store revisions (transactions) from the apply to convergence; `events`: the keys
//!   they wrote, as one watcher of the whole store receives them (`-` when that watcher fell
//!   behind the history the store keeps);
//! - `steady_writes_s`: store revisions per second over the 5 s after convergence (lease
//!   renewals do not make revisions), or after the timeout for a shape that never converges:
//!   more instances than the nodes hold (16 cpu a node, 100m an instance: `2000x10`) shows
//!   what a cluster stuck with unplaced instances writes;
//! - `lapses`: node leases that expired during the run (each one replaces a node's instances).
//!
//! `--keep` writes the figures measured into the kept file instead of comparing.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ccattler_benches::peak_resident_bytes;
use ccattler_controllers::lang::SourceFile;
use ccattler_core::schema::{self, Cpu, Memory};
use ccattler_core::{EventKind, FactStore, Revision};
use ccattler_examples::cca::cluster::{DevCluster, DevConfig, RuntimeKind};
use ccattler_examples::cca::progress::StatusFollower;
use futures_util::StreamExt;

const KEPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/figures/scale.txt");
const DEFAULT_SHAPES: &str = "1000x100,10000x100,10000x256,10000x1000,100000x1000,100000x10000";
const FIGURES: [&str; 6] = [
    "converge_s",
    "peak_mb",
    "writes",
    "events",
    "steady_writes_s",
    "lapses",
];

type Figures = BTreeMap<String, f64>;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
    };
    let timeout = Duration::from_secs(flag("--timeout").map_or(Ok(120), |t| t.parse())?);
    if let Some(shape) = flag("--one") {
        let (instances, nodes) = parse_shape(shape)?;
        let runtime = tokio::runtime::Runtime::new()?;
        let figures = runtime.block_on(measure(instances, nodes, timeout))?;
        runtime.shutdown_timeout(Duration::from_millis(200));
        println!("{}", render(&figures));
        return Ok(());
    }
    let shapes = flag("--shapes").map_or(DEFAULT_SHAPES, String::as_str);
    let kept = read_kept();
    let mut measured = BTreeMap::new();
    println!(
        "{:<13} {}",
        "shape",
        FIGURES.map(|f| format!("{f:>24}")).join("")
    );
    for shape in shapes.split(',') {
        parse_shape(shape)?;
        let out = Command::new(std::env::current_exe()?)
            .args(["--one", shape, "--timeout", &timeout.as_secs().to_string()])
            .output()?;
        if !out.status.success() {
            return Err(format!(
                "{shape}: {}",
                String::from_utf8_lossy(&out.stderr).trim_end()
            )
            .into());
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let figures = parse_figures(text.lines().last().unwrap_or_default());
        let mut row = format!("{shape:<13} ");
        for name in FIGURES {
            let now = figures.get(name).copied().unwrap_or(f64::NAN);
            let cell = match kept.get(shape).and_then(|k| k.get(name)) {
                Some(then) => format!("{} (kept {})", short(now), short(*then)),
                None => short(now),
            };
            let _ = write!(row, "{cell:>24}");
        }
        println!("{row}");
        measured.insert(shape.to_owned(), figures);
    }
    if args.iter().any(|a| a == "--keep") {
        let mut all = kept;
        all.extend(measured);
        let mut text = String::from(
            "# The whole loop's figures as last kept (scale_figures --keep); one shape a line.\n",
        );
        for (shape, figures) in &all {
            let _ = writeln!(text, "{shape} {}", render(figures));
        }
        std::fs::write(KEPT, text)?;
        println!("kept in {KEPT}");
    }
    Ok(())
}

/// One shape's run; see the module docs.
async fn measure(
    instances: u32,
    nodes: u32,
    timeout: Duration,
) -> Result<Figures, Box<dyn std::error::Error>> {
    let cluster = DevCluster::start(DevConfig {
        runtime: RuntimeKind::Sim,
        nodes,
        cpu: Cpu::from_millis(16_000),
        memory: Memory::from_bytes(64 << 30),
        ..DevConfig::default()
    })
    .await?;
    cluster
        .wait_for_nodes(cluster.registration_timeout())
        .await?;
    let store = cluster.store().clone();
    let lapses = Arc::new(AtomicU64::new(0));
    let mut leases = store.watch(schema::NODE_LEASES, Revision::ZERO).await?;
    let lapsed = Arc::clone(&lapses);
    let counting_lapses = tokio::spawn(async move {
        while let Some(Ok(event)) = leases.next().await {
            if event.kind == EventKind::Delete {
                lapsed.fetch_add(1, Ordering::Relaxed);
            }
        }
    });
    let events = Arc::new(AtomicU64::new(0));
    let mut everything = store.watch("", Revision::ZERO).await?;
    let seen = Arc::clone(&events);
    let counting_events = tokio::spawn(async move {
        while let Some(event) = everything.next().await {
            if event.is_err() {
                // Fell behind the history kept: the count would be short, so there is none.
                seen.store(u64::MAX, Ordering::Relaxed);
                break;
            }
            seen.fetch_add(1, Ordering::Relaxed);
        }
    });
    let mut follower = StatusFollower::new(&store).await?;
    let services = 10;
    let mut text = String::new();
    for s in 0..services {
        let _ = write!(
            text,
            "service svc{s} {{\n    image busybox\n    instances {}\n    resources {{\n        \
             cpu 100m\n        memory 64Mi\n    }}\n}}\n",
            instances / services
        );
    }
    let first = store.revision().await?;
    let started = Instant::now();
    cluster.apply(&SourceFile::new("scale.cca", text)).await?;
    let converged = tokio::time::timeout(timeout, async {
        while !follower.next().await?.is_converged() {}
        Ok::<_, ccattler_core::StoreError>(())
    })
    .await;
    let converge_s = started.elapsed().as_secs_f64();
    let at_convergence = store.revision().await?;
    // Let the counting watcher drain what was delivered up to now.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let events_at_convergence = events.load(Ordering::Relaxed);
    let mut figures = Figures::new();
    figures.insert("converge_s".into(), converge_s);
    figures.insert("writes".into(), (at_convergence.0 - first.0) as f64);
    if converged.is_err() {
        // A shape that does not fit stays where it is: what it writes then is a retry storm
        // or nothing.
        eprintln!("not converged within {timeout:?}; steady_writes_s is measured from there");
    }
    let steady = Duration::from_secs(5);
    tokio::time::sleep(steady).await;
    let after = store.revision().await?;
    let per_s = (after.0 - at_convergence.0) as f64 / steady.as_secs_f64();
    figures.insert("steady_writes_s".into(), per_s);
    figures.insert("lapses".into(), lapses.load(Ordering::Relaxed) as f64);
    let events = match events_at_convergence {
        u64::MAX => f64::NAN,
        seen => seen as f64,
    };
    figures.insert("events".into(), events);
    counting_lapses.abort();
    counting_events.abort();
    cluster.shutdown().await;
    figures.insert(
        "peak_mb".into(),
        peak_resident_bytes().unwrap_or_default() as f64 / 1e6,
    );
    Ok(figures)
}

fn parse_shape(shape: &str) -> Result<(u32, u32), String> {
    let bad = || format!("a shape is INSTANCESxNODES (10000x256), not {shape:?}");
    let (instances, nodes) = shape.split_once('x').ok_or_else(bad)?;
    Ok((
        instances.parse().map_err(|_| bad())?,
        nodes.parse().map_err(|_| bad())?,
    ))
}

fn render(figures: &Figures) -> String {
    figures
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn parse_figures(line: &str) -> Figures {
    line.split_whitespace()
        .filter_map(|pair| pair.split_once('='))
        .filter_map(|(k, v)| Some((k.to_owned(), v.parse().ok()?)))
        .collect()
}

fn read_kept() -> BTreeMap<String, Figures> {
    let text = std::fs::read_to_string(KEPT).unwrap_or_default();
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once(' '))
        .map(|(shape, rest)| (shape.to_owned(), parse_figures(rest)))
        .collect()
}

/// A figure as people read it: three significant digits at most.
fn short(value: f64) -> String {
    if value.is_nan() {
        "-".into()
    } else if value >= 100.0 || value == value.trunc() {
        format!("{value:.0}")
    } else {
        format!("{value:.2}")
    }
}
