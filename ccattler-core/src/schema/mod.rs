//! The standard schema: typed records every standard component reads and writes, their keys, and
//! their JSON encoding.
//!
//! # Key table
//!
//! Every prefix has exactly one writer. Values are compact JSON (readable with `etcdctl get`),
//! with quantities and durations as text (`"500m"`, `"256Mi"`, `"10s"`).
//!
//! | key | value | single writer |
//! |---|---|---|
//! | `desired/service/{svc}` | [`ServiceSpec`] | the user's apply |
//! | `desired/volume/{vol}` | [`VolumeSpec`] | the user's apply |
//! | `desired/network/policy` | [`NetworkPolicy`] | the user's apply |
//! | `secret/{name}` | the secret's raw bytes | the user (API); never returned by reads of the API |
//! | `metric/{metric}/{svc}` | [`PushedMetric`] | the user's platform (API) |
//! | `intent/autoscaler/{svc}` | [`ScaleIntent`] | autoscaler |
//! | `intent/rollout/{svc}` | [`RolloutRequest`] | the user (API: `cca rollout pause\|resume\|undo`) |
//! | `rollout/service/{svc}` | [`Rollout`] | rollout controller |
//! | `rollout/spec/{svc}/{version}` | [`ServiceSpec`] of that version, kept for rollbacks and for agents starting instances of it | rollout controller |
//! | `effective/service/{svc}` | [`EffectiveService`] | intent resolver |
//! | `desired/instance/{id}` | [`DesiredInstance`] | instance controller |
//! | `placement/{node}/{id}` | [`Assignment`] | scheduler |
//! | `volume/attachment/{vol}` | [`VolumeAttachment`]: the node a volume's data is on, and its instance | scheduler |
//! | `lease/node/{node}` | the node's name, attached to the node's store lease | that node's agent |
//! | `observed/node/{node}` | [`NodeStatus`] | that node's agent |
//! | `observed/instance/{node}/{id}` | [`InstanceObservation`] | that node's agent |
//! | `endpoint/service/{svc}` | [`Endpoints`] | endpoint controller |
//! | `network/node/{node}` | [`NodeRules`] | network controller |
//! | `observed/network/{node}` | [`NetworkReport`] | that node's agent (its firewall) |
//! | `telemetry/node/{node}` | [`NodeTelemetry`], attached to the node's store lease | that node's agent |
//! | `status/service/{svc}` | [`ServiceStatus`] | status controller |
//! | `status/init/{svc}` | [`InitStatus`] | init controller |
//! | `status/unschedulable/{id}` | [`Unschedulable`] | scheduler |
//! | `status/placed/{id}` | the node the instance is placed on (a JSON string), beside its placement: one key guards where an instance goes, so a scheduler that missed a placement cannot add a second | scheduler |
//! | `status/rebalance/{svc}` | [`RebalanceMove`] | scheduler |
//! | `runner/commit/{controller}` | a commit marker: rewritten by every commit of the controller (see [`ControllerLoop::set_commit_marker`](crate::runner::ControllerLoop::set_commit_marker)) | the runner |
//!
//! Service names are paths (`team/web`), so they may span several key segments; node names and
//! instance ids are single segments. Placements and observations are keyed by node first, so an
//! agent watches and writes only its own prefix, and a credential for one node can be limited to
//! it by prefix alone.
//!
//! # Versions
//!
//! [`ServiceSpec::version`] is a stable hash of everything in a spec that a running instance
//! depends on (not its instance count, scale bounds or update policy): re-applying the same file keeps the
//! version, changing the image changes it.

mod cluster;
mod duration;
mod init;
mod network;
mod quantity;
mod rollout;
mod service;
mod telemetry;
mod volume;

pub use cluster::{
    Assignment, DesiredInstance, DesiredState, EffectiveService, Endpoint, Endpoints, Health,
    InstanceObservation, NodeStatus, ObservedState, PortBinding, PortRange, PushedMetric,
    RebalanceMove, ScaleIntent, ServiceStatus, Unschedulable,
};
pub use duration::{deserialize_duration, format_duration, parse_duration, serialize_duration};
pub use init::{INIT_LISTED, InitPhase, InitStatus, InstanceInit};
pub use network::{NetworkPolicy, NetworkReport, NetworkRule, NodeRules, PortGuard, RuleAction};
pub use quantity::{Cpu, Memory};
pub use rollout::{Rollout, RolloutAction, RolloutPhase, RolloutRequest};
pub use service::{
    ConfigFile, Expose, HorizontalScale, InitStep, Placement, Probe, ProbeCheck, Protocol,
    Resources, RestartPolicy, ScaleTarget, SecretRef, ServiceSpec, UpdatePolicy, VolumeMount,
    ZonePolicy,
};
pub use telemetry::{InstanceUsage, NodeTelemetry};
pub use volume::{VolumeAttachment, VolumeSpec, claimed_volume, volume_claim};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::{Fact, Key, KeyError, Value};

/// Prefix of [`ServiceSpec`]s.
pub const DESIRED_SERVICES: &str = "desired/service/";
/// Prefix of [`VolumeSpec`]s.
pub const DESIRED_VOLUMES: &str = "desired/volume/";
/// Prefix of [`VolumeAttachment`]s (`volume/attachment/{vol}`).
pub const VOLUME_ATTACHMENTS: &str = "volume/attachment/";
/// The key of the [`NetworkPolicy`].
pub const DESIRED_NETWORK_POLICY: &str = "desired/network/policy";
/// Prefix of every desired object a user's apply writes.
pub const APPLIED: [&str; 3] = [DESIRED_SERVICES, DESIRED_VOLUMES, "desired/network/"];
/// Prefix of secret values.
pub const SECRETS: &str = "secret/";
/// Prefix of [`ScaleIntent`]s.
pub const AUTOSCALER_INTENTS: &str = "intent/autoscaler/";
/// Prefix of [`PushedMetric`]s (`metric/{metric}/{svc}`).
pub const METRICS: &str = "metric/";
/// Prefix of [`RolloutRequest`]s (`intent/rollout/{svc}`).
pub const ROLLOUT_REQUESTS: &str = "intent/rollout/";
/// Prefix of [`Rollout`] records (`rollout/service/{svc}`).
pub const ROLLOUTS: &str = "rollout/service/";
/// Prefix of the specs kept by version (`rollout/spec/{svc}/{version}`).
pub const SPEC_HISTORY: &str = "rollout/spec/";
/// Prefix of [`EffectiveService`]s.
pub const EFFECTIVE_SERVICES: &str = "effective/service/";
/// Prefix of [`DesiredInstance`]s.
pub const DESIRED_INSTANCES: &str = "desired/instance/";
/// Prefix of [`Assignment`]s (`placement/{node}/{id}`).
pub const PLACEMENTS: &str = "placement/";
/// Prefix of node liveness keys.
pub const NODE_LEASES: &str = "lease/node/";
/// Prefix of [`NodeStatus`]es.
pub const OBSERVED_NODES: &str = "observed/node/";
/// Prefix of [`InstanceObservation`]s (`observed/instance/{node}/{id}`).
pub const OBSERVED_INSTANCES: &str = "observed/instance/";
/// Prefix of the [`NodeRules`] of each node (`network/node/{node}`).
pub const NODE_RULES: &str = "network/node/";
/// Prefix of the [`NetworkReport`] of each node (`observed/network/{node}`).
pub const NETWORK_REPORTS: &str = "observed/network/";
/// Prefix of the [`NodeTelemetry`] of each node (`telemetry/node/{node}`).
pub const TELEMETRY: &str = "telemetry/node/";
/// Prefix of [`Endpoints`].
pub const SERVICE_ENDPOINTS: &str = "endpoint/service/";
/// Prefix of [`ServiceStatus`]es.
pub const SERVICE_STATUSES: &str = "status/service/";
/// Prefix of [`InitStatus`]es (`status/init/{svc}`).
pub const INIT_STATUSES: &str = "status/init/";
/// Prefix of [`Unschedulable`] reasons.
pub const UNSCHEDULABLE: &str = "status/unschedulable/";
/// Prefix of the scheduler's one record per placed instance (`status/placed/{id}`, the node's
/// name as a JSON string): written and deleted in the same commit as the instance's
/// placement, so every change of an instance's placement is guarded by one key, whichever
/// node the placement names.
pub const PLACED: &str = "status/placed/";
/// Prefix of [`RebalanceMove`]s.
pub const REBALANCE_MOVES: &str = "status/rebalance/";
/// Prefix of control-plane replicas (`runner/replica/{id}`): each running server keeps its own
/// key there, attached to a lease of its own, so the keys present are the replicas up.
pub const REPLICAS: &str = "runner/replica/";
/// Prefix of [`Event`](crate::Event)s (`event/{object}/{writer}/{slot}`).
pub const EVENTS: &str = "event/";

pub mod keys;

pub use keys::RecordKey;

/// A value that does not decode, or text that is not a valid quantity.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SchemaError {
    /// A quantity, duration or name in text form is malformed.
    #[error("invalid {what} `{text}`: {reason}; expected {expected}")]
    Invalid {
        /// What was parsed: "cpu", "memory", "duration".
        what: &'static str,
        /// The text given.
        text: String,
        /// What is wrong with it.
        reason: String,
        /// What would be accepted.
        expected: &'static str,
    },
    /// A stored value is not the JSON of the record its key promises.
    #[error("fact {key} does not hold a valid {record}")]
    Decode {
        /// The fact's key.
        key: Key,
        /// The record type expected.
        record: &'static str,
        /// The JSON error.
        #[source]
        source: serde_json::Error,
    },
}

impl SchemaError {
    pub(crate) fn invalid(
        what: &'static str,
        text: &str,
        reason: &str,
        expected: &'static str,
    ) -> Self {
        SchemaError::Invalid {
            what,
            text: text.to_owned(),
            reason: reason.to_owned(),
            expected,
        }
    }
}

/// Encodes a record as its stored value (compact JSON).
///
/// # Panics
///
/// Never for the records of this module, whose encoding cannot fail.
pub fn encode<T: Serialize>(record: &T) -> Value {
    Value::from(serde_json::to_vec(record).expect("schema records always encode as JSON"))
}

/// Decodes the record a fact holds.
///
/// # Errors
///
/// [`SchemaError::Decode`] when the value is not that record's JSON.
pub fn decode<T: DeserializeOwned>(fact: &Fact) -> Result<T, SchemaError> {
    serde_json::from_slice(&fact.value).map_err(|source| SchemaError::Decode {
        key: fact.key.clone(),
        record: std::any::type_name::<T>()
            .rsplit("::")
            .next()
            .unwrap_or("record"),
        source,
    })
}

impl ServiceSpec {
    /// A stable hash (16 hex digits) of everything a running instance depends on: the spec
    /// without `instances`, `scale` and `update`. Instances of another version are replaced.
    pub fn version(&self) -> String {
        let template = ServiceSpec {
            instances: 0,
            scale: None,
            update: UpdatePolicy::default(),
            ..self.clone()
        };
        let bytes = serde_json::to_vec(&template).expect("schema records always encode as JSON");
        // FNV-1a: tiny, stable across platforms and releases, good enough to tell specs apart.
        let hash = bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
        format!("{hash:016x}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Revision;

    fn web() -> ServiceSpec {
        ServiceSpec {
            name: "team/web".into(),
            image: "nginx:1.28".into(),
            instances: 3,
            expose: vec![Expose {
                port: 8080,
                protocol: Protocol::Http,
                external: false,
                fixed: false,
            }],
            resources: Resources {
                cpu: Cpu::from_millis(500),
                memory: Memory::from_bytes(256 << 20),
            },
            readiness: Some(Probe::new(ProbeCheck::Http {
                path: "/healthz".into(),
            })),
            ..ServiceSpec::default()
        }
    }

    #[test]
    fn encodes_readable_json_that_decodes_back() {
        let spec = web();
        let value = encode(&spec);
        let text = std::str::from_utf8(&value).unwrap();
        assert!(text.contains(r#""cpu":"500m""#), "{text}");
        assert!(text.contains(r#""every":"10s""#), "{text}");
        let fact = Fact::created(keys::service("team/web").unwrap(), value, Revision(1));
        assert_eq!(decode::<ServiceSpec>(&fact).unwrap(), spec);
    }

    #[test]
    fn decode_errors_name_the_key_and_record() {
        let fact = Fact::created(
            keys::node("n1").unwrap(),
            Value::from_static(b"{\"cpu\": 12}"),
            Revision(1),
        );
        let err = decode::<NodeStatus>(&fact).unwrap_err().to_string();
        assert_eq!(
            err,
            "fact observed/node/n1 does not hold a valid NodeStatus"
        );
    }

    #[test]
    fn version_ignores_scale_but_not_the_image() {
        let base = web();
        let scaled = ServiceSpec {
            instances: 9,
            scale: Some(HorizontalScale::new(1, 10)),
            ..base.clone()
        };
        let updated = ServiceSpec {
            image: "nginx:1.29".into(),
            ..base.clone()
        };
        assert_eq!(base.version(), scaled.version());
        assert_ne!(base.version(), updated.version());
        assert_eq!(base.version().len(), 16);
    }

    #[test]
    fn keys_follow_the_table() {
        assert_eq!(
            keys::service("team/web").unwrap().as_str(),
            "desired/service/team/web"
        );
        assert_eq!(
            keys::placement("n1", "abc").unwrap().as_str(),
            "placement/n1/abc"
        );
        assert_eq!(
            keys::observed_instance("n1", "abc").unwrap().as_str(),
            "observed/instance/n1/abc"
        );
        assert!(keys::placement("n/1", "abc").is_err());
        assert!(keys::service("").is_err());
    }
}
