//! Why a request could not be placed, node by node, in words a person reads in status.

use std::fmt;

use ccattler_core::schema::{Cpu, Memory, Placement, Resources, ZonePolicy};

use super::index::Usage;
use super::ports::{HostPorts, PortsRejection};
use super::volume::{Storage, VolumeMiss};
use super::{Node, Ports, VolumeNeed};

/// Why one node cannot take a request: the first hard filter it fails, in this order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Rejection<'a> {
    /// The node is not alive.
    NotAlive,
    /// A volume the request mounts is attached to another node: its data is there.
    VolumeElsewhere {
        /// The volume (the first such one the request mounts).
        volume: &'a str,
        /// The node it is attached to.
        node: &'a str,
    },
    /// The node has another architecture than the one required.
    Architecture {
        /// The architecture the service requires.
        wanted: &'a str,
    },
    /// The node is outside the only zone the service may use.
    Zone {
        /// The zone the service is limited to.
        wanted: &'a str,
    },
    /// The node lacks a required label (the first missing one, in key order).
    MissingLabel {
        /// The label's key.
        key: &'a str,
        /// The value required.
        value: &'a str,
    },
    /// The node has a taint the service does not accept (the smallest such taint).
    Taint {
        /// The taint.
        taint: &'a str,
    },
    /// What is left of the node's CPU, after existing and newly placed instances, is too little.
    Cpu {
        /// What the request needs.
        needs: Cpu,
    },
    /// What is left of the node's memory is too little.
    Memory {
        /// What the request needs.
        needs: Memory,
    },
    /// What is left of the node's storage is too little for the volumes the request mounts
    /// that are not attached anywhere yet.
    Storage {
        /// Their sizes added up.
        needs: Memory,
    },
    /// A host port the request needs by number is held by another instance (the smallest).
    PortTaken {
        /// The port.
        port: u16,
    },
    /// The node's port range has too few free ports left for the request's declared ports.
    NoFreePort {
        /// How many ports of the range the request needs.
        needs: u32,
    },
}

impl<'a> Rejection<'a> {
    /// The first filter `node` fails for a request, or `None` when it could take it.
    pub(crate) fn of(
        node: &Node<'a>,
        (usage, host_ports, storage): (&Usage, &HostPorts, &Storage),
        placement: &'a Placement,
        (need, ports, volumes): (Resources, Ports<'_>, &[VolumeNeed<'a>]),
    ) -> Option<Self> {
        if !node.alive {
            return Some(Rejection::NotAlive);
        }
        let volume = storage.check(node.name, volumes);
        if let Err(VolumeMiss::Elsewhere { volume, node }) = volume {
            return Some(Rejection::VolumeElsewhere { volume, node });
        }
        if let Some(wanted) = placement.architecture.as_deref()
            && wanted != node.architecture
        {
            return Some(Rejection::Architecture { wanted });
        }
        if let Some(ZonePolicy::Only(wanted)) = &placement.zone
            && node.zone != Some(wanted.as_str())
        {
            return Some(Rejection::Zone { wanted });
        }
        if let Some((key, value)) = placement
            .require
            .iter()
            .find(|(k, v)| node.labels.get(*k) != Some(*v))
        {
            return Some(Rejection::MissingLabel { key, value });
        }
        if let Some(taint) = node
            .taints
            .iter()
            .filter(|t| !placement.accept.contains(t))
            .min()
        {
            return Some(Rejection::Taint { taint });
        }
        let fits_cpu = usage
            .cpu
            .checked_add(need.cpu.millis())
            .is_some_and(|c| c <= usage.cpu_cap);
        if !fits_cpu {
            return Some(Rejection::Cpu { needs: need.cpu });
        }
        if !usage.fits(need) {
            return Some(Rejection::Memory { needs: need.memory });
        }
        if let Err(VolumeMiss::Storage { needs }) = volume {
            return Some(Rejection::Storage { needs });
        }
        match host_ports.check(ports) {
            Err(PortsRejection::Taken(port)) => Some(Rejection::PortTaken { port }),
            Err(PortsRejection::TooFew) => Some(Rejection::NoFreePort { needs: ports.any }),
            Ok(()) => None,
        }
    }

    fn describe(&self, f: &mut fmt::Formatter<'_>, one: bool) -> fmt::Result {
        let (is, has, lacks) = if one {
            ("is", "has", "lacks")
        } else {
            ("are", "have", "lack")
        };
        match self {
            Rejection::NotAlive => write!(f, "{is} not alive"),
            Rejection::VolumeElsewhere { volume, node } => {
                write!(f, "{is} not {node}, where volume {volume} is attached")
            }
            Rejection::Architecture { wanted } => {
                write!(f, "{is} not {wanted} (architecture mismatch)")
            }
            Rejection::Zone { wanted } => write!(f, "{is} outside zone {wanted}"),
            Rejection::MissingLabel { key, value } => write!(f, "{lacks} label {key}={value}"),
            Rejection::Taint { taint } => write!(f, "{is} tainted {taint} (not accepted)"),
            Rejection::Cpu { needs } => write!(f, "{has} too little cpu (needs {needs})"),
            Rejection::Memory { needs } => write!(f, "{has} too little memory (needs {needs})"),
            Rejection::Storage { needs } => {
                write!(f, "{has} too little storage for volumes (needs {needs})")
            }
            Rejection::PortTaken { port } => write!(f, "{has} host port {port} taken"),
            Rejection::NoFreePort { needs } => {
                write!(f, "{has} too few free host ports (needs {needs})")
            }
        }
    }
}

/// Why a request was not placed: how many nodes failed which filter, like
/// `0/10 nodes can run it: 4 have too little cpu (needs 500m), 3 lack label disk=ssd, 2 are
/// tainted dedicated (not accepted), 1 is not alive`.
///
/// Each node is counted once, under the first filter it fails (the order of [`Rejection`]'s
/// variants). The reason describes the cluster at the moment the request came up, after the
/// instances this call placed before it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Unsatisfied<'a> {
    /// How many nodes the cluster has.
    pub nodes: usize,
    /// Each distinct rejection and how many nodes it applies to, most frequent first (equal
    /// counts in the order of [`Rejection`]).
    pub rejections: Vec<(Rejection<'a>, usize)>,
}

impl<'a> Unsatisfied<'a> {
    /// How many nodes were rejected for exactly `rejection`.
    pub fn count(&self, rejection: &Rejection<'_>) -> usize {
        self.rejections
            .iter()
            .filter(|(r, _)| r == rejection)
            .map(|(_, n)| n)
            .sum()
    }

    /// Counts every node's first failing filter. Nodes that pass every filter are not counted.
    pub(crate) fn diagnose(
        nodes: &[Node<'a>],
        (usage, host_ports, storage): (&[Usage], &[HostPorts], &[Storage]),
        placement: &'a Placement,
        needs: (Resources, Ports<'_>, &[VolumeNeed<'a>]),
    ) -> Self {
        let mut rejections: Vec<(Rejection<'a>, usize)> = Vec::new();
        let tables = usage.iter().zip(host_ports).zip(storage);
        for (node, ((usage, held), storage)) in nodes.iter().zip(tables) {
            if let Some(r) = Rejection::of(node, (usage, held, storage), placement, needs) {
                match rejections.iter_mut().find(|(seen, _)| *seen == r) {
                    Some((_, n)) => *n += 1,
                    None => rejections.push((r, 1)),
                }
            }
        }
        rejections.sort_by(|(ra, na), (rb, nb)| nb.cmp(na).then_with(|| ra.cmp(rb)));
        Unsatisfied {
            nodes: nodes.len(),
            rejections,
        }
    }
}

impl fmt::Display for Unsatisfied<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0/{} nodes can run it", self.nodes)?;
        if self.nodes == 0 {
            return write!(f, ": the cluster has no nodes");
        }
        for (i, (rejection, n)) in self.rejections.iter().enumerate() {
            write!(f, "{}{n} ", if i == 0 { ": " } else { ", " })?;
            rejection.describe(f, *n == 1)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use ccattler_core::schema::{Placement, ZonePolicy};

    use super::super::fixture::{Fixture, res};
    use super::*;

    fn why(fixture: Fixture) -> String {
        let result = fixture.run();
        assert!(result.placements.is_empty(), "{result:?}");
        result.unsatisfied.into_values().next().unwrap()
    }

    fn ssd() -> Placement {
        Placement {
            require: [("disk".to_string(), "ssd".to_string())].into(),
            ..Placement::default()
        }
    }

    #[test]
    fn explains_like_kubernetes_counting_each_node_once() {
        let mut fixture = Fixture::default();
        for i in 0..4 {
            fixture = fixture
                .node(&format!("full{i}"), "1", "8Gi")
                .with(|n| n.labels = ssd().require);
        }
        for i in 0..3 {
            fixture = fixture.node(&format!("hdd{i}"), "8", "8Gi");
        }
        for i in 0..2 {
            fixture = fixture.node(&format!("ded{i}"), "8", "8Gi").with(|n| {
                n.labels = ssd().require;
                n.taints = vec!["dedicated".into()];
            });
        }
        let fixture = fixture
            .node("gone", "8", "8Gi")
            .with(|n| n.labels = ssd().require)
            .alive("gone", false)
            .existing("other", "full0", 1, res("800m", "0"))
            .existing("other", "full1", 1, res("800m", "0"))
            .existing("other", "full2", 1, res("800m", "0"))
            .existing("other", "full3", 1, res("800m", "0"))
            .request("db", 1, res("500m", "256Mi"), &ssd());
        assert_eq!(
            why(fixture),
            "0/10 nodes can run it: 4 have too little cpu (needs 500m), 3 lack label disk=ssd, \
             2 are tainted dedicated (not accepted), 1 is not alive"
        );
    }

    #[test]
    fn no_node_alive() {
        let fixture = Fixture::default()
            .node("a", "4", "4Gi")
            .node("b", "4", "4Gi")
            .alive("a", false)
            .alive("b", false)
            .request("web", 1, res("1", "1Gi"), &Placement::default());
        assert_eq!(why(fixture), "0/2 nodes can run it: 2 are not alive");
    }

    #[test]
    fn memory_in_real_units() {
        let fixture = Fixture::default()
            .node("a", "4", "1Gi")
            .existing("big", "a", 1, res("0", "900Mi"))
            .request("web", 1, res("100m", "256Mi"), &Placement::default());
        assert_eq!(
            why(fixture),
            "0/1 nodes can run it: 1 has too little memory (needs 256Mi)"
        );
    }

    #[test]
    fn architecture_and_zone_mismatch() {
        let p = Placement {
            architecture: Some("arm64".into()),
            zone: Some(ZonePolicy::Only("z1".into())),
            ..Placement::default()
        };
        let fixture = Fixture::default()
            .node("amd", "4", "4Gi")
            .with(|n| n.zone = Some("z1".into()))
            .node("arm", "4", "4Gi")
            .with(|n| {
                n.architecture = "arm64".into();
                n.zone = Some("z2".into());
            })
            .request("web", 1, res("1", "1Gi"), &p);
        assert_eq!(
            why(fixture),
            "0/2 nodes can run it: 1 is not arm64 (architecture mismatch), 1 is outside zone z1"
        );
    }

    #[test]
    fn typed_reason_and_an_empty_cluster() {
        let fixture = Fixture::default()
            .node("a", "4", "4Gi")
            .with(|n| n.taints = vec!["gpu".into(), "dedicated".into()])
            .request("web", 1, res("1", "1Gi"), &Placement::default());
        fixture.with_schedule(|s| {
            let why = s.unsatisfied.values().next().unwrap();
            assert_eq!(why.count(&Rejection::Taint { taint: "dedicated" }), 1);
            assert_eq!(why.nodes, 1);
        });
        let empty = Fixture::default().request("web", 1, res("1", "1Gi"), &Placement::default());
        assert_eq!(why(empty), "0/0 nodes can run it: the cluster has no nodes");
    }
}
