//! Prints the whole loop's figures at several sizes, through `cca dev --runtime sim` (real
//! time) and through the seeded simulation (virtual time), each beside the figure kept in
//! `benches/figures/scale.txt`, so that a change that makes the cluster slower shows the day
//! it is made.
//!
//! `cargo run --release -p ccattler-benches --bin scale_figures [-- --modes dev,sim]
//! [--shapes 1000x100,10000x256] [--timeout 120] [--runs 3] [--keep]`
//!
//! Each run (a mode and a shape) is a process of its own, so that its peak memory is its own.
//! `--runs N` measures each row N times and prints (and keeps) the median of each figure: real
//! time on a shared machine varies from run to run, so one `dev` run is a poor figure. The
//! simulation's figures are deterministic; it runs once whatever `--runs` says.
//! The phases (apply, steady, node loss, rolling update, stuck over capacity) and their
//! figures are those of `ccattler_benches::whole_loop`. `--timeout` bounds each phase (real
//! time for `dev`, virtual time for `sim`). `--keep` writes the figures measured into the kept
//! file instead of only comparing.

use std::process::Command;
use std::time::Duration;

use ccattler_benches::kept::{self, Figures, Rows};
use ccattler_benches::whole_loop::{self, PHASES, Shape};

const KEPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/figures/scale.txt");
const DEFAULT_SHAPES: &str =
    "1000x100,10000x100,10000x256,10000x1000,100000x1000,100000x10000,1000x1000,1000x10000";
const MODES: [&str; 2] = ["dev", "sim"];

type Error = Box<dyn std::error::Error>;

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
    };
    let timeout = Duration::from_secs(flag("--timeout").map_or(Ok(120), |t| t.parse())?);
    let runs: usize = flag("--runs").map_or(Ok(1), |n| n.parse())?;
    if runs == 0 {
        return Err("--runs takes a count of at least 1".into());
    }
    if let Some(run) = flag("--one") {
        let (mode, shape) = run.split_once(':').ok_or("--one takes MODE:SHAPE")?;
        let figures = measure_one(mode, shape.parse()?, timeout)?;
        println!("{}", kept::render(&figures));
        return Ok(());
    }
    let modes: Vec<&str> = match flag("--modes") {
        Some(list) => list.split(',').collect(),
        None => MODES.to_vec(),
    };
    if let Some(bad) = modes.iter().find(|m| !MODES.contains(m)) {
        return Err(format!("a mode is dev or sim, not {bad:?}").into());
    }
    let shapes: Vec<Shape> = flag("--shapes")
        .map_or(DEFAULT_SHAPES, String::as_str)
        .split(',')
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    let kept_rows = kept::read(KEPT.as_ref());
    let mut measured = Rows::new();
    for shape in &shapes {
        for mode in &modes {
            let row = format!("{mode}:{shape}");
            let times = if *mode == "sim" { 1 } else { runs };
            let mut each = Vec::with_capacity(times);
            for _ in 0..times {
                let out = Command::new(std::env::current_exe()?)
                    .args(["--one", &row, "--timeout", &timeout.as_secs().to_string()])
                    .output()?;
                if out.status.success() {
                    let text = String::from_utf8_lossy(&out.stdout);
                    each.push(kept::parse(text.lines().last().unwrap_or_default()));
                } else {
                    // One run that fails does not hide the others' figures.
                    let why = String::from_utf8_lossy(&out.stderr);
                    println!("{row}: FAILED: {}", why.trim_end());
                }
            }
            if each.is_empty() {
                continue;
            }
            let figures = kept::median(&each);
            print_run(&row, &figures, kept_rows.get(&row));
            measured.insert(row, figures);
        }
    }
    if args.iter().any(|a| a == "--keep") {
        let mut all = kept_rows;
        all.extend(measured);
        kept::write(
            KEPT.as_ref(),
            "The whole loop's figures as last kept (scale_figures --keep); MODE:SHAPE a line.",
            &all,
        )?;
        println!("kept in {KEPT}");
    }
    Ok(())
}

/// One run in this process.
fn measure_one(mode: &str, shape: Shape, timeout: Duration) -> Result<Figures, Error> {
    match mode {
        "dev" => {
            let runtime = tokio::runtime::Runtime::new()?;
            let figures = runtime.block_on(whole_loop::dev::measure(shape, timeout))?;
            runtime.shutdown_timeout(Duration::from_millis(200));
            Ok(figures)
        }
        "sim" => whole_loop::sim::measure(shape, timeout),
        other => Err(format!("a mode is dev or sim, not {other:?}").into()),
    }
}

/// One block per run: a line per phase, each figure beside the one kept.
fn print_run(row: &str, figures: &Figures, kept: Option<&Figures>) {
    let cell = |name: &str| {
        kept::beside(
            figures.get(name).copied(),
            kept.and_then(|k| k.get(name)).copied(),
        )
    };
    println!("{row}");
    for phase in PHASES {
        let rates = || {
            format!(
                "writes/s {}, passes/s {}, deliveries/s {}",
                cell(&format!("{phase}_writes_s")),
                cell(&format!("{phase}_passes_s")),
                cell(&format!("{phase}_deliveries_s"))
            )
        };
        let line = if phase == "steady" {
            rates()
        } else if phase == "stuck" {
            format!(
                "{}; placed {}, unplaced {}",
                rates(),
                cell("stuck_placed"),
                cell("stuck_unplaced")
            )
        } else {
            let cpu = format!("{phase}_cpu_s");
            // CPU time of the whole process: measured in `dev` only (the cluster runs in it).
            let cpu = if figures.contains_key(&cpu) {
                format!(" (cpu {} s)", cell(&cpu))
            } else {
                String::new()
            };
            format!(
                "{} s{cpu}, writes {}, deliveries {}",
                cell(&format!("{phase}_s")),
                cell(&format!("{phase}_writes")),
                cell(&format!("{phase}_deliveries"))
            )
        };
        println!("  {phase:<7} {line}");
    }
    let mut last = format!(
        "  peak memory {} MB, leases lapsed {}",
        cell("peak_mb"),
        cell("lapses")
    );
    if figures.contains_key("wall_s") {
        last.push_str(&format!(", real time {} s", cell("wall_s")));
    }
    println!("{last}");
}
