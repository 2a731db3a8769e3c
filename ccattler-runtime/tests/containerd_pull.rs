//! Image pulls of ContainerdRuntime against a real registry (Debian's `docker-registry`, started
//! on loopback by each test, which pushes its image into it) and a real containerd (start it
//! with `scripts/containerd-up`). Without either, every test fails when `CI=true` and prints
//! that it was skipped otherwise.
#![cfg(feature = "containerd")]

use std::path::Path;
use std::time::{Duration, Instant};

use ccattler_core::{InstanceSpec, InstanceState, Runtime, RuntimeError};
use ccattler_runtime::containerd::test_image::{self, DEBIAN_BUSYBOX, TestImage};
use ccattler_runtime::containerd::test_registry::TestRegistry;
use ccattler_runtime::containerd::{ContainerdConfig, ContainerdRuntime, PullPolicy};

const SCRIPT: [&str; 3] = ["sh", "-c", "trap 'exit 143' TERM; sleep 1000 & wait"];

fn skip(why: &str) {
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("the pull tests need containerd (scripts/containerd-up) and docker-registry: {why}");
    }
    let line = format!("SKIPPED: {why}\n");
    let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
}

/// A runtime in its own namespace (`ccattler-pull-{name}`), a registry, and the busybox image
/// pushed into it as `{registry}/ccattler/busybox:1`; `None` (after saying so) when containerd
/// or docker-registry is missing and this is not CI.
struct Setup {
    registry: TestRegistry,
    image: TestImage,
    name: String,
}

async fn setup(credentials: Option<(&str, &str)>) -> Option<Setup> {
    setup_padded(credentials, 0).await
}

/// [`setup`] with an image of about `padding` bytes more.
async fn setup_padded(credentials: Option<(&str, &str)>, padding: usize) -> Option<Setup> {
    if !TestRegistry::available() {
        skip("docker-registry is not installed (apt-get install docker-registry)");
        return None;
    }
    let registry = match TestRegistry::start(credentials) {
        Ok(registry) => registry,
        Err(e) => panic!("cannot start the test registry: {e}"),
    };
    // A note of its own: blobs that containerd's store (kept across runs) does not have yet.
    let since_epoch = std::time::UNIX_EPOCH.elapsed().unwrap_or_default();
    let note = format!("{}-{}", std::process::id(), since_epoch.as_nanos());
    let image = TestImage::busybox(Path::new(DEBIAN_BUSYBOX), padding, &note)
        .unwrap_or_else(|e| panic!("cannot build the busybox image from {DEBIAN_BUSYBOX}: {e}"));
    let name = format!("{}/ccattler/busybox:1", registry.host());
    if let Err(e) = image.push(&name, credentials).await {
        panic!("cannot push the test image: {e}");
    }
    Some(Setup {
        registry,
        image,
        name,
    })
}

async fn runtime(test: &str, config: ContainerdConfig) -> Option<ContainerdRuntime> {
    let socket = test_image::test_socket();
    let namespace = format!("ccattler-pull-{test}");
    let config = config.state_dir(std::env::temp_dir().join("ccattler-containerd-tests"));
    match ContainerdRuntime::connect(&socket, &namespace, config).await {
        Ok(runtime) => Some(runtime),
        Err(e) => {
            skip(&format!(
                "containerd not running at {} ({e})",
                socket.display()
            ));
            None
        }
    }
}

fn insecure(setup: &Setup, policy: PullPolicy) -> ContainerdConfig {
    ContainerdConfig::default()
        .insecure_registry(setup.registry.host())
        .pull_policy(policy)
}

fn spec(id: &str, image: &str) -> InstanceSpec {
    let mut spec = InstanceSpec::new(id, image).command(SCRIPT);
    spec.service = "pull-tests".to_owned();
    spec
}

async fn running(rt: &ContainerdRuntime, spec: &InstanceSpec) {
    let _ = rt.remove(&spec.id).await;
    if let Err(e) = rt.ensure_running(spec).await {
        panic!("start {}: {e}", spec.id);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let seen = rt
            .observe()
            .await
            .unwrap_or_else(|e| panic!("observe: {e}"));
        let state = seen.into_iter().find(|o| o.id == spec.id).map(|o| o.state);
        match state {
            Some(InstanceState::Running) => break,
            other if Instant::now() > deadline => panic!("{} never ran: {other:?}", spec.id),
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    let _ = rt.ensure_stopped(&spec.id, Duration::from_secs(2)).await;
    let _ = rt.remove(&spec.id).await;
}

/// The pull's error reason, and that the instance is observed failed with it.
async fn pull_error(rt: &ContainerdRuntime, spec: &InstanceSpec) -> String {
    let _ = rt.remove(&spec.id).await;
    let reason = match rt.ensure_running(spec).await {
        Err(RuntimeError::ImagePull { image, reason }) => {
            assert_eq!(image, spec.image);
            reason
        }
        other => panic!("{} should fail to pull, got {other:?}", spec.image),
    };
    let seen = rt
        .observe()
        .await
        .unwrap_or_else(|e| panic!("observe: {e}"));
    let state = seen.into_iter().find(|o| o.id == spec.id).map(|o| o.state);
    assert!(
        matches!(&state, Some(InstanceState::Failed { reason: r }) if r.contains(&reason)),
        "{state:?}"
    );
    let present = rt.has_image(&spec.image).await;
    assert!(
        matches!(present, Ok(false)),
        "no image record after a failed pull: {present:?}"
    );
    let _ = rt.remove(&spec.id).await;
    reason
}

#[tokio::test]
async fn pulls_and_runs_with_either_policy() {
    let Some(setup) = setup(None).await else {
        return;
    };
    let Some(rt) = runtime("policies", insecure(&setup, PullPolicy::IfNotPresent)).await else {
        return;
    };
    forget_image("policies", &setup.name); // a registry of an earlier run had this port
    assert!(matches!(rt.has_image(&setup.name).await, Ok(false)));
    running(&rt, &spec("first", &setup.name)).await;
    assert!(matches!(rt.has_image(&setup.name).await, Ok(true)));
    let manifests = |s: &Setup| s.registry.requests("GET", "/manifests/");
    let asked = manifests(&setup);
    running(&rt, &spec("second", &setup.name)).await;
    assert_eq!(
        manifests(&setup),
        asked,
        "if-not-present asks the registry once"
    );

    let Some(always) = runtime("policies", insecure(&setup, PullPolicy::Always)).await else {
        return;
    };
    running(&always, &spec("third", &setup.name)).await;
    assert_eq!(
        manifests(&setup),
        asked + 1,
        "always asks the registry every start"
    );
    let layer = format!("/blobs/{}", test_image_layer(&setup));
    assert_eq!(
        setup.registry.requests("GET", &layer),
        1,
        "the layer is downloaded once"
    );

    // The index of a multi-platform image is resolved to this node's build.
    let multi = format!("{}/ccattler/busybox:multi", setup.registry.host());
    let arch = if cfg!(target_arch = "aarch64") {
        "arm64"
    } else {
        "amd64"
    };
    if let Err(e) = setup.image.push_index(&multi, "linux", arch).await {
        panic!("push index: {e}");
    }
    running(&rt, &spec("indexed", &multi)).await;
}

/// Deletes the image record `name` in the test's namespace, if any (with `ctr`).
fn forget_image(test: &str, name: &str) {
    let socket = test_image::test_socket().to_string_lossy().into_owned();
    let namespace = format!("ccattler-pull-{test}");
    let args = ["-a", &socket, "-n", &namespace, "images", "rm", name];
    let _ = std::process::Command::new("ctr").args(args).output();
}

fn test_image_layer(setup: &Setup) -> String {
    let manifest: serde_json::Value =
        serde_json::from_slice(&setup.image.manifest).unwrap_or_default();
    manifest["layers"][0]["digest"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_of_one_image_pull_it_once_and_are_seen_pulling() {
    let Some(setup) = setup_padded(None, 8 << 20).await else {
        return;
    };
    let Some(rt) = runtime("concurrent", insecure(&setup, PullPolicy::IfNotPresent)).await else {
        return;
    };
    forget_image("concurrent", &setup.name);
    let (a, b) = (spec("one", &setup.name), spec("two", &setup.name));
    for id in ["one", "two"] {
        let _ = rt.ensure_stopped(id, Duration::ZERO).await;
        let _ = rt.remove(id).await;
    }
    let watcher = rt.clone();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopped = std::sync::Arc::clone(&stop);
    let watch = tokio::spawn(async move {
        let mut seen = Vec::new();
        while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
            for o in watcher.observe().await.into_iter().flatten() {
                if let InstanceState::Pulling { done, total, .. } = o.state {
                    seen.push((o.id, done, total));
                }
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        seen
    });
    let (ra, rb) = tokio::join!(rt.ensure_running(&a), rt.ensure_running(&b));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(ra.is_ok() && rb.is_ok(), "{ra:?} {rb:?}");
    let seen = watch.await.unwrap_or_default();
    let progressed = seen.iter().any(|(_, done, total)| *done > 0 && *total > 0);
    assert!(
        progressed,
        "the instances were observed pulling, with progress: {seen:?}"
    );
    assert!(seen.iter().all(|(_, done, total)| done <= total));
    assert!(seen.iter().any(|(id, ..)| id == "one") && seen.iter().any(|(id, ..)| id == "two"));
    let layer = format!("/blobs/{}", test_image_layer(&setup));
    assert_eq!(setup.registry.requests("GET", &layer), 1, "pulled once");
    for id in ["one", "two"] {
        let _ = rt.ensure_stopped(id, Duration::from_secs(2)).await;
        let _ = rt.remove(id).await;
    }
}

#[tokio::test]
async fn credentials_are_used_and_wrong_ones_are_a_clear_error() {
    let Some(setup) = setup(Some(("tester", "right-password"))).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let file = |name: &str, password: &str| {
        let path = dir.path().join(name);
        let text = serde_json::json!({"auths": {setup.registry.host():
            {"username": "tester", "password": password}}});
        std::fs::write(&path, text.to_string()).unwrap_or_else(|e| panic!("write: {e}"));
        path
    };
    let (right, wrong) = (
        file("right.json", "right-password"),
        file("wrong.json", "nope"),
    );

    let config = insecure(&setup, PullPolicy::Always);
    let Some(anonymous) = runtime("auth", config.clone()).await else {
        return;
    };
    let reason = pull_error(&anonymous, &spec("anonymous", &setup.name)).await;
    assert!(reason.contains("requires credentials"), "{reason}");

    let wrong_rt = runtime("auth", config.clone().registry_credentials(&wrong)).await;
    let Some(wrong_rt) = wrong_rt else { return };
    let reason = pull_error(&wrong_rt, &spec("wrong", &setup.name)).await;
    assert!(reason.contains("refused the credentials"), "{reason}");

    let right_rt = runtime("auth", config.registry_credentials(&right)).await;
    let Some(right_rt) = right_rt else { return };
    running(&right_rt, &spec("right", &setup.name)).await;
}

#[tokio::test]
async fn unknown_registries_and_platforms_are_clear_errors() {
    let Some(setup) = setup(None).await else {
        return;
    };
    let config = insecure(&setup, PullPolicy::IfNotPresent).insecure_registry("127.0.0.1:1");
    let Some(rt) = runtime("unknown", config).await else {
        return;
    };
    let unknown = pull_error(&rt, &spec("unknown-host", "no-such-registry.invalid/x:1")).await;
    assert!(
        unknown.contains("cannot reach registry no-such-registry.invalid"),
        "{unknown}"
    );
    let refused = pull_error(&rt, &spec("refused", "127.0.0.1:1/x:1")).await;
    assert!(
        refused.contains("cannot reach registry 127.0.0.1:1"),
        "{refused}"
    );
    let missing = format!("{}/ccattler/nothing:1", setup.registry.host());
    let missing = pull_error(&rt, &spec("missing", &missing)).await;
    assert!(missing.contains("has no such image"), "{missing}");

    let foreign = format!("{}/ccattler/busybox:foreign", setup.registry.host());
    let arch = if cfg!(target_arch = "s390x") {
        "riscv64"
    } else {
        "s390x"
    };
    if let Err(e) = setup.image.push_index(&foreign, "linux", arch).await {
        panic!("push index: {e}");
    }
    let reason = pull_error(&rt, &spec("foreign", &foreign)).await;
    assert!(
        reason.contains("no build for this node's platform"),
        "{reason}"
    );
    assert!(reason.contains(&format!("linux/{arch}")), "{reason}");
}

#[tokio::test]
async fn a_blob_that_does_not_match_its_digest_is_never_kept_and_a_retry_works() {
    let Some(setup) = setup(None).await else {
        return;
    };
    let Some(rt) = runtime("tampered", insecure(&setup, PullPolicy::IfNotPresent)).await else {
        return;
    };
    forget_image("tampered", &setup.name);
    let layer = setup.registry.blob_file(&test_image_layer(&setup));
    let good = std::fs::read(&layer).unwrap_or_else(|e| panic!("read {}: {e}", layer.display()));
    let mut bad = good.clone();
    let middle = bad.len() / 2;
    bad[middle] ^= 0xff;
    std::fs::write(&layer, &bad).unwrap_or_else(|e| panic!("tamper: {e}"));
    let reason = pull_error(&rt, &spec("tampered", &setup.name)).await;
    assert!(reason.contains("does not match its digest"), "{reason}");

    std::fs::write(&layer, &good).unwrap_or_else(|e| panic!("restore: {e}"));
    running(&rt, &spec("tampered", &setup.name)).await;
}
