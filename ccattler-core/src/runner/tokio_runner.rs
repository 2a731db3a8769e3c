//! [`TokioRunner`]: runs controllers on tokio, one task each, while this replica leads.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use tokio::sync::watch;
use tokio::task::JoinSet;

use super::driver::{Exit, Task};
use super::events_lease::{EventsLeaseSchedule, rotate};
use super::{LeaderElection, LoopConfig, NoElection, Runner};
use crate::{Controller, FactStore, StoreError};

/// Why a [`TokioRunner`] stopped abnormally.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunnerError {
    /// A controller failed fatally; every controller was stopped.
    #[error("controller {controller} failed fatally: {message}")]
    Fatal {
        /// The controller's name.
        controller: String,
        /// Its error.
        message: String,
    },
    /// Leader election failed with an error it cannot wait out.
    #[error("leader election failed")]
    Election(#[source] StoreError),
    /// Two controllers have the same name, or two write the same prefix.
    #[error("invalid runner setup: {0}")]
    Setup(String),
}

/// Runs controllers against a store on tokio.
///
/// # Expected flow
///
/// Register controllers with [`controller`](Self::controller), then [`run`](Runner::run) with a
/// shutdown future. The runner campaigns for leadership (immediately granted with the default
/// [`NoElection`]); while it leads, each controller runs its own [`ControllerLoop`](super::ControllerLoop)
/// in a task, every commit carrying the leadership's fencing compares. When leadership is lost
/// the controllers stop and the runner campaigns again.
///
/// # Guarantees
///
/// - A fatal controller error stops every controller and `run` returns [`RunnerError::Fatal`].
/// - Shutdown cancels every controller between steps and waits at most
///   [`LoopConfig::shutdown_timeout`] for them before abandoning them.
/// - A panicking controller is restarted with backoff like a failing one; it never takes the
///   runner down.
///
/// # Caveats
///
/// `reconcile` runs on the controller's task: a controller whose reconcile takes long delays only
/// itself, but occupies a worker thread meanwhile.
pub struct TokioRunner<S, E = NoElection> {
    store: S,
    election: E,
    controllers: Vec<Arc<dyn Controller>>,
    config: LoopConfig,
    seed: u64,
}

impl<S: FactStore + Clone> TokioRunner<S, NoElection> {
    /// A runner on `store` with no leader election and default timings.
    pub fn new(store: S) -> Self {
        TokioRunner {
            store,
            election: NoElection,
            controllers: Vec::new(),
            config: LoopConfig::default(),
            seed: crate::seeded::entropy(),
        }
    }
}

impl<S: FactStore + Clone, E: LeaderElection> TokioRunner<S, E> {
    /// Uses `election` to decide when this replica runs its controllers.
    pub fn with_election<E2: LeaderElection>(self, election: E2) -> TokioRunner<S, E2> {
        TokioRunner {
            store: self.store,
            election,
            controllers: self.controllers,
            config: self.config,
            seed: self.seed,
        }
    }

    /// Registers a controller.
    #[must_use]
    pub fn controller(mut self, controller: impl Controller) -> Self {
        self.controllers.push(Arc::new(controller));
        self
    }

    /// Registers a shared controller.
    #[must_use]
    pub fn controller_arc(mut self, controller: Arc<dyn Controller>) -> Self {
        self.controllers.push(controller);
        self
    }

    /// Sets the loop timings.
    #[must_use]
    pub fn config(mut self, config: LoopConfig) -> Self {
        self.config = config;
        self
    }

    /// Seeds the conflict jitter (for reproducible tests).
    #[must_use]
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    fn check_setup(&self) -> Result<(), RunnerError> {
        let mut names = std::collections::HashSet::new();
        let mut domains: Vec<(String, String)> = Vec::new();
        for controller in &self.controllers {
            if let Err(err) = super::commit_marker(controller.name()) {
                return Err(RunnerError::Setup(format!(
                    "controller name {:?} cannot name its commit marker key: {err}",
                    controller.name()
                )));
            }
            if !names.insert(controller.name().to_owned()) {
                return Err(RunnerError::Setup(format!(
                    "two controllers are named {}",
                    controller.name()
                )));
            }
            for prefix in controller.write_domain() {
                if let Some((other, theirs)) = domains
                    .iter()
                    .find(|(_, p)| p.starts_with(&prefix) || prefix.starts_with(p.as_str()))
                {
                    return Err(RunnerError::Setup(format!(
                        "controllers {other} and {} both write under {theirs:?} / {prefix:?}; \
                         every prefix must have one writer",
                        controller.name()
                    )));
                }
                domains.push((controller.name().to_owned(), prefix));
            }
        }
        Ok(())
    }

    /// Runs the controllers while leading; returns why the term ended.
    async fn lead(
        &self,
        leadership: &mut super::Leadership,
        shutdown: &mut (impl Future<Output = ()> + Unpin),
    ) -> Term {
        let (cancel_tx, cancel_rx) = watch::channel(false);
        let mut tasks = JoinSet::new();
        let max_age = self.config.events_max_age;
        let (events_lease, rotation) = if max_age.is_zero() {
            (None, None)
        } else {
            let (leases_tx, leases_rx) = watch::channel(None);
            let schedule = EventsLeaseSchedule::new(max_age);
            let rotation = tokio::spawn(rotate(self.store.clone(), schedule, leases_tx));
            (Some(leases_rx), Some(rotation))
        };
        for (index, controller) in self.controllers.iter().enumerate() {
            let task = Task {
                store: self.store.clone(),
                controller: controller.clone(),
                fences: leadership.fences().to_vec(),
                config: self.config.clone(),
                seed: self.seed.wrapping_add(index as u64),
                cancel: cancel_rx.clone(),
                events_lease: events_lease.clone(),
            };
            let name = controller.name().to_owned();
            tasks.spawn(async move { (name, task.run().await) });
        }
        metrics::gauge!("ccattler_leader").set(1.0);
        let term = loop {
            tokio::select! {
                _ = &mut *shutdown => break Term::Shutdown,
                _ = leadership.lost() => break Term::Deposed,
                joined = tasks.join_next() => match joined {
                    None => break Term::Shutdown,
                    Some(Ok((name, Exit::Fatal(message)))) => {
                        break Term::Fatal(RunnerError::Fatal { controller: name, message })
                    }
                    Some(Ok((_, Exit::LeadershipLost))) => break Term::Deposed,
                    Some(Ok((_, Exit::Cancelled))) => {}
                    Some(Err(join_error)) => {
                        tracing::error!(error = %join_error, "controller task ended abnormally");
                    }
                },
            }
        };
        metrics::gauge!("ccattler_leader").set(0.0);
        let _ = cancel_tx.send(true);
        let drained = tokio::time::timeout(self.config.shutdown_timeout, async {
            while tasks.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::warn!("controllers did not stop within the shutdown timeout; abandoning them");
            tasks.abort_all();
        }
        if let Some(rotation) = rotation {
            rotation.abort();
        }
        term
    }
}

enum Term {
    Shutdown,
    Deposed,
    Fatal(RunnerError),
}

impl<S: FactStore + Clone, E: LeaderElection> Runner for TokioRunner<S, E> {
    type Error = RunnerError;

    async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), RunnerError> {
        self.check_setup()?;
        let mut shutdown = Box::pin(shutdown);
        loop {
            let mut leadership = tokio::select! {
                _ = &mut shutdown => return Ok(()),
                leadership = self.election.campaign() => leadership.map_err(RunnerError::Election)?,
            };
            match self.lead(&mut leadership, &mut shutdown).await {
                Term::Shutdown => return Ok(()),
                Term::Fatal(err) => return Err(err),
                Term::Deposed => tracing::warn!("lost leadership; campaigning again"),
            }
        }
    }
}

impl<S, E> fmt::Debug for TokioRunner<S, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.controllers.iter().map(|c| c.name()).collect();
        f.debug_struct("TokioRunner")
            .field("controllers", &names)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}
