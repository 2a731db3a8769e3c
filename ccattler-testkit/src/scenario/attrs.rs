//! `KEY=VALUE` attributes of `service` and `node` lines, and how they change a record.

use ccattler_core::schema::{
    Cpu, Expose, HorizontalScale, Memory, NodeStatus, Probe, ProbeCheck, Protocol, RestartPolicy,
    ServiceSpec, ZonePolicy,
};

use super::command::number;

/// One attribute of a `service` line.
#[derive(Clone, Debug)]
pub(crate) enum ServiceAttr {
    Instances(u32),
    Cpu(Cpu),
    Memory(Memory),
    Image(String),
    Restart(RestartPolicy),
    Readiness(Option<Probe>),
    Require(String, String),
    Prefer(String, String),
    Accept(String),
    Zone(Option<ZonePolicy>),
    Architecture(String),
    MaxExtra(u32),
    MaxUnavailable(u32),
    Scale(Option<(u32, u32)>),
    Port(u16),
    /// `static_port=P`: the instance needs host port P itself (`expose P static`).
    StaticPort(u16),
    Env(String, String),
    Stateful(bool),
}

/// One attribute of a `node` line.
#[derive(Clone, Debug)]
pub(crate) enum NodeAttr {
    Cpu(Cpu),
    Memory(Memory),
    Label(String, String),
    Zone(String),
    Architecture(String),
    Taint(String),
}

/// Parses `KEY=VALUE` (or the bare word `stateful`) of a service line.
pub(crate) fn parse_service_attr(word: &str) -> Result<ServiceAttr, String> {
    if word == "stateful" {
        return Ok(ServiceAttr::Stateful(true));
    }
    let (key, value) = split(word)?;
    Ok(match key {
        "instances" => ServiceAttr::Instances(number(value)?),
        "cpu" => ServiceAttr::Cpu(value.parse().map_err(|e| format!("{e}"))?),
        "memory" => ServiceAttr::Memory(value.parse().map_err(|e| format!("{e}"))?),
        "image" => ServiceAttr::Image(value.to_owned()),
        "restart" => ServiceAttr::Restart(match value {
            "always" => RestartPolicy::Always,
            "on_failure" => RestartPolicy::OnFailure,
            "never" => RestartPolicy::Never,
            other => {
                return Err(format!(
                    "unknown restart policy `{other}`; expected always, on_failure or never"
                ));
            }
        }),
        "readiness" => ServiceAttr::Readiness(match value {
            "none" => None,
            "tcp" => Some(Probe::new(ProbeCheck::Tcp)),
            path if path.starts_with("http:") => Some(Probe::new(ProbeCheck::Http {
                path: path["http:".len()..].to_owned(),
            })),
            other => {
                return Err(format!(
                    "unknown readiness `{other}`; expected http:/PATH, tcp or none"
                ));
            }
        }),
        "require" => {
            let (k, v) = label(value)?;
            ServiceAttr::Require(k, v)
        }
        "prefer" => {
            let (k, v) = label(value)?;
            ServiceAttr::Prefer(k, v)
        }
        "accept" => ServiceAttr::Accept(value.to_owned()),
        "zone" => ServiceAttr::Zone(match value {
            "any" => None,
            "spread" => Some(ZonePolicy::Spread),
            zone => Some(ZonePolicy::Only(zone.to_owned())),
        }),
        "arch" => ServiceAttr::Architecture(value.to_owned()),
        "max_extra" => ServiceAttr::MaxExtra(number(value)?),
        "max_unavailable" => ServiceAttr::MaxUnavailable(number(value)?),
        "scale" => ServiceAttr::Scale(match value {
            "none" => None,
            range => {
                let (min, max) = range
                    .split_once("..")
                    .ok_or_else(|| format!("expected scale=MIN..MAX or none, found `{range}`"))?;
                Some((number(min)?, number(max)?))
            }
        }),
        "port" => ServiceAttr::Port(number(value)?),
        "static_port" => ServiceAttr::StaticPort(number(value)?),
        "env" => {
            let (k, v) = label(value)?;
            ServiceAttr::Env(k, v)
        }
        "stateful" => ServiceAttr::Stateful(match value {
            "true" => true,
            "false" => false,
            other => return Err(format!("expected stateful=true or false, found `{other}`")),
        }),
        other => {
            return Err(format!(
                "unknown service attribute `{other}`; expected instances, cpu, memory, image, \
                 restart, readiness, require, prefer, accept, zone, arch, max_extra, \
                 max_unavailable, scale, port, env or stateful"
            ));
        }
    })
}

/// Parses `KEY=VALUE` of a node line.
pub(crate) fn parse_node_attr(word: &str) -> Result<NodeAttr, String> {
    let (key, value) = split(word)?;
    Ok(match key {
        "cpu" => NodeAttr::Cpu(value.parse().map_err(|e| format!("{e}"))?),
        "memory" => NodeAttr::Memory(value.parse().map_err(|e| format!("{e}"))?),
        "label" => {
            let (k, v) = label(value)?;
            NodeAttr::Label(k, v)
        }
        "zone" => NodeAttr::Zone(value.to_owned()),
        "arch" => NodeAttr::Architecture(value.to_owned()),
        "taint" => NodeAttr::Taint(value.to_owned()),
        other => {
            return Err(format!(
                "unknown node attribute `{other}`; expected cpu, memory, label, zone, arch or \
                 taint (or the words dead / alive alone)"
            ));
        }
    })
}

/// A new service's spec before its attributes: one instance of `example/{name}:1`.
pub(crate) fn new_service(name: &str) -> ServiceSpec {
    ServiceSpec {
        name: name.to_owned(),
        image: format!("example/{name}:1"),
        instances: 1,
        ..ServiceSpec::default()
    }
}

/// A new node's status before its attributes: amd64, no capacity.
pub(crate) fn new_node(name: &str) -> NodeStatus {
    NodeStatus {
        name: name.to_owned(),
        architecture: "amd64".to_owned(),
        address: name.to_owned(),
        ..NodeStatus::default()
    }
}

/// Changes what the attribute names.
pub(crate) fn apply_service(spec: &mut ServiceSpec, attr: &ServiceAttr) {
    match attr.clone() {
        ServiceAttr::Instances(n) => spec.instances = n,
        ServiceAttr::Cpu(cpu) => spec.resources.cpu = cpu,
        ServiceAttr::Memory(memory) => spec.resources.memory = memory,
        ServiceAttr::Image(image) => spec.image = image,
        ServiceAttr::Restart(policy) => spec.restart = policy,
        ServiceAttr::Readiness(probe) => spec.readiness = probe,
        ServiceAttr::Require(k, v) => {
            spec.placement.require.insert(k, v);
        }
        ServiceAttr::Prefer(k, v) => {
            spec.placement.prefer.insert(k, v);
        }
        ServiceAttr::Accept(taint) => spec.placement.accept.push(taint),
        ServiceAttr::Zone(zone) => spec.placement.zone = zone,
        ServiceAttr::Architecture(arch) => spec.placement.architecture = Some(arch),
        ServiceAttr::MaxExtra(n) => spec.update.max_extra = n,
        ServiceAttr::MaxUnavailable(n) => spec.update.max_unavailable = n,
        ServiceAttr::Scale(bounds) => {
            spec.scale = bounds.map(|(min, max)| HorizontalScale::new(min, max));
        }
        ServiceAttr::Port(port) => spec.expose.push(Expose {
            port,
            protocol: Protocol::Http,
            external: false,
            fixed: false,
        }),
        ServiceAttr::StaticPort(port) => spec.expose.push(Expose {
            port,
            protocol: Protocol::Http,
            external: false,
            fixed: true,
        }),
        ServiceAttr::Env(k, v) => {
            spec.env.insert(k, v);
        }
        ServiceAttr::Stateful(on) => spec.stateful = on,
    }
}

/// Changes what the attribute names.
pub(crate) fn apply_node(node: &mut NodeStatus, attr: &NodeAttr) {
    match attr.clone() {
        NodeAttr::Cpu(cpu) => node.cpu = cpu,
        NodeAttr::Memory(memory) => node.memory = memory,
        NodeAttr::Label(k, v) => {
            node.labels.insert(k, v);
        }
        NodeAttr::Zone(zone) => node.zone = Some(zone),
        NodeAttr::Architecture(arch) => node.architecture = arch,
        NodeAttr::Taint(taint) => node.taints.push(taint),
    }
}

fn split(word: &str) -> Result<(&str, &str), String> {
    word.split_once('=')
        .ok_or_else(|| format!("expected KEY=VALUE, found `{word}`"))
}

/// `key:value` of a label.
fn label(value: &str) -> Result<(String, String), String> {
    value
        .split_once(':')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| format!("expected KEY:VALUE, found `{value}`"))
}
