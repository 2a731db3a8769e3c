//! [`Workload`]: a cluster and what its users do to it, drawn from a seed, written in the
//! `.cca` language, run in the [simulation](crate::sim).
//!
//! The simulation proves the code for the workloads it runs; fixed files prove it for those
//! files only. A workload drawn from the seed covers what users write: service names from the
//! whole identifier alphabet (letters of any script, digits, `_ - . :`, paths with `/`, words
//! like `init` inside names, long names), every feature of the language (stateful services,
//! init steps, probes of each kind, restart policies, zone spread and pinning, `require` and
//! `prefer`, volumes, secrets in files and in the environment, update policies, configuration,
//! horizontal scale bounds, network policy), counts from one to hundreds, and changes while the
//! cluster runs: scale up and down, a new version, a version that never becomes ready (rolled
//! forward later, as a user would), a service deleted, a service added, a secret set late or
//! changed.
//!
//! Every document is rendered as text and goes through the language's own checker
//! ([`Workload::builder`]): a document the checker refuses is a failure of the generator or of
//! the language, reported with the document, never skipped.
//!
//! # Feasible by construction
//!
//! A drawn workload is one the cluster can satisfy with room to spare: every document of the
//! run, its rollouts' extra instances included, is placed by the pure scheduler on the nodes at
//! half their capacity ([`feasibility`]), so that it still fits with a node down. A draw that
//! does not fit is shrunk (fewer instances, smaller requests) until it does, so a generated
//! workload never fails for want of room. A given document is held to the same check at full
//! capacity: one that cannot converge on its cluster is named as such, with the service and the
//! scheduler's reason ([`feasibility`]).
//!
//! | file | what it holds |
//! |---|---|
//! | `mod.rs` | [`Workload`], [`ServiceDraw`], [`Step`]: the data, and its documents |
//! | `render.rs` | a service as `.cca` text |
//! | `generate.rs` | [`Workload::generate`]: the draw from a seed |
//! | `feasible.rs` | [`feasibility`]: what the cluster cannot place, and why |
//! | `shrink.rs` | [`Workload::smaller`]: the workloads one step smaller, for shrinking a failure |

mod feasible;
mod generate;
mod render;
mod shrink;

pub use feasible::{Unsatisfiable, feasibility, feasibility_at_max};

use std::fmt;
use std::time::Duration;

use ccattler_controllers::apply::DesiredFacts;
use ccattler_controllers::lang::{self, SourceFile};

use crate::cluster::NodeSpec;
use crate::sim::{Simulation, SimulationBuilder};

/// A cluster and its users' documents over time, drawn from a seed (or built by hand).
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    /// The seed it was drawn from (0 for one built by hand).
    pub seed: u64,
    /// The nodes.
    pub nodes: Vec<NodeSpec>,
    /// The services of the first document.
    pub services: Vec<ServiceDraw>,
    /// The `network` rules of every document, in order (each written in the documents that
    /// declare both of its services).
    pub network: Vec<RuleDraw>,
    /// Secrets set before the first apply: (name, value).
    pub secrets: Vec<(String, String)>,
    /// What the users do while the cluster runs, in time order.
    pub steps: Vec<Step>,
}

/// One service as drawn: each field a feature of the language.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceDraw {
    /// The name (a word or a path of words).
    pub name: String,
    /// `instances`.
    pub instances: u32,
    /// `resources { cpu }`, in millicores.
    pub cpu_millis: u32,
    /// `resources { memory }`, in MiB.
    pub memory_mib: u32,
    /// `restart`, when given.
    pub restart: Option<&'static str>,
    /// `command`, when given.
    pub command: Option<String>,
    /// `expose PORT http|tcp`.
    pub expose: Vec<(u16, &'static str)>,
    /// Whether the exposed ports are `static` (the instance needs the very port on its host).
    pub static_ports: bool,
    /// `startup`, `liveness`, `readiness`: each a probe block, when given.
    pub probes: Vec<ProbeDraw>,
    /// `placement { zone spread }` or `zone Z`.
    pub zone: Option<ZoneDraw>,
    /// `placement { require K = V }`.
    pub require: Vec<(String, String)>,
    /// `placement { prefer K = V }`.
    pub prefer: Vec<(String, String)>,
    /// `update { ... }`, when given.
    pub update: Option<Update>,
    /// `scale { horizontal { min  max } }`, when given.
    pub scale: Option<(u32, u32)>,
    /// `stateful`.
    pub stateful: bool,
    /// `init { exec "CMD"  timeout  retry }`, in order.
    pub init: Vec<String>,
    /// `volume NAME /data/NAME` (each declared at the top of the document).
    pub volumes: Vec<String>,
    /// `secret NAME [/mount/path]`.
    pub secrets: Vec<(String, Option<String>)>,
    /// `config { env K V }`.
    pub env: Vec<(String, String)>,
    /// `config { file /etc/NAME.conf "..." }`.
    pub file: bool,
    /// The version: the image's tag.
    pub version: u32,
    /// Whether this version never becomes ready (its network probes fail; with init steps, its
    /// last step fails too).
    pub broken: bool,
}

/// One rule of the `network` block: `allow|deny FROM -> TO [port N]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleDraw {
    /// `allow` (else `deny`).
    pub allow: bool,
    /// The calling service.
    pub from: String,
    /// The called service.
    pub to: String,
    /// `port N`, when given.
    pub port: Option<u16>,
}

/// A probe block of a service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeDraw {
    /// `startup`, `liveness` or `readiness`.
    pub kind: &'static str,
    /// What it checks.
    pub check: CheckDraw,
    /// `every`, in seconds.
    pub every_secs: u32,
    /// `failure_threshold`, when given.
    pub failure_threshold: Option<u32>,
}

/// What a probe checks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CheckDraw {
    /// `http /path`.
    Http(String),
    /// `tcp`.
    Tcp,
    /// `exec "CMD"` (one that passes on the simulator).
    Exec(String),
}

/// Where a service's instances go by zone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ZoneDraw {
    /// `zone spread`.
    Spread,
    /// `zone Z`.
    In(String),
}

/// What a user does at one time.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// When, in virtual time.
    pub at: Duration,
    /// What.
    pub change: Change,
}

/// One change a user makes.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// Sets the service's `instances`.
    Scale {
        /// The service.
        service: String,
        /// Its new count.
        instances: u32,
    },
    /// Applies the next version of the service (a new image tag); `broken`: one that never
    /// becomes ready (its probes fail; with init steps, its last step fails too).
    Version {
        /// The service.
        service: String,
        /// Whether the version never becomes ready.
        broken: bool,
    },
    /// Deletes the service (the document no longer declares it).
    Delete {
        /// The service.
        service: String,
    },
    /// Adds a service.
    Add(Box<ServiceDraw>),
    /// Sets a secret (a first value, or a new one).
    Secret {
        /// The secret's name.
        name: String,
        /// Its value.
        value: String,
    },
}

impl Change {
    /// Whether the change is about service `name` (adds, scales, versions or deletes it).
    pub fn names(&self, name: &str) -> bool {
        match self {
            Change::Scale { service, .. }
            | Change::Version { service, .. }
            | Change::Delete { service } => service == name,
            Change::Add(service) => service.name == name,
            Change::Secret { .. } => false,
        }
    }
}

/// A generated `update { ... }` block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Update {
    /// `max_unavailable`.
    pub max_unavailable: u32,
    /// `max_extra`.
    pub max_extra: u32,
    /// `progress_deadline`, in seconds, when given: short enough, at times, that a version
    /// that never becomes ready is rolled back before its fix is applied.
    pub progress_deadline_secs: Option<u32>,
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Change::Scale { service, instances } => write!(f, "scale {service} to {instances}"),
            Change::Version { service, broken } => write!(
                f,
                "new version of {service}{}",
                if *broken { " (never ready)" } else { "" }
            ),
            Change::Delete { service } => write!(f, "delete {service}"),
            Change::Add(service) => {
                write!(f, "add {} ({} instances)", service.name, service.instances)
            }
            Change::Secret { name, .. } => write!(f, "set secret {name}"),
        }
    }
}

/// A document the language refused: the generator wrote something the language does not
/// accept (or the language refuses what its docs promise).
#[derive(Debug, thiserror::Error)]
#[error(
    "the language refused document {index} of the workload of seed {seed}:\n{diagnostics}\n--- the document ---\n{text}"
)]
pub struct Refused {
    /// The workload's seed.
    pub seed: u64,
    /// Which document (0: the first).
    pub index: usize,
    /// The text.
    pub text: String,
    /// What the checker said.
    pub diagnostics: String,
}

impl Workload {
    /// The services declared after each step, from the first document on: `(when, services)`
    /// for the first document (at zero) and then after every step that changes services.
    pub fn states(&self) -> Vec<(Duration, Vec<ServiceDraw>)> {
        let mut services = self.services.clone();
        let mut states = vec![(Duration::ZERO, services.clone())];
        for step in &self.steps {
            let changed = match &step.change {
                Change::Scale { service, instances } => services
                    .iter_mut()
                    .find(|s| s.name == *service)
                    .map(|s| s.instances = *instances)
                    .is_some(),
                Change::Version { service, broken } => services
                    .iter_mut()
                    .find(|s| s.name == *service)
                    .map(|s| {
                        s.version += 1;
                        s.broken = *broken;
                    })
                    .is_some(),
                Change::Delete { service } => {
                    let before = services.len();
                    services.retain(|s| s.name != *service);
                    services.len() != before
                }
                Change::Add(service) => {
                    let fresh = services.iter().all(|s| s.name != service.name);
                    if fresh {
                        services.push(service.as_ref().clone());
                    }
                    fresh
                }
                Change::Secret { .. } => false,
            };
            if changed {
                states.push((step.at, services.clone()));
            }
        }
        states
    }

    /// Every document of the run as `.cca` text, with when it is applied (the first at zero).
    pub fn documents(&self) -> Vec<(Duration, String)> {
        self.states()
            .into_iter()
            .map(|(at, services)| (at, render::document(&services, &self.network)))
            .collect()
    }

    /// Every document checked by the language and compiled, with when it is applied.
    ///
    /// # Errors
    ///
    /// [`Refused`] for the first document the language does not accept.
    pub fn compiled(&self) -> Result<Vec<(Duration, DesiredFacts)>, Box<Refused>> {
        self.documents()
            .into_iter()
            .enumerate()
            .map(|(index, (at, text))| {
                let file = SourceFile::new(format!("workload-{}-{index}.cca", self.seed), text);
                match lang::check(&file) {
                    Ok(compiled) => Ok((at, compiled.to_facts())),
                    Err(diagnostics) => Err(Box::new(Refused {
                        seed: self.seed,
                        index,
                        text: file.text().to_owned(),
                        diagnostics: diagnostics.to_string(),
                    })),
                }
            })
            .collect()
    }

    /// A simulation of this workload: its nodes, its documents applied at their times, its
    /// secrets set, the probes of its broken versions failing. Set the seed, faults and timing
    /// on the builder it returns.
    ///
    /// # Errors
    ///
    /// [`Refused`] when the language does not accept one of its documents.
    pub fn builder(&self) -> Result<SimulationBuilder, Box<Refused>> {
        let mut documents = self.compiled()?.into_iter();
        let (_, first) = documents.next().unwrap_or_default();
        let mut builder = Simulation::builder(first).seed(self.seed);
        for node in &self.nodes {
            builder = builder.node(node.clone());
        }
        for (at, desired) in documents {
            builder = builder.then_apply(at, desired);
        }
        for (name, value) in &self.secrets {
            if let Ok(key) = ccattler_core::schema::keys::secret(name) {
                builder = builder.fact(Duration::ZERO, key, value.clone());
            }
        }
        for step in &self.steps {
            if let Change::Secret { name, value } = &step.change
                && let Ok(key) = ccattler_core::schema::keys::secret(name)
            {
                builder = builder.fact(step.at, key, value.clone());
            }
        }
        for image in self.broken_images() {
            builder = builder.failing_probes(image);
        }
        Ok(builder)
    }

    /// The images of the versions that never become ready.
    pub fn broken_images(&self) -> Vec<String> {
        let mut images: Vec<String> = self
            .states()
            .iter()
            .flat_map(|(_, services)| services.iter().filter(|s| s.broken).map(render::image))
            .collect();
        images.sort();
        images.dedup();
        images
    }

    /// One line: the cluster, the services with their counts, and the steps.
    pub fn summary(&self) -> String {
        let services: Vec<String> = self
            .services
            .iter()
            .map(|s| format!("{} x{}", s.name, s.instances))
            .collect();
        let steps: Vec<String> = self
            .steps
            .iter()
            .map(|s| format!("{:.1}s {}", s.at.as_secs_f64(), s.change))
            .collect();
        format!(
            "workload of seed {}: {} nodes; services {}; steps: {}",
            self.seed,
            self.nodes.len(),
            services.join(", "),
            if steps.is_empty() {
                "none".to_owned()
            } else {
                steps.join("; ")
            }
        )
    }

    /// How long the cluster may take to converge after the last fault, derived from the work
    /// the workload asks for: the simulation's base bound (120 s: four resyncs, twelve lease
    /// TTLs), or longer when a service's own pace asks for it. An instance's round (placed,
    /// its init steps run one per agent pass of 1 s, started, found ready by its readiness
    /// probe) takes `steps + 2` s plus the probe's period; a rolling update replaces
    /// `max_unavailable + max_extra` instances per round, and rebalancing after a node came
    /// back moves one per round, up to half the service. The bound covers the slower of the
    /// two for the slowest service, twice over (faults, conflicts, a controller restarting).
    pub fn settle(&self) -> Duration {
        let base = Duration::from_secs(120);
        let slowest = self
            .states()
            .iter()
            .flat_map(|(_, services)| services.iter())
            .map(|s| {
                let ready = s
                    .probes
                    .iter()
                    .map(|p| u64::from(p.every_secs))
                    .max()
                    .unwrap_or(0);
                let round = s.init.len() as u64 + 2 + ready;
                let (unavailable, extra) = s
                    .update
                    .map_or((1, 1), |u| (u.max_unavailable, u.max_extra));
                let per_round = u64::from((unavailable + extra).max(1));
                let count = u64::from(s.instances);
                let rollout = count.div_ceil(per_round);
                let rebalance = count / 2;
                2 * round * rollout.max(rebalance)
            })
            .max()
            .unwrap_or(0);
        base.max(Duration::from_secs(slowest))
    }

    /// When the last step happens (zero without steps).
    pub fn last_step(&self) -> Duration {
        self.steps.last().map_or(Duration::ZERO, |s| s.at)
    }
}

impl fmt::Display for Workload {
    /// The cluster, then each document with its time, then the other steps: what a person
    /// needs to replay the workload by hand.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "# workload of seed {}: {} nodes",
            self.seed,
            self.nodes.len()
        )?;
        for node in &self.nodes {
            let s = &node.status;
            write!(f, "#   {} cpu {} memory {}", s.name, s.cpu, s.memory)?;
            if let Some(zone) = &s.zone {
                write!(f, " zone {zone}")?;
            }
            for (k, v) in &s.labels {
                write!(f, " {k}={v}")?;
            }
            writeln!(f)?;
        }
        for (name, _) in &self.secrets {
            writeln!(f, "# secret {name} set before the first apply")?;
        }
        for step in &self.steps {
            writeln!(f, "# at {:?}: {}", step.at, step.change)?;
        }
        for (at, text) in self.documents() {
            writeln!(f, "\n# --- the document applied at {at:?} ---")?;
            f.write_str(&text)?;
        }
        Ok(())
    }
}
