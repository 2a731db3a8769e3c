//! The cluster's status as a person reads it, from the store's facts, and the live display.
//!
//! [`ClusterStatus::read`] reads one row per declared service: desired instances (the effective
//! count), placed, running and ready (from the status controller's `status/service/{svc}`), and
//! the reasons the scheduler gave for instances it could not place, and the autoscaler's
//! recommendation with its reason. [`StatusFollower`] keeps it
//! current from a watch (not polling), one change at a time; [`Display`](super::display::Display)
//! draws it.

use std::fmt::Write as _;

use ccattler_core::{FactStore, Revision, StoreError};
use futures_util::{FutureExt, StreamExt};

use super::tally::Tally;

/// One service's row.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServiceRow {
    /// The service's name.
    pub name: String,
    /// Instances that should run: the effective count (the declared one until it is resolved).
    pub desired: u32,
    /// Instances assigned to a live node and meant to run (one held on a dead node, not yet
    /// stopped there, is not counted).
    pub placed: u32,
    /// Instances running (current version).
    pub running: u32,
    /// Of those, ready.
    pub ready: u32,
    /// Instances the scheduler could not place.
    pub unplaced: u32,
    /// Why, one entry per distinct reason.
    pub reasons: Vec<String>,
    /// Whether the status controller has counted the current desired number, with every count
    /// matching it, no rebalancing move in flight or about to start, and no instance on a live
    /// node still stopping: nothing is left to do for this service.
    pub converged: bool,
    /// What the autoscaler recommends, for a service whose `scale` block has a target.
    pub autoscaler: Option<Autoscaling>,
}

/// The autoscaler's recommendation for a service (its `intent/autoscaler/{svc}` record).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Autoscaling {
    /// The instances it recommends, before the scale block's bounds clamp them.
    pub instances: u32,
    /// Why: each metric against its target and what it asks for.
    pub reason: String,
}

/// Every service's row, and how many nodes are alive.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterStatus {
    /// One row per declared service, by name.
    pub services: Vec<ServiceRow>,
    /// Nodes whose liveness lease is held.
    pub nodes: usize,
}

impl ClusterStatus {
    /// Reads the status from `store`: one scan of each prefix it is made of.
    ///
    /// # Errors
    ///
    /// The store's error when a scan fails. Facts that do not decode are skipped.
    pub async fn read<S: FactStore>(store: &S) -> Result<Self, StoreError> {
        Ok(Tally::scan(store).await?.status())
    }

    /// Whether observed state matches desired: every service has as many running and ready
    /// instances as desired (zero included) and none is unplaced.
    pub fn is_converged(&self) -> bool {
        self.services.iter().all(|s| s.converged)
    }

    /// The status as a table, one row per service, then one line per unplaced service with the
    /// scheduler's reasons, and one per autoscaled service with the autoscaler's.
    pub fn table(&self) -> String {
        let width = self
            .services
            .iter()
            .map(|s| s.name.len())
            .max()
            .unwrap_or(0)
            .max("SERVICE".len());
        let mut out = format!(
            "{:<width$}  {:>7}  {:>6}  {:>7}  {:>5}\n",
            "SERVICE", "DESIRED", "PLACED", "RUNNING", "READY"
        );
        for s in &self.services {
            let _ = writeln!(
                out,
                "{:<width$}  {:>7}  {:>6}  {:>7}  {:>5}",
                s.name, s.desired, s.placed, s.running, s.ready
            );
        }
        for s in self.services.iter().filter(|s| s.unplaced > 0) {
            let _ = writeln!(out, "{}", unplaced_line(s));
        }
        for s in &self.services {
            if let Some(scaling) = &s.autoscaler {
                let _ = writeln!(out, "~ {}: {}", s.name, scaling.line());
            }
        }
        out
    }
}

impl ServiceRow {
    /// "web: desired 3, placed 3, running 2, ready 1[, 2 unplaced: REASON]".
    pub fn line(&self) -> String {
        let mut line = format!(
            "{}: desired {}, placed {}, running {}, ready {}",
            self.name, self.desired, self.placed, self.running, self.ready
        );
        if self.unplaced > 0 {
            let _ = write!(
                line,
                ", {} unplaced: {}",
                self.unplaced,
                self.reasons.join("; ")
            );
        }
        line
    }
}

impl Autoscaling {
    /// "autoscaler recommends 6: cpu 120% of 60%, asks 6".
    pub fn line(&self) -> String {
        if self.reason.is_empty() {
            format!("autoscaler recommends {}", self.instances)
        } else {
            format!("autoscaler recommends {}: {}", self.instances, self.reason)
        }
    }
}

fn unplaced_line(s: &ServiceRow) -> String {
    format!(
        "! {}: {} unplaced: {}",
        s.name,
        s.unplaced,
        s.reasons.join("; ")
    )
}

/// Follows the store: the status now, then again after every batch of changes.
///
/// It scans once, then keeps its tally current from one watch, one change at a time: reading
/// the status after a change costs the services, not the facts (a full scan per change made
/// the progress view of a 10,000-instance cluster the busiest task of `cca dev`). A watch that
/// fails or ends is opened again and the tally scanned anew.
#[derive(Debug)]
pub struct StatusFollower<S: FactStore> {
    store: S,
    watch: Option<S::Watch>,
    tally: Tally,
    first: bool,
    /// Changes read from the watch so far.
    read: u64,
}

impl<S: FactStore + Clone> StatusFollower<S> {
    /// Starts following `store`. The first [`next`](Self::next) returns the status at once,
    /// with whatever changes the watch already holds.
    ///
    /// # Errors
    ///
    /// The store's error when the watch cannot be opened or a scan fails.
    pub async fn new(store: &S) -> Result<Self, StoreError> {
        // The watch first: a change between the scans and the watch is never missed.
        let watch = store.watch("", Revision::ZERO).await?;
        Ok(StatusFollower {
            store: store.clone(),
            watch: Some(watch),
            tally: Tally::scan(store).await?,
            first: true,
            read: 0,
        })
    }

    /// Waits until something changed since the last call (not at all on the first call), then
    /// gives the status. Changes that arrive together are read as one.
    ///
    /// Cancel-safe: dropping the future loses no change.
    ///
    /// # Errors
    ///
    /// The store's error when a scan fails or the watch cannot be opened again.
    pub async fn next(&mut self) -> Result<ClusterStatus, StoreError> {
        if std::mem::take(&mut self.first) {
            // What changed since it started following, if anything, without waiting.
            self.take_ready();
        } else {
            self.wait_for_change().await?;
        }
        Ok(self.tally.status())
    }

    /// The status as of the last change read, without waiting.
    pub fn last(&self) -> ClusterStatus {
        self.tally.status()
    }

    /// How many changes it has read from its watch (a watch of the whole store): the keys
    /// written since it started, unless its watch fell behind the store's history and it
    /// scanned again.
    pub fn changes_read(&self) -> u64 {
        self.read
    }

    async fn wait_for_change(&mut self) -> Result<(), StoreError> {
        let watch = match self.watch.as_mut() {
            Some(watch) => watch,
            None => {
                let watch = self.store.watch("", Revision::ZERO).await?;
                self.tally = Tally::scan(&self.store).await?;
                self.watch.insert(watch)
            }
        };
        match watch.next().await {
            Some(Ok(event)) => {
                self.tally.apply(&event);
                self.read += 1;
                // Take whatever else is already there: one status for the whole batch.
                self.take_ready();
            }
            // A watch that fell behind or ended: scan again, watch again from the next change.
            Some(Err(_)) | None => self.watch = None,
        }
        Ok(())
    }

    /// Applies every change the watch already holds, without waiting. A watch that failed or
    /// ended is dropped: the next wait scans again.
    fn take_ready(&mut self) {
        let Some(watch) = self.watch.as_mut() else {
            return;
        };
        loop {
            match watch.next().now_or_never() {
                Some(Some(Ok(event))) => {
                    self.tally.apply(&event);
                    self.read += 1;
                }
                Some(Some(Err(_)) | None) => {
                    self.watch = None;
                    return;
                }
                None => return,
            }
        }
    }
}
