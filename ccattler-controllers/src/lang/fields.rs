//! The compiler's field readers: what each statement inside a `service` (and a `network`
//! rule) means for the service spec.

use ccattler_core::schema::{
    ConfigFile, Cpu, Expose, HorizontalScale, InitStep, Memory, NetworkRule, Probe, ProbeCheck,
    Protocol, RestartPolicy, RuleAction, ScaleTarget, SecretRef, ServiceSpec, VolumeMount,
    ZonePolicy,
};

use super::compile::{Checked, Compiler, Reported};
use super::diagnostic::Diagnostic;
use super::span::Span;
use super::syntax::{Arg, ArgKind, Statement};
use super::token::Op;

impl Compiler<'_> {
    pub(super) fn service_field(
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
                        "progress_deadline" => {
                            spec.update.progress_deadline = this.duration(field, 0)?;
                        }
                        "min_ready" => spec.update.min_ready = this.duration(field, 0)?,
                        "failure_threshold" => {
                            spec.update.failure_threshold =
                                this.count(field, 0, "failure_threshold")?;
                        }
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
                self.volume_refs
                    .push((volume.clone(), span, spec.name.clone()));
                spec.volumes.push(VolumeMount { volume, path });
            }
            "stateful" => spec.stateful = true,
            _ => {}
        }
        Ok(())
    }

    pub(super) fn expose(&mut self, spec: &mut ServiceSpec, st: &Statement) -> Checked<()> {
        let external = st.args.first().and_then(|a| a.kind.text()) == Some("external");
        let first = usize::from(external);
        let port = self.port(st, first)?;
        let protocol = match st.args.get(first + 1).and_then(|a| a.kind.text()) {
            Some("tcp") => Protocol::Tcp,
            _ => Protocol::Http,
        };
        // `static`: the instance needs this very port on its host.
        let fixed = st.args.len() > first + 1
            && st.args.last().and_then(|a| a.kind.text()) == Some("static");
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
            fixed,
        });
        Ok(())
    }

    pub(super) fn probe(&mut self, st: &Statement) -> Checked<Probe> {
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

    pub(super) fn placement(&mut self, spec: &mut ServiceSpec, st: &Statement) -> Checked<()> {
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

    pub(super) fn horizontal(&mut self, st: &Statement) -> Checked<HorizontalScale> {
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

    pub(super) fn target(&mut self, st: &Statement) -> Checked<ScaleTarget> {
        let (metric, metric_span) = self.text(st, 0, "a metric")?;
        // Measured: cpu and memory. Pushed by the platform: a name with a dot, so that a typo
        // of a measured one is caught here rather than waited for forever.
        if !matches!(metric.as_str(), "cpu" | "memory") && !metric.contains('.') {
            return Err(self.error(
                "cca::unknown-metric",
                metric_span,
                format!("unknown metric `{metric}`"),
                "`cpu` and `memory` are measured; a metric your platform pushes is named with a \
                 dot, such as `payments.pending`",
            ));
        }
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

    pub(super) fn config(&mut self, spec: &mut ServiceSpec, st: &Statement) -> Checked<()> {
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

    pub(super) fn init(&mut self, st: &Statement) -> Checked<InitStep> {
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

    pub(super) fn rule(&mut self, st: &Statement) -> Checked<NetworkRule> {
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
}
