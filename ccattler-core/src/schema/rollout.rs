//! Rollouts: where a service's move to a new spec version stands, the specs kept by version,
//! and what the user asks of a rollout (pause, resume, undo).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `rollout/service/{svc}`: the rollout controller's record of a service's rollout.
///
/// It decides the version in force ([`version`](Self::version)), which the intent resolver
/// copies into `effective/service/{svc}`; everything else says why. Times are milliseconds
/// since the Unix epoch, as the controller's clock gave them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Rollout {
    /// The version in force: what instances must run.
    pub version: String,
    /// The desired spec's version when the controller last judged the service.
    pub desired: String,
    /// The last version whose rollout completed, if any: what a failing rollout returns to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stable: Option<String>,
    /// Where the rollout stands.
    pub phase: RolloutPhase,
    /// Why it stands there, in a sentence.
    pub reason: String,
    /// The version rolled back from, while [`RolloutPhase::RolledBack`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rolled_back_from: Option<String>,
    /// When the version in force began rolling out.
    pub started_at: u64,
    /// When the rollout last made progress (more instances of the version ready than ever
    /// before in this rollout); the progress deadline counts from here.
    pub progress_at: u64,
    /// The most instances of the version seen ready at once in this rollout.
    pub best_ready: u32,
    /// Since when every instance of the version has been ready (the minimum ready time counts
    /// from here); `None` while some are not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready_since: Option<u64>,
    /// Failures seen of the version's instances in this rollout, by instance id: restarts,
    /// failed init attempts, and one more for an instance reported failed. Kept by id so that a failed instance that is
    /// replaced (and forgotten) still counts.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub failures: BTreeMap<String, u32>,
    /// The versions whose spec is kept under `rollout/spec/{svc}/{version}`, oldest first.
    pub kept: Vec<String>,
    /// The id of the last [`RolloutRequest`] handled.
    pub handled: u64,
}

impl Rollout {
    /// Failures counted in this rollout, over every instance.
    pub fn failure_count(&self) -> u32 {
        self.failures.values().sum()
    }
}

/// Where a rollout stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RolloutPhase {
    /// Instances are being moved to the version in force.
    #[default]
    Progressing,
    /// Every instance runs the version in force and has been ready for the minimum time.
    Complete,
    /// Held by the user: no instance is replaced for its version, and the desired version is
    /// not put in force, until resumed.
    Paused,
    /// The desired version failed (too many failures, or no progress by the deadline): the
    /// last stable version is in force again, until a new version is applied or the rollout
    /// is resumed.
    RolledBack,
    /// The version in force is failing and there is no earlier version to return to: it goes
    /// on trying.
    Failing,
}

impl RolloutPhase {
    /// The phase as status and the CLI print it (`progressing`, `rolled back`...).
    pub fn label(self) -> &'static str {
        match self {
            RolloutPhase::Progressing => "progressing",
            RolloutPhase::Complete => "complete",
            RolloutPhase::Paused => "paused",
            RolloutPhase::RolledBack => "rolled back",
            RolloutPhase::Failing => "failing",
        }
    }
}

/// `intent/rollout/{svc}`: what the user asks of a service's rollout, written through the API
/// (`cca rollout pause|resume|undo`). Each request has a new [`id`](Self::id); the rollout
/// controller acts on each id once and records it in [`Rollout::handled`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RolloutRequest {
    /// Unique and increasing per service (the API uses the time in milliseconds, raised past
    /// the last id if the clock went back).
    pub id: u64,
    /// What to do.
    #[serde(flatten)]
    pub action: RolloutAction,
}

/// One request of a rollout.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "action")]
pub enum RolloutAction {
    /// Hold the rollout where it is.
    Pause,
    /// Go on with the desired version: unpause, or try again a version that was rolled back
    /// or undone.
    Resume,
    /// Put an earlier version in force: `to_version`, or the version before the one in force.
    Undo {
        /// The version to return to; it must be one the rollout keeps.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        to_version: Option<String>,
    },
}
