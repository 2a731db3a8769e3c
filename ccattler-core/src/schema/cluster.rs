//! Records the controllers and agents write: instances, placements, nodes, endpoints, status.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Cpu, Memory};

/// `intent/autoscaler/{svc}`: the autoscaler's recommended instance count, why, and what it
/// must remember to judge the next one (a controller keeps nothing of its own).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ScaleIntent {
    /// Recommended instances (the intent resolver clamps it to the scale bounds).
    pub instances: u32,
    /// Why, for people: the metrics against their targets and what that asks for.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// The raw recommendations of the stabilization windows: each time the metrics asked for
    /// another count, since when (milliseconds since the Unix epoch), oldest first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub recommendations: Vec<(u64, u32)>,
    /// When the count last went up (milliseconds since the Unix epoch): scaling up is limited
    /// per period.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scaled_up_at: Option<u64>,
}

/// `metric/{metric}/{svc}`: a value of a metric pushed for a service (through the API), which a
/// `scale` block can target. The service's total: the autoscaler divides it by the target per
/// instance.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushedMetric {
    /// The value.
    pub value: u64,
}

/// `effective/service/{svc}`: the instance count and spec version in force.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EffectiveService {
    /// Instances that should exist.
    pub instances: u32,
    /// The spec version instances must run ([`ServiceSpec::version`](super::ServiceSpec::version)).
    pub version: String,
    /// The rollout is paused: instances of other versions are not replaced for their version.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
}

/// Whether a desired instance should run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DesiredState {
    /// It should run (the default).
    #[default]
    Running,
    /// It should be stopped; the fact goes once the agent reports it gone.
    Stopped,
}

/// `desired/instance/{id}`: one instance that should exist.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DesiredInstance {
    /// The service it belongs to.
    pub service: String,
    /// The spec version it runs.
    pub version: String,
    /// Its ordinal for stateful services (`svc-0` is ordinal 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ordinal: Option<u32>,
    /// Running, or asked to stop.
    #[serde(default)]
    pub state: DesiredState,
    /// The instance this one was created to take over from, in a rebalancing move (see
    /// [`RebalanceMove`]): while it is not ready it is not counted as surplus, and once it is
    /// ready the instance it replaces is stopped. `None` for every other instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaces: Option<String>,
}

/// `status/rebalance/{svc}`: a move the scheduler suggests to even out a service's spread, or
/// to make room for an instance that can run on one node only.
///
/// Written while one node holds at least two instances of the service more than the node one
/// more instance would be placed on, and deleted once no such node is left; or (`room_for`)
/// while an instance that can run on `from` only (its volume is attached there, or the static
/// host port it needs is free nowhere else that could take it) waits for cpu or memory there
/// that moving `instance` elsewhere would help free. The instance controller performs it
/// start-new-then-stop-old: it creates one instance that
/// [`replaces`](DesiredInstance::replaces) `instance`, which the scheduler places like any new
/// one (on `to`, or a node as good), and stops `instance` once the new one is ready.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RebalanceMove {
    /// The instance to move: the newest on the most crowded node.
    pub instance: String,
    /// The node it runs on now.
    pub from: String,
    /// Where one more instance of the service would be placed now.
    pub to: String,
    /// The instance the move makes room for on `from` (its volume's data is there, or its
    /// static host port is free there), if that is why the move is suggested; `None` for a
    /// move that evens out the spread.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub room_for: Option<String>,
}

/// `placement/{node}/{id}`: the instance is assigned to that node.
///
/// It carries what the node's agent needs besides the service spec, so that an agent watches
/// only `placement/{node}/` (and reads the specs of the services it runs).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assignment {
    /// The instance id.
    pub instance: String,
    /// Its service.
    pub service: String,
    /// The node it runs on.
    pub node: String,
    /// The spec version it runs.
    #[serde(default)]
    pub version: String,
    /// The instance's desired state, mirrored by the scheduler from `desired/instance/{id}`.
    #[serde(default)]
    pub state: DesiredState,
    /// The host port the scheduler gave each declared port (`expose`), in the order the spec
    /// declares them: the port itself for a fixed one, else a free port of the node's range.
    /// No two instances on a node are given one host port.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<PortBinding>,
    /// The declarations of the volumes the instance mounts, as they were when it was placed,
    /// each under its name for this instance ([`volume_claim`](super::volume_claim)) and
    /// attached to it (see [`VolumeAttachment`](super::VolumeAttachment)). The agent
    /// keeps a persistent volume's data on the node across instances and deletes the data of
    /// the others with the instance; a declaration changed later does not change where a
    /// placed instance's data is.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<super::VolumeSpec>,
}

/// A declared port and the host port given to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PortBinding {
    /// The port the service declares (`expose 8080`).
    pub port: u16,
    /// The host port the instance gets for it on its node.
    pub host: u16,
}

/// `observed/node/{node}`: what a node's agent reports about its node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeStatus {
    /// The node's name.
    pub name: String,
    /// Allocatable CPU.
    pub cpu: Cpu,
    /// Allocatable memory.
    pub memory: Memory,
    /// Labels (`disk = ssd`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Taints: only services that accept them are placed here.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<String>,
    /// The zone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// CPU architecture (`amd64`).
    pub architecture: String,
    /// Address other nodes reach it at.
    pub address: String,
    /// The host ports the scheduler hands out to the declared ports (`expose`) of instances
    /// placed here; 20000-29999 unless the agent says otherwise.
    #[serde(skip_serializing_if = "PortRange::is_default")]
    pub ports: PortRange,
    /// The storage the node offers to volumes: the sizes of the volumes attached here never add
    /// up to more. Zero (the default): the node takes no instance that mounts a volume.
    #[serde(skip_serializing_if = "Memory::is_zero")]
    pub storage: Memory,
}

/// A range of host ports, both ends included.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PortRange {
    /// The first port.
    pub first: u16,
    /// The last port (a range with `last < first` is empty).
    pub last: u16,
}

impl PortRange {
    /// The range nodes offer unless told otherwise: 20000-29999, below Linux's ephemeral ports
    /// (32768 and up), so the ports handed out never meet a client's outgoing connections.
    pub const DEFAULT: PortRange = PortRange {
        first: 20000,
        last: 29999,
    };

    /// How many ports it holds.
    pub fn len(&self) -> u32 {
        (u32::from(self.last) + 1).saturating_sub(u32::from(self.first))
    }

    /// Whether it holds no port.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `port` is in it.
    pub fn contains(&self, port: u16) -> bool {
        (self.first..=self.last).contains(&port)
    }

    fn is_default(&self) -> bool {
        *self == Self::DEFAULT
    }
}

impl Default for PortRange {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// An instance's lifecycle state, as its agent observes it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ObservedState {
    /// Known to the agent, not started yet.
    #[default]
    Pending,
    /// Fetching its image.
    Pulling,
    /// Running init steps or starting.
    Starting,
    /// Running.
    Running,
    /// Ended with exit code 0.
    Exited,
    /// Ended in failure, or could not start.
    Failed,
    /// Stopped on request.
    Stopped,
}

impl ObservedState {
    /// Whether the instance is work in progress or running (counts as present).
    pub fn is_active(self) -> bool {
        matches!(
            self,
            ObservedState::Pending
                | ObservedState::Pulling
                | ObservedState::Starting
                | ObservedState::Running
        )
    }
}

/// Health from the instance's probes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Health {
    /// No probe result yet, or no probe.
    #[default]
    Unknown,
    /// Probes pass.
    Healthy,
    /// Probes fail.
    Unhealthy,
}

/// `observed/instance/{id}`: what the agent of the instance's node reports. What the instance
/// uses is not here but in its node's [`NodeTelemetry`](super::NodeTelemetry), so that use that
/// changes does not rewrite this record.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct InstanceObservation {
    /// The node it runs on.
    pub node: String,
    /// Its service.
    pub service: String,
    /// Lifecycle state.
    pub state: ObservedState,
    /// Where it serves (`host:port`), once running.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// Probe health.
    pub health: Health,
    /// Whether it passes its readiness probe (or has none and runs).
    pub ready: bool,
    /// The image it runs.
    pub image: String,
    /// Init steps completed (all of them once its main process started).
    pub init_done: u32,
    /// Init steps of its version; 0 when it has none.
    #[serde(skip_serializing_if = "is_zero")]
    pub init_steps: u32,
    /// Failed attempts of the init step now due (step `init_done`, from 0) since the step before
    /// it passed; the agent tries it again on its restart schedule.
    #[serde(skip_serializing_if = "is_zero")]
    pub init_failures: u32,
    /// The last lines the last failed attempt of an init step printed (at most 1 KiB).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub init_output: Option<String>,
    /// How often the agent restarted it.
    pub restarts: u32,
    /// Exit code of the last run, if it ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Why it failed, for people.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The node lease the agent held when it wrote this report. A report written under an
    /// earlier lease predates the node's current registration (the node crashed and came back)
    /// and says nothing about what runs there now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease: Option<i64>,
    /// Whether the placement the agent holds asks the instance to stop: a report with this set
    /// and an ended state says the agent saw the stop and nothing of the instance runs on its
    /// node (for a stateful identity, only then may the same identity start elsewhere).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub stop_asked: bool,
}

/// `endpoint/service/{svc}`: where the service's ready instances serve.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoints {
    /// One entry per ready instance, sorted by address, then instance. Two instances that
    /// report the same address stay two entries: an address shared by two instances is a
    /// fault to see (a port given twice), not one endpoint.
    pub endpoints: Vec<Endpoint>,
}

impl Endpoints {
    /// The `host:port` of each entry, in entry order (an address twice if two instances
    /// report it).
    pub fn addresses(&self) -> Vec<String> {
        self.endpoints.iter().map(|e| e.address.clone()).collect()
    }
}

/// One ready instance of a service and where it serves.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Endpoint {
    /// `host:port`, as the instance's agent reports it.
    pub address: String,
    /// The instance's id.
    pub instance: String,
    /// The node it runs on.
    pub node: String,
}

/// `status/unschedulable/{id}`: why the scheduler could not place an instance.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unschedulable {
    /// The instance's service.
    pub service: String,
    /// The reason, for people ("no node has label disk=ssd").
    pub reason: String,
}

/// `status/service/{svc}`: counts a person looks at.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ServiceStatus {
    /// Instances that should exist.
    pub desired: u32,
    /// Current-version instances that exist (pending, starting or running).
    pub present: u32,
    /// Of those, running.
    pub running: u32,
    /// Of those, ready.
    pub ready: u32,
    /// Whether the service is being deleted.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub deleting: bool,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}
