//! Loop timing: the runner's configuration and its backoff schedules.

use std::time::Duration;

/// Timing and retry settings of a controller loop. `Default` gives the documented defaults.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct LoopConfig {
    /// How often the loop lists everything again as a safety net against missed events: the
    /// longest wait between two lists. Each wait is shortened by a random fraction of up to a
    /// tenth ([`Backoff::resync_delay`]), so loops started together do not list together.
    /// Default 30 s.
    pub resync_interval: Duration,
    /// Delays before restarting a failed or panicking controller, one per consecutive failure; the
    /// last repeats. Default 100 ms, 500 ms, 1 s, 2 s, 5 s, then every 30 s.
    pub restart_delays: Vec<Duration>,
    /// First delay after a commit conflict; it doubles per consecutive conflict. Default 5 ms.
    pub conflict_base: Duration,
    /// Longest delay after a commit conflict. Default 1 s.
    pub conflict_cap: Duration,
    /// How long shutdown waits for in-flight work before abandoning it. Default 5 s.
    pub shutdown_timeout: Duration,
    /// How long the [`Event`](crate::Event)s controllers record are kept: the tokio runner
    /// attaches them to a lease it renews never and replaces every sixth of this, so an event
    /// lives between this long and a sixth more. Zero writes no events. Default 1 h.
    pub events_max_age: Duration,
}

impl Default for LoopConfig {
    fn default() -> Self {
        LoopConfig {
            resync_interval: Duration::from_secs(30),
            restart_delays: [100, 500, 1_000, 2_000, 5_000, 30_000]
                .into_iter()
                .map(Duration::from_millis)
                .collect(),
            conflict_base: Duration::from_millis(5),
            conflict_cap: Duration::from_secs(1),
            shutdown_timeout: Duration::from_secs(5),
            events_max_age: Duration::from_secs(3600),
        }
    }
}

impl LoopConfig {
    /// Sets the resync interval.
    #[must_use]
    pub fn resync_interval(mut self, every: Duration) -> Self {
        self.resync_interval = every;
        self
    }

    /// Sets the restart delays (at least one; an empty list restarts at once).
    #[must_use]
    pub fn restart_delays(mut self, delays: Vec<Duration>) -> Self {
        self.restart_delays = delays;
        self
    }

    /// Sets the conflict backoff's first delay and cap.
    #[must_use]
    pub fn conflict_backoff(mut self, base: Duration, cap: Duration) -> Self {
        self.conflict_base = base;
        self.conflict_cap = cap;
        self
    }

    /// Sets the shutdown timeout.
    #[must_use]
    pub fn shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.shutdown_timeout = timeout;
        self
    }
}

/// The two backoff schedules of a loop, as pure functions of attempt counts.
#[derive(Debug, Clone)]
pub struct Backoff;

impl Backoff {
    /// Delay before restart after the `failures`-th consecutive failure (1-based).
    pub fn restart_delay(config: &LoopConfig, failures: u32) -> Duration {
        Backoff::nth(&config.restart_delays, failures)
    }

    /// The delay a schedule gives the `attempt`-th consecutive failure (1-based): one delay per
    /// attempt, the last repeating; zero for an empty schedule. The runner's restarts and the
    /// node agent's retries (starts, store reconnects) share this one rule.
    ///
    /// ```
    /// use std::time::Duration;
    /// use ccattler_core::runner::Backoff;
    ///
    /// let schedule = [Duration::from_millis(100), Duration::from_secs(1)];
    /// assert_eq!(Backoff::nth(&schedule, 1), Duration::from_millis(100));
    /// assert_eq!(Backoff::nth(&schedule, 5), Duration::from_secs(1));
    /// ```
    pub fn nth(schedule: &[Duration], attempt: u32) -> Duration {
        let index = usize::try_from(attempt.saturating_sub(1)).unwrap_or(usize::MAX);
        schedule
            .get(index)
            .or(schedule.last())
            .copied()
            .unwrap_or_default()
    }

    /// The wait before the next periodic list: `interval` shortened by up to a tenth,
    /// `interval * (1 - unit / 10)`, where `unit` is a number in [0, 1) the caller draws
    /// (clamped into that range). Loops that started together (the controllers of one process,
    /// the agents of a fleet) thus spread their lists instead of all listing at one moment, a
    /// herd the store would feel; no wait is ever longer than `interval`, so a missed event is
    /// still found within it. The runner's loops and the node agent share this one rule.
    ///
    /// ```
    /// use std::time::Duration;
    /// use ccattler_core::runner::Backoff;
    ///
    /// let every = Duration::from_secs(30);
    /// assert_eq!(Backoff::resync_delay(every, 0.0), every);
    /// assert_eq!(Backoff::resync_delay(every, 0.5), Duration::from_millis(28_500));
    /// ```
    pub fn resync_delay(interval: Duration, unit: f64) -> Duration {
        interval.mul_f64(1.0 - clamped_unit(unit) / 10.0)
    }

    /// Jittered delay after the `conflicts`-th consecutive conflict (1-based): exponential from
    /// `conflict_base`, capped at `conflict_cap`, then scaled by a factor in [0.5, 1.0) so that
    /// racing writers spread out: `0.5 + unit / 2`, where `unit` is a random number in [0, 1)
    /// the caller draws (clamped into that range), so the schedule itself stays deterministic.
    pub fn conflict_delay(config: &LoopConfig, conflicts: u32, unit: f64) -> Duration {
        let doublings = conflicts.saturating_sub(1).min(20);
        let full = config
            .conflict_base
            .saturating_mul(1u32 << doublings)
            .min(config.conflict_cap);
        full.mul_f64(0.5 + clamped_unit(unit) / 2.0)
    }
}

/// `unit` clamped into [0, 1]; 0 for a number that is not finite.
fn clamped_unit(unit: f64) -> f64 {
    if unit.is_finite() {
        unit.clamp(0.0, 1.0)
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restart_delays_follow_the_documented_schedule() {
        let config = LoopConfig::default();
        let delays: Vec<u128> = (1..=8)
            .map(|n| Backoff::restart_delay(&config, n).as_millis())
            .collect();
        assert_eq!(delays, [100, 500, 1000, 2000, 5000, 30000, 30000, 30000]);
    }

    #[test]
    fn resync_delays_are_never_longer_than_the_interval_nor_shorter_by_more_than_a_tenth() {
        let every = Duration::from_secs(30);
        let mut rng = crate::seeded::Seeded::new(7);
        let delays: Vec<Duration> = (0..1000)
            .map(|_| Backoff::resync_delay(every, rng.unit()))
            .collect();
        assert!(delays.iter().all(|d| *d <= every && *d >= every * 9 / 10));
        let spread = delays.iter().max().zip(delays.iter().min());
        assert!(spread.is_some_and(|(max, min)| *max - *min > Duration::from_secs(2)));
        assert_eq!(Backoff::resync_delay(every, f64::NAN), every);
        assert_eq!(Backoff::resync_delay(every, 7.0), every * 9 / 10);
    }

    #[test]
    fn conflict_delays_grow_are_capped_and_jittered() {
        let config = LoopConfig::default();
        let mut rng = crate::seeded::Seeded::new(7);
        for n in 1..30 {
            let full = config
                .conflict_base
                .saturating_mul(1 << (n - 1).min(20))
                .min(config.conflict_cap);
            let d = Backoff::conflict_delay(&config, n, rng.unit());
            assert!(d >= full / 2 && d < full, "attempt {n}: {d:?} vs {full:?}");
        }
    }
}
