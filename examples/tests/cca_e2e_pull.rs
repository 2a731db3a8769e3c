//! `cca agent --runtime containerd` pulls an image that exists only in a registry: a private
//! `docker-registry` on loopback, into which the test pushes the busybox test image, named with
//! `--insecure-registry`. The service reaches running; containerd then has the image.
//!
//! Needs the private containerd of `scripts/containerd-up` (root) and Debian's docker-registry:
//! without them the test fails under CI and says it was skipped when run by hand.
#![cfg(feature = "containerd")]

mod containerd_ns;
mod processes;

use std::path::Path;
use std::time::Duration;

use ccattler_runtime::containerd::test_image::{self, DEBIAN_BUSYBOX, TestImage};
use ccattler_runtime::containerd::test_registry::TestRegistry;
use ccattler_runtime::containerd::{ContainerdConfig, ContainerdRuntime, PullPolicy};
use containerd_ns::Namespace;
use processes::{
    Children, admin_token, api_client, apply, enrollment_token, read_log, running, start_agent,
    start_server, wait_for,
};

const CHECK: &str = "cca_agent_pulls_an_image_from_a_registry_and_runs_it";
/// The namespace of this test alone; emptied before and after it.
const NAMESPACE: &str = "ccattler-e2e-pull";

fn skip(why: &str) {
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{CHECK} needs containerd (scripts/containerd-up) and docker-registry under CI, but {why}"
    );
    eprintln!("SKIPPED {CHECK}: {why}");
}

fn runtime_config(dir: &Path) -> ContainerdConfig {
    ContainerdConfig::default()
        .state_dir(dir.join("test-runtime"))
        .pull_policy(PullPolicy::Never)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cca_agent_pulls_an_image_from_a_registry_and_runs_it() {
    let socket = test_image::test_socket();
    let tempdir = tempfile::tempdir().expect("tempdir");
    let dir = tempdir.path().to_owned();
    let containerd =
        match ContainerdRuntime::connect(&socket, NAMESPACE, runtime_config(&dir)).await {
            Ok(containerd) => containerd,
            Err(err) => {
                skip(&format!(
                    "containerd does not answer at {}: {err}",
                    socket.display()
                ));
                return;
            }
        };
    if !TestRegistry::available() {
        skip("docker-registry is not installed (apt-get install docker-registry)");
        return;
    }
    let registry = TestRegistry::start(None).expect("the test registry starts");
    // A note of its own: blobs that containerd's store (kept across runs) does not have yet.
    let since_epoch = std::time::UNIX_EPOCH.elapsed().unwrap_or_default();
    let note = format!("{CHECK}-{}", since_epoch.as_nanos());
    let image = TestImage::busybox(Path::new(DEBIAN_BUSYBOX), 0, &note)
        .unwrap_or_else(|e| panic!("cannot build the busybox image from {DEBIAN_BUSYBOX}: {e}"));
    let name = format!("{}/ccattler/busybox:1", registry.host());
    image.push(&name, None).await.expect("push to the registry");
    assert!(
        matches!(containerd.has_image(&name).await, Ok(false)),
        "{name} must exist only in the registry"
    );

    // Dropped in reverse order: the processes first, then the containers they left.
    let _namespace = Namespace {
        socket: socket.clone(),
        name: NAMESPACE,
        config: runtime_config(&dir),
    };
    let mut children = Children::default();
    let (server, url) = start_server(&dir, "127.0.0.1:0", &["--store", "memory"], 1);
    children.0.push(server);
    let admin = admin_token(&dir);
    let client = api_client(&url, Some(&admin));
    let socket_arg = socket.to_string_lossy().into_owned();
    let host = registry.host();
    let flags = [
        "--runtime",
        "containerd",
        "--containerd-socket",
        &socket_arg,
        "--containerd-namespace",
        NAMESPACE,
        "--insecure-registry",
        &host,
        "--pull-policy",
        "if-not-present",
        "--cpu",
        "2",
        "--memory",
        "1Gi",
        "--stop-grace",
        "1s",
    ];
    let token = enrollment_token(&url, &admin);
    children
        .0
        .push(start_agent(&dir, &url, "n1", &token, &flags));

    let service = format!(
        "service pulled {{\n    image \"{name}\"\n    command \"sh -c 'while true; do sleep 1; done'\"\n    instances 1\n    resources {{\n        cpu 100m\n        memory 16Mi\n    }}\n}}\n"
    );
    apply(&dir, &url, &admin, &service, &[]);
    let (ids, took) = wait_for(
        "the pulled service running on n1",
        Duration::from_secs(60),
        async || {
            let on_n1 = running(&client).await.remove("n1").unwrap_or_default();
            (on_n1.len() == 1).then_some(on_n1)
        },
    )
    .await;
    eprintln!("{CHECK}: pulled and running after {took:?}: {ids:?}");
    assert!(
        matches!(containerd.has_image(&name).await, Ok(true)),
        "containerd has the pulled image; the agent said: {}",
        read_log(&dir, "agent-n1.log")
    );
    let layer_gets = registry.requests("GET", "/blobs/sha256:");
    assert!(
        layer_gets >= 2,
        "config and layer came from the registry: {layer_gets}"
    );
}
