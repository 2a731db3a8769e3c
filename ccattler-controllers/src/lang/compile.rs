//! The compiler: gives the statement tree its meaning, checks it, and produces the desired
//! records of the standard schema.
//!
//! It assumes the [grammar](super::grammar) shape checks ran (keywords, arities, which fields
//! take blocks) but never relies on them for safety: anything unexpected becomes a diagnostic.

use std::collections::{BTreeMap, BTreeSet};

use ccattler_core::schema::{self, Memory, NetworkPolicy, ServiceSpec, VolumeSpec};

use super::diagnostic::{Diagnostic, Diagnostics};
use super::span::Span;
use super::syntax::{Document, Statement};

/// The desired facts one `.cca` document compiles to: key → encoded record (what
/// [`apply`](crate::apply) writes).
pub type DesiredFacts = BTreeMap<ccattler_core::Key, ccattler_core::Value>;

/// What a document declares, as typed records.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Compiled {
    /// Services in declaration order.
    pub services: Vec<ServiceSpec>,
    /// Volumes in declaration order.
    pub volumes: Vec<VolumeSpec>,
    /// The network rules of every `network` block, in order; `None` without any block.
    pub network: Option<NetworkPolicy>,
}

impl Compiled {
    /// The desired facts: one per service and volume, and the network policy.
    ///
    /// Names were checked to be valid keys during compilation; one that is not (which cannot
    /// happen for a `Compiled` from [`compile`]) is left out.
    pub fn to_facts(&self) -> DesiredFacts {
        let mut facts = DesiredFacts::new();
        for spec in &self.services {
            if let Ok(key) = schema::keys::service(&spec.name) {
                facts.insert(key, schema::encode(spec));
            }
        }
        for volume in &self.volumes {
            if let Ok(key) = schema::keys::volume(&volume.name) {
                facts.insert(key, schema::encode(volume));
            }
        }
        if let Some(policy) = &self.network {
            facts.insert(schema::keys::network_policy(), schema::encode(policy));
        }
        facts
    }
}

/// Compiles a parsed document, adding every problem found to `diagnostics`.
///
/// Returns the records even when there are errors (so tools can show partial results); callers
/// that apply must check [`Diagnostics::has_errors`] first.
pub fn compile(doc: &Document, diagnostics: &mut Diagnostics) -> Compiled {
    let mut compiler = Compiler {
        out: Compiled::default(),
        diagnostics,
        service_spans: BTreeMap::new(),
        volume_spans: BTreeMap::new(),
        volume_refs: Vec::new(),
        service_refs: Vec::new(),
    };
    compiler.document(doc);
    compiler.check_references();
    compiler.out
}

pub(super) struct Compiler<'a> {
    pub(super) out: Compiled,
    pub(super) diagnostics: &'a mut Diagnostics,
    pub(super) service_spans: BTreeMap<String, Span>,
    pub(super) volume_spans: BTreeMap<String, Span>,
    /// (volume name, where it is referenced)
    /// Each volume mount: the volume, where it is named, and the service mounting it.
    pub(super) volume_refs: Vec<(String, Span, String)>,
    /// (service name, where it is referenced)
    pub(super) service_refs: Vec<(String, Span)>,
}

/// A required argument was missing or of the wrong kind; the diagnostic was already reported.
pub(super) struct Reported;

pub(super) type Checked<T> = Result<T, Reported>;

impl Compiler<'_> {
    pub(super) fn error(
        &mut self,
        code: &'static str,
        span: Span,
        message: String,
        help: &str,
    ) -> Reported {
        let mut diagnostic = Diagnostic::error(code, span, message);
        if !help.is_empty() {
            diagnostic = diagnostic.with_help(help.to_owned());
        }
        self.diagnostics.push(diagnostic);
        Reported
    }

    /// Runs `f` on each statement of `st`'s block, going on after one fails (its problem is
    /// already reported), so that every error of a block is found.
    pub(super) fn each(
        &mut self,
        st: &Statement,
        mut f: impl FnMut(&mut Self, &Statement) -> Checked<()>,
    ) {
        for field in st.children() {
            let _ = f(self, field);
        }
    }

    fn document(&mut self, doc: &Document) {
        for statement in &doc.statements {
            if self.diagnostics.is_full() {
                return;
            }
            match statement.name() {
                "service" => self.service(statement),
                "volume" => self.volume(statement),
                "network" => self.network(statement),
                _ => {} // reported by the grammar check
            }
        }
    }

    // ---- declarations --------------------------------------------------------------------

    fn service(&mut self, st: &Statement) {
        let Ok((name, name_span)) = self.name(st, 0, "a service name") else {
            return;
        };
        if schema::keys::service(&name).is_err() {
            self.error(
                "cca::bad-name",
                name_span,
                format!("`{name}` is not a valid service name"),
                "service names are words or paths of words, like `web` or `team/web`",
            );
            return;
        }
        if let Some(first) = self.service_spans.get(&name).copied() {
            let diagnostic = Diagnostic::error(
                "cca::duplicate-service",
                name_span,
                format!("service `{name}` is declared twice"),
            )
            .with_secondary(first, "first declared here")
            .with_help("rename one of them or merge the two blocks");
            self.diagnostics.push(diagnostic);
            return;
        }
        // Instance ids are the name with `/` turned into `.`: `team/web` and `team.web` would
        // give their instances the same ids (`team.web-0` of two stateful services).
        let ids = name.replace('/', ".");
        let same_ids = self
            .service_spans
            .iter()
            .find(|(other, _)| other.replace('/', ".") == ids)
            .map(|(other, span)| (other.clone(), *span));
        if let Some((other, first)) = same_ids {
            let diagnostic = Diagnostic::error(
                "cca::same-instance-ids",
                name_span,
                format!("services `{other}` and `{name}` would give their instances the same ids"),
            )
            .with_secondary(first, "declared here")
            .with_help("instance ids are the service name with `/` as `.`: rename one of them");
            self.diagnostics.push(diagnostic);
            return;
        }
        self.service_spans.insert(name.clone(), name_span);
        let mut spec = ServiceSpec {
            name,
            instances: 1,
            ..ServiceSpec::default()
        };
        let mut has_image = false;
        let mut health: Option<Span> = None;
        let mut liveness: Option<Span> = None;
        self.each(st, |this, field| {
            let _ =
                this.service_field(&mut spec, field, &mut has_image, &mut health, &mut liveness);
            Ok(())
        });
        if let (Some(health), Some(liveness)) = (health, liveness) {
            let diagnostic = Diagnostic::error(
                "cca::health-and-liveness",
                health,
                "`health` and `liveness` both set the liveness probe".to_owned(),
            )
            .with_secondary(liveness, "liveness declared here")
            .with_help("keep one: `health` is shorthand for `liveness`");
            self.diagnostics.push(diagnostic);
        }
        let update = spec.update;
        if update.max_unavailable == 0 && update.max_extra == 0 {
            self.error(
                "cca::stuck-update",
                name_span,
                format!(
                    "service `{}` could never be updated: `max_unavailable 0` stops no old \
                     instance and `max_extra 0` starts no new one beside them",
                    spec.name
                ),
                "allow one of them, such as `max_extra 1` (the defaults are 1 and 1)",
            );
        } else if spec.stateful && update.max_unavailable == 0 {
            self.error(
                "cca::stuck-update",
                name_span,
                format!(
                    "stateful service `{}` could never be updated with `max_unavailable 0`: each \
                     identity is stopped before it starts again in the new version, so one at a \
                     time is unavailable",
                    spec.name
                ),
                "set `max_unavailable 1` (the default) or more",
            );
        }
        if update.failure_threshold == 0 {
            self.error(
                "cca::bad-rollout",
                name_span,
                format!(
                    "service `{}` has `failure_threshold 0`: every new version would be rolled \
                     back before any of its instances failed",
                    spec.name
                ),
                "count the failures that roll a version back, 1 or more (the default is 3)",
            );
        }
        if update.progress_deadline.is_zero() {
            self.error(
                "cca::bad-rollout",
                name_span,
                format!(
                    "service `{}` has `progress_deadline 0s`: every new version would be rolled \
                     back before its first instance could be ready",
                    spec.name
                ),
                "give instances time to start, such as `progress_deadline 10m` (the default)",
            );
        }
        if let Some(scale) = &spec.scale {
            for target in &scale.targets {
                let requested = match target.metric.as_str() {
                    "cpu" => spec.resources.cpu.millis(),
                    "memory" => spec.resources.memory.bytes(),
                    _ => continue,
                };
                if requested == 0 {
                    let metric = &target.metric;
                    self.error(
                        "cca::target-without-request",
                        name_span,
                        format!(
                            "service `{}` targets {metric} use but requests no {metric}: the \
                             target is a percentage of what an instance requests",
                            spec.name
                        ),
                        &format!("add `resources {{ {metric} ... }}` to the service"),
                    );
                }
            }
        }
        if !has_image {
            self.error(
                "cca::missing-image",
                name_span,
                format!("service `{}` has no image", spec.name),
                "add a line `image NAME`, such as `image nginx:1.28`",
            );
        }
        self.out.services.push(spec);
    }

    fn volume(&mut self, st: &Statement) {
        let Ok((name, span)) = self.name(st, 0, "a volume name") else {
            return;
        };
        if let Some(first) = self.volume_spans.get(&name).copied() {
            let diagnostic = Diagnostic::error(
                "cca::duplicate-volume",
                span,
                format!("volume `{name}` is declared twice"),
            )
            .with_secondary(first, "first declared here")
            .with_help("rename one of them or merge the two blocks");
            self.diagnostics.push(diagnostic);
            return;
        }
        if schema::keys::volume(&name).is_err() {
            self.error(
                "cca::bad-name",
                span,
                format!("`{name}` is not a valid volume name"),
                "volume names are words like `pgdata`",
            );
            return;
        }
        self.volume_spans.insert(name.clone(), span);
        let mut volume = VolumeSpec {
            name,
            size: Memory::ZERO,
            persistent: false,
        };
        let mut sized = false;
        self.each(st, |this, field| {
            match field.name() {
                "size" => {
                    sized = true;
                    volume.size = this.parsed::<Memory>(field, 0, "a size")?;
                }
                "persistent" => volume.persistent = this.flag(field, 0)?,
                _ => {}
            }
            Ok(())
        });
        if !sized || volume.size.is_zero() {
            let what = if sized { "a size of 0" } else { "no size" };
            self.error(
                "cca::volume-size",
                span,
                format!(
                    "volume `{}` has {what}: its size is what it takes of a node's storage",
                    volume.name
                ),
                "add a line `size S`, such as `size 10Gi`",
            );
        }
        self.out.volumes.push(volume);
    }

    fn network(&mut self, st: &Statement) {
        let policy = self.out.network.get_or_insert_with(NetworkPolicy::default);
        let mut rules = std::mem::take(&mut policy.rules);
        self.each(st, |this, field| {
            if let Ok(rule) = this.rule(field) {
                rules.push(rule);
            }
            Ok(())
        });
        if let Some(policy) = &mut self.out.network {
            policy.rules = rules;
        }
    }

    fn check_references(&mut self) {
        let volume_refs = std::mem::take(&mut self.volume_refs);
        self.check_mounts(&volume_refs);
        for (name, span, _) in volume_refs {
            if !self.volume_spans.contains_key(&name) {
                let declared = list(self.volume_spans.keys());
                self.error(
                    "cca::undeclared-volume",
                    span,
                    format!("volume `{name}` is not declared"),
                    &format!("declare it with `volume {name} {{ size 10Gi }}`; declared volumes: {declared}"),
                );
            }
        }
        let service_refs = std::mem::take(&mut self.service_refs);
        for (name, span) in service_refs {
            if !self.service_spans.contains_key(&name) {
                let declared = list(self.service_spans.keys());
                self.error(
                    "cca::undeclared-service",
                    span,
                    format!("service `{name}` is not declared"),
                    &format!("declared services: {declared}"),
                );
            }
        }
    }
}

impl Compiler<'_> {
    /// A volume is attached to one instance at a time: it is mounted by one service, which runs
    /// one instance (never scaled above one) unless it is stateful (each identity then has a
    /// volume of its own), and can be updated stop-first.
    fn check_mounts(&mut self, mounts: &[(String, Span, String)]) {
        let mut first_mount: BTreeMap<&str, (&str, Span)> = BTreeMap::new();
        let mut judged: BTreeSet<(&str, &str)> = BTreeSet::new();
        for (volume, span, service) in mounts {
            match first_mount.get(volume.as_str()) {
                Some(&(other, first)) if other != service => {
                    let diagnostic = Diagnostic::error(
                        "cca::shared-volume",
                        *span,
                        format!(
                            "volume `{volume}` is mounted by services `{other}` and `{service}`: \
                             a volume is attached to one instance at a time"
                        ),
                    )
                    .with_secondary(first, "first mounted here")
                    .with_help("declare a volume for each service");
                    self.diagnostics.push(diagnostic);
                    continue;
                }
                Some(_) => {}
                None => {
                    first_mount.insert(volume, (service, *span));
                }
            }
            if !judged.insert((volume, service)) {
                continue;
            }
            let Some(spec) = self.out.services.iter().find(|s| &s.name == service) else {
                continue;
            };
            let most = spec.scale.as_ref().map_or(spec.instances, |s| s.max);
            let max_unavailable = spec.update.max_unavailable;
            if most > 1 && !spec.stateful {
                let runs = if spec.scale.is_some() {
                    format!("may scale to {most} instances")
                } else {
                    format!("runs {most} instances")
                };
                self.error(
                    "cca::volume-instances",
                    *span,
                    format!(
                        "service `{service}` {runs} but mounts volume `{volume}`, which is \
                         attached to one instance at a time"
                    ),
                    "make the service `stateful` (each instance then has a volume of its own), or \
                     run `instances 1` (with `scale`, `max 1`)",
                );
            } else if max_unavailable == 0 {
                self.error(
                    "cca::stuck-update",
                    *span,
                    format!(
                        "service `{service}` mounts volume `{volume}` and could never be updated \
                         with `max_unavailable 0`: its instance is stopped before its replacement \
                         starts, since the volume is attached to one instance at a time"
                    ),
                    "set `max_unavailable 1` (the default)",
                );
            }
        }
    }
}

fn list<'a>(names: impl Iterator<Item = &'a String>) -> String {
    let names: Vec<String> = names.map(|n| format!("`{n}`")).collect();
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}
