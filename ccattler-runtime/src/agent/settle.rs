//! Which placed instances the periodic pass must decide for: those a pass left unsettled.
//!
//! Every [`AgentConfig::sync_interval`](super::AgentConfig::sync_interval) the agent observes
//! every instance the runtime holds, so that what changed on its own (a crash, an exit, an
//! instance removed behind its back) is seen. Deciding for every placed instance as well cost
//! what the node holds, every interval, whatever changed: at a hundred instances a node, most
//! of an idle cluster's CPU. An instance that runs as placed, with nothing pending, is settled:
//! a pass decides nothing for it until its sample, its placement, its spec or its secrets
//! change, and each of those marks it for the next pass. So the periodic pass decides for the
//! instances whose runtime sample changed and for the unsettled ones (starting, retrying,
//! waiting for a spec or a secret, stopping, failed, busy), which time alone can move on.
//!
//! Probes are not a reason to be unsettled: they are planned over every track each pass
//! (the pass's probe planning). The first pass, a pass after a list (every resync), and one
//! after specs or secrets arrive still decide for every instance.

use ccattler_core::InstanceState;
use ccattler_core::schema::DesiredState;

use super::machine::AgentLoop;
use super::plan::Track;
use super::scope::Scope;

impl AgentLoop {
    /// Whether a pass would decide nothing for placed instance `id` until something about it
    /// changes (see the module's docs): placed to run, seen running, started here or adopted,
    /// with no retry, renewal, wait, failure or condemnation pending and its lane idle; or
    /// placed stopped and seen ended (or not held, with its stop confirmed).
    fn is_settled(&self, id: &str) -> bool {
        let Some(assignment) = self.desired.placements.get(id) else {
            return true; // not placed: an orphan's changes mark it
        };
        if self.work.busy(id) {
            return false;
        }
        let seen = self.observed.get(id).map(|s| &s.instance.state);
        let track = self.tracks.get(id);
        if assignment.state == DesiredState::Stopped {
            return match seen {
                Some(state) => state.has_ended(),
                None => !track.is_some_and(Track::unconfirmed_stop),
            };
        }
        track.is_some_and(|track| {
            track.retry_at.is_none()
                && track.renew.is_none()
                && track.waiting.is_none()
                && track.failure.is_none()
                && track.init_failure.is_none()
                && track.condemned.is_none()
                && !track.anew
                && track.started.is_some()
        }) && seen == Some(&InstanceState::Running)
    }

    /// After a pass decided for `scope`: forgets the unsettled mark of those it settled, and
    /// marks the others.
    pub(super) fn settle(&mut self, scope: &Scope) {
        match scope.ids() {
            None => {
                let unsettled = self
                    .desired
                    .placements
                    .keys()
                    .filter(|id| !self.is_settled(id))
                    .cloned()
                    .collect();
                self.unsettled = unsettled;
            }
            Some(ids) => {
                for id in ids {
                    if self.is_settled(id) {
                        self.unsettled.remove(id);
                    } else if !self.unsettled.contains(id) {
                        self.unsettled.insert(id.clone());
                    }
                }
            }
        }
    }

    /// Marks the unsettled instances still placed for the next pass (the periodic one), and
    /// forgets those no longer placed.
    pub(super) fn mark_unsettled(&mut self) {
        let placements = &self.desired.placements;
        self.unsettled.retain(|id| placements.contains_key(id));
        for id in &self.unsettled {
            self.pass_scope.mark(id);
        }
    }
}
