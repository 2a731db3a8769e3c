//! Room for pinned instances: a move that frees cpu or memory on the one node an instance can
//! run on.
//!
//! An instance whose persistent volume is attached to a node goes there or nowhere; one that needs
//! a static host port goes only where that port is free, and one whose service requires a node
//! label (a zone, an architecture) only to the nodes that have it. If instances that could run
//! anywhere filled those nodes (while it was away, its node down, or before it was added), it would
//! wait forever although the cluster has room. So for each such instance that the last placement
//! pass left waiting on an alive node that passes its filters and lacks only cpu or memory (for a
//! static port or a required label, the node nearest to taking it; one instance of a service a
//! pass), the scheduler suggests moving one instance off that node: of a service that mounts no
//! volume and is not stateful, whose next instance would be placed on another node (so the move's
//! new instance does not land where room is wanted). Among those, the smallest whose resources
//! cover the shortfall alone, else the largest (another move follows once it is done), then the
//! highest id. No move is suggested when all the movable instances there together would not free
//! enough: moving them would restart them for nothing. The instance controller performs it like any
//! rebalancing move, new before old, so no service drops below its ready count. An instance its
//! volume pins is placed in the pass that sees the room, ahead of requests that could go anywhere
//! (the scheduler's processing order); one bound by a static port or a label has no such
//! precedence: a request placed before it in that pass may take the room, and another move follows.

use std::cmp::Reverse;
use std::collections::BTreeMap;

use ccattler_core::schema::{DesiredState, RebalanceMove, Resources};

use super::cluster::{Cluster, Instance};
use super::spread::next_node;
use crate::scheduler::{LiveIndex, Load};

/// What an instance waiting for its node lacks there.
pub(super) struct Short<'a> {
    id: &'a str,
    node: &'a str,
    lacks: Resources,
}

/// A node's load before [`hold_for_pinned`] held room on it.
pub(super) type Held<'a> = Vec<(&'a str, Load)>;

/// For each of `waiting` (instance id, the node its volume pins it to) whose node is alive,
/// passes its filters and lacks only cpu or memory for it: what it lacks. Then holds its need
/// on that node, as a placement pass does (the node takes nothing that needs room), until
/// [`release`].
pub(super) fn hold_for_pinned<'a>(
    cluster: &Cluster,
    index: &mut LiveIndex,
    waiting: &'a [(String, String)],
) -> (Vec<Short<'a>>, Held<'a>) {
    let mut short = Vec::new();
    let mut held = Vec::new();
    for (id, node) in waiting {
        let Some(spec) = cluster
            .instances
            .get(id)
            .and_then(|i| cluster.services.get(&i.desired.service))
        else {
            continue;
        };
        let Some(mut free) = index.free(node) else {
            continue; // not alive: no move brings it back
        };
        // What instances asked to stop there will free (a move just done, for one).
        for stopping in cluster.instances_on(node) {
            let stopping_spec = (stopping.desired.state == DesiredState::Stopped)
                .then(|| cluster.services.get(&stopping.desired.service))
                .flatten();
            if let Some(stopping) = stopping_spec {
                free = plus(free, stopping.resources);
            }
        }
        let lacks = Resources {
            cpu: spec.resources.cpu.saturating_sub(free.cpu),
            memory: spec.resources.memory.saturating_sub(free.memory),
        };
        let Some(before) = index.hold(node, &spec.placement, spec.resources) else {
            continue; // its filters reject the node, or the node is too small for it
        };
        held.push((node.as_str(), before));
        if lacks.cpu.millis() > 0 || !lacks.memory.is_zero() {
            // (else it waits for ports or storage: moving load frees neither)
            short.push(Short { id, node, lacks });
        }
    }
    (short, held)
}

/// Gives back what [`hold_for_pinned`] held.
pub(super) fn release(index: &mut LiveIndex, held: Held<'_>) {
    for (node, before) in held.into_iter().rev() {
        index.unhold(node, before);
    }
}

/// The moves that make room for the instances `short` describes, by the service of the
/// instance to move: at most one per waiting instance, and per service. Call with their
/// nodes held ([`hold_for_pinned`]).
pub(super) fn room_moves(
    cluster: &Cluster,
    index: &mut LiveIndex,
    short: &[Short<'_>],
) -> BTreeMap<String, RebalanceMove> {
    let mut moves: BTreeMap<String, RebalanceMove> = BTreeMap::new();
    for &Short { id, node, lacks } in short {
        let covers = |r: &Resources| r.cpu >= lacks.cpu && r.memory >= lacks.memory;
        let movable = |i: &&Instance| {
            i.desired.state == DesiredState::Running
                // Not the new instance of a move in progress (the one it replaces still there).
                && i.desired
                    .replaces
                    .as_ref()
                    .is_none_or(|old| !cluster.instances.contains_key(old))
        };
        let mut candidates: Vec<(&str, &str, Resources)> = cluster
            .instances_on(node)
            .filter(movable)
            .filter_map(|i| {
                let service = cluster.services.get(&i.desired.service)?;
                let movable = service.volumes.is_empty()
                    && !service.stateful
                    && service.update.max_extra > 0
                    && !moves.contains_key(&service.name);
                movable.then_some((i.id.as_str(), service.name.as_str(), service.resources))
            })
            .collect();
        let freeable = candidates
            .iter()
            .fold(Resources::default(), |sum, (_, _, r)| plus(sum, *r));
        if !covers(&freeable) {
            continue;
        }
        // Covering ones first, smallest first; then the rest, largest first; then highest id.
        candidates.sort_by_key(|&(id, _, r)| {
            let size = (r.cpu.millis(), r.memory.bytes());
            let covering = covers(&r);
            (
                !covering,
                if covering { size } else { (0, 0) },
                Reverse(size),
                Reverse(id),
            )
        });
        let mut judged: Vec<&str> = Vec::new();
        for (victim, service, _) in candidates {
            if judged.contains(&service) {
                continue;
            }
            judged.push(service);
            let Some(spec) = cluster.services.get(service) else {
                continue;
            };
            match next_node(index, spec) {
                Some(to) if to != node => {
                    moves.insert(
                        service.to_owned(),
                        RebalanceMove {
                            instance: victim.to_owned(),
                            from: node.to_owned(),
                            to,
                            room_for: Some(id.to_owned()),
                        },
                    );
                    break;
                }
                _ => {}
            }
        }
    }
    moves
}

/// `a` and `b` together; a sum that overflows keeps `a`'s amount.
fn plus(a: Resources, b: Resources) -> Resources {
    Resources {
        cpu: a.cpu.checked_add(b.cpu).unwrap_or(a.cpu),
        memory: a.memory.checked_add(b.memory).unwrap_or(a.memory),
    }
}
