//! [`Work`]: the agent's runtime actions, one lane per instance, several lanes at once.
//!
//! Instances are independent: a pull or a slow start of one must never hold back another's
//! stop, start or probe. So every runtime action belongs to the lane of the instance it acts
//! on (an init step's to its instance's), each lane runs its actions one at a time and in the
//! order they were queued, and up to [`AgentConfig::parallel_actions`](super::AgentConfig)
//! lanes run at once. Observing the runtime is the node's, not an instance's: at most one
//! observation is in flight, beside the lanes.
//!
//! An observation taken while a lane was acting can predate that action's effect; the
//! completion counter ([`Work::finished`]) lets a pass tell which lanes it must not judge on
//! such an observation.
//!
//! An observation need not look at every instance: the work remembers the lanes that finished
//! an action since an observation covering them was sent ([`Work::unobserved`]), which the next
//! one must cover.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::action::Action;
use super::machine::RuntimeOp;

/// Why the runtime is observed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Observe {
    /// To decide a pass.
    Decide,
    /// To report what the actions did, or how a start in flight is doing (a pull's progress).
    Report,
}

/// One queued runtime action.
#[derive(Debug)]
struct Job {
    action: Action,
    op: RuntimeOp,
}

/// An observation in flight: why, and how many actions had finished when it was sent.
#[derive(Clone, Copy, Debug)]
pub(super) struct Observing {
    pub purpose: Observe,
    pub after: u64,
}

/// The runtime work of one agent: lanes of queued actions, those in flight, the observation.
#[derive(Debug)]
pub(super) struct Work {
    limit: usize,
    waiting: BTreeMap<String, VecDeque<Job>>,
    /// The lanes acting now, with the action in flight.
    running: BTreeMap<String, RuntimeOp>,
    observing: Option<Observing>,
    /// The runtime ids the observation in flight covers (`None`: every instance), and the
    /// lanes it took out of `unobserved` (given back should it fail).
    covering: (Option<BTreeSet<String>>, BTreeSet<String>),
    /// Lanes that finished an action since an observation that covers them was sent.
    unobserved: BTreeSet<String>,
    /// Actions finished so far.
    finished: u64,
    /// For each lane, the value of `finished` its last action finished at.
    done_at: BTreeMap<String, u64>,
}

impl Work {
    /// Work with up to `limit` lanes acting at once (at least one).
    pub(super) fn new(limit: usize) -> Self {
        Work {
            limit: limit.max(1),
            waiting: BTreeMap::new(),
            running: BTreeMap::new(),
            observing: None,
            covering: (None, BTreeSet::new()),
            unobserved: BTreeSet::new(),
            finished: 0,
            done_at: BTreeMap::new(),
        }
    }

    /// Queues `action` on `lane`, after whatever the lane already holds.
    pub(super) fn push(&mut self, lane: &str, (action, op): (Action, RuntimeOp)) {
        self.waiting
            .entry(lane.to_owned())
            .or_default()
            .push_back(Job { action, op });
    }

    /// Drops what `lane` has queued (not what is in flight): it was decided on a placement that
    /// changed since.
    pub(super) fn forget_waiting(&mut self, lane: &str) {
        self.waiting.remove(lane);
    }

    /// Drops everything queued (the placements were listed anew).
    pub(super) fn forget_all_waiting(&mut self) {
        self.waiting.clear();
    }

    /// Whether `lane` has an action queued or in flight.
    pub(super) fn busy(&self, lane: &str) -> bool {
        self.running.contains_key(lane) || self.waiting.contains_key(lane)
    }

    /// Whether no action is queued or in flight (an observation may be).
    pub(super) fn is_idle(&self) -> bool {
        self.running.is_empty() && self.waiting.is_empty()
    }

    /// Whether a start (of an instance or an init step) is in flight.
    pub(super) fn starting(&self) -> bool {
        self.running
            .values()
            .any(|op| matches!(op, RuntimeOp::Start(_) | RuntimeOp::StartInit(..)))
    }

    /// The next action to perform: the first of the first idle lane that has one, while fewer
    /// than the limit act.
    pub(super) fn next(&mut self) -> Option<(Action, RuntimeOp)> {
        if self.running.len() >= self.limit {
            return None;
        }
        let lane = self
            .waiting
            .keys()
            .find(|lane| !self.running.contains_key(*lane))?
            .clone();
        let jobs = self.waiting.get_mut(&lane)?;
        let job = jobs.pop_front()?;
        if jobs.is_empty() {
            self.waiting.remove(&lane);
        }
        self.running.insert(lane, job.op.clone());
        Some((job.action, job.op))
    }

    /// The action in flight whose outcome names runtime id `id` is over: its op, and its lane is
    /// free for the next. `None` if no such action is in flight (an outcome from before a
    /// restart of the loop).
    pub(super) fn finish(&mut self, id: &str) -> Option<RuntimeOp> {
        let lane = self
            .running
            .iter()
            .find(|(_, op)| op.runtime_id() == id)
            .map(|(lane, _)| lane.clone())?;
        let op = self.running.remove(&lane)?;
        self.finished += 1;
        self.done_at.insert(lane.clone(), self.finished);
        self.unobserved.insert(lane);
        Some(op)
    }

    /// The lanes that finished an action since an observation covering them was sent.
    pub(super) fn unobserved(&self) -> &BTreeSet<String> {
        &self.unobserved
    }

    /// The lanes a start (of an instance or an init step) is in flight on.
    pub(super) fn starting_lanes(&self) -> impl Iterator<Item = &String> {
        let starts = self.running.iter();
        starts
            .filter(|(_, op)| matches!(op, RuntimeOp::Start(_) | RuntimeOp::StartInit(..)))
            .map(|(lane, _)| lane)
    }

    /// Whether an observation may start (none is in flight).
    pub(super) fn can_observe(&self) -> bool {
        self.observing.is_none()
    }

    /// Starts an observation for `purpose` of the runtime ids `covers` (`None`: every
    /// instance); `false` if one is in flight already. The lanes it covers are observed.
    pub(super) fn observe(&mut self, purpose: Observe, covers: Option<BTreeSet<String>>) -> bool {
        if self.observing.is_some() {
            return false;
        }
        self.observing = Some(Observing {
            purpose,
            after: self.finished,
        });
        let taken = match &covers {
            None => std::mem::take(&mut self.unobserved),
            Some(ids) => {
                let taken = self.unobserved.intersection(ids).cloned().collect();
                self.unobserved.retain(|lane| !ids.contains(lane));
                taken
            }
        };
        self.covering = (covers, taken);
        true
    }

    /// The observation in flight, if any.
    pub(super) fn observing(&self) -> Option<Observing> {
        self.observing
    }

    /// The observation in flight is over: why it was made, and the runtime ids it covers
    /// (`None`: every instance). One that `failed` leaves the lanes it covered to the next.
    pub(super) fn observed(
        &mut self,
        failed: bool,
    ) -> Option<(Observing, Option<BTreeSet<String>>)> {
        let seen = self.observing.take()?;
        let (covers, taken) = std::mem::take(&mut self.covering);
        if failed {
            self.unobserved.extend(taken);
        }
        Some((seen, covers))
    }

    /// Whether `lane` finished an action after the observation `seen` was sent: that
    /// observation may not show what it did.
    pub(super) fn changed_since(&self, lane: &str, seen: Observing) -> bool {
        self.done_at.get(lane).is_some_and(|at| *at > seen.after)
    }

    /// Forgets the completion marks of lanes no observation in flight needs any more.
    pub(super) fn forget_marks(&mut self) {
        if self.observing.is_none() {
            self.done_at.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stop(id: &str) -> (Action, RuntimeOp) {
        (
            Action::Remove {
                id: id.to_owned(),
                data: None,
            },
            RuntimeOp::Remove(id.to_owned()),
        )
    }

    #[test]
    fn lanes_run_at_once_up_to_the_limit_each_in_its_order() {
        let mut work = Work::new(2);
        for (lane, id) in [("a", "a.init0"), ("a", "a"), ("b", "b"), ("c", "c")] {
            work.push(lane, stop(id));
        }
        let first = work.next().map(|(_, op)| op.runtime_id().into_owned());
        let second = work.next().map(|(_, op)| op.runtime_id().into_owned());
        assert_eq!(
            (first.as_deref(), second.as_deref()),
            (Some("a.init0"), Some("b"))
        );
        assert!(work.next().is_none(), "two lanes act: the limit");
        assert!(work.finish("b").is_some());
        let third = work.next().map(|(_, op)| op.runtime_id().into_owned());
        assert_eq!(third.as_deref(), Some("c"), "a waits for its step; c goes");
        assert!(work.finish("a.init0").is_some());
        let fourth = work.next().map(|(_, op)| op.runtime_id().into_owned());
        assert_eq!(fourth.as_deref(), Some("a"), "then a, after its step");
        assert!(work.finish("nobody").is_none());
    }

    #[test]
    fn an_observation_knows_which_lanes_acted_after_it_was_sent() {
        let mut work = Work::new(4);
        work.push("a", stop("a"));
        let _ = work.next();
        assert!(work.observe(Observe::Decide, None));
        assert!(
            !work.observe(Observe::Report, None),
            "one observation at a time"
        );
        let seen = work.observing().expect("in flight");
        work.finish("a");
        assert!(work.changed_since("a", seen));
        assert!(!work.changed_since("b", seen));
        work.observed(false);
        work.forget_marks();
        assert!(work.observe(Observe::Decide, None));
        let later = work.observing().expect("in flight");
        assert!(!work.changed_since("a", later));
    }

    #[test]
    fn what_finished_waits_for_an_observation_that_covers_it() {
        let mut work = Work::new(4);
        for lane in ["a", "b"] {
            work.push(lane, stop(lane));
            let _ = work.next();
            work.finish(lane);
        }
        let only_a = BTreeSet::from(["a".to_owned()]);
        assert!(work.observe(Observe::Report, Some(only_a.clone())));
        assert_eq!(work.unobserved(), &BTreeSet::from(["b".to_owned()]));
        assert_eq!(
            work.observed(true).and_then(|(_, c)| c),
            Some(only_a.clone())
        );
        assert_eq!(
            work.unobserved().len(),
            2,
            "a failed observation covered nothing"
        );
        assert!(work.observe(Observe::Report, Some(only_a)));
        work.observed(false);
        assert!(work.observe(Observe::Decide, None));
        assert!(
            work.unobserved().is_empty(),
            "every instance covers every lane"
        );
    }
}
