//! `cca agent --runtime containerd` end to end, as separate processes: `cca server` (memory
//! store) and one agent that runs its instances as containerd containers. Apply, wait for the
//! containers through the API, stop and restart the agent (its containers are adopted, not
//! restarted), then scale down (the surplus container is stopped and removed).
//!
//! Needs the private containerd of `scripts/containerd-up` (root): without it the test fails
//! under CI and says it was skipped when run by hand.
#![cfg(feature = "containerd")]

mod containerd_ns;
mod processes;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use ccattler_core::{InstanceState, Runtime};

use ccattler_runtime::containerd::test_image::{self, DEBIAN_BUSYBOX, write_busybox_archive};
use ccattler_runtime::containerd::{ContainerdConfig, ContainerdRuntime};
use containerd_ns::Namespace;
use processes::{
    Children, admin_token, api_client, apply, enrollment_token, read_log, running, start_agent,
    start_server, terminate, wait_for,
};

const CHECK: &str = "cca_agent_runs_adopts_and_removes_containerd_containers";
/// The namespace of this test alone; emptied before and after it.
const NAMESPACE: &str = "ccattler-e2e";
const IMAGE: &str = "local/ccattler-busybox:1";

fn service(instances: usize) -> String {
    format!(
        "service sleeper {{\n    image {IMAGE}\n    command \"sh -c 'while true; do sleep 1; done'\"\n    instances {instances}\n    resources {{\n        cpu 100m\n        memory 16Mi\n    }}\n}}\n"
    )
}

fn runtime_config(dir: &Path) -> ContainerdConfig {
    ContainerdConfig::default().state_dir(dir.join("test-runtime"))
}

/// The instances containerd runs in the namespace: `{id: state}`.
async fn in_containerd(containerd: &ContainerdRuntime) -> BTreeMap<String, InstanceState> {
    let observed = containerd.observe().await.expect("observe containerd");
    observed.into_iter().map(|o| (o.id, o.state)).collect()
}

/// The task pids containerd reports (`ctr tasks ls`): `{id: pid}`.
fn task_pids(socket: &Path) -> BTreeMap<String, String> {
    let out = Command::new("ctr")
        .arg("--address")
        .arg(socket)
        .args(["--namespace", NAMESPACE, "tasks", "ls"])
        .output()
        .expect("ctr runs");
    assert!(out.status.success(), "ctr tasks ls: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .skip(1)
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            Some((fields.next()?.to_owned(), fields.next()?.to_owned()))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cca_agent_runs_adopts_and_removes_containerd_containers() {
    let socket = test_image::test_socket();
    let tempdir = tempfile::tempdir().expect("tempdir");
    let dir = tempdir.path().to_owned();
    let containerd =
        match ContainerdRuntime::connect(&socket, NAMESPACE, runtime_config(&dir)).await {
            Ok(containerd) => containerd,
            Err(err) => {
                let why = format!("containerd does not answer at {}: {err}", socket.display());
                assert!(
                    std::env::var("CI").as_deref() != Ok("true"),
                    "{CHECK} needs containerd and CI=true, but {why}; run scripts/containerd-up"
                );
                eprintln!("SKIPPED {CHECK}: {why} (run scripts/containerd-up)");
                return;
            }
        };
    let namespace = Namespace {
        socket: socket.clone(),
        name: NAMESPACE,
        config: runtime_config(&dir),
    };
    namespace.empty();
    let archive = dir.join("busybox.tar");
    write_busybox_archive(Path::new(DEBIAN_BUSYBOX), IMAGE, &archive)
        .unwrap_or_else(|e| panic!("cannot build the busybox image from {DEBIAN_BUSYBOX}: {e}"));
    let imported = containerd.import_oci_archive(&archive, None).await;
    assert_eq!(imported.ok().as_deref(), Some(IMAGE));

    // Dropped in reverse order: the processes first, then the containers they left.
    let _namespace = namespace;
    let mut children = Children::default();
    let (server, url) = start_server(&dir, "127.0.0.1:0", &["--store", "memory"], 1);
    children.0.push(server);
    let admin = admin_token(&dir);
    let client = api_client(&url, Some(&admin));
    let socket_arg = socket.to_string_lossy().into_owned();
    let flags = [
        "--runtime",
        "containerd",
        "--containerd-socket",
        &socket_arg,
        "--containerd-namespace",
        NAMESPACE,
        "--cpu",
        "2",
        "--memory",
        "1Gi",
        "--stop-grace",
        "1s",
        "--lease-ttl",
        "4s",
    ];
    // Every change from the start, for the messages of failed checks.
    let history = std::fs::File::create(dir.join("history.log")).expect("log");
    children.0.push(
        processes::cca()
            .args(["watch", "--after", "0", "--server", &url, "--token", &admin])
            .stdout(history)
            .spawn()
            .expect("watch"),
    );
    let token = enrollment_token(&url, &admin);
    children
        .0
        .push(start_agent(&dir, &url, "n1", &token, &flags));

    apply(&dir, &url, &admin, &service(2), &[]);
    let (ids, took) = wait_for(
        "2 containers running on n1",
        Duration::from_secs(60),
        async || {
            let on_n1 = running(&client).await.remove("n1").unwrap_or_default();
            (on_n1.len() == 2).then_some(on_n1)
        },
    )
    .await;
    eprintln!("{CHECK}: 2 containers running after {took:?}");
    let states = in_containerd(&containerd).await;
    assert_eq!(
        states.keys().collect::<Vec<_>>(),
        ids.keys().collect::<Vec<_>>(),
        "containerd runs what the API reports ({states:?}); the agent said: {}\nthe history of the store:\n{}",
        read_log(&dir, "agent-n1.log"),
        read_log(&dir, "history.log")
    );
    assert!(
        states.values().all(|s| *s == InstanceState::Running),
        "{states:?}"
    );
    let pids = task_pids(&socket);
    assert_eq!(pids.len(), 2, "{pids:?}");

    // Stop the agent (as Ctrl-C does): its containers keep running. Restarted with its saved
    // credential, it adopts them: same instances, same tasks.
    terminate(&mut children.0[2]);
    assert_eq!(
        task_pids(&socket),
        pids,
        "containers stopped with the agent"
    );
    let log = std::fs::File::create(dir.join("agent-n1-restarted.log")).expect("log");
    let restarted = processes::cca()
        .args(["agent", "--server", &url, "--node", "n1"])
        .arg("--state-dir")
        .arg(dir.join("n1"))
        .args(flags)
        .env_remove("CCATTLER_NODE_TOKEN")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("cca agent restarts");
    children.0[2] = restarted;
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(
        matches!(children.0[2].try_wait(), Ok(None)),
        "the restarted agent stopped; it said: {}",
        read_log(&dir, "agent-n1-restarted.log")
    );
    assert_eq!(
        running(&client).await.remove("n1").unwrap_or_default(),
        ids,
        "the instances changed across an agent restart; the agent said: {}",
        read_log(&dir, "agent-n1-restarted.log")
    );
    assert_eq!(
        task_pids(&socket),
        pids,
        "containers restarted with the agent"
    );

    // Scale down: one container is stopped and removed from containerd.
    apply(&dir, &url, &admin, &service(1), &[]);
    let (left, took) = wait_for(
        "one container left in containerd",
        Duration::from_secs(30),
        async || {
            let states = in_containerd(&containerd).await;
            (states.len() == 1).then_some(states)
        },
    )
    .await;
    eprintln!("{CHECK}: scaled down to one container after {took:?}");
    assert!(ids.keys().any(|id| left.contains_key(id)), "{left:?}");
    assert_eq!(left.values().next(), Some(&InstanceState::Running));
}
