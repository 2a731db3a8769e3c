//! Init progress: where each instance stands in its service's init steps, as derived from what
//! its node's agent reports, and the per-service summary the init controller keeps.

use serde::{Deserialize, Serialize};

use super::{InstanceObservation, ObservedState};

/// How many instances an [`InitStatus`] names one by one; the others are only counted.
pub const INIT_LISTED: usize = 10;

/// Where one instance stands in its init steps.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "snake_case")]
pub enum InitPhase {
    /// No init step started yet: the instance waits for its node, its image, its spec or a
    /// secret.
    Waiting,
    /// Step `step` (counted from 1) of `of` runs.
    Running {
        /// The step running, from 1.
        step: u32,
        /// How many steps there are.
        of: u32,
    },
    /// Step `step` of `of` failed `failures` times since the step before it passed; the agent
    /// tries it again on its restart schedule (or, under restart `never`, gave up).
    Failed {
        /// The step that failed, from 1.
        step: u32,
        /// How many steps there are.
        of: u32,
        /// Failed attempts of that step so far.
        failures: u32,
        /// Why the last attempt failed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        /// The last lines the last attempt printed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        output: Option<String>,
    },
    /// Every step passed (or there are none): the main process may start.
    Done,
}

impl InitPhase {
    /// The phase of an instance whose agent reported `observation` (`None`: nothing reported,
    /// or a stale report) for a version with `steps` init steps.
    ///
    /// An instance whose main process ever ran is [`Done`](Self::Done): the agent starts it only
    /// after every step passed.
    pub fn of(observation: Option<&InstanceObservation>, steps: u32) -> InitPhase {
        let Some(o) = observation else {
            return if steps == 0 {
                InitPhase::Done
            } else {
                InitPhase::Waiting
            };
        };
        let steps = steps.max(o.init_steps);
        if o.init_done >= steps || matches!(o.state, ObservedState::Running) {
            return InitPhase::Done;
        }
        let step = o.init_done + 1;
        if o.init_failures > 0 {
            return InitPhase::Failed {
                step,
                of: steps,
                failures: o.init_failures,
                reason: o.reason.clone(),
                output: o.init_output.clone(),
            };
        }
        match o.state {
            ObservedState::Starting => InitPhase::Running { step, of: steps },
            _ if o.init_done > 0 => InitPhase::Running { step, of: steps },
            _ => InitPhase::Waiting,
        }
    }

    /// The phase in a few words: `waiting`, `step 2 of 3`, `step 2 of 3 failed 4 times`,
    /// `done`.
    pub fn describe(&self) -> String {
        match self {
            InitPhase::Waiting => "waiting".to_owned(),
            InitPhase::Running { step, of } => format!("step {step} of {of} running"),
            InitPhase::Failed {
                step, of, failures, ..
            } if *failures == 1 => format!("step {step} of {of} failed once"),
            InitPhase::Failed {
                step, of, failures, ..
            } => format!("step {step} of {of} failed {failures} times"),
            InitPhase::Done => "done".to_owned(),
        }
    }
}

/// One instance an [`InitStatus`] names.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceInit {
    /// The instance id.
    pub id: String,
    /// The node it is placed on, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Where it stands.
    #[serde(flatten)]
    pub phase: InitPhase,
}

/// `status/init/{svc}`: how far a service's instances are through their init steps, kept by
/// the init controller for every service whose spec has init steps.
///
/// Counts cover the instances meant to run (not those asked to stop). At most
/// [`INIT_LISTED`] instances are named, failed ones first, then running, then waiting, each
/// group by id; an instance whose init is done is only counted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct InitStatus {
    /// Init steps of the service's desired spec.
    pub steps: u32,
    /// Instances waiting to begin.
    pub waiting: u32,
    /// Instances running a step.
    pub running: u32,
    /// Instances whose current step failed.
    pub failed: u32,
    /// Instances whose init is done.
    pub done: u32,
    /// The instances not done, as many as [`INIT_LISTED`].
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub instances: Vec<InstanceInit>,
}

impl InitStatus {
    /// Whether every instance counted is done.
    pub fn is_done(&self) -> bool {
        self.waiting + self.running + self.failed == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(state: ObservedState, done: u32, failures: u32) -> InstanceObservation {
        InstanceObservation {
            state,
            init_steps: 3,
            init_done: done,
            init_failures: failures,
            ..InstanceObservation::default()
        }
    }

    #[test]
    fn the_phase_follows_the_report() {
        use ObservedState::*;
        assert_eq!(InitPhase::of(None, 3), InitPhase::Waiting);
        assert_eq!(InitPhase::of(None, 0), InitPhase::Done);
        assert_eq!(
            InitPhase::of(Some(&seen(Pending, 0, 0)), 3),
            InitPhase::Waiting
        );
        assert_eq!(
            InitPhase::of(Some(&seen(Starting, 1, 0)), 3),
            InitPhase::Running { step: 2, of: 3 }
        );
        let failed = InitPhase::of(Some(&seen(Starting, 2, 4)), 3);
        assert_eq!(failed.describe(), "step 3 of 3 failed 4 times");
        assert_eq!(
            InitPhase::of(Some(&seen(Running, 0, 0)), 3),
            InitPhase::Done
        );
        assert_eq!(
            InitPhase::of(Some(&seen(Starting, 3, 0)), 3),
            InitPhase::Done
        );
    }

    #[test]
    fn an_instance_reads_back_flat() {
        let one = InstanceInit {
            id: "web-i1".into(),
            node: Some("n1".into()),
            phase: InitPhase::Running { step: 1, of: 2 },
        };
        let text = serde_json::to_string(&one).expect("encodes");
        assert_eq!(
            text,
            r#"{"id":"web-i1","node":"n1","phase":"running","step":1,"of":2}"#
        );
        let back: InstanceInit = serde_json::from_str(&text).expect("decodes");
        assert_eq!(back, one);
    }
}
