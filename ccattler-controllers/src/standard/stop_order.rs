//! The order in which a service's instances are stopped when it has too many.
//!
//! The next instance to stop is the least of `(group, Reverse(crowd), Reverse(ordinal),
//! Reverse(id))` over those left, where the group ranks what an instance is worth (finished,
//! unplaced, not running, not ready, ready), and `crowd` is how many of the instances left
//! are on its node. The crowding is counted again after each pick, so stopping several
//! instances evens the spread out rather than emptying the most crowded node first.
//!
//! # Why this is exact in O(n log n)
//!
//! Within one group and one node, every instance has the same crowd, so their order is fixed
//! by `(ordinal, id)` alone: each (group, node) is a queue sorted once. The next pick is the
//! head of one of those queues: the best head of the first non-empty group. Each group keeps
//! its queues' heads in an ordered set keyed as above. A pick changes the crowd of one node
//! only, and so the keys of at most one head per group: those are taken out and put back with
//! the new crowd (five groups, so O(log n) per pick). An unplaced instance has crowd 0 and no
//! node to count, so unplaced instances form one queue per group whose key never changes.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};

use ccattler_core::schema::RestartPolicy;

use super::cluster::{Instance, Standing};

/// How many groups [`group`] ranks instances into.
const GROUPS: usize = 5;

/// A queue's head as its group orders it; the node comes last only to tell heads apart.
type Head<'a> = (
    Reverse<usize>,
    Reverse<u32>,
    Reverse<&'a str>,
    Option<&'a str>,
);

/// `instances` in stop order, picked lazily: taking the first k costs O((n + k) log n).
pub(super) fn stop_order<'a>(
    instances: &[&'a Instance],
    restart: RestartPolicy,
) -> impl Iterator<Item = &'a Instance> {
    StopOrder::new(instances, restart)
}

/// The rank of what stopping an instance loses: lower groups are stopped first.
fn group(instance: &Instance, restart: RestartPolicy) -> usize {
    match instance.standing(restart) {
        Standing::Finished => 0,
        _ if instance.node.is_none() => 1,
        _ if !instance.is_running() => 2,
        _ if !instance.is_ready() => 3,
        _ => 4,
    }
}

struct StopOrder<'a> {
    /// Instances left on each node.
    crowd: BTreeMap<&'a str, usize>,
    /// Per group, per node (`None`: unplaced), the instances left, best pick last.
    queues: [BTreeMap<Option<&'a str>, Vec<&'a Instance>>; GROUPS],
    /// Per group, the head of each of its non-empty queues.
    heads: [BTreeSet<Head<'a>>; GROUPS],
}

impl<'a> StopOrder<'a> {
    fn new(instances: &[&'a Instance], restart: RestartPolicy) -> Self {
        let mut order = StopOrder {
            crowd: BTreeMap::new(),
            queues: Default::default(),
            heads: Default::default(),
        };
        for instance in instances {
            let node = instance.node.as_deref();
            if let Some(node) = node {
                *order.crowd.entry(node).or_default() += 1;
            }
            order.queues[group(instance, restart)]
                .entry(node)
                .or_default()
                .push(instance);
        }
        for g in 0..GROUPS {
            for queue in order.queues[g].values_mut() {
                queue.sort_by(|a, b| rank(a).cmp(&rank(b)));
            }
            let nodes: Vec<Option<&'a str>> = order.queues[g].keys().copied().collect();
            for node in nodes {
                order.push_head(g, node);
            }
        }
        order
    }

    fn crowd_of(&self, node: Option<&str>) -> usize {
        node.and_then(|n| self.crowd.get(n)).copied().unwrap_or(0)
    }

    /// The head entry of a group's queue for `node` under the current crowd, if it has one.
    fn head(&self, g: usize, node: Option<&'a str>) -> Option<Head<'a>> {
        let best = self.queues[g].get(&node)?.last()?;
        let (ordinal, id) = rank(best);
        Some((
            Reverse(self.crowd_of(node)),
            Reverse(ordinal),
            Reverse(id),
            node,
        ))
    }

    fn push_head(&mut self, g: usize, node: Option<&'a str>) {
        if let Some(head) = self.head(g, node) {
            self.heads[g].insert(head);
        }
    }
}

/// The order within one queue: the best pick (highest ordinal, then highest id) sorts last.
fn rank(instance: &Instance) -> (u32, &str) {
    (instance.desired.ordinal.unwrap_or(0), instance.id.as_str())
}

impl<'a> Iterator for StopOrder<'a> {
    type Item = &'a Instance;

    fn next(&mut self) -> Option<&'a Instance> {
        let g = (0..GROUPS).find(|&g| !self.heads[g].is_empty())?;
        let (_, _, _, node) = self.heads[g].pop_first()?;
        let picked = self.queues[g].get_mut(&node)?.pop()?;
        let Some(name) = node else {
            self.push_head(g, node);
            return Some(picked);
        };
        // The node's crowd changes: every group's head on it is keyed anew.
        let stale: Vec<usize> = (0..GROUPS)
            .filter(|&h| h != g)
            .filter(|&h| self.queues[h].get(&node).is_some_and(|q| !q.is_empty()))
            .collect();
        for &h in &stale {
            if let Some(head) = self.head(h, node) {
                self.heads[h].remove(&head);
            }
        }
        if let Some(count) = self.crowd.get_mut(name) {
            *count = count.saturating_sub(1);
        }
        for h in stale.into_iter().chain([g]) {
            self.push_head(h, node);
        }
        Some(picked)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ccattler_core::schema::{DesiredInstance, DesiredState};
    use ccattler_core::{Key, Revision};
    use proptest::prelude::*;

    /// An instance; `state` 0: no report, 1: running, 2: running and ready, 3: exited cleanly.
    fn instance(id: String, node: Option<u8>, ordinal: Option<u32>, state: u8) -> Instance {
        let observed = match state {
            1 => Some(r#"{"state":"running"}"#),
            2 => Some(r#"{"state":"running","ready":true}"#),
            3 => Some(r#"{"state":"exited","exit_code":0}"#),
            _ => None,
        };
        Instance {
            key: Key::new(format!("desired/instance/{id}")).expect("a valid key"),
            desired: std::sync::Arc::new(DesiredInstance {
                service: "web".into(),
                version: "v1".into(),
                ordinal,
                state: DesiredState::Running,
                ..serde_json::from_str(r#"{"service":"web","version":"v1"}"#).expect("a record")
            }),
            id,
            revision: Revision(1),
            node: node.map(|n| format!("n{n}")),
            observed: observed
                .map(|o| std::sync::Arc::new(serde_json::from_str(o).expect("a report"))),
            fresh: node.is_some(),
            node_alive: node.is_some(),
        }
    }

    /// The definition: a full scan of those left for each pick.
    fn by_scanning<'a>(instances: &[&'a Instance], restart: RestartPolicy) -> Vec<&'a Instance> {
        let mut crowd: BTreeMap<&str, usize> = BTreeMap::new();
        for i in instances {
            if let Some(node) = &i.node {
                *crowd.entry(node).or_default() += 1;
            }
        }
        let mut left = instances.to_vec();
        let mut ordered = Vec::new();
        while !left.is_empty() {
            let key = |i: &Instance| {
                let c = i.node.as_deref().and_then(|n| crowd.get(n)).copied();
                (
                    group(i, restart),
                    Reverse(c.unwrap_or(0)),
                    Reverse(i.desired.ordinal.unwrap_or(0)),
                    Reverse(i.id.clone()),
                )
            };
            let index = (0..left.len())
                .min_by_key(|&k| key(left[k]))
                .expect("a non-empty list");
            let picked = left.swap_remove(index);
            if let Some(count) = picked.node.as_deref().and_then(|n| crowd.get_mut(n)) {
                *count -= 1;
            }
            ordered.push(picked);
        }
        ordered
    }

    proptest! {
        #[test]
        fn picks_as_the_full_scan_does(
            shape in proptest::collection::vec(
                (proptest::option::of(0u8..5), proptest::option::of(0u32..4), 0u8..4),
                0..40,
            ),
            never in any::<bool>(),
        ) {
            let instances: Vec<Instance> = shape
                .iter()
                .enumerate()
                .map(|(k, (node, ordinal, state))| {
                    instance(format!("web-{k:02}"), *node, *ordinal, *state)
                })
                .collect();
            let refs: Vec<&Instance> = instances.iter().collect();
            let restart = if never { RestartPolicy::Never } else { RestartPolicy::Always };
            let fast: Vec<&str> = stop_order(&refs, restart).map(|i| i.id.as_str()).collect();
            let slow: Vec<&str> =
                by_scanning(&refs, restart).into_iter().map(|i| i.id.as_str()).collect();
            prop_assert_eq!(fast, slow);
        }
    }
}
