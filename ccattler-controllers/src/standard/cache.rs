//! [`ClusterCache`] and [`PlanCache`]: a controller's [`Cluster`] kept up to date from one
//! snapshot to the next, and the services a pass must plan.

use parking_lot::Mutex;

use ccattler_core::{Change, FactView, Key, KeyError, ReconcileError, Value};

use super::cluster::Cluster;

/// Keeps a [`Cluster`] in step with the snapshots a controller is handed.
///
/// # Guarantees
///
/// The cluster returned for a view is the same as [`Cluster::read`] of that view; only the cost
/// differs. The cache is derived state, so reconcile stays a pure function of the view.
#[derive(Debug, Default)]
pub struct ClusterCache {
    last: Mutex<Option<(FactView, Cluster)>>,
}

impl ClusterCache {
    /// An empty cache.
    pub fn new() -> Self {
        ClusterCache::default()
    }

    /// The cluster of `view`, patched from the previous one.
    pub fn read(&self, view: &FactView) -> Cluster {
        self.read_changes(view).0
    }

    /// The cluster of `view`, and the services whose records changed since the previous call;
    /// on the first read, every service any record names (its spec, effective record,
    /// instances, or only a status or endpoints record left of a deleted service).
    pub fn read_changes(&self, view: &FactView) -> (Cluster, std::collections::BTreeSet<String>) {
        // Taken out while patching: if anything panics, the next call starts afresh.
        let previous = self.last.lock().take();
        let mut cluster = match previous {
            Some((old_view, mut cluster)) => {
                for (key, _, new) in view.changes_since(&old_view) {
                    cluster.apply(key, new);
                }
                cluster
            }
            None => Cluster::read(view),
        };
        let touched = cluster.take_touched();
        *self.last.lock() = Some((view.clone(), cluster.clone()));
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
    pending: Mutex<std::collections::BTreeSet<String>>,
}

impl PlanCache {
    /// An empty cache.
    pub fn new() -> Self {
        PlanCache::default()
    }

    /// The cluster of `view` and the services to plan in this pass.
    pub fn begin(&self, view: &FactView) -> (Cluster, std::collections::BTreeSet<String>) {
        let (cluster, touched) = self.cache.read_changes(view);
        let mut pending = self.pending.lock();
        pending.extend(touched);
        (cluster, pending.clone())
    }

    /// Records which of the planned services still had changes to propose.
    pub fn finish(&self, with_changes: std::collections::BTreeSet<String>) {
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
        let mut with_changes = std::collections::BTreeSet::new();
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
