//! The compiler: every construct lands in the right record, the example document
//! (`tests/data/example.cca`, which uses every construct of the language) compiles to
//! the expected facts, each semantic error class renders as a snapshot, and apply writes a file
//! all at once or not at all.

use std::time::Duration;

use ccattler_controllers::apply::{ApplyError, ApplyOptions, apply_file};
use ccattler_controllers::lang::{self, Compiled, SourceFile};
use ccattler_core::schema::{
    Cpu, Memory, ProbeCheck, Protocol, RestartPolicy, RuleAction, ServiceSpec, ZonePolicy,
};
use ccattler_core::{FactStore, Revision};
use ccattler_store::MemoryStore;

fn compile(text: &str) -> Compiled {
    match lang::check(&SourceFile::new("app.cca", text)) {
        Ok(compiled) => compiled,
        Err(diags) => panic!("expected no errors, got:\n{diags}"),
    }
}

fn service<'a>(compiled: &'a Compiled, name: &str) -> &'a ServiceSpec {
    compiled
        .services
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no service {name}"))
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

const EVERYTHING: &str = r#"
service team/web {
    image "registry.example/app:2"
    command "/bin/server --port 8080 'quoted arg'"
    instances 4
    restart on_failure
    expose 8080 http
    expose external 8443 tcp
    resources {
        cpu 1.5
        memory 1Gi
    }
    startup {
        exec "test -f /ready"
        every 1s
    }
    liveness {
        tcp
        port 8080
        timeout 3s
        failure_threshold 5
    }
    readiness {
        http /health/ready
        initial_delay 250ms
        success_threshold 2
    }
    placement {
        architecture arm64
        zone spread
        require disk = ssd
        prefer tier = gold
        accept dedicated
    }
    update {
        max_unavailable 1
        max_extra 2
    }
    scale {
        horizontal {
            min 2
            max 10
            target cpu = 60%
            target payments.pending = 100
            stabilization {
                scale_up 30s
                scale_down 10m
            }
        }
    }
    config {
        env LOG_LEVEL debug
        env MODE = "fast lane"
        file /etc/app.conf """
listen 8080
"""
    }
    secret api-key /run/secrets/api
    secret db-password
    init {
        exec "migrate up"
        timeout 2m
        retry 3
    }
    init {
        exec "warm-cache"
    }
    volume data /var/lib/app
    stateful
}

service team/db {
    image postgres:16
    health {
        tcp
    }
    placement {
        zone eu-1
    }
}

volume data {
    size 20Gi
    persistent true
}

network {
    allow team/web -> team/db port 5432
    deny team/db -> team/web
}
"#;

#[test]
fn a_static_port_is_fixed_on_the_host_and_the_others_are_not() {
    let compiled = compile(
        "service edge {\n    image nginx\n    expose 80 static\n    expose external 443 tcp static\n    expose 9000 http\n}\n",
    );
    let edge = service(&compiled, "edge");
    let fixed: Vec<(u16, bool)> = edge.expose.iter().map(|e| (e.port, e.fixed)).collect();
    assert_eq!(fixed, [(80, true), (443, true), (9000, false)]);
    assert!(edge.expose[1].external && edge.expose[1].protocol == Protocol::Tcp);
}

#[test]
fn every_construct_lands_in_its_record() {
    let compiled = compile(EVERYTHING);
    let web = service(&compiled, "team/web");
    assert_eq!(web.image, "registry.example/app:2");
    assert_eq!(web.command, ["/bin/server", "--port", "8080", "quoted arg"]);
    assert_eq!(web.instances, 4);
    assert_eq!(web.restart, RestartPolicy::OnFailure);
    assert_eq!(web.expose.len(), 2);
    assert!(web.expose[1].external && web.expose[1].protocol == Protocol::Tcp);
    assert_eq!(web.resources.cpu, Cpu::from_millis(1500));
    assert_eq!(web.resources.memory, Memory::from_bytes(1 << 30));
    let startup = web.startup.as_ref().expect("startup probe");
    assert_eq!(
        startup.check,
        ProbeCheck::Exec {
            command: "test -f /ready".into()
        }
    );
    assert_eq!(startup.every, Duration::from_secs(1));
    let liveness = web.liveness.as_ref().expect("liveness probe");
    assert_eq!((liveness.port, liveness.failure_threshold), (Some(8080), 5));
    let readiness = web.readiness.as_ref().expect("readiness probe");
    assert_eq!(
        readiness.check,
        ProbeCheck::Http {
            path: "/health/ready".into()
        }
    );
    assert_eq!(readiness.initial_delay, Duration::from_millis(250));
    assert_eq!(web.placement.architecture.as_deref(), Some("arm64"));
    assert_eq!(web.placement.zone, Some(ZonePolicy::Spread));
    assert_eq!(web.placement.require["disk"], "ssd");
    assert_eq!(web.placement.prefer["tier"], "gold");
    assert_eq!(web.placement.accept, ["dedicated"]);
    assert_eq!((web.update.max_unavailable, web.update.max_extra), (1, 2));
    let scale = web.scale.as_ref().expect("scale");
    assert_eq!((scale.min, scale.max, scale.targets.len()), (2, 10, 2));
    assert!(scale.targets[0].percent && scale.targets[0].value == 60);
    assert_eq!(scale.targets[1].metric, "payments.pending");
    assert_eq!(scale.scale_down_stabilization, Duration::from_secs(600));
    assert_eq!(web.env["MODE"], "fast lane");
    assert_eq!(web.env["LOG_LEVEL"], "debug");
    assert_eq!(web.files[0].path, "/etc/app.conf");
    assert!(web.files[0].content.contains("listen 8080"));
    assert_eq!(web.secrets.len(), 2);
    assert_eq!(web.secrets[0].mount.as_deref(), Some("/run/secrets/api"));
    assert_eq!(web.init.len(), 2);
    assert_eq!(
        (web.init[0].timeout, web.init[0].retry),
        (Duration::from_secs(120), 3)
    );
    assert_eq!(web.volumes[0].volume, "data");
    assert!(web.stateful);

    let db = service(&compiled, "team/db");
    assert_eq!(db.instances, 1, "instances default to one");
    assert!(db.liveness.is_some(), "health is the liveness probe");
    assert_eq!(db.placement.zone, Some(ZonePolicy::Only("eu-1".into())));
    assert_eq!(compiled.volumes[0].size, Memory::from_bytes(20 << 30));
    let rules = &compiled.network.as_ref().expect("network").rules;
    assert_eq!(rules[0].action, RuleAction::Allow);
    assert_eq!(
        (rules[0].to.as_str(), rules[0].port),
        ("team/db", Some(5432))
    );
    assert_eq!(rules[1].action, RuleAction::Deny);
}

#[test]
fn the_language_md_example_compiles_to_these_facts() {
    let text = include_str!("data/example.cca");
    let facts = compile(text).to_facts();
    let rendered: Vec<String> = facts
        .iter()
        .map(|(key, value)| {
            let json: serde_json::Value = serde_json::from_slice(value).expect("JSON");
            format!(
                "{key} = {}",
                serde_json::to_string_pretty(&json).expect("JSON")
            )
        })
        .collect();
    insta::assert_snapshot!(rendered.join("\n"));
}

/// Renders the diagnostics of `text`, checking their classes.
fn render(codes: &[&str], text: &str) -> String {
    let diags = lang::check(&SourceFile::new("app.cca", text)).expect_err("expected errors");
    assert_eq!(diags.codes(), codes, "unexpected classes in:\n{diags}");
    diags.to_string()
}

macro_rules! snapshot_error {
    ($name:ident, [$($code:literal),+], $text:expr) => {
        #[test]
        fn $name() {
            insta::assert_snapshot!(render(&[$($code),+], $text));
        }
    };
}

snapshot_error!(
    duplicate_service,
    ["cca::duplicate-service"],
    "service web {\n    image a\n}\n\nservice web {\n    image b\n}\n"
);
snapshot_error!(
    same_instance_ids,
    ["cca::same-instance-ids"],
    "service team/web {\n    image a\n}\n\nservice team.web {\n    image b\n}\n"
);
snapshot_error!(
    an_update_that_can_never_move,
    ["cca::stuck-update"],
    "service web {\n    image a\n    update {\n        max_unavailable 0\n        max_extra 0\n    }\n}\n"
);
snapshot_error!(
    a_stateful_update_without_an_unavailable_slot,
    ["cca::stuck-update"],
    "service db {\n    image postgres:16\n    update {\n        max_unavailable 0\n    }\n    stateful\n}\n"
);
snapshot_error!(
    duplicate_volume,
    ["cca::duplicate-volume"],
    "volume data {\n    size 1Gi\n}\n\nvolume data {\n    size 2Gi\n}\n"
);
snapshot_error!(
    undeclared_volume,
    ["cca::undeclared-volume"],
    "service db {\n    image postgres:16\n    volume pgdata /var/lib/data\n}\n\nvolume other {\n    size 1Gi\n}\n"
);
snapshot_error!(
    a_volume_without_a_size,
    ["cca::volume-size", "cca::volume-size"],
    "volume data {\n    persistent true\n}\n\nvolume cache {\n    size 0\n}\n"
);
snapshot_error!(
    a_volume_mounted_by_two_services,
    ["cca::shared-volume"],
    "service a {\n    image x\n    volume data /data\n}\n\nservice b {\n    image x\n    volume data /data\n}\n\nvolume data {\n    size 1Gi\n}\n"
);
snapshot_error!(
    a_volume_mounted_by_several_instances_that_are_not_stateful,
    ["cca::volume-instances", "cca::volume-instances"],
    "service web {\n    image x\n    instances 3\n    volume data /data\n}\n\nservice api {\n    image x\n    scale {\n        horizontal {\n            min 1\n            max 4\n        }\n    }\n    volume logs /logs\n}\n\nvolume data {\n    size 1Gi\n}\n\nvolume logs {\n    size 1Gi\n}\n"
);
snapshot_error!(
    a_volume_service_that_could_never_be_updated,
    ["cca::stuck-update"],
    "service db {\n    image x\n    volume data /data\n    update {\n        max_unavailable 0\n    }\n}\n\nvolume data {\n    size 1Gi\n    persistent true\n}\n"
);
snapshot_error!(
    undeclared_service_in_network,
    ["cca::undeclared-service"],
    "service web {\n    image nginx\n}\n\nnetwork {\n    allow web -> db port 5432\n}\n"
);
snapshot_error!(
    port_out_of_range,
    ["cca::port-range", "cca::port-range"],
    "service web {\n    image nginx\n    expose 0\n    expose 70000 tcp\n}\n"
);
snapshot_error!(
    negative_count,
    ["cca::negative"],
    "service web {\n    image nginx\n    instances -2\n}\n"
);
snapshot_error!(
    non_integer_count,
    ["cca::not-whole"],
    "service web {\n    image nginx\n    instances 2.5\n}\n"
);
snapshot_error!(
    max_below_min,
    ["cca::max-below-min"],
    "service web {\n    image nginx\n    scale {\n        horizontal {\n            min 5\n            max 2\n        }\n    }\n}\n"
);
snapshot_error!(
    unknown_metric,
    ["cca::unknown-metric"],
    "service web {\n    image nginx\n    scale {\n        horizontal {\n            min 1\n            max 4\n            target cpuu = 60\n        }\n    }\n}\n"
);
snapshot_error!(
    target_without_request,
    ["cca::target-without-request"],
    "service web {\n    image nginx\n    scale {\n        horizontal {\n            min 1\n            max 4\n            target memory = 60%\n        }\n    }\n}\n"
);
snapshot_error!(
    bad_units,
    ["cca::bad-unit", "cca::bad-unit", "cca::bad-unit"],
    "service web {\n    image nginx\n    resources {\n        cpu 500x\n        memory 1e99Gi\n    }\n    readiness {\n        tcp\n        every 10\n    }\n}\n"
);
snapshot_error!(
    missing_image,
    ["cca::missing-image"],
    "service web {\n    instances 2\n}\n"
);
snapshot_error!(
    health_and_liveness,
    ["cca::health-and-liveness"],
    "service web {\n    image nginx\n    health {\n        tcp\n    }\n    liveness {\n        tcp\n    }\n}\n"
);
snapshot_error!(
    probe_without_check,
    ["cca::probe-without-check"],
    "service web {\n    image nginx\n    readiness {\n        every 5s\n    }\n}\n"
);

#[test]
fn syntax_and_meaning_errors_are_reported_together() {
    let text = "service web {\n    image nginx;\n    instances -1\n    expose 99999\n}\n";
    let diags = lang::check(&SourceFile::new("app.cca", text)).expect_err("errors");
    assert_eq!(
        diags.codes(),
        ["cca::stray-semicolon", "cca::negative", "cca::port-range"]
    );
}

#[test]
fn apply_writes_a_file_at_once_and_twice_changes_nothing() {
    let store = MemoryStore::new();
    let file = SourceFile::new("example.cca", include_str!("data/example.cca"));
    let first = block_on(apply_file(&store, &file, ApplyOptions::default())).expect("apply");
    assert_eq!(
        first.plan.added.len(),
        4,
        "two services, a volume and the network policy"
    );
    assert_eq!(
        first.revision,
        Some(Revision(1)),
        "one transaction, one revision"
    );
    let again = block_on(apply_file(&store, &file, ApplyOptions::default())).expect("apply");
    assert_eq!(again.revision, None);
    assert_eq!(block_on(store.revision()).expect("revision"), Revision(1));
}

#[test]
fn a_file_with_errors_applies_nothing() {
    let store = MemoryStore::new();
    let file = SourceFile::new(
        "bad.cca",
        "service web {\n    image nginx\n}\n\nservice api {\n    image x\n    expose 0\n}\n",
    );
    let err = block_on(apply_file(&store, &file, ApplyOptions::default())).expect_err("invalid");
    let ApplyError::Invalid(diags) = err else {
        panic!("expected diagnostics, got {err}");
    };
    assert_eq!(diags.codes(), ["cca::port-range"]);
    assert_eq!(
        block_on(store.revision()).expect("revision"),
        Revision::ZERO
    );
}
