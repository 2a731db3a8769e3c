//! [`Chaos`]: many seeds of one simulation, spread over threads, summed up.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::faults::FaultKind;
use super::{Report, SimulationBuilder};
use crate::workload::Workload;

/// Runs one simulation per seed and sums the runs up. Every seed runs once: a failing seed is
/// reported, never retried.
#[derive(Clone)]
pub struct Chaos {
    source: Source,
    seeds: Vec<u64>,
    threads: usize,
}

/// Where each seed's simulation comes from.
#[derive(Clone)]
enum Source {
    /// One builder, its seed replaced.
    Fixed(Box<SimulationBuilder>),
    /// The workload drawn from the seed ([`Workload::generate`] over `window`), its builder
    /// then set up by `configure` (faults, timing).
    Generated {
        window: Duration,
        configure: Configure,
    },
}

type Configure = Arc<dyn Fn(SimulationBuilder) -> SimulationBuilder + Send + Sync>;

impl std::fmt::Debug for Chaos {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let source = match &self.source {
            Source::Fixed(builder) => format!("{builder:?}"),
            Source::Generated { window, .. } => format!("generated workloads over {window:?}"),
        };
        f.debug_struct("Chaos")
            .field("source", &source)
            .field("seeds", &self.seeds.len())
            .field("threads", &self.threads)
            .finish()
    }
}

/// What one seed did, kept small so that thousands fit.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Run {
    /// The seed.
    pub seed: u64,
    /// Whether it converged in time with no invariant broken.
    pub passed: bool,
    /// How long convergence took after the faults stopped.
    pub time_to_converge: Option<Duration>,
    /// How often each fault kind fired.
    pub fired: Vec<(FaultKind, u64)>,
    /// For a failed run: [`Report::explain`] (and, for a generated workload, what it was).
    pub explanation: Option<String>,
}

impl Run {
    fn of(report: &Report) -> Self {
        let passed = report.passed();
        Run {
            seed: report.seed,
            passed,
            time_to_converge: report.time_to_converge(),
            fired: report.fired.clone(),
            explanation: (!passed).then(|| report.explain()),
        }
    }

    /// A seed whose simulation could not even be built: failed, with why.
    fn refused(seed: u64, why: String) -> Self {
        Run {
            seed,
            passed: false,
            time_to_converge: None,
            fired: Vec::new(),
            explanation: Some(why),
        }
    }
}

/// The runs of every seed, in seed order.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Summary {
    /// One per seed.
    pub runs: Vec<Run>,
}

impl Summary {
    /// The runs that failed.
    pub fn failed(&self) -> impl Iterator<Item = &Run> {
        self.runs.iter().filter(|r| !r.passed)
    }

    /// Each failed run's explanation (its seed, what failed, the trace's last lines), in seed
    /// order; empty when every run passed.
    pub fn failures(&self) -> Vec<String> {
        self.failed()
            .filter_map(|run| run.explanation.clone())
            .collect()
    }

    /// Whether every run passed.
    pub fn passed(&self) -> bool {
        self.runs.iter().all(|r| r.passed)
    }

    /// How often each kind fired over all runs.
    pub fn fired(&self) -> Vec<(FaultKind, u64)> {
        FaultKind::ALL
            .into_iter()
            .map(|kind| {
                let total = self
                    .runs
                    .iter()
                    .flat_map(|r| &r.fired)
                    .filter(|(k, _)| *k == kind)
                    .map(|(_, n)| n)
                    .sum();
                (kind, total)
            })
            .collect()
    }

    /// The `p`-th percentile (0..=100, nearest rank) of the time to converge of the runs that
    /// converged; `None` if none did.
    pub fn convergence_percentile(&self, p: u32) -> Option<Duration> {
        let mut times: Vec<Duration> = self
            .runs
            .iter()
            .filter_map(|r| r.time_to_converge)
            .collect();
        if times.is_empty() {
            return None;
        }
        times.sort();
        let rank = (u64::from(p.min(100)) * times.len() as u64).div_ceil(100);
        let index = usize::try_from(rank)
            .unwrap_or(usize::MAX)
            .saturating_sub(1);
        times.get(index.min(times.len() - 1)).copied()
    }
}

impl Chaos {
    /// Runs `builder` once per seed in `seeds` (the builder's own seed is replaced), on two
    /// threads.
    pub fn new(builder: SimulationBuilder, seeds: impl IntoIterator<Item = u64>) -> Self {
        Chaos {
            source: Source::Fixed(Box::new(builder)),
            seeds: seeds.into_iter().collect(),
            threads: 2,
        }
    }

    /// Runs, for each seed in `seeds`, the workload drawn from it
    /// ([`Workload::generate`], its changes within `window`), on a builder `configure` sets up
    /// (faults, timing, replicas). A seed whose documents the language refuses fails with the
    /// document and the diagnostics; a failing seed's explanation begins with its workload.
    /// Each run's convergence bound is at least what its workload's pace needs
    /// ([`Workload::settle`]).
    pub fn generated<F>(
        window: Duration,
        configure: F,
        seeds: impl IntoIterator<Item = u64>,
    ) -> Self
    where
        F: Fn(SimulationBuilder) -> SimulationBuilder + Send + Sync + 'static,
    {
        Chaos {
            source: Source::Generated {
                window,
                configure: Arc::new(configure),
            },
            seeds: seeds.into_iter().collect(),
            threads: 2,
        }
    }

    /// The run of one seed.
    fn run_seed(&self, seed: u64) -> Run {
        match &self.source {
            Source::Fixed(builder) => Run::of(&builder.clone().seed(seed).run()),
            Source::Generated { window, configure } => {
                let workload = Workload::generate(seed, *window);
                let builder = match workload.builder() {
                    Ok(builder) => builder,
                    Err(refused) => return Run::refused(seed, refused.to_string()),
                };
                let settle = workload.settle();
                let builder = configure(builder).settle_at_least(settle);
                let mut run = Run::of(&builder.seed(seed).run());
                if let Some(explanation) = &mut run.explanation {
                    *explanation = format!(
                        "{}
{explanation}",
                        workload.summary()
                    );
                }
                run
            }
        }
    }

    /// Sets how many threads run seeds (at least one).
    #[must_use]
    pub fn threads(mut self, threads: usize) -> Self {
        self.threads = threads.max(1);
        self
    }

    /// Runs every seed; `progress` is called after each with the run and how many are done.
    /// Which thread runs a seed does not change its result: each run is its own simulation.
    pub fn run(&self, progress: impl Fn(&Run, usize) + Sync) -> Summary {
        let next = AtomicU64::new(0);
        let done = AtomicU64::new(0);
        let runs = Mutex::new(Vec::with_capacity(self.seeds.len()));
        std::thread::scope(|scope| {
            for _ in 0..self.threads.min(self.seeds.len().max(1)) {
                scope.spawn(|| {
                    loop {
                        let index = next.fetch_add(1, Ordering::SeqCst) as usize;
                        let Some(&seed) = self.seeds.get(index) else {
                            return;
                        };
                        let run = self.run_seed(seed);
                        let finished = done.fetch_add(1, Ordering::SeqCst) as usize + 1;
                        progress(&run, finished);
                        if let Ok(mut runs) = runs.lock() {
                            runs.push(run);
                        }
                    }
                });
            }
        });
        let mut runs = runs.into_inner().unwrap_or_default();
        runs.sort_by_key(|r| r.seed);
        Summary { runs }
    }
}
