//! The compiler: gives the statement tree its meaning, checks it, and produces the desired
//! records of the standard schema.
//!
//! It assumes the [grammar](super::grammar) shape checks ran (keywords, arities, which fields
//! take blocks) but never relies on them for safety: anything unexpected becomes a diagnostic.

use std::collections::BTreeMap;
use std::str::FromStr;

use ccattler_core::schema::{
    self, ConfigFile, Cpu, Expose, HorizontalScale, InitStep, Memory, NetworkPolicy, NetworkRule,
    Probe, ProbeCheck, Protocol, RestartPolicy, RuleAction, ScaleTarget, SecretRef, ServiceSpec,
    VolumeMount, VolumeSpec, ZonePolicy,
};

use super::diagnostic::{Diagnostic, Diagnostics};
use super::span::Span;
use super::syntax::{Arg, ArgKind, Document, Statement};
use super::token::Op;
use crate::apply::DesiredFacts;

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

struct Compiler<'a> {
    out: Compiled,
    diagnostics: &'a mut Diagnostics,
    service_spans: BTreeMap<String, Span>,
    volume_spans: BTreeMap<String, Span>,
    /// (volume name, where it is referenced)
    volume_refs: Vec<(String, Span)>,
    /// (service name, where it is referenced)
    service_refs: Vec<(String, Span)>,
}

/// A required argument was missing or of the wrong kind; the diagnostic was already reported.
struct Reported;

type Checked<T> = Result<T, Reported>;

impl Compiler<'_> {
    fn error(&mut self, code: &'static str, span: Span, message: String, help: &str) -> Reported {
        let mut diagnostic = Diagnostic::error(code, span, message);
        if !help.is_empty() {
            diagnostic = diagnostic.with_help(help.to_owned());
        }
        self.diagnostics.push(diagnostic);
        Reported
    }

    /// Runs `f` on each statement of `st`'s block, going on after one fails (its problem is
    /// already reported), so that every error of a block is found.
    fn each(&mut self, st: &Statement, mut f: impl FnMut(&mut Self, &Statement) -> Checked<()>) {
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

    // ---- argument helpers ----------------------------------------------------------------

    fn arg<'s>(&mut self, st: &'s Statement, index: usize, what: &str) -> Checked<&'s Arg> {
        match st.args.get(index) {
            Some(arg) => Ok(arg),
            None => Err(self.error(
                "cca::missing-argument",
                st.span,
                format!("`{}` needs {what}", st.name()),
                "",
            )),
        }
    }

    /// A name: a word, or a string.
    fn name(&mut self, st: &Statement, index: usize, what: &str) -> Checked<(String, Span)> {
        let arg = self.arg(st, index, what)?;
        match &arg.kind {
            ArgKind::Word(text) | ArgKind::Str(text) => Ok((text.clone(), arg.span)),
            other => Err(self.error(
                "cca::expected-name",
                arg.span,
                format!("expected {what}, found {}", other.describe()),
                "names are words like `web` or `team/web`",
            )),
        }
    }

    fn text(&mut self, st: &Statement, index: usize, what: &str) -> Checked<(String, Span)> {
        let arg = self.arg(st, index, what)?;
        match (&arg.kind, arg.kind.text().or(arg.kind.string())) {
            (ArgKind::Op(_), _) | (_, None) => Err(self.error(
                "cca::expected-value",
                arg.span,
                format!("expected {what}, found {}", arg.kind.describe()),
                "",
            )),
            (_, Some(text)) => Ok((text.to_owned(), arg.span)),
        }
    }

    fn whole(&mut self, st: &Statement, index: usize, what: &str) -> Checked<u64> {
        let arg = self.arg(st, index, what)?;
        let text = match &arg.kind {
            ArgKind::Number(text) => text.as_str(),
            other => {
                return Err(self.error(
                    "cca::expected-number",
                    arg.span,
                    format!("{what} must be a whole number, found {}", other.describe()),
                    "write a number such as `3`",
                ));
            }
        };
        if let Some(rest) = text.strip_prefix('-') {
            let _ = rest;
            return Err(self.error(
                "cca::negative",
                arg.span,
                format!("{what} cannot be negative (`{text}`)"),
                "use 0 or a positive whole number",
            ));
        }
        if !text.bytes().all(|b| b.is_ascii_digit()) {
            return Err(self.error(
                "cca::not-whole",
                arg.span,
                format!("{what} must be a whole number, not `{text}`"),
                "write a number without fraction or unit, such as `3`",
            ));
        }
        text.parse().map_err(|_| {
            self.error(
                "cca::too-large",
                arg.span,
                format!("{what} `{text}` is too large"),
                "",
            )
        })
    }

    fn count(&mut self, st: &Statement, index: usize, what: &str) -> Checked<u32> {
        let value = self.whole(st, index, what)?;
        u32::try_from(value).map_err(|_| {
            let span = st.args.get(index).map_or(st.span, |a| a.span);
            self.error(
                "cca::too-large",
                span,
                format!("{what} `{value}` is too large"),
                "the largest count is 4294967295",
            )
        })
    }

    fn port(&mut self, st: &Statement, index: usize) -> Checked<u16> {
        let span = st.args.get(index).map_or(st.span, |a| a.span);
        let value = self.whole(st, index, "a port")?;
        match u16::try_from(value) {
            Ok(port) if port >= 1 => Ok(port),
            _ => Err(self.error(
                "cca::port-range",
                span,
                format!("port {value} is outside 1-65535"),
                "ports are whole numbers from 1 to 65535",
            )),
        }
    }

    fn parsed<T: FromStr<Err = schema::SchemaError>>(
        &mut self,
        st: &Statement,
        index: usize,
        what: &str,
    ) -> Checked<T> {
        let arg = self.arg(st, index, what)?;
        let text = arg.kind.text().unwrap_or_default();
        text.parse().map_err(|err: schema::SchemaError| {
            self.error("cca::bad-unit", arg.span, err.to_string(), "")
        })
    }

    fn duration(&mut self, st: &Statement, index: usize) -> Checked<std::time::Duration> {
        let arg = self.arg(st, index, "a duration")?;
        let text = arg.kind.text().unwrap_or_default();
        schema::parse_duration(text)
            .map_err(|err| self.error("cca::bad-unit", arg.span, err.to_string(), ""))
    }

    fn flag(&mut self, st: &Statement, index: usize) -> Checked<bool> {
        let arg = self.arg(st, index, "`true` or `false`")?;
        match arg.kind.text() {
            Some("true") => Ok(true),
            Some("false") => Ok(false),
            _ => Err(self.error(
                "cca::expected-bool",
                arg.span,
                format!("expected `true` or `false`, found {}", arg.kind.describe()),
                "",
            )),
        }
    }

    /// `KEY VALUE` or `KEY = VALUE` starting at `index`.
    fn pair(&mut self, st: &Statement, index: usize, what: &str) -> Checked<(String, String)> {
        let (key, _) = self.text(st, index, what)?;
        let value_index = match st.args.get(index + 1) {
            Some(Arg {
                kind: ArgKind::Op(Op::Assign),
                ..
            }) => index + 2,
            _ => index + 1,
        };
        let (value, _) = self.text(st, value_index, "a value")?;
        Ok((key, value))
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

    fn service_field(
        &mut self,
        spec: &mut ServiceSpec,
        st: &Statement,
        has_image: &mut bool,
        health: &mut Option<Span>,
        liveness: &mut Option<Span>,
    ) -> Checked<()> {
        match st.name() {
            "image" => {
                spec.image = self.text(st, 0, "an image")?.0;
                *has_image = true;
            }
            "command" => {
                let (line, span) = self.text(st, 0, "a command")?;
                spec.command = shlex::split(&line).ok_or_else(|| {
                    self.error(
                        "cca::bad-command",
                        span,
                        "the command has an unbalanced quote".to_owned(),
                        "",
                    )
                })?;
            }
            "instances" => spec.instances = self.count(st, 0, "instances")?,
            "restart" => {
                spec.restart = match self.text(st, 0, "a restart policy")?.0.as_str() {
                    "always" => RestartPolicy::Always,
                    "on_failure" => RestartPolicy::OnFailure,
                    "never" => RestartPolicy::Never,
                    _ => return Ok(()), // reported by the grammar check
                };
            }
            "expose" => self.expose(spec, st)?,
            "resources" => {
                self.each(st, |this, field| {
                    match field.name() {
                        "cpu" => spec.resources.cpu = this.parsed::<Cpu>(field, 0, "cpu")?,
                        "memory" => {
                            spec.resources.memory = this.parsed::<Memory>(field, 0, "memory")?;
                        }
                        _ => {}
                    }
                    Ok(())
                });
            }
            "health" => {
                *health = Some(st.keyword.span);
                spec.liveness = Some(self.probe(st)?);
            }
            "liveness" => {
                *liveness = Some(st.keyword.span);
                if health.is_none() {
                    spec.liveness = Some(self.probe(st)?);
                }
            }
            "startup" => spec.startup = Some(self.probe(st)?),
            "readiness" => spec.readiness = Some(self.probe(st)?),
            "placement" => self.placement(spec, st)?,
            "update" => {
                self.each(st, |this, field| {
                    match field.name() {
                        "max_unavailable" => {
                            spec.update.max_unavailable =
                                this.count(field, 0, "max_unavailable")?;
                        }
                        "max_extra" => spec.update.max_extra = this.count(field, 0, "max_extra")?,
                        _ => {}
                    }
                    Ok(())
                });
            }
            "scale" => {
                for horizontal in st.children().iter().filter(|s| s.name() == "horizontal") {
                    spec.scale = Some(self.horizontal(horizontal)?);
                }
            }
            "config" => self.config(spec, st)?,
            "secret" => {
                let (name, _) = self.name(st, 0, "a secret name")?;
                let mount = match st.args.get(1) {
                    Some(_) => Some(self.text(st, 1, "a mount path")?.0),
                    None => None,
                };
                spec.secrets.push(SecretRef { name, mount });
            }
            "init" => spec.init.push(self.init(st)?),
            "volume" => {
                let (volume, span) = self.name(st, 0, "a volume name")?;
                let (path, _) = self.text(st, 1, "a mount path")?;
                self.volume_refs.push((volume.clone(), span));
                spec.volumes.push(VolumeMount { volume, path });
            }
            "stateful" => spec.stateful = true,
            _ => {}
        }
        Ok(())
    }

    fn expose(&mut self, spec: &mut ServiceSpec, st: &Statement) -> Checked<()> {
        let external = st.args.first().and_then(|a| a.kind.text()) == Some("external");
        let first = usize::from(external);
        let port = self.port(st, first)?;
        let protocol = match st.args.get(first + 1).and_then(|a| a.kind.text()) {
            Some("tcp") => Protocol::Tcp,
            _ => Protocol::Http,
        };
        if spec.expose.iter().any(|e| e.port == port) {
            let span = st.args.get(first).map_or(st.span, |a| a.span);
            return Err(self.error(
                "cca::duplicate-port",
                span,
                format!("port {port} is exposed twice"),
                "expose each port once",
            ));
        }
        spec.expose.push(Expose {
            port,
            protocol,
            external,
        });
        Ok(())
    }

    fn probe(&mut self, st: &Statement) -> Checked<Probe> {
        let mut check = None;
        let mut probe = Probe::new(ProbeCheck::Tcp);
        self.each(st, |this, field| {
            match field.name() {
                "http" => {
                    check = Some(ProbeCheck::Http {
                        path: this.text(field, 0, "a path such as /healthz")?.0,
                    });
                }
                "tcp" => check = Some(ProbeCheck::Tcp),
                "exec" => {
                    check = Some(ProbeCheck::Exec {
                        command: this.text(field, 0, "a command")?.0,
                    });
                }
                "port" => probe.port = Some(this.port(field, 0)?),
                "every" => probe.every = this.duration(field, 0)?,
                "timeout" => probe.timeout = this.duration(field, 0)?,
                "initial_delay" => probe.initial_delay = this.duration(field, 0)?,
                "failure_threshold" => {
                    probe.failure_threshold = this.count(field, 0, "failure_threshold")?;
                }
                "success_threshold" => {
                    probe.success_threshold = this.count(field, 0, "success_threshold")?;
                }
                _ => {}
            }
            Ok(())
        });
        probe.check = check.ok_or_else(|| {
            self.error(
                "cca::probe-without-check",
                st.keyword.span,
                format!("`{}` does not say what to check", st.name()),
                "add one of `http /path`, `tcp` or `exec \"command\"`",
            )
        })?;
        Ok(probe)
    }

    fn placement(&mut self, spec: &mut ServiceSpec, st: &Statement) -> Checked<()> {
        let placement = &mut spec.placement;
        self.each(st, |this, field| {
            match field.name() {
                "architecture" => {
                    placement.architecture = Some(this.text(field, 0, "an architecture")?.0);
                }
                "zone" => {
                    let (zone, _) = this.text(field, 0, "`spread` or a zone name")?;
                    placement.zone = Some(if zone == "spread" {
                        ZonePolicy::Spread
                    } else {
                        ZonePolicy::Only(zone)
                    });
                }
                "require" => {
                    let (label, value) = this.pair(field, 0, "a label")?;
                    placement.require.insert(label, value);
                }
                "prefer" => {
                    let (label, value) = this.pair(field, 0, "a label")?;
                    placement.prefer.insert(label, value);
                }
                "accept" => placement.accept.push(this.text(field, 0, "a taint")?.0),
                _ => {}
            }
            Ok(())
        });
        Ok(())
    }

    fn horizontal(&mut self, st: &Statement) -> Checked<HorizontalScale> {
        let mut scale = HorizontalScale::new(1, 1);
        let (mut min, mut max) = (None, None);
        self.each(st, |this, field| {
            match field.name() {
                "min" => {
                    scale.min = this.count(field, 0, "min")?;
                    min = field.args.first().map(|a| a.span);
                }
                "max" => {
                    scale.max = this.count(field, 0, "max")?;
                    max = field.args.first().map(|a| a.span);
                }
                "target" => scale.targets.push(this.target(field)?),
                "stabilization" => {
                    this.each(field, |this, period| {
                        match period.name() {
                            "scale_up" => {
                                scale.scale_up_stabilization = this.duration(period, 0)?
                            }
                            "scale_down" => {
                                scale.scale_down_stabilization = this.duration(period, 0)?;
                            }
                            _ => {}
                        }
                        Ok(())
                    });
                }
                _ => {}
            }
            Ok(())
        });
        match (min, max) {
            (Some(min_span), Some(max_span)) if scale.max < scale.min => {
                let diagnostic = Diagnostic::error(
                    "cca::max-below-min",
                    max_span,
                    format!("max {} is below min {}", scale.max, scale.min),
                )
                .with_secondary(min_span, "min set here")
                .with_help("max must be at least min");
                self.diagnostics.push(diagnostic);
                Err(Reported)
            }
            (None, _) | (_, None) => Err(self.error(
                "cca::scale-bounds",
                st.keyword.span,
                "`horizontal` needs both `min` and `max`".to_owned(),
                "add `min N` and `max N`",
            )),
            _ => Ok(scale),
        }
    }

    fn target(&mut self, st: &Statement) -> Checked<ScaleTarget> {
        let (metric, _) = self.text(st, 0, "a metric")?;
        let index = match st.args.get(1) {
            Some(Arg {
                kind: ArgKind::Op(Op::Assign),
                ..
            }) => 2,
            _ => 1,
        };
        let arg = self.arg(st, index, "a target value")?;
        let raw = arg.kind.text().unwrap_or_default();
        let (number, percent) = match raw.strip_suffix('%') {
            Some(number) => (number, true),
            None => (raw, false),
        };
        match number.parse::<u64>() {
            Ok(value) if number.bytes().all(|b| b.is_ascii_digit()) => Ok(ScaleTarget {
                metric,
                value,
                percent,
            }),
            _ => Err(self.error(
                "cca::bad-target",
                arg.span,
                format!("target `{raw}` is not a whole number or percentage"),
                "write `target cpu = 60` or `target cpu = 60%`",
            )),
        }
    }

    fn config(&mut self, spec: &mut ServiceSpec, st: &Statement) -> Checked<()> {
        self.each(st, |this, field| {
            match field.name() {
                "env" => {
                    let (key, value) = this.pair(field, 0, "a variable name")?;
                    if spec.env.insert(key.clone(), value).is_some() {
                        let span = field.args.first().map_or(field.span, |a| a.span);
                        this.error(
                            "cca::duplicate-env",
                            span,
                            format!("environment variable `{key}` is set twice"),
                            "set each variable once",
                        );
                    }
                }
                "file" => {
                    let (path, _) = this.text(field, 0, "a file path")?;
                    let (content, _) = this.text(field, 1, "the file's content")?;
                    spec.files.push(ConfigFile { path, content });
                }
                _ => {}
            }
            Ok(())
        });
        Ok(())
    }

    fn init(&mut self, st: &Statement) -> Checked<InitStep> {
        let mut step = InitStep::new(String::new());
        let mut has_exec = false;
        self.each(st, |this, field| {
            match field.name() {
                "exec" => {
                    step.exec = this.text(field, 0, "a command")?.0;
                    has_exec = true;
                }
                "timeout" => step.timeout = this.duration(field, 0)?,
                "retry" => step.retry = this.count(field, 0, "retry")?,
                _ => {}
            }
            Ok(())
        });
        if !has_exec {
            return Err(self.error(
                "cca::init-without-exec",
                st.keyword.span,
                "`init` does not say what to run".to_owned(),
                "add `exec \"command\"`",
            ));
        }
        Ok(step)
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
        self.each(st, |this, field| {
            match field.name() {
                "size" => volume.size = this.parsed::<Memory>(field, 0, "a size")?,
                "persistent" => volume.persistent = this.flag(field, 0)?,
                _ => {}
            }
            Ok(())
        });
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

    fn rule(&mut self, st: &Statement) -> Checked<NetworkRule> {
        let action = match st.name() {
            "allow" => RuleAction::Allow,
            "deny" => RuleAction::Deny,
            _ => return Err(Reported),
        };
        let (from, from_span) = self.name(st, 0, "the calling service")?;
        let (to, to_span) = self.name(st, 2, "the called service")?;
        self.service_refs.push((from.clone(), from_span));
        self.service_refs.push((to.clone(), to_span));
        let port = match st.args.iter().position(|a| a.kind.text() == Some("port")) {
            Some(index) => Some(self.port(st, index + 1)?),
            None => None,
        };
        Ok(NetworkRule {
            action,
            from,
            to,
            port,
        })
    }

    fn check_references(&mut self) {
        let volume_refs = std::mem::take(&mut self.volume_refs);
        for (name, span) in volume_refs {
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

fn list<'a>(names: impl Iterator<Item = &'a String>) -> String {
    let names: Vec<String> = names.map(|n| format!("`{n}`")).collect();
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}
