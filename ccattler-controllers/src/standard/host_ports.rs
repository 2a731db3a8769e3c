//! Host ports: what a service's declared ports ask of a node, and which host ports the
//! instances the scheduler placed in one pass are given.
//!
//! The scheduler only counts ports (a fixed port must be free on the node, and the node's range
//! must have enough free ports for the rest); the numbers are picked here, after it placed a
//! pass: per node, the fixed ports of the pass first, then the lowest free ports of the node's
//! range for the others, in instance order. Both see the same held ports (every placement on the
//! node, [`Cluster::host_ports_on`]), so a pass the scheduler let through always finds its ports.

use std::collections::{BTreeMap, BTreeSet};

use ccattler_core::schema::{PortBinding, PortRange, ServiceSpec};

use super::cluster::Cluster;

/// The host ports of each placement of one pass (`(instance, node, spec)`, any order). An
/// instance whose node has no port left (the scheduler let it through, so only a cluster already
/// in conflict gets here) is in the second map instead, with the reason: it stays unplaced.
/// Cost: the placements, and for each node given an instance that exposes a port, the host
/// ports its placements hold.
pub(super) fn allocate<'p>(
    cluster: &Cluster,
    placements: &[(&'p str, &'p str, &'p ServiceSpec)],
) -> (
    BTreeMap<&'p str, Vec<PortBinding>>,
    BTreeMap<&'p str, String>,
) {
    let mut by_node: BTreeMap<&str, Vec<(&str, &ServiceSpec)>> = BTreeMap::new();
    for &(instance, node, spec) in placements {
        by_node.entry(node).or_default().push((instance, spec));
    }
    let mut out = BTreeMap::new();
    let mut failed = BTreeMap::new();
    for (node, mut placed) in by_node {
        if placed.iter().all(|(_, spec)| spec.expose.is_empty()) {
            // Most services expose no port: no read of what the node's placements hold.
            out.extend(
                placed
                    .into_iter()
                    .map(|(instance, _)| (instance, Vec::new())),
            );
            continue;
        }
        placed.sort_by_key(|(instance, _)| *instance);
        let range = cluster
            .nodes
            .get(node)
            .map_or(PortRange::DEFAULT, |status| status.ports);
        let mut held = cluster.host_ports_on(node);
        held.extend(
            placed
                .iter()
                .flat_map(|(_, spec)| spec.expose.iter().filter(|e| e.fixed).map(|e| e.port)),
        );
        let mut next = u32::from(range.first);
        for (instance, spec) in placed {
            let mut ports = Vec::with_capacity(spec.expose.len());
            for expose in &spec.expose {
                let host = if expose.fixed {
                    Some(expose.port)
                } else {
                    free_port(range, &mut next, &mut held)
                };
                let Some(host) = host else {
                    break;
                };
                ports.push(PortBinding {
                    port: expose.port,
                    host,
                });
            }
            if ports.len() == spec.expose.len() {
                out.insert(instance, ports);
            } else {
                let reason = format!(
                    "node {node} has no free host port left in {}-{}",
                    range.first, range.last
                );
                failed.insert(instance, reason);
            }
        }
    }
    (out, failed)
}

/// The lowest port of `range` from `next` on that is not held; holds it. `next` is a `u32`
/// so that it can pass the last port 65535.
fn free_port(range: PortRange, next: &mut u32, held: &mut BTreeSet<u16>) -> Option<u16> {
    *next = (*next).max(u32::from(range.first));
    while *next <= u32::from(range.last) {
        let port = u16::try_from(*next).ok()?;
        *next += 1;
        if held.insert(port) {
            return Some(port);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lowest_free_ports_skip_the_held_and_end_with_the_range() {
        let range = PortRange {
            first: 100,
            last: 103,
        };
        let mut held: BTreeSet<u16> = [101, 103].into();
        let mut next = 0;
        assert_eq!(free_port(range, &mut next, &mut held), Some(100));
        assert_eq!(free_port(range, &mut next, &mut held), Some(102));
        assert_eq!(free_port(range, &mut next, &mut held), None);
        let top = PortRange {
            first: u16::MAX,
            last: u16::MAX,
        };
        let mut next = 0;
        assert_eq!(
            free_port(top, &mut next, &mut BTreeSet::new()),
            Some(u16::MAX)
        );
        assert_eq!(free_port(top, &mut next, &mut BTreeSet::new()), None);
    }
}
