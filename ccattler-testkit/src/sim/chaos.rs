//! [`Chaos`]: many seeds of one simulation, spread over threads, summed up.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::faults::FaultKind;
use super::{Report, SimulationBuilder};

/// Runs one simulation per seed and sums the runs up. Every seed runs once: a failing seed is
/// reported, never retried.
#[derive(Debug, Clone)]
pub struct Chaos {
    builder: SimulationBuilder,
    seeds: Vec<u64>,
    threads: usize,
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
    /// For a failed run: [`Report::explain`].
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
            builder,
            seeds: seeds.into_iter().collect(),
            threads: 2,
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
                        let report = self.builder.clone().seed(seed).run();
                        let run = Run::of(&report);
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
