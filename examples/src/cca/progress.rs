//! The cluster's status as a person reads it, from the store's facts, and the live display.
//!
//! [`ClusterStatus::read`] reads one row per declared service: desired instances (the effective
//! count), placed, running and ready (from the status controller's `status/service/{svc}`), and
//! the reasons the scheduler gave for instances it could not place. [`StatusFollower`] re-reads
//! it whenever something in the store changes (a watch, not polling); [`Display`](super::display::Display)
//! draws it.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use ccattler_core::schema::{
    self, Assignment, DesiredState, EffectiveService, RebalanceMove, ServiceSpec, ServiceStatus,
    Unschedulable,
};
use ccattler_core::{FactStore, Revision, StoreError};
use futures_util::{FutureExt, StreamExt};
use serde::de::DeserializeOwned;

/// One service's row.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServiceRow {
    /// The service's name.
    pub name: String,
    /// Instances that should run: the effective count (the declared one until it is resolved).
    pub desired: u32,
    /// Instances assigned to a node and meant to run.
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
    /// matching it, and no rebalancing move is in flight or about to start: nothing is left to
    /// do for this service.
    pub converged: bool,
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
    /// Reads the status from `store`.
    ///
    /// # Errors
    ///
    /// The store's error when a scan fails. Facts that do not decode are skipped.
    pub async fn read<S: FactStore>(store: &S) -> Result<Self, StoreError> {
        let specs = store.scan(schema::DESIRED_SERVICES).await?.facts;
        let effective = decoded::<S, EffectiveService>(store, schema::EFFECTIVE_SERVICES).await?;
        let status = decoded::<S, ServiceStatus>(store, schema::SERVICE_STATUSES).await?;
        let moves = decoded::<S, RebalanceMove>(store, schema::REBALANCE_MOVES).await?;
        let mut placed: BTreeMap<String, u32> = BTreeMap::new();
        for fact in store.scan(schema::PLACEMENTS).await?.facts {
            if let Ok(a) = schema::decode::<Assignment>(&fact)
                && a.state == DesiredState::Running
            {
                *placed.entry(a.service).or_default() += 1;
            }
        }
        let mut unplaced: BTreeMap<String, (u32, Vec<String>)> = BTreeMap::new();
        for fact in store.scan(schema::UNSCHEDULABLE).await?.facts {
            if let Ok(u) = schema::decode::<Unschedulable>(&fact) {
                let entry = unplaced.entry(u.service).or_default();
                entry.0 += 1;
                if !entry.1.contains(&u.reason) {
                    entry.1.push(u.reason);
                }
            }
        }
        let nodes = store.scan(schema::NODE_LEASES).await?.facts.len();
        let mut services = Vec::new();
        for fact in &specs {
            let Ok(spec) = schema::decode::<ServiceSpec>(fact) else {
                continue;
            };
            let resolved = effective.get(&spec.name);
            let desired = resolved.map_or(spec.instances, |e| e.instances);
            let counted = status.get(&spec.name);
            let (unplaced, reasons) = unplaced.remove(&spec.name).unwrap_or_default();
            let converged = resolved.is_some()
                && counted.is_some_and(|s| {
                    s.desired == desired
                        && s.present == desired
                        && s.running == desired
                        && s.ready == desired
                        && !s.deleting
                })
                && unplaced == 0;
            // Settled too: no rebalancing move in flight (an extra instance placed) or about to
            // start (a suggestion the instance controller acts on).
            let placed_now = placed.get(&spec.name).copied().unwrap_or(0);
            let moving = placed_now > desired
                || (moves.contains_key(&spec.name) && !spec.stateful && spec.update.max_extra > 0);
            let converged = converged && !moving;
            let counted = counted.cloned().unwrap_or_default();
            services.push(ServiceRow {
                placed: placed_now,
                name: spec.name,
                desired,
                running: counted.running,
                ready: counted.ready,
                unplaced,
                reasons,
                converged,
            });
        }
        Ok(ClusterStatus { services, nodes })
    }

    /// Whether observed state matches desired: every service has as many running and ready
    /// instances as desired (zero included) and none is unplaced.
    pub fn is_converged(&self) -> bool {
        self.services.iter().all(|s| s.converged)
    }

    /// The status as a table, one row per service, then one line per unplaced service with the
    /// scheduler's reasons.
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

fn unplaced_line(s: &ServiceRow) -> String {
    format!(
        "! {}: {} unplaced: {}",
        s.name,
        s.unplaced,
        s.reasons.join("; ")
    )
}

async fn decoded<S: FactStore, T: DeserializeOwned>(
    store: &S,
    prefix: &str,
) -> Result<BTreeMap<String, T>, StoreError> {
    let mut out = BTreeMap::new();
    for fact in store.scan(prefix).await?.facts {
        if let (Some(name), Ok(record)) =
            (fact.key.strip_prefix(prefix), schema::decode::<T>(&fact))
        {
            out.insert(name.to_owned(), record);
        }
    }
    Ok(out)
}

/// Follows the store: the status now, then again after every batch of changes.
#[derive(Debug)]
pub struct StatusFollower<S: FactStore> {
    store: S,
    watch: Option<S::Watch>,
    first: bool,
}

impl<S: FactStore + Clone> StatusFollower<S> {
    /// Starts following `store`. The first [`next`](Self::next) returns the status at once.
    ///
    /// # Errors
    ///
    /// The store's error when the watch cannot be opened.
    pub async fn new(store: &S) -> Result<Self, StoreError> {
        let watch = store.watch("", Revision::ZERO).await?;
        Ok(StatusFollower {
            store: store.clone(),
            watch: Some(watch),
            first: true,
        })
    }

    /// Waits until something changed since the last call (not at all on the first call), then
    /// reads the status. Changes that arrive together are read as one.
    ///
    /// # Errors
    ///
    /// The store's error when a read fails or the watch cannot be opened again.
    pub async fn next(&mut self) -> Result<ClusterStatus, StoreError> {
        if !std::mem::take(&mut self.first) {
            self.wait_for_change().await?;
        }
        ClusterStatus::read(&self.store).await
    }

    async fn wait_for_change(&mut self) -> Result<(), StoreError> {
        let watch = match self.watch.as_mut() {
            Some(watch) => watch,
            None => self
                .watch
                .insert(self.store.watch("", Revision::ZERO).await?),
        };
        match watch.next().await {
            Some(Ok(_)) => {
                // Take whatever else is already there: one read for the whole batch.
                while let Some(Some(Ok(_))) = watch.next().now_or_never() {}
            }
            // A watch that fell behind or ended: read now, watch again from the next change.
            Some(Err(_)) | None => self.watch = None,
        }
        Ok(())
    }
}
