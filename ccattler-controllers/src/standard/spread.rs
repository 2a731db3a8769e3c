//! The scheduler controller's rebalancing suggestions: `status/rebalance/{svc}` records.
//!
//! Placements are never rewritten under a running instance, so a service placed while few nodes
//! were up (a node that registered after the apply, or came back after its instances were
//! replaced elsewhere) keeps its skew unless something moves it. The scheduler says what to move
//! and the instance controller moves it, starting the new instance before stopping the old one:
//! see [`RebalanceMove`] and the instance controller's "Rebalancing".
//!
//! # The rule
//!
//! For a *settled* service (every instance placed, none stopping, all of one version), let
//! `from` be the alive node holding the most of its instances (ties: the smaller name) and `to`
//! the node one more instance would be placed on now, by the scheduler's own ranking. If `from`
//! holds at least two more than `to`, the record names the newest instance on `from`; otherwise
//! there is no record. Each move lowers the sum of squared per-node counts, so moves end, and
//! they end where placing the service again would put it: no node holds two more than where the
//! next instance would go.
//!
//! A service that is not settled keeps its record as it is (a move in progress, a rollout, a
//! node failure: the instance controller acts only on settled services anyway); a service with
//! no spec loses it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use ccattler_core::schema::{self, RebalanceMove, RecordKey, ServiceSpec};
use ccattler_core::{Change, FactView, ReconcileError};

use super::cluster::Cluster;
use super::room::{hold_for_pinned, release, room_moves};
use crate::scheduler::{LiveIndex, Request};

/// The id of the request that asks where one more instance would go; never a real instance id
/// (those are single key segments without NUL).
const PROBE: &str = "\0next";

/// How often, at most, every service is judged although only reservations changed (reconcile
/// time): a node one service freed may now take an instance of another, none of whose own
/// facts changed.
const SWEEP: Duration = Duration::from_secs(5);

/// Which services to judge next: those whose own facts changed, or every one.
#[derive(Debug, Default)]
pub(super) struct SpreadState {
    /// Services whose suggestion may have changed, or `None` for every service (a fresh read,
    /// a node's status or liveness changed).
    changed: Option<BTreeSet<String>>,
    /// When (reconcile time) every service was last judged.
    swept: Option<SystemTime>,
    /// Services whose record the last pass rewrote: judged again, should that write not have
    /// been committed.
    rewritten: BTreeSet<String>,
}

impl SpreadState {
    /// What changed since the last pass: these services, or (`None`) possibly every one.
    pub(super) fn changed(&mut self, changed: Option<BTreeSet<String>>) {
        self.changed = changed;
    }

    /// Writes or deletes `status/rebalance/{svc}` for the services due at `now`, as the module
    /// docs say, after `changes` (the pass's other changes). Returns when the next sweep is
    /// due if one must come even when nothing else changes (the caller asks the runner for a
    /// pass by then): after a pass that judged only some services, or that changes anything
    /// (its own placements may settle a service, or leave room for another's move; a pass
    /// judges the view before them). A full sweep that changes nothing needs no other.
    ///
    /// `waiting` are the instances the pass left waiting for room on one node (a volume pins
    /// them there, or a static host port binds them to it): their nodes are held for them
    /// while moves are judged (no move targets a node whose room is
    /// wanted), and moves that make room for them come first (the `room` module).
    pub(super) fn suggest(
        &mut self,
        cluster: &Cluster,
        index: &mut LiveIndex,
        facts: &FactView,
        (now, waiting): (SystemTime, &[(String, String)]),
        changes: &mut Vec<Change>,
    ) -> Result<Option<Duration>, ReconcileError> {
        let (short, held) = hold_for_pinned(cluster, index, waiting);
        let room = room_moves(cluster, index, &short);
        let judged = self.judge(cluster, index, facts, (now, &room), changes);
        release(index, held);
        judged
    }

    fn judge(
        &mut self,
        cluster: &Cluster,
        index: &mut LiveIndex,
        facts: &FactView,
        (now, room): (SystemTime, &BTreeMap<String, RebalanceMove>),
        changes: &mut Vec<Change>,
    ) -> Result<Option<Duration>, ReconcileError> {
        let since_sweep = self.swept.and_then(|at| now.duration_since(at).ok());
        let sweep_due = since_sweep.is_none_or(|since| since >= SWEEP);
        let mut sweep_in = None;
        let mut services = match self.changed.take() {
            Some(changed) if !sweep_due => {
                sweep_in = since_sweep.map(|since| SWEEP.saturating_sub(since));
                changed
            }
            _ => {
                self.swept = Some(now);
                // Every record too, not only those that decode: a bad one is rewritten.
                let records = facts.scan(schema::REBALANCE_MOVES);
                let named = records.filter_map(|f| match RecordKey::parse(&f.key) {
                    Some(RecordKey::Rebalance(service)) => Some(service.to_owned()),
                    _ => None,
                });
                cluster.services.keys().cloned().chain(named).collect()
            }
        };
        services.append(&mut self.rewritten);
        services.extend(room.keys().cloned());
        for service in services {
            let key = schema::keys::rebalance(&service)?;
            let held = facts.get(key.as_str());
            let wanted = match room.get(&service) {
                Some(m) => Some(schema::encode(m)),
                None => match settled_move(cluster, index, &service) {
                    Settled::Move(m) => Some(schema::encode(&m)),
                    Settled::Balanced => None,
                    Settled::No => continue,
                },
            };
            let change = match (held, wanted) {
                (Some(fact), Some(value)) if fact.value == value => continue,
                (_, Some(value)) => Change::put(key, value),
                (Some(_), None) => Change::delete(key),
                (None, None) => continue,
            };
            changes.push(change);
            self.rewritten.insert(service);
        }
        if sweep_in.is_none() && !changes.is_empty() {
            sweep_in = Some(SWEEP);
        }
        Ok(sweep_in)
    }
}

enum Settled {
    /// Settled and skewed.
    Move(RebalanceMove),
    /// Settled and even (or gone).
    Balanced,
    /// Not settled: leave the record alone.
    No,
}

fn settled_move(cluster: &Cluster, index: &mut LiveIndex, service: &str) -> Settled {
    let Some(spec) = cluster.services.get(service) else {
        return Settled::Balanced;
    };
    if !spec.volumes.is_empty() {
        return Settled::Balanced; // its instances' data is on their nodes: never moved
    }
    let mut version = None;
    // Per alive node: (count, newest instance id).
    let mut per_node: BTreeMap<&str, (u32, &str)> = BTreeMap::new();
    for instance in cluster.instances_of(service) {
        let Some(node) = instance.node.as_deref() else {
            return Settled::No;
        };
        if instance.desired.state == schema::DesiredState::Stopped
            || *version.get_or_insert(&instance.desired.version) != &instance.desired.version
        {
            return Settled::No;
        }
        if cluster.alive.contains(node) {
            let entry = per_node.entry(node).or_insert((0, instance.id.as_str()));
            entry.0 += 1;
            entry.1 = entry.1.max(instance.id.as_str());
        }
    }
    let Some((from, (most, newest))) = per_node
        .iter()
        .max_by(|(a, (ca, _)), (b, (cb, _))| ca.cmp(cb).then_with(|| b.cmp(a)))
    else {
        return Settled::Balanced;
    };
    if *most < 2 {
        return Settled::Balanced;
    }
    let Some(to) = next_node(index, spec) else {
        return Settled::Balanced; // nowhere has room for one more: nothing can move
    };
    let there = per_node.get(to.as_str()).map_or(0, |(count, _)| *count);
    if *most < there + 2 {
        return Settled::Balanced;
    }
    Settled::Move(RebalanceMove {
        instance: (*newest).to_owned(),
        from: (*from).to_owned(),
        to,
        room_for: None,
    })
}

/// The node one more instance of `spec`'s service would be placed on now, by the scheduler's
/// own ranking (`None`: no node has room).
pub(super) fn next_node(index: &mut LiveIndex, spec: &ServiceSpec) -> Option<String> {
    let probe = Request {
        instance: PROBE,
        service: &spec.name,
        resources: spec.resources,
        placement: &spec.placement,
        ports: crate::scheduler::Ports::NONE,
        volumes: &[],
    };
    index.place(&[probe]).placements.remove(PROBE)
}
