//! [`HostPorts`]: which host ports of one node are held, and whether a request's ports fit.

use std::collections::BTreeMap;

use ccattler_core::schema::{PortRange, ServiceSpec};

use super::Ports;

/// A service's declared ports as the scheduler counts them: the fixed ones (`expose 80
/// static`) by number, and how many take a port of the node's range. A [`Ports`] borrows the
/// first: `Ports { fixed: &fixed, any }`.
pub fn port_needs(spec: &ServiceSpec) -> (Vec<u16>, u32) {
    let fixed: Vec<u16> = spec
        .expose
        .iter()
        .filter(|e| e.fixed)
        .map(|e| e.port)
        .collect();
    let any = spec.expose.iter().filter(|e| !e.fixed).count();
    (fixed, u32::try_from(any).unwrap_or(u32::MAX))
}

/// The host ports of one node: its range, the ports held by number (by existing instances, and
/// by this call's placements that need fixed ports), and how many of its range this call's
/// placements will take without a number yet (the caller picks free ones afterwards).
#[derive(Clone, Debug, Default)]
pub(crate) struct HostPorts {
    range: PortRange,
    /// Held ports, with how many instances hold each (more than one only in a cluster that was
    /// already in conflict).
    held: BTreeMap<u16, u32>,
    /// Held ports inside the range.
    held_in_range: u32,
    /// Ports of the range promised by number-less placements of this call.
    promised: u32,
}

/// Why a node's host ports cannot take a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PortsRejection {
    /// This fixed port is held already (the smallest such).
    Taken(u16),
    /// The range has fewer free ports than needed.
    TooFew,
}

impl HostPorts {
    /// A node offering `range`, nothing held.
    pub(crate) fn new(range: PortRange) -> Self {
        HostPorts {
            range,
            ..HostPorts::default()
        }
    }

    /// A node that offers no port (one that never reported its range).
    pub(crate) fn none() -> Self {
        HostPorts::new(PortRange { first: 1, last: 0 })
    }

    /// Makes `range` the node's range (what is held stays held).
    pub(crate) fn set_range(&mut self, range: PortRange) {
        self.range = range;
        let in_range = self
            .held
            .iter()
            .filter(|(port, _)| range.contains(**port))
            .map(|(_, count)| *count);
        self.held_in_range = in_range.sum();
    }

    /// Records `ports` as held (an existing instance's host ports).
    pub(crate) fn hold(&mut self, ports: &[u16]) {
        for &port in ports {
            *self.held.entry(port).or_default() += 1;
            if self.range.contains(port) {
                self.held_in_range += 1;
            }
        }
    }

    /// Forgets `ports` as held.
    pub(crate) fn release(&mut self, ports: &[u16]) {
        for &port in ports {
            let Some(count) = self.held.get_mut(&port) else {
                continue;
            };
            *count -= 1;
            if *count == 0 {
                self.held.remove(&port);
            }
            if self.range.contains(port) {
                self.held_in_range = self.held_in_range.saturating_sub(1);
            }
        }
    }

    /// Whether a request needing `ports` fits, or why not.
    pub(crate) fn check(&self, ports: Ports<'_>) -> Result<(), PortsRejection> {
        if let Some(&port) = ports
            .fixed
            .iter()
            .filter(|p| self.held.contains_key(p))
            .min()
        {
            return Err(PortsRejection::Taken(port));
        }
        let fixed_in_range = ports
            .fixed
            .iter()
            .filter(|&&p| self.range.contains(p))
            .count();
        let used = u64::from(self.held_in_range) + u64::from(self.promised) + fixed_in_range as u64;
        let free = u64::from(self.range.len()).saturating_sub(used);
        if u64::from(ports.any) > free {
            return Err(PortsRejection::TooFew);
        }
        Ok(())
    }

    /// Whether a request needing `ports` fits.
    pub(crate) fn fits(&self, ports: Ports<'_>) -> bool {
        self.check(ports).is_ok()
    }

    /// Takes what a request placed here needs (call only when it fits).
    pub(crate) fn take(&mut self, ports: Ports<'_>) {
        self.hold(ports.fixed);
        self.promised += ports.any;
    }

    /// Gives back what [`take`](Self::take) took.
    pub(crate) fn untake(&mut self, ports: Ports<'_>) {
        self.release(ports.fixed);
        self.promised = self.promised.saturating_sub(ports.any);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RANGE: PortRange = PortRange {
        first: 100,
        last: 102,
    };

    #[test]
    fn fixed_ports_are_free_or_taken_and_count_against_the_range_when_in_it() {
        let mut ports = HostPorts::new(RANGE);
        ports.hold(&[80, 100]);
        let web = Ports {
            fixed: &[443, 80],
            any: 0,
        };
        assert_eq!(ports.check(web), Err(PortsRejection::Taken(80)));
        // 101 and 102 are free: two number-less ports fit, three do not.
        assert!(ports.fits(Ports { fixed: &[], any: 2 }));
        assert_eq!(
            ports.check(Ports { fixed: &[], any: 3 }),
            Err(PortsRejection::TooFew)
        );
        // A fixed port in the range leaves one fewer for the rest.
        assert!(!ports.fits(Ports {
            fixed: &[101],
            any: 2
        }));
        ports.take(Ports {
            fixed: &[101],
            any: 1,
        });
        assert!(!ports.fits(Ports { fixed: &[], any: 1 }));
        ports.untake(Ports {
            fixed: &[101],
            any: 1,
        });
        ports.release(&[100]);
        assert!(ports.fits(Ports { fixed: &[], any: 3 }));
    }
}
