//! [`CacheWriter`]: the agent's cache written off the executor, the latest state only.
//!
//! A save is a synced write of the whole file, milliseconds on a busy disk. Done inline it would
//! hold the agent's task, and the executor thread under it, away from lease renewals and
//! reports (and, in a process that runs hundreds of agents, from every other agent). So saves
//! go to a blocking thread, one at a time per agent; states asked for while one is written are
//! coalesced into the newest, which is what a restart needs. Closing waits for the newest to be
//! written.

use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::cache::{Cache, Desired};

/// Writes an agent's cache in the background; see the module docs.
#[derive(Debug)]
pub(super) struct CacheWriter {
    /// Shared, not copied: the writer takes the newest state without cloning it.
    latest: watch::Sender<Option<Arc<Desired>>>,
    task: JoinHandle<()>,
}

impl CacheWriter {
    /// Starts writing to `cache` whatever [`save`](Self::save) is given, for node `node`.
    pub(super) fn spawn(cache: Cache, node: String) -> Self {
        let (latest, mut wanted) = watch::channel(None::<Arc<Desired>>);
        let path: PathBuf = cache.path().to_owned();
        let task = tokio::spawn(async move {
            let cache = Arc::new(cache);
            // Ends once the sender is dropped and its last value written.
            while wanted.changed().await.is_ok() {
                let Some(desired) = wanted.borrow_and_update().clone() else {
                    continue;
                };
                let writer = Arc::clone(&cache);
                let saved = tokio::task::spawn_blocking(move || writer.save(&desired)).await;
                match saved {
                    Ok(Ok(())) => {}
                    Ok(Err(err)) => {
                        tracing::warn!(node = %node, error = %err, path = %path.display(), "cannot write the agent's cache");
                    }
                    Err(err) => {
                        tracing::error!(node = %node, error = %err, "writing the agent's cache panicked");
                    }
                }
            }
        });
        CacheWriter { latest, task }
    }

    /// Asks for `desired` to be written (replacing any state not written yet).
    pub(super) fn save(&self, desired: Box<Desired>) {
        self.latest.send_replace(Some(Arc::from(desired)));
    }

    /// Waits until the newest state asked for is written.
    pub(super) async fn close(self) {
        let CacheWriter { latest, task } = self;
        drop(latest);
        if let Err(err) = task.await {
            tracing::error!(error = %err, "the agent's cache writer failed");
        }
    }
}
