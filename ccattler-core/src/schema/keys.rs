//! The key of every standard record, both ways: [`RecordKey::parse`] reads a key back into the
//! ids it names, and one builder per record writes it. The per-node rules (what a node's agent
//! may write, what it watches) are here too, so no one spells a prefix by hand.
//!
//! # Errors
//!
//! Builders return [`KeyError`] when a name is not a valid key path (empty, `//`, leading `/`,
//! NUL), or when a node name or instance id is not a single segment.
//!
//! ```
//! use ccattler_core::schema::{keys, RecordKey};
//!
//! let key = keys::placement("n1", "web-1").unwrap();
//! assert_eq!(key.as_str(), "placement/n1/web-1");
//! assert_eq!(
//!     RecordKey::parse(&key),
//!     Some(RecordKey::Placement { node: "n1", instance: "web-1" })
//! );
//! assert!(keys::node_may_write("n1", "observed/instance/n1/web-1"));
//! assert!(!keys::node_may_write("n1", "observed/instance/n10/web-1"));
//! ```

use super::*;

/// `desired/service/{svc}`.
pub fn service(name: &str) -> Result<Key, KeyError> {
    Key::join(DESIRED_SERVICES, [name])
}
/// `desired/volume/{vol}`. A volume's name names a directory on its node too: no segment of
/// it may be `.` or `..`.
pub fn volume(name: &str) -> Result<Key, KeyError> {
    Key::join(DESIRED_VOLUMES, [path_name(name)?])
}
/// `volume/attachment/{vol}`, `vol` a name of [`volume_claim`].
pub fn volume_attachment(name: &str) -> Result<Key, KeyError> {
    Key::join(VOLUME_ATTACHMENTS, [path_name(name)?])
}
/// `desired/network/policy`.
pub fn network_policy() -> Key {
    Key::new(DESIRED_NETWORK_POLICY).expect("a constant, valid key")
}
/// `secret/{name}`.
pub fn secret(name: &str) -> Result<Key, KeyError> {
    Key::join(SECRETS, [name])
}
/// `intent/autoscaler/{svc}`.
pub fn scale_intent(service: &str) -> Result<Key, KeyError> {
    Key::join(AUTOSCALER_INTENTS, [service])
}
/// `intent/rollout/{svc}`.
pub fn rollout_request(service: &str) -> Result<Key, KeyError> {
    Key::join(ROLLOUT_REQUESTS, [service])
}
/// `rollout/service/{svc}`.
pub fn rollout(service: &str) -> Result<Key, KeyError> {
    Key::join(ROLLOUTS, [service])
}
/// `rollout/spec/{svc}/{version}`: the spec of one version of a service.
pub fn spec_version(service: &str, version: &str) -> Result<Key, KeyError> {
    Key::join(SPEC_HISTORY, [service, segment(version)?])
}
/// `rollout/spec/{svc}/`: the prefix of every kept spec of a service.
///
/// # Errors
///
/// [`KeyError`] when `service` is not a valid name.
pub fn spec_versions(service: &str) -> Result<String, KeyError> {
    Ok(format!("{}/", Key::join(SPEC_HISTORY, [service])?))
}
/// `effective/service/{svc}`.
pub fn effective(service: &str) -> Result<Key, KeyError> {
    Key::join(EFFECTIVE_SERVICES, [service])
}
/// `desired/instance/{id}`.
pub fn instance(id: &str) -> Result<Key, KeyError> {
    Key::join(DESIRED_INSTANCES, [segment(id)?])
}
/// `placement/{node}/{id}`.
pub fn placement(node: &str, id: &str) -> Result<Key, KeyError> {
    Key::join(PLACEMENTS, [segment(node)?, segment(id)?])
}
/// `lease/node/{node}`.
pub fn node_lease(node: &str) -> Result<Key, KeyError> {
    Key::join(NODE_LEASES, [segment(node)?])
}
/// `observed/node/{node}`.
pub fn node(node: &str) -> Result<Key, KeyError> {
    Key::join(OBSERVED_NODES, [segment(node)?])
}
/// `observed/instance/{node}/{id}`.
pub fn observed_instance(node: &str, id: &str) -> Result<Key, KeyError> {
    Key::join(OBSERVED_INSTANCES, [segment(node)?, segment(id)?])
}
/// `network/node/{node}`.
pub fn node_rules(node: &str) -> Result<Key, KeyError> {
    Key::join(NODE_RULES, [segment(node)?])
}
/// `observed/network/{node}`.
pub fn network_report(node: &str) -> Result<Key, KeyError> {
    Key::join(NETWORK_REPORTS, [segment(node)?])
}
/// `metric/{metric}/{svc}`.
pub fn metric(metric: &str, service: &str) -> Result<Key, KeyError> {
    Key::join(METRICS, [segment(metric)?, service])
}
/// `telemetry/node/{node}`.
pub fn telemetry(node: &str) -> Result<Key, KeyError> {
    Key::join(TELEMETRY, [segment(node)?])
}
/// `endpoint/service/{svc}`.
pub fn endpoints(service: &str) -> Result<Key, KeyError> {
    Key::join(SERVICE_ENDPOINTS, [service])
}
/// `status/service/{svc}`.
pub fn service_status(service: &str) -> Result<Key, KeyError> {
    Key::join(SERVICE_STATUSES, [service])
}
/// `status/init/{svc}`.
pub fn init_status(service: &str) -> Result<Key, KeyError> {
    Key::join(INIT_STATUSES, [service])
}
/// `status/unschedulable/{id}`.
pub fn unschedulable(id: &str) -> Result<Key, KeyError> {
    Key::join(UNSCHEDULABLE, [segment(id)?])
}
/// `status/placed/{id}`.
pub fn placed(id: &str) -> Result<Key, KeyError> {
    Key::join(PLACED, [segment(id)?])
}
/// `status/rebalance/{svc}`.
pub fn rebalance(service: &str) -> Result<Key, KeyError> {
    Key::join(REBALANCE_MOVES, [service])
}

/// `runner/replica/{id}`: a control-plane replica (one key segment).
pub fn replica(id: &str) -> Result<Key, KeyError> {
    Key::join(REPLICAS, [segment(id)?])
}

/// `event/{object}/{writer}/{slot}`: slot `slot` of `writer`'s ring of events about `object` (a
/// service name, which may be a path, or an instance id). The slot is two digits or more.
///
/// # Errors
///
/// [`KeyError`] when `object` is not a valid key path or `writer` not a single segment.
pub fn event(object: &str, writer: &str, slot: u32) -> Result<Key, KeyError> {
    Key::new(format!("{EVENTS}{object}/{}/{slot:02}", segment(writer)?))
}

/// The writer name of `node`'s agent in event keys: `node.{node}`.
pub fn node_event_writer(node: &str) -> String {
    format!("node.{node}")
}

/// A name that is also a path on a node: no segment `.` or `..`.
fn path_name(name: &str) -> Result<&str, KeyError> {
    if name.split('/').any(|part| part == "." || part == "..") {
        Err(KeyError::EmptySegment(format!(
            "{name} (a volume's name names a directory: no `.` or `..` in it)"
        )))
    } else {
        Ok(name)
    }
}

/// Node names and instance ids are single key segments.
fn segment(name: &str) -> Result<&str, KeyError> {
    if name.contains('/') {
        Err(KeyError::EmptySegment(format!(
            "{name} (must not contain `/`)"
        )))
    } else {
        Ok(name)
    }
}

/// A standard key, read back into the ids it names. Node names and instance ids are single
/// segments; service, volume and secret names may be paths (`team/web`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RecordKey<'k> {
    /// `desired/service/{svc}`.
    Service(&'k str),
    /// `desired/volume/{vol}`.
    Volume(&'k str),
    /// `volume/attachment/{vol}`.
    VolumeAttachment(&'k str),
    /// `desired/network/policy`.
    NetworkPolicy,
    /// `secret/{name}`.
    Secret(&'k str),
    /// `intent/autoscaler/{svc}`.
    ScaleIntent(&'k str),
    /// `intent/rollout/{svc}`.
    RolloutRequest(&'k str),
    /// `rollout/service/{svc}`.
    Rollout(&'k str),
    /// `rollout/spec/{svc}/{version}`.
    SpecVersion {
        /// The service (a path).
        service: &'k str,
        /// The version (the key's last segment).
        version: &'k str,
    },
    /// `effective/service/{svc}`.
    Effective(&'k str),
    /// `desired/instance/{id}`.
    Instance(&'k str),
    /// `placement/{node}/{id}`.
    Placement {
        /// The node it is assigned to.
        node: &'k str,
        /// The instance id.
        instance: &'k str,
    },
    /// `lease/node/{node}`.
    NodeLease(&'k str),
    /// `observed/node/{node}`.
    Node(&'k str),
    /// `observed/instance/{node}/{id}`.
    ObservedInstance {
        /// The reporting node.
        node: &'k str,
        /// The instance id.
        instance: &'k str,
    },
    /// `network/node/{node}`.
    NodeRules(&'k str),
    /// `observed/network/{node}`.
    NetworkReport(&'k str),
    /// `telemetry/node/{node}`.
    Telemetry(&'k str),
    /// `metric/{metric}/{svc}`.
    Metric {
        /// The metric's name.
        metric: &'k str,
        /// The service.
        service: &'k str,
    },
    /// `endpoint/service/{svc}`.
    Endpoints(&'k str),
    /// `status/service/{svc}`.
    ServiceStatus(&'k str),
    /// `status/init/{svc}`.
    InitStatus(&'k str),
    /// `status/unschedulable/{id}`.
    Unschedulable(&'k str),
    /// `status/placed/{id}`.
    Placed(&'k str),
    /// `status/rebalance/{svc}`.
    Rebalance(&'k str),
    /// `runner/replica/{id}`.
    Replica(&'k str),
    /// `event/{object}/{writer}/{slot}`.
    Event {
        /// The service or instance the event is about.
        object: &'k str,
        /// Who wrote it: a controller's name, or `node.{node}`.
        writer: &'k str,
        /// The slot in the writer's ring for the object.
        slot: u32,
    },
}

impl<'k> RecordKey<'k> {
    /// What `key` names, or `None` for a key of no standard record (or one whose ids are not
    /// well formed: an empty id, a node or instance id of several segments).
    pub fn parse(key: &'k Key) -> Option<Self> {
        RecordKey::parse_str(key.as_str())
    }

    /// [`parse`](Self::parse) on a key's text.
    pub fn parse_str(key: &'k str) -> Option<Self> {
        let name = |prefix: &str| key.strip_prefix(prefix).filter(|rest| !rest.is_empty());
        let one = |prefix: &str| name(prefix).filter(|rest| !rest.contains('/'));
        let two = |prefix: &str| {
            let (a, b) = name(prefix)?.split_once('/')?;
            (!a.is_empty() && !b.is_empty() && !b.contains('/')).then_some((a, b))
        };
        if key == DESIRED_NETWORK_POLICY {
            return Some(RecordKey::NetworkPolicy);
        }
        let parsed = if let Some(n) = name(DESIRED_SERVICES) {
            RecordKey::Service(n)
        } else if let Some(n) = name(DESIRED_VOLUMES) {
            RecordKey::Volume(n)
        } else if let Some(n) = name(VOLUME_ATTACHMENTS) {
            RecordKey::VolumeAttachment(n)
        } else if let Some(n) = name(SECRETS) {
            RecordKey::Secret(n)
        } else if let Some(n) = name(AUTOSCALER_INTENTS) {
            RecordKey::ScaleIntent(n)
        } else if let Some(n) = name(ROLLOUT_REQUESTS) {
            RecordKey::RolloutRequest(n)
        } else if let Some(n) = name(ROLLOUTS) {
            RecordKey::Rollout(n)
        } else if let Some(rest) = name(SPEC_HISTORY) {
            let (service, version) = rest.rsplit_once('/')?;
            (!service.is_empty() && !version.is_empty()).then_some(())?;
            RecordKey::SpecVersion { service, version }
        } else if let Some(n) = name(EFFECTIVE_SERVICES) {
            RecordKey::Effective(n)
        } else if key.starts_with(DESIRED_INSTANCES) {
            RecordKey::Instance(one(DESIRED_INSTANCES)?)
        } else if key.starts_with(PLACEMENTS) {
            let (node, instance) = two(PLACEMENTS)?;
            RecordKey::Placement { node, instance }
        } else if key.starts_with(NODE_LEASES) {
            RecordKey::NodeLease(one(NODE_LEASES)?)
        } else if key.starts_with(OBSERVED_NODES) {
            RecordKey::Node(one(OBSERVED_NODES)?)
        } else if key.starts_with(OBSERVED_INSTANCES) {
            let (node, instance) = two(OBSERVED_INSTANCES)?;
            RecordKey::ObservedInstance { node, instance }
        } else if key.starts_with(NODE_RULES) {
            RecordKey::NodeRules(one(NODE_RULES)?)
        } else if key.starts_with(NETWORK_REPORTS) {
            RecordKey::NetworkReport(one(NETWORK_REPORTS)?)
        } else if key.starts_with(TELEMETRY) {
            RecordKey::Telemetry(one(TELEMETRY)?)
        } else if let Some(rest) = name(METRICS) {
            let (metric, service) = rest.split_once('/')?;
            (!metric.is_empty() && !service.is_empty()).then_some(())?;
            RecordKey::Metric { metric, service }
        } else if let Some(n) = name(SERVICE_ENDPOINTS) {
            RecordKey::Endpoints(n)
        } else if let Some(n) = name(SERVICE_STATUSES) {
            RecordKey::ServiceStatus(n)
        } else if let Some(n) = name(INIT_STATUSES) {
            RecordKey::InitStatus(n)
        } else if key.starts_with(UNSCHEDULABLE) {
            RecordKey::Unschedulable(one(UNSCHEDULABLE)?)
        } else if key.starts_with(PLACED) {
            RecordKey::Placed(one(PLACED)?)
        } else if let Some(n) = name(REBALANCE_MOVES) {
            RecordKey::Rebalance(n)
        } else if key.starts_with(REPLICAS) {
            RecordKey::Replica(one(REPLICAS)?)
        } else if let Some(rest) = name(EVENTS) {
            let mut parts = rest.rsplitn(3, '/');
            let slot = parts.next()?.parse().ok()?;
            let writer = parts.next().filter(|w| !w.is_empty())?;
            let object = parts.next().filter(|o| !o.is_empty())?;
            RecordKey::Event {
                object,
                writer,
                slot,
            }
        } else {
            return None;
        };
        Some(parsed)
    }

    /// The key this names (the inverse of [`parse`](Self::parse)).
    ///
    /// # Errors
    ///
    /// [`KeyError`] when an id is not valid, as the builders say.
    pub fn key(&self) -> Result<Key, KeyError> {
        match *self {
            RecordKey::Service(n) => service(n),
            RecordKey::Volume(n) => volume(n),
            RecordKey::VolumeAttachment(n) => volume_attachment(n),
            RecordKey::NetworkPolicy => Ok(network_policy()),
            RecordKey::Secret(n) => secret(n),
            RecordKey::ScaleIntent(n) => scale_intent(n),
            RecordKey::RolloutRequest(n) => rollout_request(n),
            RecordKey::Rollout(n) => rollout(n),
            RecordKey::SpecVersion { service, version } => spec_version(service, version),
            RecordKey::Effective(n) => effective(n),
            RecordKey::Instance(id) => instance(id),
            RecordKey::Placement { node, instance } => placement(node, instance),
            RecordKey::NodeLease(n) => node_lease(n),
            RecordKey::Node(n) => super::keys::node(n),
            RecordKey::ObservedInstance { node, instance } => observed_instance(node, instance),
            RecordKey::NodeRules(n) => node_rules(n),
            RecordKey::NetworkReport(n) => network_report(n),
            RecordKey::Telemetry(n) => telemetry(n),
            RecordKey::Metric { metric: m, service } => metric(m, service),
            RecordKey::Endpoints(n) => endpoints(n),
            RecordKey::ServiceStatus(n) => service_status(n),
            RecordKey::InitStatus(n) => init_status(n),
            RecordKey::Unschedulable(id) => unschedulable(id),
            RecordKey::Placed(id) => placed(id),
            RecordKey::Rebalance(n) => rebalance(n),
            RecordKey::Replica(id) => replica(id),
            RecordKey::Event {
                object,
                writer,
                slot,
            } => event(object, writer, slot),
        }
    }

    /// The instance id the key names, if it names one (an instance, a placement, an
    /// observation, an unschedulable reason).
    pub fn instance(&self) -> Option<&'k str> {
        match *self {
            RecordKey::Instance(id) | RecordKey::Unschedulable(id) | RecordKey::Placed(id) => {
                Some(id)
            }
            RecordKey::Placement { instance, .. }
            | RecordKey::ObservedInstance { instance, .. } => Some(instance),
            _ => None,
        }
    }

    /// The object an event key is about, if it is an event's.
    pub fn event_object(&self) -> Option<&'k str> {
        match *self {
            RecordKey::Event { object, .. } => Some(object),
            _ => None,
        }
    }

    /// The node the key names, if it names one.
    pub fn node(&self) -> Option<&'k str> {
        match *self {
            RecordKey::NodeLease(n)
            | RecordKey::Node(n)
            | RecordKey::NodeRules(n)
            | RecordKey::NetworkReport(n)
            | RecordKey::Telemetry(n) => Some(n),
            RecordKey::Placement { node, .. } | RecordKey::ObservedInstance { node, .. } => {
                Some(node)
            }
            _ => None,
        }
    }
}

/// `placement/{node}/`: the prefix a node's agent watches for what to run.
///
/// # Errors
///
/// [`KeyError`] when `node` is not a single valid segment.
pub fn node_placements(node: &str) -> Result<String, KeyError> {
    Ok(format!("{}/", placement_prefix(node)?))
}

/// `observed/instance/{node}/`: the prefix of a node's own reports.
///
/// # Errors
///
/// [`KeyError`] when `node` is not a single valid segment.
pub fn node_observations(node: &str) -> Result<String, KeyError> {
    Ok(format!(
        "{}/",
        Key::join(OBSERVED_INSTANCES, [segment(node)?])?
    ))
}

fn placement_prefix(node: &str) -> Result<Key, KeyError> {
    Key::join(PLACEMENTS, [segment(node)?])
}

/// Whether the agent of `node` may write `key`: exactly its liveness key
/// (`lease/node/{node}`), its status (`observed/node/{node}`), its firewall's report
/// (`observed/network/{node}`), its telemetry (`telemetry/node/{node}`), its reports
/// (`observed/instance/{node}/{id}`, one segment per id, not `.` or `..`) and its own events
/// (`event/{object}/node.{node}/{slot}`); nothing of any other node, however the names overlap
/// (`n1` never writes for `n10`).
pub fn node_may_write(node: &str, key: &str) -> bool {
    let id_ok = |id: &str| id != "." && id != "..";
    if Key::new(key).is_err() {
        return false;
    }
    match RecordKey::parse_str(key) {
        Some(
            RecordKey::NodeLease(n)
            | RecordKey::Node(n)
            | RecordKey::NetworkReport(n)
            | RecordKey::Telemetry(n),
        ) => n == node && id_ok(n),
        Some(RecordKey::ObservedInstance { node: n, instance }) => {
            n == node && id_ok(n) && id_ok(instance)
        }
        Some(RecordKey::Event { writer, .. }) => id_ok(node) && writer == node_event_writer(node),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builder_parses_back() {
        let cases = [
            RecordKey::Service("team/web"),
            RecordKey::Volume("data"),
            RecordKey::VolumeAttachment("team/data"),
            RecordKey::NetworkPolicy,
            RecordKey::Secret("db/password"),
            RecordKey::ScaleIntent("web"),
            RecordKey::RolloutRequest("team/web"),
            RecordKey::Rollout("team/web"),
            RecordKey::SpecVersion {
                service: "team/web",
                version: "0123456789abcdef",
            },
            RecordKey::Effective("web"),
            RecordKey::Instance("web-1"),
            RecordKey::Placement {
                node: "n1",
                instance: "web-1",
            },
            RecordKey::NodeLease("n1"),
            RecordKey::Node("n1"),
            RecordKey::ObservedInstance {
                node: "n1",
                instance: "web-1",
            },
            RecordKey::NodeRules("n1"),
            RecordKey::NetworkReport("n1"),
            RecordKey::Telemetry("n1"),
            RecordKey::Metric {
                metric: "payments.pending",
                service: "team/web",
            },
            RecordKey::Endpoints("team/web"),
            RecordKey::ServiceStatus("web"),
            RecordKey::InitStatus("team/web"),
            RecordKey::Unschedulable("web-1"),
            RecordKey::Placed("web-1"),
            RecordKey::Rebalance("web"),
            RecordKey::Replica("host-a:7420"),
        ];
        for record in cases {
            let key = record.key().unwrap();
            assert_eq!(RecordKey::parse(&key), Some(record), "{key}");
        }
    }

    #[test]
    fn malformed_ids_are_no_record() {
        for key in [
            "placement/n1",
            "placement/n1/",
            "placement/n1/a/b",
            "desired/instance/a/b",
            "observed/instance/n1",
            "lease/node/",
            "runner/replica/",
            "runner/replica/a/b",
            "desired/service/",
            "other/thing",
        ] {
            assert_eq!(RecordKey::parse_str(key), None, "{key}");
        }
        let key = placement("n1", "web-1").unwrap();
        let parsed = RecordKey::parse(&key).unwrap();
        assert_eq!(
            (parsed.node(), parsed.instance()),
            (Some("n1"), Some("web-1"))
        );
    }

    #[test]
    fn a_node_writes_only_its_own_keys() {
        assert!(node_may_write("n1", "lease/node/n1"));
        assert!(node_may_write("n1", "observed/node/n1"));
        assert!(node_may_write("n1", "observed/instance/n1/web-1"));
        assert!(node_may_write("n1", "observed/network/n1"));
        for key in [
            "observed/network/n10",
            "network/node/n1",
            "lease/node/n10",
            "observed/node/n1x",
            "observed/instance/n10/web-1",
            "observed/instance/n1/a/b",
            "observed/instance/n1/..",
            "placement/n1/web-1",
            "desired/instance/web-1",
        ] {
            assert!(!node_may_write("n1", key), "{key}");
        }
        assert!(volume("data/../etc").is_err() && volume_attachment("./data").is_err());
        assert!(volume("team/data.v2").is_ok());
        assert_eq!(node_placements("n1").unwrap(), "placement/n1/");
        assert!(node_placements("a/b").is_err());
    }
}
