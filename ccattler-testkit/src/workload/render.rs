//! A workload's services as `.cca` text, one field per line, as a person writes it.

use std::fmt::Write;

use super::{CheckDraw, RuleDraw, ServiceDraw, ZoneDraw};

/// The image of a service's version: `example/{name}:{version}`, with `-broken` for a version
/// that never becomes ready (its probes fail on the simulator).
pub(super) fn image(service: &ServiceDraw) -> String {
    let slug: String = service
        .name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    let broken = if service.broken { "-broken" } else { "" };
    format!("example/{slug}:{}{broken}", service.version)
}

/// One document: the services, the volumes they mount, and the network rules whose services
/// it declares.
pub(super) fn document(services: &[ServiceDraw], network: &[RuleDraw]) -> String {
    let mut out = String::new();
    let mut volumes: Vec<&str> = Vec::new();
    for service in services {
        out.push_str(&self::service(service));
        out.push('\n');
        volumes.extend(service.volumes.iter().map(String::as_str));
    }
    volumes.sort_unstable();
    volumes.dedup();
    for (i, volume) in volumes.iter().enumerate() {
        let persistent = i % 2 == 0;
        let _ = writeln!(
            out,
            "volume {volume} {{\n    size 1Gi\n    persistent {persistent}\n}}\n"
        );
    }
    let declared = |name: &str| services.iter().any(|s| s.name == name);
    let rules: Vec<String> = network
        .iter()
        .filter(|rule| declared(&rule.from) && declared(&rule.to))
        .map(|rule| {
            let action = if rule.allow { "allow" } else { "deny" };
            let port = rule.port.map(|p| format!(" port {p}")).unwrap_or_default();
            format!("    {action} {} -> {}{port}\n", rule.from, rule.to)
        })
        .collect();
    if !rules.is_empty() {
        out.push_str("network {\n");
        out.extend(rules);
        out.push_str("}\n");
    }
    out
}

fn service(s: &ServiceDraw) -> String {
    let mut out = format!("service {} {{\n", s.name);
    let mut line = |text: String| {
        out.push_str("    ");
        out.push_str(&text);
        out.push('\n');
    };
    line(format!("image \"{}\"", image(s)));
    if let Some(command) = &s.command {
        line(format!("command \"{command}\""));
    }
    line(format!("instances {}", s.instances));
    if let Some(restart) = s.restart {
        line(format!("restart {restart}"));
    }
    let fixed = if s.static_ports { " static" } else { "" };
    for (port, protocol) in &s.expose {
        line(format!("expose {port} {protocol}{fixed}"));
    }
    line(format!(
        "resources {{\n        cpu {}m\n        memory {}Mi\n    }}",
        s.cpu_millis, s.memory_mib
    ));
    for probe in &s.probes {
        let check = match &probe.check {
            CheckDraw::Http(path) => format!("http {path}"),
            CheckDraw::Tcp => "tcp".to_owned(),
            CheckDraw::Exec(command) => format!("exec \"{command}\""),
        };
        let mut block = format!(
            "{} {{\n        {check}\n        every {}s\n        timeout 1s",
            probe.kind, probe.every_secs
        );
        if let Some(n) = probe.failure_threshold {
            let _ = write!(block, "\n        failure_threshold {n}");
        }
        block.push_str("\n    }");
        line(block);
    }
    let mut placement = Vec::new();
    match &s.zone {
        Some(ZoneDraw::Spread) => placement.push("zone spread".to_owned()),
        Some(ZoneDraw::In(zone)) => placement.push(format!("zone {zone}")),
        None => {}
    }
    placement.extend(s.require.iter().map(|(k, v)| format!("require {k} = {v}")));
    placement.extend(s.prefer.iter().map(|(k, v)| format!("prefer {k} = {v}")));
    if !placement.is_empty() {
        line(format!(
            "placement {{\n        {}\n    }}",
            placement.join("\n        ")
        ));
    }
    if let Some(update) = s.update {
        let deadline = update
            .progress_deadline_secs
            .map_or_else(String::new, |secs| {
                format!("\n        progress_deadline {secs}s")
            });
        line(format!(
            "update {{\n        max_unavailable {}\n        max_extra {}{deadline}\n    }}",
            update.max_unavailable, update.max_extra
        ));
    }
    if let Some((min, max)) = s.scale {
        // A use target needs what it is a percentage of; without one, a pushed metric.
        let target = if s.cpu_millis > 0 {
            "cpu = 60"
        } else if s.memory_mib > 0 {
            "memory = 60%"
        } else {
            "queue.depth = 10"
        };
        line(format!(
            "scale {{\n        horizontal {{\n            min {min}\n            max {max}\n            target {target}\n        }}\n    }}"
        ));
    }
    if !s.env.is_empty() || s.file {
        let mut config = String::from("config {");
        for (k, v) in &s.env {
            let _ = write!(config, "\n        env {k} \"{v}\"");
        }
        if s.file {
            config.push_str(
                "\n        file /etc/app.conf \"\"\"\nlisten = 0.0.0.0\nworkers = 2\n\"\"\"",
            );
        }
        config.push_str("\n    }");
        line(config);
    }
    for (name, mount) in &s.secrets {
        match mount {
            Some(path) => line(format!("secret {name} {path}")),
            None => line(format!("secret {name}")),
        }
    }
    // A broken version of a service with init steps fails its last one (and is never ready
    // either: its image's probes fail).
    for (i, command) in s.init.iter().enumerate() {
        let command = if s.broken && i + 1 == s.init.len() {
            "exit 3"
        } else {
            command.as_str()
        };
        line(format!(
            "init {{\n        exec \"{command}\"\n        timeout 5s\n        retry 2\n    }}"
        ));
    }
    for volume in &s.volumes {
        line(format!("volume {volume} /data/{volume}"));
    }
    if s.stateful {
        line("stateful".to_owned());
    }
    out.push_str("}\n");
    out
}
