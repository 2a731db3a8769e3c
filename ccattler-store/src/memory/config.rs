//! [`MemoryConfig`]: the knobs of a [`MemoryStore`](super::MemoryStore).

use std::sync::Arc;
use std::time::Duration;

use ccattler_core::{Clock, StoreLimits, SystemClock};

/// How a [`MemoryStore`](super::MemoryStore) is set up.
///
/// | setting | default | meaning |
/// |---|---|---|
/// | [`limits`](MemoryConfig::limits) | [`StoreLimits::default()`] (128 ops, 1.5 MiB) | request limits, as etcd's defaults |
/// | [`watch_buffer`](MemoryConfig::watch_buffer) | 1024 events | the most events buffered per watcher before it reads from the history instead |
/// | [`history_limit`](MemoryConfig::history_limit) | 100 000 events, or as many as the store holds facts if more | the most events kept for watches to replay; older revisions are compacted away |
/// | [`clock`](MemoryConfig::clock) | [`SystemClock`] | the time leases expire by |
/// | [`reaper_interval`](MemoryConfig::reaper_interval) | 100 ms | how often a background thread expires leases (system clock only) |
///
/// ```
/// use std::sync::Arc;
/// use ccattler_core::ManualClock;
/// use ccattler_store::{MemoryConfig, MemoryStore};
///
/// let clock = ManualClock::new();
/// let store = MemoryStore::with_config(
///     MemoryConfig::default()
///         .history_limit(10_000)
///         .clock(Arc::new(clock.clone())),
/// );
/// # drop(store);
/// ```
#[derive(Clone, Debug)]
pub struct MemoryConfig {
    pub(crate) limits: StoreLimits,
    pub(crate) watch_buffer: usize,
    pub(crate) history_limit: HistoryLimit,
    pub(crate) clock: Option<Arc<dyn Clock>>,
    pub(crate) reaper_interval: Duration,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig {
            limits: StoreLimits::default(),
            watch_buffer: 1024,
            history_limit: HistoryLimit::AtLeastFacts(100_000),
            clock: None,
            reaper_interval: Duration::from_millis(100),
        }
    }
}

impl MemoryConfig {
    /// The request limits the store enforces and reports from
    /// [`FactStore::limits`](ccattler_core::FactStore::limits).
    #[must_use]
    pub fn limits(mut self, limits: StoreLimits) -> Self {
        self.limits = limits;
        self
    }

    /// The most events buffered per watcher (at least 1). A watcher whose reader falls further
    /// behind catches up from the history instead; see [`MemoryWatch`](super::MemoryWatch).
    #[must_use]
    pub fn watch_buffer(mut self, events: usize) -> Self {
        self.watch_buffer = events.max(1);
        self
    }

    /// The most events kept in the history, whatever the store holds. When a write takes it
    /// over, the oldest whole revisions are dropped and the compaction revision moves forward.
    ///
    /// Without it, the history keeps 100,000 events, or as many as the store holds facts when
    /// that is more: a watcher that fell behind by fewer writes than the store has facts
    /// replays what it missed instead of listing every fact again (a list costs the facts, a
    /// replay the events). An event shares its key and value with the fact it wrote, so the
    /// history costs about 200 bytes an event besides, up to the size of the store's index.
    #[must_use]
    pub fn history_limit(mut self, events: usize) -> Self {
        self.history_limit = HistoryLimit::Fixed(events);
        self
    }

    /// The clock leases expire by. With a clock other than the default system clock there is no
    /// background reaper: expiry happens at the start of every operation and on
    /// [`MemoryStore::expire_leases`](super::MemoryStore::expire_leases).
    #[must_use]
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// How often the background thread expires leases when the store runs on the system clock.
    #[must_use]
    pub fn reaper_interval(mut self, interval: Duration) -> Self {
        self.reaper_interval = interval;
        self
    }

    /// The clock to use, and whether it is the default system clock.
    pub(crate) fn resolve_clock(&self) -> (Arc<dyn Clock>, bool) {
        match &self.clock {
            Some(clock) => (Arc::clone(clock), false),
            None => (Arc::new(SystemClock::new()), true),
        }
    }
}

/// How many events the history keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HistoryLimit {
    /// This many, whatever the store holds.
    Fixed(usize),
    /// This many, or as many as the store holds facts when that is more.
    AtLeastFacts(usize),
}

impl HistoryLimit {
    /// The most events kept while the store holds `facts` facts.
    pub(crate) fn events(self, facts: usize) -> usize {
        match self {
            HistoryLimit::Fixed(events) => events,
            HistoryLimit::AtLeastFacts(events) => events.max(facts),
        }
    }
}
