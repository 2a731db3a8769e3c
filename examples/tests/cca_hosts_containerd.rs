//! The reference cluster across hosts that are real network namespaces (see `hosts`), with
//! containerd: `cca server --dns` on one host and `cca agent --runtime containerd` on two
//! others, each container in a network namespace of its own through CNI. Two containers of one
//! declared port share a host at two host ports; each host reaches the other's containers at
//! their endpoints; `allow web -> db` lets the host where `web` runs reach `db`'s container and
//! refuses the server's host and an outside address (the firewall judges the connections CNI's
//! portmap forwards to the container).
//!
//! Needs root, `ip`, `nft`, `curl`, `dig`, the CNI plugins and the private containerd of
//! `scripts/containerd-up`: without them the test fails under CI and says it was skipped when
//! run by hand.
#![cfg(feature = "containerd")]

mod containerd_ns;
mod hosts;
mod processes;

use std::path::Path;
use std::time::Duration;

use ccattler_runtime::cni::CniConfig;
use ccattler_runtime::containerd::test_image::{self, DEBIAN_BUSYBOX, write_busybox_archive};
use ccattler_runtime::containerd::{ContainerNetwork, ContainerdConfig, ContainerdRuntime};
use containerd_ns::Namespace;
use hosts::Hosts;
use processes::{Children, admin_token, apply, has_tool, wait_for};

const CCA: &str = env!("CARGO_BIN_EXE_cca");
const TEST: &str = "containers_on_hosts_are_reached_and_guarded";
const IMAGE: &str = "local/ccattler-busybox:1";
/// The containerd namespace of each agent's host.
const NAMESPACES: [&str; 2] = ["ccattler-hosts-h1", "ccattler-hosts-h2"];

/// busybox's httpd on `$PORT` (the declared port, in the container's own network).
fn service(name: &str, instances: u32, role: &str) -> String {
    format!(
        "service {name} {{\n    image {IMAGE}\n    command \"sh -c 'mkdir -p /tmp/w && echo {name} > /tmp/w/index.html && exec httpd -f -p $PORT -h /tmp/w'\"\n    instances {instances}\n    expose 8080 http\n    readiness {{\n        tcp\n        every 1s\n    }}\n    placement {{\n        require role = {role}\n    }}\n    resources {{\n        cpu 100m\n        memory 16Mi\n    }}\n}}\n\n"
    )
}

/// The `host:port` of each ready endpoint of `service`, as host `from` resolves them.
fn endpoints(hosts: &Hosts, from: usize, server: &str, service: &str) -> Vec<String> {
    let name = format!("{service}.service.cca");
    let mut found: Vec<String> = hosts
        .srv(from, server, &name)
        .into_iter()
        .map(|(port, target)| format!("{}:{port}", hosts.resolve(from, server, &target)))
        .collect();
    found.sort();
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containers_on_hosts_are_reached_and_guarded() {
    if !["curl", "dig", "nft", "iptables"]
        .iter()
        .all(|tool| has_tool(TEST, tool))
    {
        return;
    }
    if !Path::new("/usr/lib/cni/portmap").exists() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{TEST} needs the CNI plugins (scripts/test installs containernetworking-plugins)"
        );
        eprintln!("SKIPPED {TEST}: the CNI plugins are not installed");
        return;
    }
    let socket = test_image::test_socket();
    let tempdir = tempfile::tempdir().expect("tempdir");
    let dir = tempdir.path().to_owned();
    // The namespaces are emptied (containers and their networks) after the agents stop.
    let mut namespaces = Vec::new();
    for (i, name) in NAMESPACES.into_iter().enumerate() {
        let cni = CniConfig::default().state_dir(dir.join(format!("h{}", i + 1)).join("cni"));
        let config = ContainerdConfig::default()
            .state_dir(dir.join("test-runtime"))
            .network(ContainerNetwork::Cni(cni));
        let containerd = match ContainerdRuntime::connect(&socket, name, config.clone()).await {
            Ok(containerd) => containerd,
            Err(err) => {
                assert!(
                    std::env::var("CI").as_deref() != Ok("true"),
                    "{TEST} needs containerd (run scripts/containerd-up): {err}"
                );
                eprintln!("SKIPPED {TEST}: containerd does not answer: {err}");
                return;
            }
        };
        let namespace = Namespace {
            socket: socket.clone(),
            name,
            config,
        };
        namespace.empty();
        let archive = dir.join("busybox.tar");
        write_busybox_archive(Path::new(DEBIAN_BUSYBOX), IMAGE, &archive).expect("the image");
        let imported = containerd.import_oci_archive(&archive, None).await;
        assert_eq!(imported.ok().as_deref(), Some(IMAGE));
        namespaces.push(namespace);
    }
    let Some(hosts) = Hosts::new(TEST, 3) else {
        return;
    };
    let mut children = Children::default();
    let (child, url, server) = hosts.start_server(CCA, &dir);
    children.0.push(child);
    let admin = admin_token(&dir);
    let socket_arg = socket.to_string_lossy().into_owned();
    for (i, role) in [(1, "db"), (2, "web")] {
        let labels = format!("role={role}");
        let agent_flags = [
            "--runtime",
            "containerd",
            "--containerd-socket",
            &socket_arg,
            "--containerd-namespace",
            NAMESPACES[i - 1],
            "--pull-policy",
            "never",
            "--cpu",
            "4",
            "--memory",
            "4Gi",
            "--stop-grace",
            "1s",
            "--labels",
            &labels,
        ];
        let cluster = (dir.as_path(), url.as_str(), admin.as_str());
        let command = hosts.command_net_only(i, CCA);
        children
            .0
            .push(hosts.start_agent(command, i, cluster, &agent_flags));
    }

    // Two containers of db on host 1, two of web on host 2: one declared port, two host ports.
    let document = format!("{}{}", service("db", 2, "db"), service("web", 2, "web"));
    apply(&dir, &url, &admin, &document, &[]);
    let (db, took) = wait_for("both services ready", Duration::from_secs(60), async || {
        let db = endpoints(&hosts, 2, &server, "db");
        let web = endpoints(&hosts, 1, &server, "web");
        (db.len() == 2 && web.len() == 2).then_some(db)
    })
    .await;
    eprintln!("db at {db:?} after {took:?}");
    let host_1 = hosts.hosts[1].address.to_string();
    assert!(
        db.iter().all(|e| e.starts_with(&format!("{host_1}:"))),
        "{db:?}"
    );
    assert_ne!(db[0], db[1], "two host ports");
    for endpoint in &db {
        assert_ne!(
            hosts.http(2, endpoint),
            "000",
            "host 2 cannot reach {endpoint}"
        );
    }
    for endpoint in endpoints(&hosts, 1, &server, "web") {
        assert_ne!(
            hosts.http(1, &endpoint),
            "000",
            "host 1 cannot reach {endpoint}"
        );
    }
    assert_ne!(
        hosts.http(0, &db[0]),
        "000",
        "before the policy, host 0 reaches db"
    );

    // The policy: web may call db; the server's host and an outside address may not.
    let guarded = format!("{document}network {{\n    allow web -> db\n}}\n");
    apply(&dir, &url, &admin, &guarded, &[]);
    let (_, took) = wait_for(
        "host 0 refused, host 2 let through",
        Duration::from_secs(30),
        async || (hosts.http(0, &db[0]) == "000" && hosts.http(2, &db[0]) != "000").then_some(()),
    )
    .await;
    eprintln!("rules in force after {took:?}");
    assert_eq!(hosts.http(0, &db[1]), "000");
    assert_ne!(hosts.http(2, &db[1]), "000");
    assert_eq!(hosts.http_outside(&db[0]), "000");
    drop(children);
    drop(namespaces);
}
