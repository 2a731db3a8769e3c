//! The node agent: makes the placements of one node real through a [`Runtime`], and reports
//! what is.
//!
//! # Expected flow
//!
//! [`NodeAgent::run`] registers the node (a store lease held by keep-alives, `lease/node/{node}`
//! and `observed/node/{node}`), lists and then watches only `placement/{node}/`, fetches the
//! specs and secrets of what is placed there, and every [`AgentConfig::sync_interval`] (and after
//! every change) compares desired and observed state: it starts what should run (init steps
//! first, each a short-lived instance of the same image, in order, with timeout and retry),
//! restarts what ended according to the restart policy, stops what should stop, runs probes and
//! reports `observed/instance/{node}/{id}`.
//!
//! # Guarantees
//!
//! - **The data plane outlives the control plane.** The last desired state is cached on disk.
//!   When the store is unreachable the agent keeps every workload running (and restarts crashed
//!   ones per policy) and retries with backoff; when the agent restarts it adopts what runs
//!   (through [`Runtime::observe`]) and restarts nothing. An instance unknown to the desired
//!   state is stopped only once the agent has listed its placements successfully.
//! - **Shutdown leaves workloads running.** Stopping the agent stops nothing; its lease is kept
//!   in the cache and resumed by the next agent if it still lives.
//! - **Failures are reported, not fatal.** A missing image, a missing command or an unwritable
//!   directory becomes an observation in state `failed` with the reason; the agent retries with
//!   backoff and never crashes for it.

mod act;
mod cache;
mod config;
mod link;
mod probe;
mod spec;

pub use cache::{Cache, Desired};
pub use config::AgentConfig;
pub use probe::ProbeState;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use ccattler_core::{FactStore, Runtime, Value};
use futures_util::StreamExt;
use tokio::time::Instant;

/// Why the agent stopped abnormally. Store and runtime failures are not among them: the agent
/// outlives both.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    /// The node name is not a single key segment.
    #[error("node name {0:?} is not valid: use a single key segment such as `n1`")]
    InvalidNode(String),
    /// The cache directory cannot be written.
    #[error("cannot write the agent's cache in {dir}")]
    Cache {
        /// The directory.
        dir: std::path::PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// One node's agent over a store `S` and a runtime `R`.
#[derive(Debug)]
pub struct NodeAgent<S, R> {
    store: S,
    runtime: Arc<R>,
    config: AgentConfig,
}

/// What the agent tracks about one placed instance between passes.
#[derive(Debug, Default)]
struct Track {
    /// Init steps completed.
    init_done: u32,
    /// Failed start attempts in a row.
    attempts: u32,
    /// No new start attempt before this.
    retry_at: Option<Instant>,
    /// Why the last start failed.
    failure: Option<String>,
    /// Probes: startup, liveness, readiness.
    probes: [Option<ProbeState>; 3],
    /// When the running instance was last seen starting.
    started: Option<Instant>,
    /// When its liveness probe failed: it is restarted one pass later, once reported unhealthy.
    condemned: Option<Instant>,
}

/// The agent's mutable state.
#[derive(Debug, Default)]
struct Local {
    desired: Desired,
    /// Whether the placements were listed from the store since the agent started.
    synced: bool,
    tracks: BTreeMap<String, Track>,
    /// Observation values last written, by instance id.
    reported: BTreeMap<String, Value>,
}

impl<S: FactStore + Clone, R: Runtime> NodeAgent<S, R> {
    /// An agent for the node `config` describes.
    ///
    /// # Errors
    ///
    /// [`AgentError::InvalidNode`] when the node name is not a single key segment.
    pub fn new(store: S, runtime: Arc<R>, config: AgentConfig) -> Result<Self, AgentError> {
        if ccattler_core::schema::keys::node(&config.node).is_err() {
            return Err(AgentError::InvalidNode(config.node));
        }
        Ok(NodeAgent {
            store,
            runtime,
            config,
        })
    }

    /// Runs until `shutdown` completes. Workloads keep running after it returns.
    ///
    /// # Errors
    ///
    /// [`AgentError::Cache`] when the cache directory cannot be written at start.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) -> Result<(), AgentError> {
        let cache = Cache::new(&self.config.cache_dir);
        let mut local = Local {
            desired: cache.load(),
            ..Local::default()
        };
        cache
            .save(&local.desired)
            .map_err(|source| AgentError::Cache {
                dir: self.config.cache_dir.clone(),
                source,
            })?;
        let mut shutdown = std::pin::pin!(shutdown);
        let mut watch: Option<S::Watch> = None;
        let mut failures: u32 = 0;
        let mut reconnect_at = Instant::now();
        let mut keep_alive_at = Instant::now() + self.config.lease_ttl / 3;
        let mut ticker = tokio::time::interval(self.config.sync_interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let now = Instant::now();
            if watch.is_none() && now >= reconnect_at {
                match self.connect(&mut local).await {
                    Ok(w) => {
                        watch = Some(w);
                        failures = 0;
                        keep_alive_at = now + self.config.lease_ttl / 3;
                        let _ = cache.save(&local.desired);
                    }
                    Err(err) => {
                        failures += 1;
                        reconnect_at = now + self.backoff(failures);
                        tracing::warn!(node = %self.config.node, error = %err, "store unreachable; workloads keep running");
                    }
                }
            }
            let current = self.pass(&mut local).await;
            if watch.is_some() {
                let (puts, deletes) = self.observations(&mut local, current).await;
                if let Err(err) = self.write(puts, deletes).await {
                    tracing::warn!(node = %self.config.node, error = %err, "reporting failed; reconnecting");
                    local.reported.clear();
                    watch = None;
                    failures += 1;
                    reconnect_at = Instant::now() + self.backoff(failures);
                }
            }
            tokio::select! {
                biased;
                () = &mut shutdown => return Ok(()),
                item = next_event(&mut watch) => {
                    let mut item = item;
                    loop {
                        match item {
                            Some(Ok(event)) => {
                                if let Err(err) = self.apply_event(event, &mut local.desired).await {
                                    tracing::warn!(error = %err, "could not fetch what a placement needs");
                                    watch = None;
                                    break;
                                }
                            }
                            Some(Err(_)) | None => {
                                watch = None;
                                break;
                            }
                        }
                        match watch.as_mut().and_then(|w| futures_util::FutureExt::now_or_never(w.next())) {
                            Some(next) => item = next,
                            None => break,
                        }
                    }
                    let _ = cache.save(&local.desired);
                }
                _ = tokio::time::sleep_until(keep_alive_at), if watch.is_some() => {
                    keep_alive_at = Instant::now() + self.config.lease_ttl / 3;
                    if let Some(lease) = local.desired.lease_id()
                        && self.store.keep_alive(lease).await.is_err()
                    {
                        // Expired or unreachable: register again (a new lease if need be).
                        watch = None;
                        local.reported.clear();
                    }
                }
                _ = ticker.tick() => {}
            }
        }
    }

    async fn connect(&self, local: &mut Local) -> Result<S::Watch, ccattler_core::StoreError> {
        self.register(&mut local.desired).await?;
        let watch = self.follow(&mut local.desired).await?;
        local.synced = true;
        local.reported.clear();
        // What is already reported need not be written again.
        let prefix = format!(
            "{}{}/",
            ccattler_core::schema::OBSERVED_INSTANCES,
            self.config.node
        );
        for fact in self.store.scan(&prefix).await?.facts {
            if let Some(id) = fact.key.strip_prefix(&prefix) {
                local.reported.insert(id.to_owned(), fact.value.clone());
            }
        }
        Ok(watch)
    }

    fn backoff(&self, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(10);
        Duration::from_secs(1)
            .saturating_mul(1 << doublings)
            .min(self.config.max_backoff)
    }
}

async fn next_event<W>(
    watch: &mut Option<W>,
) -> Option<Result<ccattler_core::WatchEvent, ccattler_core::StoreError>>
where
    W: futures_core::Stream<Item = Result<ccattler_core::WatchEvent, ccattler_core::StoreError>>
        + Unpin,
{
    match watch {
        Some(watch) => watch.next().await,
        None => std::future::pending().await,
    }
}
