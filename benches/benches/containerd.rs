//! Create + start of a busybox container: ContainerdRuntime::ensure_running (until the task
//! runs) side by side with `ctr run -d` of the same image and command, in the same run.
//! Teardown (SIGKILL, task, container and snapshot deletion) is not measured.
//!
//! `scripts/containerd-up && cargo bench -p ccattler-benches --features containerd --bench containerd`
//!
//! Without an answering containerd it prints that it was skipped. The socket comes from
//! `CCATTLER_CONTAINERD_SOCKET`, else `/tmp/ccattler-containerd/socket-path`.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use ccattler_core::{InstanceSpec, Runtime};
use ccattler_runtime::containerd::test_image::{self, DEBIAN_BUSYBOX, write_busybox_archive};
use ccattler_runtime::containerd::{ContainerdConfig, ContainerdRuntime};
use criterion::{Criterion, criterion_group, criterion_main};

const NAMESPACE: &str = "ccattler-bench";
const IMAGE: &str = "local/ccattler-busybox:1";
const COMMAND: [&str; 2] = ["sleep", "1000"];

/// Connects and imports the image; `None` when containerd does not answer.
async fn setup(socket: &Path) -> Option<ContainerdRuntime> {
    let config = ContainerdConfig::default()
        .state_dir(std::env::temp_dir().join("ccattler-containerd-bench"));
    let runtime = match ContainerdRuntime::connect(socket, NAMESPACE, config).await {
        Ok(runtime) => runtime,
        Err(e) => {
            println!(
                "SKIPPED containerd benches: containerd not running ({e}); run scripts/containerd-up"
            );
            return None;
        }
    };
    let archive =
        std::env::temp_dir().join(format!("ccattler-bench-busybox-{}.tar", std::process::id()));
    if let Err(e) = write_busybox_archive(Path::new(DEBIAN_BUSYBOX), IMAGE, &archive) {
        println!("SKIPPED containerd benches: cannot build the image from {DEBIAN_BUSYBOX}: {e}");
        return None;
    }
    let imported = runtime.import_oci_archive(&archive, None).await;
    let _ = std::fs::remove_file(&archive);
    match imported {
        Ok(_) => Some(runtime),
        Err(e) => {
            println!("SKIPPED containerd benches: import failed: {e}");
            None
        }
    }
}

fn bench(c: &mut Criterion) {
    let Ok(tokio) = tokio::runtime::Runtime::new() else {
        println!("SKIPPED containerd benches: no tokio runtime");
        return;
    };
    let socket = test_image::test_socket();
    let Some(runtime) = tokio.block_on(setup(&socket)) else {
        return;
    };
    let mut group = c.benchmark_group("containerd");
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(10));
    group.warm_up_time(Duration::from_secs(1));

    let mut n = 0u64;
    group.bench_function("create_start_busybox", |b| {
        b.to_async(&tokio).iter_custom(|iters| {
            let runtime = runtime.clone();
            n += 1;
            let round = n;
            async move {
                let mut measured = Duration::ZERO;
                for i in 0..iters {
                    let id = format!("bench-rt-{round}-{i}");
                    let spec = InstanceSpec::new(&id, IMAGE).command(COMMAND);
                    let started = Instant::now();
                    let result = runtime.ensure_running(&spec).await;
                    measured += started.elapsed();
                    if let Err(e) = result {
                        panic!("ensure_running failed: {e}");
                    }
                    let _ = runtime.remove(&id).await;
                }
                measured
            }
        });
    });

    let address = socket.to_string_lossy().into_owned();
    group.bench_function("ctr_run_d_busybox", |b| {
        b.to_async(&tokio).iter_custom(|iters| {
            let runtime = runtime.clone();
            let address = address.clone();
            n += 1;
            let round = n;
            async move {
                let mut measured = Duration::ZERO;
                for i in 0..iters {
                    let id = format!("bench-ctr-{round}-{i}");
                    let mut ctr = Command::new("ctr");
                    ctr.args(["-a", &address, "-n", NAMESPACE, "run", "-d", IMAGE, &id]);
                    ctr.args(COMMAND);
                    let started = Instant::now();
                    let status = ctr.status();
                    measured += started.elapsed();
                    if !status.as_ref().is_ok_and(|s| s.success()) {
                        panic!("ctr run -d failed: {status:?}");
                    }
                    // The same teardown: task, container, snapshot.
                    let _ = runtime.remove(&id).await;
                }
                measured
            }
        });
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
