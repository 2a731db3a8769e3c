//! The containerd namespace of one end-to-end test, emptied before it and, when dropped, after
//! it, pass or fail.

use std::path::PathBuf;
use std::time::Duration;

use ccattler_core::Runtime;
use ccattler_runtime::containerd::{ContainerdConfig, ContainerdRuntime};

/// Stops and removes every container of `name` when emptied or dropped. Drop it after the
/// processes that run containers there (declare it before them).
pub(crate) struct Namespace {
    pub(crate) socket: PathBuf,
    pub(crate) name: &'static str,
    pub(crate) config: ContainerdConfig,
}

impl Namespace {
    /// Stops and removes every container of the namespace, on a thread of its own so that it
    /// also works from `Drop` inside the test's runtime. A containerd that does not answer is
    /// left as it is.
    pub(crate) fn empty(&self) {
        let (socket, name, config) = (self.socket.clone(), self.name, self.config.clone());
        let removed = std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            runtime.block_on(async {
                let Ok(containerd) = ContainerdRuntime::connect(&socket, name, config).await else {
                    return;
                };
                for instance in containerd.observe().await.unwrap_or_default() {
                    let _ = containerd
                        .ensure_stopped(&instance.id, Duration::from_millis(100))
                        .await;
                    if let Err(error) = containerd.remove(&instance.id).await {
                        eprintln!("emptying {name}: {error}");
                    }
                }
            });
        });
        let _ = removed.join();
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        self.empty();
    }
}
