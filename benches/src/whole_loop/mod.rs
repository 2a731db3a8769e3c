//! The whole loop measured at a size: the same four phases, in real time through the cluster
//! `cca dev --runtime sim` runs ([`dev`]), and in virtual time through the seeded simulation
//! ([`sim`]).
//!
//! A [`Shape`] is `INSTANCESxNODES`: nodes of 16 cpu and 64Gi, ten services of 100m cpu and
//! 64Mi sharing the instances. The phases, one after the other on one cluster:
//!
//! 1. **apply**: the document applied, until every service runs its count, all ready;
//! 2. **steady**: nothing changes for a while (from 10 s after the apply, 5 s real or 30 s
//!    virtual): writes, controller passes and watch deliveries per second;
//! 3. **loss**: node `n1` crashes (for good), until its instances run elsewhere, all ready
//!    (its lease lapses first: 3 s);
//! 4. **update**: a new version of `svc0` (a tenth of the instances, rolled out a tenth at a
//!    time: `max_unavailable` and `max_extra` of a tenth of its count), until every instance
//!    runs the new version, ready.
//! 5. **stuck**: a service [`OVERFLOW`] that does not fit is added (2 instances a node of
//!    40Gi each, where a node holds 64Gi: one fits a node): once the part that fits runs and
//!    the rest is unplaced with the scheduler's reason, and after the same settling as steady,
//!    writes, passes and deliveries per second while it stays stuck (`stuck_writes_s`,
//!    `stuck_passes_s`, `stuck_deliveries_s`), and how many are placed and unplaced
//!    (`stuck_placed`, `stuck_unplaced`).
//!
//! Each phase gives its time (`PHASE_s`), its store writes (`PHASE_writes`: revisions, one per
//! committed transaction) and its watch deliveries (`PHASE_deliveries`: events handed to the
//! controllers' and agents' watches, not to the measuring program's own); steady gives rates
//! (`steady_writes_s`, `steady_passes_s`, `steady_deliveries_s`). Then `peak_mb`, the process's
//! peak resident memory, and `lapses`, node leases that expired other than `n1`'s.

pub mod dev;
pub mod sim;

use std::fmt::Write as _;

use ccattler_core::schema::{Cpu, Memory};

/// The services the instances are shared among.
pub const SERVICES: u32 = 10;

/// Each node's cpu.
pub const NODE_CPU: Cpu = Cpu::from_millis(16_000);

/// Each node's memory.
pub const NODE_MEMORY: Memory = Memory::from_bytes(64 << 30);

/// The service of the stuck phase, which does not fit.
pub const OVERFLOW: &str = "overflow";

/// `INSTANCESxNODES`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Instances of all services together.
    pub instances: u32,
    /// Nodes.
    pub nodes: u32,
}

impl std::str::FromStr for Shape {
    type Err = String;

    fn from_str(shape: &str) -> Result<Self, String> {
        let bad = || format!("a shape is INSTANCESxNODES (10000x256), not {shape:?}");
        let (instances, nodes) = shape.split_once('x').ok_or_else(bad)?;
        let shape = Shape {
            instances: instances.parse().map_err(|_| bad())?,
            nodes: nodes.parse().map_err(|_| bad())?,
        };
        if shape.instances < SERVICES || shape.nodes < 2 {
            return Err(format!(
                "{shape:?}: at least {SERVICES} instances (one per service) and 2 nodes (one is lost)"
            ));
        }
        Ok(shape)
    }
}

impl std::fmt::Display for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}x{}", self.instances, self.nodes)
    }
}

impl Shape {
    /// The `.cca` document of the shape: `version` 1 is applied first, 2 is the update of
    /// `svc0`.
    pub fn document(&self, version: u32) -> String {
        let each = self.instances / SERVICES;
        let step = (each / 10).max(1);
        let mut text = String::new();
        for s in 0..SERVICES {
            let image = if s == 0 {
                format!("example/svc0:{version}")
            } else {
                format!("example/svc{s}:1")
            };
            let _ = write!(
                text,
                "service svc{s} {{\n    image \"{image}\"\n    instances {each}\n    \
                 resources {{\n        cpu 100m\n        memory 64Mi\n    }}\n"
            );
            if s == 0 {
                let _ = write!(
                    text,
                    "    update {{\n        max_unavailable {step}\n        max_extra {step}\n    }}\n"
                );
            }
            text.push_str("}\n");
        }
        text
    }

    /// Version 2 of the document and [`OVERFLOW`]: 2 instances a node of 40Gi each, where a
    /// node holds 64Gi (some of it taken): one fits a node, the rest nowhere.
    pub fn overflowing_document(&self) -> String {
        let mut text = self.document(2);
        let _ = write!(
            text,
            "service {OVERFLOW} {{\n    image \"example/{OVERFLOW}:1\"\n    instances {}\n    \
             resources {{\n        cpu 100m\n        memory 40Gi\n    }}\n}}\n",
            self.nodes * 2
        );
        text
    }
}

/// The phases, in order.
pub const PHASES: [&str; 5] = ["apply", "steady", "loss", "update", "stuck"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_versions_of_a_shape_pass_the_checker_and_differ_only_in_svc0() {
        let shape: Shape = "1000x100".parse().unwrap();
        let one = shape.document(1);
        let two = shape.document(2);
        for text in [&one, &two] {
            let file = ccattler_controllers::lang::SourceFile::new("shape.cca", text.as_str());
            assert!(ccattler_controllers::lang::check(&file).is_ok(), "{text}");
        }
        let differ: Vec<_> = one
            .lines()
            .zip(two.lines())
            .filter(|(a, b)| a != b)
            .collect();
        assert_eq!(
            differ,
            [(
                "    image \"example/svc0:1\"",
                "    image \"example/svc0:2\""
            )]
        );
        assert!(one.contains("max_unavailable 10\n"));
        let over = shape.overflowing_document();
        let file = ccattler_controllers::lang::SourceFile::new("shape.cca", over.as_str());
        assert!(ccattler_controllers::lang::check(&file).is_ok(), "{over}");
        assert!(over.starts_with(&two) && over.contains("instances 200\n"));
        assert!("5x100".parse::<Shape>().is_err());
        assert!("10000by256".parse::<Shape>().is_err());
    }
}
