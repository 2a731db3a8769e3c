//! [`Cluster`]: the typed reading of a fact view that the standard controllers share.
//!
//! Facts that do not decode are skipped here (and reported by [`Cluster::invalid`]), so one bad
//! value never stops a controller; each controller decides what a missing record means.

use std::collections::{BTreeMap, BTreeSet};

use ccattler_core::schema::{
    self, Assignment, DesiredInstance, DesiredState, EffectiveService, InstanceObservation,
    NodeStatus, ObservedState, RestartPolicy, ServiceSpec,
};
use ccattler_core::{FactView, Key, Revision};

/// A desired instance with everything known about it.
#[derive(Clone, Debug)]
pub struct Instance {
    /// Its id (the last segment of `desired/instance/{id}`).
    pub id: String,
    /// The desired record.
    pub desired: DesiredInstance,
    /// The key of the desired record.
    pub key: Key,
    /// The mod revision of the desired record.
    pub revision: Revision,
    /// The node it is placed on, if any.
    pub node: Option<String>,
    /// What the agent of that node reports, if anything.
    pub observed: Option<InstanceObservation>,
    /// Whether its node is alive (holds its lease). False when unplaced.
    pub node_alive: bool,
}

/// How an instance counts for its service.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Standing {
    /// Asked to stop.
    Stopping,
    /// Placed on a node that is not alive: it does not count, and is replaced.
    Lost,
    /// Ended in failure (or exited, under restart `always`) and will be replaced.
    Replaceable,
    /// Ended and not to be replaced (restart `never`, or a clean exit under `on_failure`): it
    /// still counts, so it is not recreated endlessly.
    Finished,
    /// Pending, pulling, starting or running: present work.
    Active,
}

impl Instance {
    /// How this instance counts, under its service's restart policy.
    pub fn standing(&self, restart: RestartPolicy) -> Standing {
        if self.desired.state == DesiredState::Stopped {
            return Standing::Stopping;
        }
        if self.node.is_some() && !self.node_alive {
            return Standing::Lost;
        }
        let state = self
            .observed
            .as_ref()
            .map_or(ObservedState::Pending, |o| o.state);
        match state {
            ObservedState::Failed | ObservedState::Stopped if restart.replaces_failed() => {
                Standing::Replaceable
            }
            ObservedState::Exited if restart == RestartPolicy::Always => Standing::Replaceable,
            ObservedState::Failed | ObservedState::Stopped | ObservedState::Exited => {
                Standing::Finished
            }
            _ => Standing::Active,
        }
    }

    /// Whether the agent reports it running.
    pub fn is_running(&self) -> bool {
        self.observed
            .as_ref()
            .is_some_and(|o| o.state == ObservedState::Running)
    }

    /// Whether it is running and ready.
    pub fn is_ready(&self) -> bool {
        self.is_running() && self.observed.as_ref().is_some_and(|o| o.ready)
    }

    /// Whether it is gone for good: unplaced, or reported ended by a live node's agent.
    pub fn is_gone(&self) -> bool {
        match (&self.node, &self.observed) {
            (None, _) => true,
            (Some(_), Some(o)) => !o.state.is_active(),
            (Some(_), None) => false,
        }
    }
}

/// Every standard record a view holds, decoded and cross-referenced.
#[derive(Clone, Debug, Default)]
pub struct Cluster {
    /// Desired services by name.
    pub services: BTreeMap<String, ServiceSpec>,
    /// Effective counts and versions by service.
    pub effective: BTreeMap<String, EffectiveService>,
    /// Desired instances by id.
    pub instances: BTreeMap<String, Instance>,
    /// Nodes that report status, by name.
    pub nodes: BTreeMap<String, NodeStatus>,
    /// Nodes that hold their lease.
    pub alive: BTreeSet<String>,
    /// Placements by instance id: (node, key, mod revision).
    pub placements: BTreeMap<String, (String, Key, Revision)>,
    /// Keys whose value did not decode.
    pub invalid: Vec<Key>,
}

impl Cluster {
    /// Reads every standard record present in `view` (a controller sees only what it watches).
    pub fn read(view: &FactView) -> Self {
        let mut cluster = Cluster::default();
        for fact in view.scan(schema::SERVICES) {
            match schema::decode::<ServiceSpec>(fact) {
                Ok(spec) => {
                    cluster.services.insert(spec.name.clone(), spec);
                }
                Err(_) => cluster.invalid.push(fact.key.clone()),
            }
        }
        for fact in view.scan(schema::EFFECTIVE) {
            let name = fact.key.strip_prefix(schema::EFFECTIVE).unwrap_or_default();
            match schema::decode::<EffectiveService>(fact) {
                Ok(effective) => {
                    cluster.effective.insert(name.to_owned(), effective);
                }
                Err(_) => cluster.invalid.push(fact.key.clone()),
            }
        }
        for fact in view.scan(schema::NODE_LEASES) {
            if let Some(node) = fact.key.strip_prefix(schema::NODE_LEASES) {
                cluster.alive.insert(node.to_owned());
            }
        }
        for fact in view.scan(schema::NODES) {
            match schema::decode::<NodeStatus>(fact) {
                Ok(node) => {
                    cluster.nodes.insert(node.name.clone(), node);
                }
                Err(_) => cluster.invalid.push(fact.key.clone()),
            }
        }
        for fact in view.scan(schema::PLACEMENTS) {
            match schema::decode::<Assignment>(fact) {
                Ok(a) => {
                    cluster
                        .placements
                        .insert(a.instance, (a.node, fact.key.clone(), fact.mod_revision));
                }
                Err(_) => cluster.invalid.push(fact.key.clone()),
            }
        }
        let mut observed: BTreeMap<(String, String), InstanceObservation> = BTreeMap::new();
        for fact in view.scan(schema::OBSERVED_INSTANCES) {
            let rest = fact
                .key
                .strip_prefix(schema::OBSERVED_INSTANCES)
                .unwrap_or_default();
            let Some((node, id)) = rest.split_once('/') else {
                continue;
            };
            match schema::decode::<InstanceObservation>(fact) {
                Ok(o) => {
                    observed.insert((node.to_owned(), id.to_owned()), o);
                }
                Err(_) => cluster.invalid.push(fact.key.clone()),
            }
        }
        for fact in view.scan(schema::INSTANCES) {
            let id = fact
                .key
                .strip_prefix(schema::INSTANCES)
                .unwrap_or_default()
                .to_owned();
            let Ok(desired) = schema::decode::<DesiredInstance>(fact) else {
                cluster.invalid.push(fact.key.clone());
                continue;
            };
            let node = cluster.placements.get(&id).map(|(node, _, _)| node.clone());
            let observed = node
                .as_ref()
                .and_then(|node| observed.remove(&(node.clone(), id.clone())));
            let node_alive = node.as_ref().is_some_and(|n| cluster.alive.contains(n));
            cluster.instances.insert(
                id.clone(),
                Instance {
                    id,
                    desired,
                    key: fact.key.clone(),
                    revision: fact.mod_revision,
                    node,
                    observed,
                    node_alive,
                },
            );
        }
        cluster
    }

    /// The instances of one service, in id order.
    pub fn instances_of<'a>(&'a self, service: &'a str) -> impl Iterator<Item = &'a Instance> + 'a {
        self.instances
            .values()
            .filter(move |i| i.desired.service == service)
    }

    /// Every service that has an effective record or instances, sorted.
    pub fn service_names(&self) -> BTreeSet<&str> {
        self.effective
            .keys()
            .map(String::as_str)
            .chain(self.instances.values().map(|i| i.desired.service.as_str()))
            .collect()
    }
}
