//! Time in the harness: one clock, tokio's, for the runner, the agents and the store's leases.
//!
//! The runner's timers (resync, backoff), the agents' keep-alives and start/stop delays, and the
//! harness's waits all use `tokio::time`. The store's leases expire by [`TokioClock`], which reads
//! the same `tokio::time::Instant`, and a reaper task calls
//! [`MemoryStore::expire_leases`] every [`REAPER_INTERVAL`] so that expiry is seen by watchers
//! even when nobody writes.
//!
//! So under `#[tokio::test(start_paused = true)]` every part of the cluster runs on tokio's
//! virtual clock: when every task waits, tokio jumps to the next timer, a lease TTL of 10 s
//! passes in no real time, and nothing depends on how fast the machine is. On a normal runtime
//! (benchmarks) the same clock is real time.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ccattler_core::Clock;
use ccattler_store::MemoryStore;
use tokio::task::JoinHandle;

/// How often the reaper task expires leases.
pub const REAPER_INTERVAL: Duration = Duration::from_millis(100);

/// A [`Clock`] that reads tokio's clock: virtual time when tokio's clock is paused.
///
/// Create it inside the runtime whose clock it should follow. It never goes back, even when
/// read from a thread outside that runtime (where tokio falls back to the system clock).
#[derive(Clone, Debug)]
pub struct TokioClock {
    origin: tokio::time::Instant,
    latest: Arc<AtomicU64>,
}

impl TokioClock {
    /// A clock whose origin is tokio's `now`.
    pub fn new() -> Self {
        TokioClock {
            origin: tokio::time::Instant::now(),
            latest: Arc::new(AtomicU64::new(0)),
        }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        TokioClock::new()
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Duration {
        let elapsed = tokio::time::Instant::now().saturating_duration_since(self.origin);
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        let latest = self.latest.fetch_max(nanos, Ordering::SeqCst).max(nanos);
        Duration::from_nanos(latest)
    }
}

/// Spawns the task that expires due leases every [`REAPER_INTERVAL`].
pub(crate) fn spawn_reaper(store: MemoryStore) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(REAPER_INTERVAL);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            store.expire_leases();
        }
    })
}
