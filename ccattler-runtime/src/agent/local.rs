//! What the node itself says it runs, read on the node: [`NodeSnapshot`], taken from an
//! [`AgentLoop`] with [`AgentLoop::snapshot`] and published by
//! [`NodeAgent::run_publishing`](super::NodeAgent::run_publishing), so a local port (`cca agent
//! --local-addr`) answers from it while the control plane is unreachable; and the agent's
//! metrics, which the driver records through the `metrics` facade: `ccattler_agent_instances`
//! by `state`, `ccattler_agent_ready_instances` and `ccattler_agent_connected` (set as each
//! snapshot is published), `ccattler_agent_probes_total`, `ccattler_agent_pass_duration_seconds`,
//! `ccattler_agent_lists_total` and `ccattler_agent_store_errors_total`.
//!
//! The table of every metric CCattler records is [`ccattler_core::telemetry`].

use std::collections::BTreeMap;

use ccattler_core::LeaseId;
use ccattler_core::schema::{Assignment, InstanceObservation, ObservedState};
use serde::Serialize;

use super::action::Action;
use super::machine::AgentLoop;

/// Name of the instances-by-state gauge.
pub(super) const INSTANCES: &str = "ccattler_agent_instances";
/// Name of the ready instances gauge.
pub(super) const READY_INSTANCES: &str = "ccattler_agent_ready_instances";
/// Name of the connected gauge.
pub(super) const CONNECTED: &str = "ccattler_agent_connected";
/// Name of the probe counter.
pub(super) const PROBES: &str = "ccattler_agent_probes_total";
/// Name of the pass duration histogram.
pub(super) const PASS_DURATION: &str = "ccattler_agent_pass_duration_seconds";
/// Name of the counter of full lists of the node's placements.
pub(super) const LISTS: &str = "ccattler_agent_lists_total";
/// Name of the store errors counter.
pub(super) const STORE_ERRORS: &str = "ccattler_agent_store_errors_total";

/// Every [`ObservedState`], in lifecycle order, for gauges that need a series per state.
pub const OBSERVED_STATES: [ObservedState; 7] = [
    ObservedState::Pending,
    ObservedState::Pulling,
    ObservedState::Starting,
    ObservedState::Running,
    ObservedState::Exited,
    ObservedState::Failed,
    ObservedState::Stopped,
];

/// The name of a state as the store's records spell it (`running`).
pub fn state_name(state: ObservedState) -> &'static str {
    match state {
        ObservedState::Pending => "pending",
        ObservedState::Pulling => "pulling",
        ObservedState::Starting => "starting",
        ObservedState::Running => "running",
        ObservedState::Exited => "exited",
        ObservedState::Failed => "failed",
        ObservedState::Stopped => "stopped",
    }
}

/// One node's observed state as its agent knows it now, whether or not the store can hear it.
///
/// It holds no spec and no secret: only what the agent reports to the store anyway, and the
/// placements it follows.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct NodeSnapshot {
    /// The node's name.
    pub node: String,
    /// Whether the agent is registered, listed and watching its placements right now.
    pub connected: bool,
    /// What each placed instance is doing, by instance id: the observation the agent reports
    /// (or would report, were the store reachable), with state, health, readiness and reason.
    pub instances: BTreeMap<String, InstanceObservation>,
    /// The placements the agent last applied (listed or watched from the store, or loaded from
    /// its cache), by instance id.
    pub placements: BTreeMap<String, Assignment>,
}

impl NodeSnapshot {
    /// How many instances are in `state`.
    pub fn count(&self, state: ObservedState) -> usize {
        self.instances
            .values()
            .filter(|instance| instance.state == state)
            .count()
    }

    /// How many instances are running and ready.
    pub fn ready(&self) -> usize {
        self.instances
            .values()
            .filter(|instance| instance.state == ObservedState::Running && instance.ready)
            .count()
    }
}

impl NodeSnapshot {
    /// Sets the gauges the snapshot answers: instances by state, ready, connected.
    pub(super) fn record(&self) {
        for state in OBSERVED_STATES {
            metrics::gauge!(INSTANCES, "state" => state_name(state)).set(self.count(state) as f64);
        }
        metrics::gauge!(READY_INSTANCES).set(self.ready() as f64);
        metrics::gauge!(CONNECTED).set(if self.connected { 1.0 } else { 0.0 });
    }
}

/// The `operation` label of a failed store action.
pub(super) fn store_operation(action: &Action) -> &'static str {
    match action {
        Action::Register { .. } => "register",
        Action::List { .. } => "list",
        Action::Watch { .. } => "watch",
        Action::FetchSpecs { .. } => "fetch_specs",
        Action::FetchSecrets { .. } => "fetch_secrets",
        Action::Report { .. } => "report",
        _ => "other",
    }
}

/// Counts one failed store call of `operation`.
pub(super) fn store_error(operation: &'static str) {
    metrics::counter!(STORE_ERRORS, "operation" => operation).increment(1);
}

/// Counts one full list of the node's placements (after registering, and each resync).
pub(super) fn listed() {
    metrics::counter!(LISTS).increment(1);
}

/// Counts one probe check of `kind`.
pub(super) fn probed(kind: &'static str, passed: bool) {
    let result = if passed { "pass" } else { "fail" };
    metrics::counter!(PROBES, "probe" => kind, "result" => result).increment(1);
}

impl AgentLoop {
    /// The node's observed state now: the observations the loop would report if the store
    /// answered (what it already reported, with what changed since), and its placements.
    pub fn snapshot(&self) -> NodeSnapshot {
        let lease = self
            .lease()
            .or(self.desired.lease_id())
            .unwrap_or(LeaseId(0));
        let mut instances: BTreeMap<String, InstanceObservation> = self
            .reported
            .iter()
            .filter(|(id, _)| self.desired.placements.contains_key(*id))
            .filter_map(|(id, seen)| Some((id.clone(), seen.clone()?)))
            .collect();
        // Every instance, not only those marked: a report in flight is not in `reported` yet.
        let every = super::scope::Scope::default();
        for (id, observation) in self.report_changes(lease, &every).applied {
            match observation {
                Some(observation) => instances.insert(id, observation),
                None => instances.remove(&id),
            };
        }
        NodeSnapshot {
            node: self.config.node.clone(),
            connected: self.is_connected(),
            instances,
            placements: self.desired.placements.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use ccattler_core::schema::DesiredState;

    use super::super::cache::Desired;
    use super::super::config::AgentConfig;
    use super::*;

    #[test]
    fn a_placed_instance_not_started_yet_is_pending_and_disconnected() {
        let mut desired = Desired::default();
        desired.placements.insert(
            "web-1".to_owned(),
            Assignment {
                instance: "web-1".to_owned(),
                service: "web".to_owned(),
                node: "n1".to_owned(),
                version: "v1".to_owned(),
                state: DesiredState::Running,
                ports: Vec::new(),
                volumes: Vec::new(),
            },
        );
        let machine = AgentLoop::new(AgentConfig::new("n1", "/nonexistent/cache"), desired);
        let snapshot = machine.snapshot();
        assert_eq!(snapshot.node, "n1");
        assert!(!snapshot.connected);
        assert_eq!(snapshot.count(ObservedState::Pending), 1);
        assert_eq!(snapshot.ready(), 0);
        assert_eq!(snapshot.instances["web-1"].service, "web");
        assert_eq!(snapshot.placements.len(), 1);
    }

    #[test]
    fn state_names_are_the_records_spelling() {
        for state in OBSERVED_STATES {
            let json = serde_json::to_value(state).expect("encodes");
            assert_eq!(json.as_str(), Some(state_name(state)));
        }
    }
}
