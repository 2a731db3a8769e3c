//! [`World`]: what one stand-in node knows (placements, desired records) and runs, and the
//! observations it reports.

use std::collections::{BTreeMap, BTreeSet};

use ccattler_core::schema::{
    self, Assignment, DesiredInstance, DesiredState, Health, InstanceObservation, ObservedState,
};
use ccattler_core::{EventKind, Fact, FactStore, Key, LeaseId, Op, StoreError, Txn, WatchEvent};
use tokio::time::Instant;

use super::agent::AgentTiming;

/// The first port handed out to an instance on each node.
const FIRST_PORT: u16 = 20_000;

/// One instance as this node runs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Proc {
    state: ObservedState,
    port: Option<u16>,
    stopping: bool,
}

/// What the agent knows and what it runs.
#[derive(Debug)]
pub(crate) struct World {
    node: String,
    /// The lease the node registered under, put in every report (as the node agent does): after
    /// a new registration every report differs from the one adopted, so all are written anew.
    lease: LeaseId,
    timing: AgentTiming,
    /// Instances placed here: id → service.
    placed: BTreeMap<String, String>,
    /// The desired records of the instances placed here (not the others': with 50 nodes, each
    /// would hold every record of the cluster).
    desired: BTreeMap<String, Fact>,
    /// Placed instances whose desired record must be read (it was written before the placement,
    /// when this node did not keep it).
    fetch: BTreeSet<String>,
    running: BTreeMap<String, Proc>,
    reported: BTreeMap<String, InstanceObservation>,
    timers: BTreeSet<(Instant, String)>,
    next_port: u16,
}

impl World {
    pub(crate) fn new(node: String, lease: LeaseId, timing: AgentTiming) -> Self {
        World {
            node,
            lease,
            timing,
            placed: BTreeMap::new(),
            desired: BTreeMap::new(),
            fetch: BTreeSet::new(),
            running: BTreeMap::new(),
            reported: BTreeMap::new(),
            timers: BTreeSet::new(),
            next_port: FIRST_PORT,
        }
    }

    pub(crate) fn event(&mut self, event: &WatchEvent) {
        let fact = (event.kind == EventKind::Put).then_some(&event.fact);
        if event.key().has_prefix(schema::PLACEMENTS) {
            self.placement(event.key(), fact);
        } else {
            self.desired(event.key(), fact.cloned());
        }
    }

    pub(crate) fn placement(&mut self, key: &Key, fact: Option<&Fact>) {
        let Some(id) = last_segment(key) else { return };
        let assignment = fact.and_then(|f| schema::decode::<Assignment>(f).ok());
        match assignment {
            Some(a) => {
                if self.placed.insert(id.to_owned(), a.service).is_none()
                    && !self.desired.contains_key(id)
                {
                    self.fetch.insert(id.to_owned());
                }
            }
            None => {
                self.placed.remove(id);
                self.desired.remove(id);
                self.fetch.remove(id);
            }
        }
    }

    /// A desired record changed (or was read); kept only for instances placed here, and only
    /// when newer than the one held.
    pub(crate) fn desired(&mut self, key: &Key, fact: Option<Fact>) {
        let Some(id) = last_segment(key) else { return };
        if !self.placed.contains_key(id) {
            return;
        }
        self.fetch.remove(id);
        match fact {
            Some(fact) => {
                let held = self.desired.get(id).map(|f| f.mod_revision);
                if held.is_none_or(|held| held < fact.mod_revision) {
                    self.desired.insert(id.to_owned(), fact);
                }
            }
            None => {
                self.desired.remove(id);
            }
        }
    }

    /// The desired keys to read, for instances placed before their record was seen here.
    pub(crate) fn take_fetches(&mut self) -> Vec<Key> {
        std::mem::take(&mut self.fetch)
            .into_iter()
            .filter_map(|id| schema::keys::instance(&id).ok())
            .collect()
    }

    /// Takes over what this node reported before (a restarted agent keeps its instances).
    pub(crate) fn adopt(&mut self, fact: &Fact) {
        let Some(id) = last_segment(&fact.key) else {
            return;
        };
        let Ok(observation) = schema::decode::<InstanceObservation>(fact) else {
            return;
        };
        let port = observation
            .address
            .as_deref()
            .and_then(|a| a.rsplit_once(':'))
            .and_then(|(_, port)| port.parse::<u16>().ok());
        if let Some(port) = port {
            self.next_port = self.next_port.max(port.saturating_add(1));
        }
        let proc = Proc {
            state: observation.state,
            port,
            stopping: false,
        };
        if proc.state == ObservedState::Starting {
            let due = Instant::now() + self.timing.start_delay;
            self.timers.insert((due, id.to_owned()));
        }
        self.running.insert(id.to_owned(), proc);
        self.reported.insert(id.to_owned(), observation);
    }

    /// What the instance's desired record asks; `None` when there is none (not seen yet, or
    /// forgotten because it is gone: either way there is nothing to do).
    fn desired_state(&self, id: &str) -> Option<DesiredState> {
        let fact = self.desired.get(id)?;
        Some(schema::decode::<DesiredInstance>(fact).map_or(DesiredState::Stopped, |d| d.state))
    }

    /// Starts what should run, stops what should not, forgets what is no longer placed here.
    pub(crate) fn converge(&mut self, now: Instant) {
        self.running.retain(|id, _| self.placed.contains_key(id));
        let ids: Vec<String> = self.placed.keys().cloned().collect();
        for id in ids {
            let Some(desired) = self.desired_state(&id) else {
                continue;
            };
            let run = desired == DesiredState::Running;
            let timing = self.timing;
            match self.running.get_mut(&id) {
                None if run => {
                    let port = self.next_port;
                    self.next_port = self.next_port.wrapping_add(1).max(FIRST_PORT);
                    let state = if timing.start_delay.is_zero() {
                        ObservedState::Running
                    } else {
                        self.timers.insert((now + timing.start_delay, id.clone()));
                        ObservedState::Starting
                    };
                    let proc = Proc {
                        state,
                        port: Some(port),
                        stopping: false,
                    };
                    self.running.insert(id, proc);
                }
                None => {
                    let proc = Proc {
                        state: ObservedState::Stopped,
                        port: None,
                        stopping: false,
                    };
                    self.running.insert(id, proc);
                }
                Some(proc) if !run && proc.state.is_active() && !proc.stopping => {
                    if timing.stop_delay.is_zero() {
                        proc.state = ObservedState::Stopped;
                    } else {
                        proc.stopping = true;
                        self.timers.insert((now + timing.stop_delay, id));
                    }
                }
                Some(_) => {}
            }
        }
    }

    pub(crate) fn next_timer(&self) -> Option<Instant> {
        self.timers.first().map(|(due, _)| *due)
    }

    /// Finishes the starts and stops that are due.
    pub(crate) fn fire(&mut self, now: Instant) {
        while let Some((due, id)) = self.timers.first().cloned() {
            if due > now {
                break;
            }
            self.timers.pop_first();
            if let Some(proc) = self.running.get_mut(&id) {
                if proc.stopping {
                    proc.state = ObservedState::Stopped;
                    proc.stopping = false;
                } else if proc.state == ObservedState::Starting {
                    proc.state = ObservedState::Running;
                }
            }
        }
    }

    pub(crate) fn set_state(&mut self, id: &str, state: ObservedState) {
        if let Some(proc) = self.running.get_mut(id) {
            proc.state = state;
            proc.stopping = false;
        }
    }

    fn observation(&self, id: &str, proc: &Proc) -> InstanceObservation {
        let running = proc.state == ObservedState::Running;
        InstanceObservation {
            node: self.node.clone(),
            service: self.placed.get(id).cloned().unwrap_or_default(),
            state: proc.state,
            address: proc
                .port
                .filter(|_| running)
                .map(|port| format!("{}:{port}", self.node)),
            health: if running {
                Health::Healthy
            } else {
                Health::Unknown
            },
            ready: running,
            lease: Some(self.lease.0),
            ..InstanceObservation::default()
        }
    }

    /// Writes every observation that changed, in transactions of at most the store's op limit.
    pub(crate) async fn report<S: FactStore>(&mut self, store: &S) -> Result<(), StoreError> {
        let mut writes: Vec<(String, Option<InstanceObservation>)> = Vec::new();
        for (id, proc) in &self.running {
            let observation = self.observation(id, proc);
            if self.reported.get(id) != Some(&observation) {
                writes.push((id.clone(), Some(observation)));
            }
        }
        for id in self.reported.keys() {
            if !self.running.contains_key(id) {
                writes.push((id.clone(), None));
            }
        }
        for chunk in writes.chunks(store.limits().max_txn_ops.max(1)) {
            let mut txn = Txn::new();
            for (id, observation) in chunk {
                let key = schema::keys::observed_instance(&self.node, id)?;
                txn.then.push(match observation {
                    Some(o) => Op::put(key, schema::encode(o)),
                    None => Op::delete(key),
                });
            }
            store.txn(txn).await?;
            for (id, observation) in chunk {
                match observation {
                    Some(o) => self.reported.insert(id.clone(), o.clone()),
                    None => self.reported.remove(id),
                };
            }
        }
        Ok(())
    }
}

/// The instance id at the end of a placement, desired or observed key.
fn last_segment(key: &Key) -> Option<&str> {
    key.as_str().rsplit_once('/').map(|(_, id)| id)
}
