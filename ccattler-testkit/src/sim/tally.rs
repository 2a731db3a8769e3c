//! [`Tally`]: what each service counts in the store, kept up to date one instance at a time,
//! so that judging a service costs the same for ten instances as for ten thousand.
//!
//! Each instance contributes a [`Mark`] (wanted, running, ready, the address it serves at); a
//! change to a fact re-marks only the instances it concerns (a node's lease: the instances on
//! that node; a service's spec or effective record: that service's instances), subtracting the
//! old mark from its service's [`Totals`] and adding the new one.

use std::collections::BTreeMap;

use ccattler_controllers::standard::{Cluster, Instance, Standing};
use ccattler_core::Key;
use ccattler_core::schema::{DesiredState, RecordKey};

/// One instance's part in its service's totals.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Mark {
    service: String,
    /// The control plane wants it running: desired running, placed on a live node, not ended.
    wanted: bool,
    /// Wanted, and its report is stale (written before its node's current registration): the
    /// instance controller keeps one instance above the count for each such, until the node
    /// reports again or loses its lease.
    stale: bool,
    /// Reported running on a live node (a fresh report).
    running: bool,
    /// Desired running and reported ready on a live node.
    ready: bool,
    /// Ready and of the version in force.
    current_ready: bool,
    /// The address it serves at, when ready.
    serves: Option<String>,
}

/// What one service counts now.
#[derive(Clone, Debug, Default)]
pub(crate) struct Totals {
    pub wanted: usize,
    pub stale: usize,
    pub running: usize,
    pub ready: usize,
    pub current_ready: usize,
    /// Addresses ready instances serve at, with how many serve at each.
    pub serving: BTreeMap<String, usize>,
}

/// Marks and totals, following the checker's [`Cluster`].
#[derive(Debug, Default)]
pub(crate) struct Tally {
    marks: BTreeMap<String, Mark>,
    totals: BTreeMap<String, Totals>,
}

impl Tally {
    /// The totals of `service` (all zero if it has none). Borrowed: the checker asks after
    /// every step, and a large service serves at thousands of addresses.
    pub(crate) fn of(&self, service: &str) -> &Totals {
        static NONE: Totals = Totals {
            wanted: 0,
            stale: 0,
            running: 0,
            ready: 0,
            current_ready: 0,
            serving: BTreeMap::new(),
        };
        self.totals.get(service).unwrap_or(&NONE)
    }

    /// Re-marks what the change of `key` concerns, after `cluster` applied it.
    pub(crate) fn changed(&mut self, cluster: &Cluster, key: &Key) {
        let ids: Vec<String> = match RecordKey::parse(key) {
            Some(RecordKey::Instance(id))
            | Some(RecordKey::Placement { instance: id, .. })
            | Some(RecordKey::ObservedInstance { instance: id, .. }) => vec![id.to_owned()],
            Some(RecordKey::NodeLease(node)) => {
                cluster.instances_on(node).map(|i| i.id.clone()).collect()
            }
            Some(RecordKey::Service(name)) | Some(RecordKey::Effective(name)) => {
                cluster.instances_of(name).map(|i| i.id.clone()).collect()
            }
            _ => return,
        };
        for id in ids {
            self.remark(cluster, &id);
        }
    }

    fn remark(&mut self, cluster: &Cluster, id: &str) {
        let new = cluster.instances.get(id).map(|i| mark(cluster, i));
        let old = match &new {
            Some(mark) => self.marks.insert(id.to_owned(), mark.clone()),
            None => self.marks.remove(id),
        };
        if let Some(old) = old {
            let totals = self.totals.entry(old.service.clone()).or_default();
            add(totals, &old, false);
        }
        if let Some(new) = new {
            let totals = self.totals.entry(new.service.clone()).or_default();
            add(totals, &new, true);
        }
    }
}

fn mark(cluster: &Cluster, i: &Instance) -> Mark {
    let spec = cluster.services.get(&i.desired.service);
    let restart = spec.map(|s| s.restart).unwrap_or_default();
    let effective = cluster.effective.get(&i.desired.service);
    let running_desired = i.desired.state == DesiredState::Running;
    let ready = running_desired && i.node_alive && i.is_ready();
    let wanted = running_desired
        && i.node.is_some()
        && i.node_alive
        && matches!(i.standing(restart), Standing::Active);
    Mark {
        service: i.desired.service.clone(),
        wanted,
        stale: wanted && i.is_stale(),
        running: i.node_alive && i.is_running(),
        ready,
        current_ready: ready && effective.is_some_and(|e| e.version == i.desired.version),
        serves: if i.node_alive && i.is_ready() {
            i.report().and_then(|o| o.address.clone())
        } else {
            None
        },
    }
}

/// Adds (`plus`) or subtracts one mark from its service's totals.
fn add(totals: &mut Totals, mark: &Mark, plus: bool) {
    let step = |n: &mut usize, on: bool| {
        if on {
            *n = if plus { *n + 1 } else { n.saturating_sub(1) };
        }
    };
    step(&mut totals.wanted, mark.wanted);
    step(&mut totals.stale, mark.stale);
    step(&mut totals.running, mark.running);
    step(&mut totals.ready, mark.ready);
    step(&mut totals.current_ready, mark.current_ready);
    if let Some(address) = &mark.serves {
        let n = totals.serving.entry(address.clone()).or_default();
        step(n, true);
        if *n == 0 {
            totals.serving.remove(address);
        }
    }
}
