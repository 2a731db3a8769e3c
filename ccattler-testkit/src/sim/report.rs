//! [`Report`]: what a run found.

use std::time::Duration;

use super::faults::{FaultKind, Schedule};
use super::{Trace, Violation};

/// What the work of a run cost: the virtual time the simulation charged it (its
/// [`WorkModel`](super::WorkModel)), the real time the same work took, and how long reconciles
/// waited for a core of their server.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Compute {
    /// Reconciles run.
    pub reconciles: u64,
    /// Facts of the views they read, summed.
    pub facts_read: u64,
    /// Virtual time charged for them.
    pub charged: Duration,
    /// Real time they took (varies from run to run; nothing in the run depends on it).
    pub measured: Duration,
    /// Virtual time they waited for a core, summed: work queued behind other work.
    pub waited: Duration,
    /// The longest a reconcile waited for a core.
    pub longest_wait: Duration,
    /// Actions the agents handed out.
    pub agent_actions: u64,
    /// Virtual time charged for them.
    pub agent_charged: Duration,
    /// Real time the agents' loops took to hand them out.
    pub agent_measured: Duration,
}

impl Compute {
    pub(crate) fn reconciled(
        &mut self,
        facts: usize,
        charged: Duration,
        waited: Duration,
        measured: Duration,
    ) {
        self.reconciles += 1;
        self.facts_read += facts as u64;
        self.charged += charged;
        self.measured += measured;
        self.waited += waited;
        self.longest_wait = self.longest_wait.max(waited);
    }

    pub(crate) fn agent_acted(&mut self, charged: Duration, measured: Duration) {
        self.agent_actions += 1;
        self.agent_charged += charged;
        self.agent_measured += measured;
    }
}

/// What a run found.
#[derive(Debug)]
#[non_exhaustive]
pub struct Report {
    /// The seed.
    pub seed: u64,
    /// The faults injected.
    pub schedule: Schedule,
    /// How often each kind fired (struck something).
    pub fired: Vec<(FaultKind, u64)>,
    /// When the last fault's effects ended (or the fault period did, if later).
    pub quiet_after: Duration,
    /// When the cluster was first seen converged after that, if it was.
    pub converged_at: Option<Duration>,
    /// The bound it had.
    pub settle: Duration,
    /// A controller that failed fatally.
    pub fatal: Option<String>,
    /// The first invariant broken (the run stopped there).
    pub violation: Option<Violation>,
    /// Events handled.
    pub steps: u64,
    /// What the work of the run cost.
    pub compute: Compute,
    /// The trace (as much as was kept).
    pub trace: Trace,
    /// The store at the end, summed up: each service's status and the placements per node.
    pub state: String,
}

impl Report {
    /// Whether the run converged in time, with no invariant broken and no fatal failure.
    pub fn passed(&self) -> bool {
        self.converged_at.is_some() && self.fatal.is_none() && self.violation.is_none()
    }

    /// How long convergence took after the faults stopped.
    pub fn time_to_converge(&self) -> Option<Duration> {
        self.converged_at
            .map(|at| at.saturating_sub(self.quiet_after))
    }

    /// A paragraph for a failed run: the seed, what failed, and the trace's last lines.
    pub fn explain(&self) -> String {
        let verdict = match (&self.fatal, self.converged_at) {
            _ if self.violation.is_some() => self
                .violation
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default(),
            (Some(fatal), _) => fatal.clone(),
            (None, None) => format!(
                "not converged within {:?} after the last fault (at {:?})",
                self.settle, self.quiet_after
            ),
            (None, Some(at)) => format!("converged at {at:?}"),
        };
        let mut faults: Vec<String> = self
            .schedule
            .faults
            .iter()
            .take(12)
            .map(|f| format!("  {f}"))
            .collect();
        if self.schedule.faults.len() > faults.len() {
            faults.push(format!(
                "  ... {} more",
                self.schedule.faults.len() - faults.len()
            ));
        }
        format!(
            "seed {}: {verdict}\nthe cluster {}\nits {} faults:\n{}\nlast lines of the trace:\n{}",
            self.seed,
            self.state,
            self.schedule.faults.len(),
            faults.join("\n"),
            self.trace.tail(40)
        )
    }
}
