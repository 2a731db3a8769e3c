//! The scenarios' observation fixture: what node agents would report, written so that the
//! controllers' loop closes, and nothing more.
//!
//! Scenarios test controllers on observations a test states (`observe web-i3 running
//! unready`); the real agent would restart crashed instances, register leases and probe on its
//! own, and every expectation would become one about the agent. So this is deliberately not an
//! agent: no runtime, no restart policy, no probes, no lease. The real `AgentLoop` is proved in
//! the seeded simulation ([`crate::sim`]), in [`crate::cluster::TestCluster`] and in its own
//! step tests.
//!
//! For each live node (one holding `lease/node/{node}`), in name order, one commit:
//!
//! - a placed instance that should run and whose observation was not set by hand is reported
//!   `running`, ready and healthy, at `{node}:{port}` (ports from 10000 up, per node, given once
//!   per instance, so addresses never change);
//! - a placed instance asked to stop that the agent still sees active (or never saw) is reported
//!   `stopped`; ended instances keep their state. Either way the report then says the stop
//!   was seen ([`InstanceObservation::stop_asked`]), as the node agent's do;
//! - an observation whose placement is gone is deleted (the agent removed the instance);
//! - every report carries the node's registration in [`InstanceObservation::lease`], as the
//!   node agent's carry its lease id: here the create revision of `lease/node/{node}` (the
//!   scenario's lease facts have no store lease). So after `node N alive` the agent writes every
//!   report of N anew on its next pass, unchanged but for that field (an instance it was
//!   running still runs: a lapsed lease is not a crash), and the controllers trust them again.
//!
//! It never restarts an instance that ended: replacing it is the controllers' job. A dead node's
//! agent reports nothing, and its observations stay as they were.

use ccattler_core::schema::{
    self, DesiredInstance, DesiredState, Health, InstanceObservation, ObservedState, RecordKey,
    ServiceSpec,
};
use ccattler_core::{Change, Fact};

use super::world::{Applied, World, WorldError};

impl World {
    /// One pass of every live node's agent. Returns what changed.
    ///
    /// # Errors
    ///
    /// Never in practice; kept for symmetry with [`World::step`].
    pub fn agents_pass(&mut self) -> Result<Vec<Applied>, WorldError> {
        let nodes: Vec<String> = self
            .scan(schema::NODE_LEASES)
            .filter_map(|f| RecordKey::parse(&f.key)?.node().map(String::from))
            .collect();
        let mut applied = Vec::new();
        for node in nodes {
            let changes = self.agent_changes(&node)?;
            for change in self.commit(changes)? {
                applied.push(Applied {
                    by: format!("agent/{node}"),
                    change,
                });
            }
        }
        Ok(applied)
    }

    fn agent_changes(&mut self, node: &str) -> Result<Vec<Change>, WorldError> {
        let key_error = |e: ccattler_core::KeyError| WorldError(e.to_string());
        let placed: Vec<String> = self
            .scan(&schema::keys::node_placements(node).map_err(key_error)?)
            .filter_map(|f| RecordKey::parse(&f.key)?.instance().map(String::from))
            .collect();
        let Some(registration) = self
            .get(schema::keys::node_lease(node).map_err(key_error)?.as_str())
            .map(|f| i64::try_from(f.create_revision.0).unwrap_or(i64::MAX))
        else {
            return Ok(Vec::new()); // not registered: a dead node reports nothing
        };
        let mut changes = Vec::new();
        for id in &placed {
            let Some(desired) = self
                .get(schema::keys::instance(id).map_err(key_error)?.as_str())
                .and_then(|f| schema::decode::<DesiredInstance>(f).ok())
            else {
                continue; // forgotten: the scheduler deletes the placement next
            };
            let key = schema::keys::observed_instance(node, id).map_err(key_error)?;
            let seen = self.get(key.as_str()).and_then(decode_observation);
            let report = match desired.state {
                DesiredState::Running if self.held.contains(id) => None,
                DesiredState::Running => match &seen {
                    Some(o) if o.state == ObservedState::Running => None,
                    Some(o) if !o.state.is_active() => None, // ended: not restarted here
                    _ => Some(self.started(node, id, &desired.service)),
                },
                DesiredState::Stopped => {
                    self.held.remove(id);
                    match seen.clone() {
                        Some(o) if !o.state.is_active() && o.stop_asked => None,
                        // Ended before: now ended as asked (what frees a stateful identity).
                        Some(o) if !o.state.is_active() => Some(InstanceObservation {
                            stop_asked: true,
                            ..o
                        }),
                        seen => Some(stopped(node, &desired.service, seen)),
                    }
                }
            };
            // Left as it is, a report from an earlier registration is written anew.
            let report = report.or(seen).map(|o| InstanceObservation {
                lease: Some(registration),
                ..o
            });
            if let Some(report) = report {
                changes.push(Change::put(key, schema::encode(&report)));
            }
        }
        let own = schema::keys::node_observations(node).map_err(key_error)?;
        for fact in self.scan(&own) {
            let id = RecordKey::parse(&fact.key)
                .and_then(|r| r.instance())
                .unwrap_or_default();
            if !placed.iter().any(|p| p == id) {
                changes.push(Change::delete(fact.key.clone()));
            }
        }
        Ok(changes)
    }

    /// The instance's address on its node: given once, from port 10000 up per node.
    pub(crate) fn address(&mut self, node: &str, id: &str) -> String {
        if let Some(address) = self.addresses.get(id) {
            return address.clone();
        }
        let port = self.ports.entry(node.to_owned()).or_insert(10_000);
        let address = format!("{node}:{port}");
        *port += 1;
        self.addresses.insert(id.to_owned(), address.clone());
        address
    }

    /// A running, ready, healthy report at the instance's address (given on first start).
    fn started(&mut self, node: &str, id: &str, service: &str) -> InstanceObservation {
        let address = self.address(node, id);
        let image = self
            .record(RecordKey::Service(service))
            .and_then(|f| schema::decode::<ServiceSpec>(f).ok())
            .map(|s| s.image)
            .unwrap_or_default();
        InstanceObservation {
            node: node.to_owned(),
            service: service.to_owned(),
            state: ObservedState::Running,
            address: Some(address),
            health: Health::Healthy,
            ready: true,
            image,
            ..InstanceObservation::default()
        }
    }
}

/// The report of an instance the agent stopped on request.
fn stopped(node: &str, service: &str, seen: Option<InstanceObservation>) -> InstanceObservation {
    let base = seen.unwrap_or_else(|| InstanceObservation {
        node: node.to_owned(),
        service: service.to_owned(),
        ..InstanceObservation::default()
    });
    InstanceObservation {
        state: ObservedState::Stopped,
        address: None,
        ready: false,
        health: Health::Unknown,
        stop_asked: true,
        ..base
    }
}

pub(crate) fn decode_observation(fact: &Fact) -> Option<InstanceObservation> {
    schema::decode::<InstanceObservation>(fact).ok()
}
