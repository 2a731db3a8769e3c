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

use std::collections::{BTreeMap, VecDeque};

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
        self.done_at.insert(lane, self.finished);
        Some(op)
    }

    /// Starts an observation for `purpose`; `false` if one is in flight already.
    pub(super) fn observe(&mut self, purpose: Observe) -> bool {
        if self.observing.is_some() {
            return false;
        }
        self.observing = Some(Observing {
            purpose,
            after: self.finished,
        });
        true
    }

    /// The observation in flight, if any.
    pub(super) fn observing(&self) -> Option<Observing> {
        self.observing
    }

    /// The observation in flight is over.
    pub(super) fn observed(&mut self) -> Option<Observing> {
        self.observing.take()
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
        assert!(work.observe(Observe::Decide));
        assert!(!work.observe(Observe::Report), "one observation at a time");
        let seen = work.observing().expect("in flight");
        work.finish("a");
        assert!(work.changed_since("a", seen));
        assert!(!work.changed_since("b", seen));
        work.observed();
        work.forget_marks();
        assert!(work.observe(Observe::Decide));
        let later = work.observing().expect("in flight");
        assert!(!work.changed_since("a", later));
    }
}
