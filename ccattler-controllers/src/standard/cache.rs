//! [`ClusterCache`] and [`PlanCache`]: a controller's [`Cluster`] kept up to date from one
//! snapshot to the next, and the services a pass must plan.

use std::collections::BTreeSet;
use std::sync::Arc;

use parking_lot::Mutex;

use ccattler_core::{Change, FactView, Key, KeyError, ReconcileError, Value};

use super::cluster::Cluster;
use super::shared::{Reader, SharedCluster};

/// Keeps a [`Cluster`] in step with the snapshots a controller is handed.
///
/// # Guarantees
///
/// The cluster returned for a view is the same as [`Cluster::read`] of that view; only the cost
/// differs. The cache is derived state, so reconcile stays a pure function of the view. Caches
/// made with [`sharing`](Self::sharing) one [`SharedCluster`] decode each record once between
/// them; one made with [`new`](Self::new) has a cluster of its own.
#[derive(Debug, Default)]
pub struct ClusterCache {
    shared: Arc<SharedCluster>,
    reader: Mutex<Option<Reader>>,
}

impl ClusterCache {
    /// An empty cache with a cluster of its own.
    pub fn new() -> Self {
        ClusterCache::default()
    }

    /// An empty cache that reads and patches `shared`, with the other caches that share it.
    pub fn sharing(shared: Arc<SharedCluster>) -> Self {
        ClusterCache {
            shared,
            reader: Mutex::default(),
        }
    }

    /// The cluster of `view`, patched from the previous one.
    pub fn read(&self, view: &FactView) -> Cluster {
        self.read_changes(view).0
    }

    /// The cluster of `view`, and the services whose records changed since the previous call
    /// (a few more at times, when the cluster is shared); on the first read, every service any
    /// record names (its spec, effective record, instances, or only a status, endpoints or
    /// init record left of a deleted service).
    pub fn read_changes(&self, view: &FactView) -> (Cluster, BTreeSet<String>) {
        // Taken out while reading: if anything panics, the next call starts afresh.
        let previous = self.reader.lock().take();
        let (cluster, touched, reader) = self.shared.read(previous, view);
        *self.reader.lock() = Some(reader);
        (cluster, touched)
    }
}

/// A [`ClusterCache`] plus the services whose last plan proposed changes, so a controller
/// plans only the services that changed, or that still had work left, since its last pass.
///
/// # Guarantees
///
/// A service is left out of a pass only when none of its records changed since a pass that
/// proposed nothing for it: since a service's plan depends only on its own records, that plan
/// would be empty again. A pass that fails between [`begin`](Self::begin) and
/// [`finish`](Self::finish) leaves every service it was to plan pending for the next one.
#[derive(Debug, Default)]
pub struct PlanCache {
    cache: ClusterCache,
    pending: Mutex<BTreeSet<String>>,
}

impl PlanCache {
    /// An empty cache with a cluster of its own.
    pub fn new() -> Self {
        PlanCache::default()
    }

    /// An empty cache whose cluster is `shared` with other controllers' caches.
    pub fn sharing(shared: Arc<SharedCluster>) -> Self {
        PlanCache {
            cache: ClusterCache::sharing(shared),
            pending: Mutex::default(),
        }
    }

    /// The cluster of `view` and the services to plan in this pass.
    pub fn begin(&self, view: &FactView) -> (Cluster, BTreeSet<String>) {
        let (cluster, touched) = self.cache.read_changes(view);
        let mut pending = self.pending.lock();
        pending.extend(touched);
        (cluster, pending.clone())
    }

    /// Records which of the planned services still had changes to propose.
    pub fn finish(&self, with_changes: BTreeSet<String>) {
        *self.pending.lock() = with_changes;
    }

    /// One pass of a controller that keeps one fact per service at `key(name)`: for each
    /// service to plan, `wanted` gives the value that fact should hold (`None`: no fact). Puts
    /// what differs from the view, deletes what should not be there, and remembers the services
    /// that had changes, as [`begin`](Self::begin) and [`finish`](Self::finish) do.
    ///
    /// # Errors
    ///
    /// A service name that makes no valid key; the services stay pending.
    pub fn sync_per_service(
        &self,
        facts: &FactView,
        key: impl Fn(&str) -> Result<Key, KeyError>,
        mut wanted: impl FnMut(&Cluster, &str) -> Option<Value>,
    ) -> Result<Vec<Change>, ReconcileError> {
        let (cluster, to_plan) = self.begin(facts);
        let mut changes = Vec::new();
        let mut with_changes = BTreeSet::new();
        for name in &to_plan {
            let key = key(name)?;
            let held = facts.get(key.as_str());
            let change = match (wanted(&cluster, name), held) {
                (Some(value), held) if held.map(|f| &f.value) != Some(&value) => {
                    Change::put(key, value)
                }
                (None, Some(fact)) => Change::delete(fact.key.clone()),
                _ => continue,
            };
            changes.push(change);
            with_changes.insert(name.clone());
        }
        self.finish(with_changes);
        Ok(changes)
    }
}
