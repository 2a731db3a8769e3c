//! Pull + start: ContainerdRuntime::ensure_running of an image that is only in a loopback
//! registry (Debian's docker-registry), a single-layer busybox image padded to about 5 MB, until
//! the task runs: manifest, config and layer downloaded and verified, written into containerd's
//! content store, unpacked, container created and started. Each iteration pushes an image of its
//! own first (not measured), so that every one is a real pull; teardown is not measured either.
//! Prints the median of all iterations at the end.
//!
//! `scripts/containerd-up && cargo bench -p ccattler-benches --features containerd --bench containerd_pull`
//!
//! Without an answering containerd or without docker-registry it prints that it was skipped.

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ccattler_core::{InstanceSpec, Runtime};
use ccattler_runtime::containerd::test_image::{self, DEBIAN_BUSYBOX, TestImage};
use ccattler_runtime::containerd::test_registry::TestRegistry;
use ccattler_runtime::containerd::{ContainerdConfig, ContainerdRuntime, PullPolicy};
use criterion::{Criterion, SamplingMode, criterion_group, criterion_main};

const NAMESPACE: &str = "ccattler-bench-pull";
const COMMAND: [&str; 2] = ["sleep", "1000"];
/// Incompressible bytes added to the busybox layer (about 1 MB gzipped): about 5 MB in all.
const PADDING: usize = 4_000_000;

fn bench(c: &mut Criterion) {
    let Ok(tokio) = tokio::runtime::Runtime::new() else {
        println!("SKIPPED containerd pull bench: no tokio runtime");
        return;
    };
    if !TestRegistry::available() {
        println!("SKIPPED containerd pull bench: docker-registry is not installed");
        return;
    }
    let registry = match TestRegistry::start(None) {
        Ok(registry) => registry,
        Err(e) => {
            println!("SKIPPED containerd pull bench: the registry does not start: {e}");
            return;
        }
    };
    let socket = test_image::test_socket();
    let config = ContainerdConfig::default()
        .state_dir(std::env::temp_dir().join("ccattler-containerd-bench"))
        .pull_policy(PullPolicy::IfNotPresent)
        .insecure_registry(registry.host());
    let runtime = match tokio.block_on(ContainerdRuntime::connect(&socket, NAMESPACE, config)) {
        Ok(runtime) => runtime,
        Err(e) => {
            println!("SKIPPED containerd pull bench: containerd not running ({e})");
            return;
        }
    };
    let host = registry.host();
    let samples = Arc::new(Mutex::new(Vec::new()));
    let mut size = 0;
    let mut group = c.benchmark_group("containerd_pull");
    group.sample_size(10);
    group.sampling_mode(SamplingMode::Flat);
    group.measurement_time(Duration::from_secs(20));
    group.warm_up_time(Duration::from_secs(1));
    let mut n = 0u64;
    group.bench_function("pull_start_5mb_single_layer", |b| {
        b.to_async(&tokio).iter_custom(|iters| {
            let (runtime, host, samples) = (runtime.clone(), host.clone(), Arc::clone(&samples));
            n += 1;
            let round = n;
            let mut images = Vec::new();
            for i in 0..iters {
                // A note of its own per iteration: blobs that containerd does not have yet.
                let since_epoch = std::time::UNIX_EPOCH.elapsed().unwrap_or_default();
                let note = format!("{round}-{i}-{}", since_epoch.as_nanos());
                match TestImage::busybox(Path::new(DEBIAN_BUSYBOX), PADDING, &note) {
                    Ok(image) => images.push(image),
                    Err(e) => panic!("cannot build the image from {DEBIAN_BUSYBOX}: {e}"),
                }
            }
            size = images.first().map_or(0, TestImage::size);
            async move {
                let mut measured = Duration::ZERO;
                for (i, image) in images.iter().enumerate() {
                    let name = format!("{host}/bench/pull-{round}-{i}:1");
                    if let Err(e) = image.push(&name, None).await {
                        panic!("push: {e}");
                    }
                    let id = format!("bench-pull-{round}-{i}");
                    let spec = InstanceSpec::new(&id, &name).command(COMMAND);
                    let started = Instant::now();
                    let result = runtime.ensure_running(&spec).await;
                    let took = started.elapsed();
                    measured += took;
                    if let Err(e) = result {
                        panic!("ensure_running failed: {e}");
                    }
                    samples.lock().unwrap_or_else(|e| e.into_inner()).push(took);
                    let _ = runtime.ensure_stopped(&id, Duration::ZERO).await;
                    let _ = runtime.remove(&id).await;
                    forget_image(&name);
                }
                measured
            }
        });
    });
    group.finish();
    let mut all = samples.lock().unwrap_or_else(|e| e.into_inner()).clone();
    all.sort_unstable();
    if let Some(median) = all.get(all.len() / 2) {
        println!(
            "containerd_pull: pull + start of a {:.1} MB single-layer image from a loopback \
             registry: median {median:?} over {} pulls (min {:?}, max {:?})",
            size as f64 / 1e6,
            all.len(),
            all.first().copied().unwrap_or_default(),
            all.last().copied().unwrap_or_default(),
        );
    }
}

/// Deletes the image record (with `ctr`), so that containerd collects its blobs and snapshots.
fn forget_image(name: &str) {
    let socket = test_image::test_socket().to_string_lossy().into_owned();
    let args = ["-a", &socket, "-n", NAMESPACE, "images", "rm", name];
    let _ = Command::new("ctr").args(args).output();
}

criterion_group!(benches, bench);
criterion_main!(benches);
