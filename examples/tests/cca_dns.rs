//! Service discovery as a user meets it: `cca server --dns`, one `cca agent` running real
//! processes, and `dig` asking for `web.service.cca` while instances become ready and go.
//!
//! Needs `dig` (Debian `dnsutils`) and `python3` (the workload serves HTTP): without them the
//! test fails under CI and says it was skipped when run by hand.

mod processes;

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use processes::{
    Children, Workloads, admin_token, apply, enrollment_token, free_port, has_tool, start_agent,
    start_server, unique, wait_for,
};

/// `dig @server NAME TYPE` (`+short` answers, or the whole reply with `full`).
fn dig(server: SocketAddr, name: &str, kind: &str, full: bool) -> String {
    let out = Command::new("dig")
        .arg(format!("@{}", server.ip()))
        .args(["-p", &server.port().to_string(), name, kind])
        .args(if full {
            ["+noall", "+comments"]
        } else {
            ["+short", "+tries=1"]
        })
        .output()
        .expect("dig runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn service(marker: &str, instances: usize) -> String {
    format!(
        "service web {{\n    image busybox\n    command \"sh -c 'exec python3 -m http.server $PORT --bind 127.0.0.1 --directory /tmp/{marker}'\"\n    instances {instances}\n    expose 8080 http\n    readiness {{\n        tcp\n        every 1s\n    }}\n    resources {{\n        cpu 100m\n        memory 32Mi\n    }}\n}}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dig_finds_the_ready_instances_and_follows_them() {
    const TEST: &str = "dig_finds_the_ready_instances_and_follows_them";
    if !has_tool(TEST, "dig") || !has_tool(TEST, "python3") {
        return;
    }
    let tempdir = tempfile::tempdir().expect("tempdir");
    let dir = tempdir.path().to_owned();
    let marker = unique("cca-dns-marker");
    let _workloads = Workloads(marker.clone());
    let mut children = Children::default();

    let dns: SocketAddr = format!("127.0.0.1:{}", free_port())
        .parse()
        .expect("address");
    let flags = ["--dns".to_owned(), dns.to_string()];
    let (server, url) = start_server(&dir, "127.0.0.1:0", &flags, 1);
    children.0.push(server);
    let admin = admin_token(&dir);
    let token = enrollment_token(&url, &admin);
    children.0.push(start_agent(
        &dir,
        &url,
        "a",
        &token,
        &["--cpu", "4", "--memory", "4Gi", "--stop-grace", "1s"],
    ));

    // Before any service: NXDOMAIN.
    let reply = dig(dns, "web.service.cca", "A", true);
    assert!(reply.contains("status: NXDOMAIN"), "{reply}");

    apply(&dir, &url, &admin, &service(&marker, 2), &[]);
    let (ports, took) = wait_for(
        "two SRV records for web",
        Duration::from_secs(30),
        async || {
            let answer = dig(dns, "web.service.cca", "SRV", false);
            let ports: Vec<String> = answer
                .lines()
                .filter_map(|l| l.split_whitespace().nth(2).map(str::to_owned))
                .collect();
            (ports.len() == 2).then_some(ports)
        },
    )
    .await;
    eprintln!("web answered at ports {ports:?} after {took:?}");
    // Two instances of one declared port on one host: the scheduler gave each its own host port
    // of the node's range (20000-29999 by default).
    assert_ne!(ports[0], ports[1], "{ports:?}");
    assert!(
        ports
            .iter()
            .all(|p| p.parse::<u16>().is_ok_and(|p| (20000..=29999).contains(&p))),
        "{ports:?}"
    );
    assert_eq!(dig(dns, "web.service.cca", "A", false).trim(), "127.0.0.1");
    // What DNS names is reachable: an HTTP request to each port answers.
    for port in &ports {
        let reached = std::net::TcpStream::connect(format!("127.0.0.1:{port}"));
        assert!(reached.is_ok(), "port {port}: {reached:?}");
    }

    // Scaled to one: the instance that stops is no longer answered.
    apply(&dir, &url, &admin, &service(&marker, 1), &[]);
    wait_for(
        "one SRV record for web",
        Duration::from_secs(30),
        async || {
            let answer = dig(dns, "web.service.cca", "SRV", false);
            (answer.lines().count() == 1).then_some(())
        },
    )
    .await;
    let reply = dig(dns, "api.service.cca", "A", true);
    assert!(reply.contains("status: NXDOMAIN"), "{reply}");
}
