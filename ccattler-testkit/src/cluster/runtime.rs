//! [`NodeRuntime`]: the runtime of one test node, a [`SimulatorRuntime`] whose starts and stops
//! take time ([`Pacing`]).
//!
//! The simulator has no clock: a start completes at once, unless it was marked slow, and then
//! it stays `starting` until someone releases it. This wrapper turns the builder's
//! [`start_delay`](super::ClusterBuilder::start_delay) and
//! [`stop_delay`](super::ClusterBuilder::stop_delay) into that vocabulary, on tokio's clock:
//!
//! - **Start.** When the agent starts an instance the simulator does not run (unknown or
//!   ended), the wrapper marks it slow ([`Faults::slow_start`]), starts it, and spawns a task
//!   that releases it ([`Faults::release`]) after the start delay. Until then the simulator,
//!   and so the agent, sees it `starting`; the agent sees `running` at its first observation
//!   after the release (within one sync interval). The release belongs to that start only: a
//!   later start of the same id (after a crash or a stop) is timed afresh. A start that fails
//!   fails at once, with no delay.
//! - **Stop.** A stop of a live (starting or running) instance waits the stop delay, then stops
//!   it; the instance runs until then. The agent performs one runtime action at a time, so its
//!   stops on one node follow each other, and the agent starts, stops or probes nothing else
//!   meanwhile; its store work (reports, lease renewals) goes on. A stop of an ended or unknown
//!   instance returns at once.
//!
//! Everything else is the simulator's own behaviour. The release tasks belong to the wrapper:
//! they run on whether or not an agent does (a workload finishes starting by itself), and
//! dropping the wrapper aborts those still pending.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use ccattler_core::{
    ExecOutput, FileSpec, InstanceSpec, InstanceState, InstanceStats, ObservedInstance, Runtime,
    RuntimeError,
};
use ccattler_runtime::simulator::{Faults, SimulatorRuntime};
use tokio::task::JoinSet;

/// How long the instances of a test node take to start and to stop.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Pacing {
    /// Time an instance spends `starting` before it runs (0: it runs at once).
    pub(crate) start_delay: Duration,
    /// Time a stop of a live instance takes (0: at once).
    pub(crate) stop_delay: Duration,
}

/// A [`SimulatorRuntime`] paced by a [`Pacing`]; see the [module docs](self).
#[derive(Debug)]
pub(crate) struct NodeRuntime {
    sim: SimulatorRuntime,
    pacing: Pacing,
    /// The number of starts made of each instance id, so that a release only ends the start it
    /// was spawned for.
    starts: Arc<Mutex<BTreeMap<String, u64>>>,
    releases: Mutex<JoinSet<()>>,
}

impl NodeRuntime {
    /// A runtime over `sim`, with `pacing`.
    pub(crate) fn new(sim: SimulatorRuntime, pacing: Pacing) -> Self {
        NodeRuntime {
            sim,
            pacing,
            starts: Arc::default(),
            releases: Mutex::new(JoinSet::new()),
        }
    }

    /// The simulator underneath (its instances are the node's workloads).
    pub(crate) fn simulator(&self) -> &SimulatorRuntime {
        &self.sim
    }

    fn is_live(&self, id: &str) -> bool {
        matches!(
            self.sim.state(id),
            Some(InstanceState::Starting | InstanceState::Running)
        )
    }

    /// Counts a new start of `id` and returns its number.
    fn next_start(&self, id: &str) -> u64 {
        let mut starts = self.starts.lock().unwrap_or_else(PoisonError::into_inner);
        let count = starts.entry(id.to_owned()).or_insert(0);
        *count += 1;
        *count
    }

    /// Spawns the release of start number `start` of `id`, due after the start delay.
    fn release_later(&self, id: String, start: u64) {
        let faults: Faults = self.sim.faults();
        let starts = Arc::clone(&self.starts);
        let delay = self.pacing.start_delay;
        let mut releases = self.releases.lock().unwrap_or_else(PoisonError::into_inner);
        while releases.try_join_next().is_some() {} // forget the finished ones
        releases.spawn(async move {
            tokio::time::sleep(delay).await;
            let current = starts
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(&id)
                .copied();
            if current == Some(start) {
                faults.release(&id);
            }
        });
    }
}

impl Runtime for NodeRuntime {
    async fn ensure_running(&self, spec: &InstanceSpec) -> Result<(), RuntimeError> {
        let fresh = self.sim.state(&spec.id).is_none_or(|s| s.has_ended());
        if self.pacing.start_delay.is_zero() || !fresh {
            return self.sim.ensure_running(spec).await;
        }
        let start = self.next_start(&spec.id);
        self.sim.faults().slow_start(spec.id.clone());
        let started = self.sim.ensure_running(spec).await;
        match started {
            Ok(()) => self.release_later(spec.id.clone(), start),
            // A failed start leaves the mark in place: take it away, so that it does not
            // slow a later start down without a release.
            Err(_) => {
                self.sim.faults().release(&spec.id);
            }
        }
        started
    }

    async fn ensure_stopped(&self, id: &str, grace: Duration) -> Result<(), RuntimeError> {
        if !self.pacing.stop_delay.is_zero() && self.is_live(id) {
            tokio::time::sleep(self.pacing.stop_delay).await;
        }
        self.sim.ensure_stopped(id, grace).await
    }

    async fn remove(&self, id: &str) -> Result<(), RuntimeError> {
        self.sim.remove(id).await
    }

    async fn observe(&self) -> Result<Vec<ObservedInstance>, RuntimeError> {
        self.sim.observe().await
    }

    async fn observe_some(
        &self,
        ids: &BTreeSet<String>,
    ) -> Result<Vec<ObservedInstance>, RuntimeError> {
        self.sim.observe_some(ids).await
    }

    async fn stats(&self, id: &str) -> Result<InstanceStats, RuntimeError> {
        self.sim.stats(id).await
    }

    async fn logs(&self, id: &str, lines: usize) -> Result<String, RuntimeError> {
        self.sim.logs(id, lines).await
    }

    async fn exec(
        &self,
        id: &str,
        command: &[String],
        timeout: Duration,
    ) -> Result<ExecOutput, RuntimeError> {
        self.sim.exec(id, command, timeout).await
    }

    async fn update_files(&self, id: &str, files: &[FileSpec]) -> Result<(), RuntimeError> {
        self.sim.update_files(id, files).await
    }

    async fn network_probe(&self, id: &str) -> Option<Result<(), String>> {
        self.sim.network_probe(id).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pacing(start: u64, stop: u64) -> Pacing {
        Pacing {
            start_delay: Duration::from_secs(start),
            stop_delay: Duration::from_secs(stop),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_start_is_starting_for_the_start_delay_then_runs() {
        let runtime = NodeRuntime::new(SimulatorRuntime::new(), pacing(3, 0));
        runtime
            .ensure_running(&InstanceSpec::new("a", "img"))
            .await
            .expect("start");
        tokio::time::sleep(Duration::from_millis(2_900)).await;
        assert_eq!(
            runtime.simulator().state("a"),
            Some(InstanceState::Starting)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(runtime.simulator().state("a"), Some(InstanceState::Running));
    }

    #[tokio::test(start_paused = true)]
    async fn a_release_ends_only_the_start_it_was_spawned_for() {
        let runtime = NodeRuntime::new(SimulatorRuntime::new(), pacing(3, 0));
        let spec = InstanceSpec::new("a", "img");
        runtime.ensure_running(&spec).await.expect("start");
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(runtime.simulator().faults().crash("a", 1));
        runtime.ensure_running(&spec).await.expect("restart");
        tokio::time::sleep(Duration::from_secs(2)).await; // the first release is due: ignored
        assert_eq!(
            runtime.simulator().state("a"),
            Some(InstanceState::Starting)
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(runtime.simulator().state("a"), Some(InstanceState::Running));
    }

    #[tokio::test(start_paused = true)]
    async fn a_running_instance_is_not_slowed_and_a_failed_start_leaves_no_mark() {
        let runtime = NodeRuntime::new(SimulatorRuntime::new(), pacing(3, 0));
        let spec = InstanceSpec::new("a", "img");
        runtime.simulator().faults().fail_next_start("a", "boom");
        assert!(runtime.ensure_running(&spec).await.is_err());
        let plain = NodeRuntime::new(runtime.simulator().clone(), Pacing::default());
        plain.ensure_running(&spec).await.expect("start");
        assert_eq!(runtime.simulator().state("a"), Some(InstanceState::Running));
        runtime.ensure_running(&spec).await.expect("already runs");
        assert_eq!(runtime.simulator().state("a"), Some(InstanceState::Running));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stop_of_a_live_instance_takes_the_stop_delay() {
        let runtime = NodeRuntime::new(SimulatorRuntime::new(), pacing(0, 2));
        runtime
            .ensure_running(&InstanceSpec::new("a", "img"))
            .await
            .expect("start");
        let began = tokio::time::Instant::now();
        runtime
            .ensure_stopped("a", Duration::ZERO)
            .await
            .expect("stop");
        assert_eq!(began.elapsed(), Duration::from_secs(2));
        assert_eq!(runtime.simulator().state("a"), Some(InstanceState::Stopped));
        let again = tokio::time::Instant::now();
        runtime
            .ensure_stopped("a", Duration::ZERO)
            .await
            .expect("stop");
        assert_eq!(
            again.elapsed(),
            Duration::ZERO,
            "an ended instance stops at once"
        );
    }
}
