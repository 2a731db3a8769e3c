//! What work costs in virtual time, and the processors it waits for.
//!
//! A simulation without a cost of work is blind to starvation: a pass over 100,000 facts would
//! take no longer than a pass over ten, and nothing would ever wait behind it. So every
//! reconcile and every agent action is charged a time in proportion to what it handles
//! ([`WorkModel`]), and that time is spent on a processor:
//!
//! - **The control plane's cores.** Each server (the one runner, or each runner replica) has
//!   [`WorkModel::cores`] cores shared by all its controllers. A reconcile takes the core that
//!   frees first, for its cost; while every core is busy it waits. Its result reaches the loop
//!   when it is done: a controller whose pass queues behind another's hears of its own late,
//!   as on a real server with more work than processors.
//! - **A node's agent.** Each agent works one action at a time on its own machine: an action
//!   leaves once the agent has finished the ones before it, so a burst of reports or starts
//!   spreads out in time. Its inputs are still taken as they arrive (the pure loop has nothing
//!   to wait for); only what it sends waits.
//!
//! The lease keeper is not charged: it runs apart from all work, as the real keeper does.
//!
//! The defaults come from measurements of the real code (`sim_figures` prints what a run
//! charged beside the real time the same work took), rounded up.

use std::time::Duration;

/// What work costs in virtual time: every reconcile and every agent action is charged a time
/// in proportion to what it handles. A reconcile takes one of its server's
/// [`cores`](Self::cores) for that time (waiting while all are busy, so a pass queued behind
/// another hears of its own late); an agent works one action at a time, so a burst of its
/// reports spreads out. The lease keeper is not charged: it runs apart from all work.
///
/// | cost | default | measured (release build, 10,000 instances on 1,000 nodes) |
/// |---|---|---|
/// | [`cores`](Self::cores) | 2 per server | |
/// | [`reconcile`](Self::reconcile) | 1 ms, the least a reconcile takes | |
/// | [`per_fact`](Self::per_fact) | 200 ns per fact of the view a reconcile reads | 150 to 170 ns |
/// | [`per_change`](Self::per_change) | 5 us per change a reconcile proposes | |
/// | [`agent_action`](Self::agent_action) | 20 us per action an agent hands out | |
/// | [`agent_per_key`](Self::agent_per_key) | 2 us per key an agent's action writes or reads | |
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkModel {
    /// Cores of each control-plane server, shared by its controllers' reconciles.
    pub cores: usize,
    /// The least a reconcile takes.
    pub reconcile: Duration,
    /// What a reconcile costs per fact of the view it reads.
    pub per_fact: Duration,
    /// What a reconcile costs per change it proposes.
    pub per_change: Duration,
    /// What an agent's action costs the agent to hand out.
    pub agent_action: Duration,
    /// What an agent's action costs per key it writes, deletes or names.
    pub agent_per_key: Duration,
}

impl Default for WorkModel {
    fn default() -> Self {
        WorkModel {
            cores: 2,
            reconcile: Duration::from_millis(1),
            per_fact: Duration::from_nanos(200),
            per_change: Duration::from_micros(5),
            agent_action: Duration::from_micros(20),
            agent_per_key: Duration::from_micros(2),
        }
    }
}

impl WorkModel {
    /// Work that costs nothing beyond the least a reconcile takes (1 ms), on cores that never
    /// run out: what the simulation did before it charged work its cost. A run under it cannot
    /// show what waits behind a long pass.
    pub fn free() -> Self {
        WorkModel {
            cores: usize::MAX,
            reconcile: Duration::from_millis(1),
            per_fact: Duration::ZERO,
            per_change: Duration::ZERO,
            agent_action: Duration::ZERO,
            agent_per_key: Duration::ZERO,
        }
    }

    /// Sets the cores of each control-plane server (at least one).
    #[must_use]
    pub fn cores(mut self, cores: usize) -> Self {
        self.cores = cores.max(1);
        self
    }

    /// Sets what a reconcile costs per fact read and per change proposed.
    #[must_use]
    pub fn per_fact(mut self, per_fact: Duration, per_change: Duration) -> Self {
        self.per_fact = per_fact;
        self.per_change = per_change;
        self
    }

    /// Multiplies every cost by `factor` (a slower machine, or a heavier controller).
    #[must_use]
    pub fn slower(mut self, factor: u32) -> Self {
        self.reconcile = self.reconcile.saturating_mul(factor);
        self.per_fact = self.per_fact.saturating_mul(factor);
        self.per_change = self.per_change.saturating_mul(factor);
        self.agent_action = self.agent_action.saturating_mul(factor);
        self.agent_per_key = self.agent_per_key.saturating_mul(factor);
        self
    }

    /// What a reconcile of a view of `facts` facts proposing `changes` changes costs.
    pub fn reconcile_cost(&self, facts: usize, changes: usize) -> Duration {
        self.reconcile + times(self.per_fact, facts) + times(self.per_change, changes)
    }

    /// What an agent's action naming `keys` keys costs.
    pub fn agent_cost(&self, keys: usize) -> Duration {
        self.agent_action + times(self.agent_per_key, keys)
    }
}

fn times(unit: Duration, n: usize) -> Duration {
    unit.saturating_mul(u32::try_from(n).unwrap_or(u32::MAX))
}

/// The cores of one control-plane server: when each is free again.
#[derive(Clone, Debug)]
pub(crate) struct Cores {
    free_at: Vec<Duration>,
}

impl Cores {
    pub(crate) fn new(cores: usize) -> Self {
        // "Cores that never run out" need as many as work can be in flight at once: one per
        // controller is enough, and a few more cost nothing.
        Cores {
            free_at: vec![Duration::ZERO; cores.clamp(1, 64)],
        }
    }

    /// Runs work of `cost` that is ready at `now` on the core that frees first: returns when it
    /// starts and when it is done.
    pub(crate) fn run(&mut self, now: Duration, cost: Duration) -> (Duration, Duration) {
        let Some(core) = self.free_at.iter_mut().min() else {
            return (now, now + cost);
        };
        let start = (*core).max(now);
        *core = start + cost;
        (start, *core)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn work_waits_for_a_free_core_and_takes_the_one_that_frees_first() {
        let mut cores = Cores::new(2);
        assert_eq!(
            cores.run(Duration::ZERO, 10 * MS),
            (Duration::ZERO, 10 * MS)
        );
        assert_eq!(cores.run(Duration::ZERO, 4 * MS), (Duration::ZERO, 4 * MS));
        // Both busy: the third waits for the one free at 4 ms.
        assert_eq!(cores.run(MS, 3 * MS), (4 * MS, 7 * MS));
        // Work ready after every core is free starts at once.
        assert_eq!(cores.run(20 * MS, MS), (20 * MS, 21 * MS));
    }

    #[test]
    fn the_model_charges_in_proportion_to_what_is_read_and_written() {
        let model = WorkModel::default();
        let small = model.reconcile_cost(10, 0);
        let large = model.reconcile_cost(100_000, 1_000);
        assert_eq!(small, MS + 10 * model.per_fact);
        assert_eq!(
            large,
            MS + 100_000 * model.per_fact + 1_000 * model.per_change
        );
        assert_eq!(WorkModel::free().reconcile_cost(100_000, 1_000), MS);
        assert_eq!(
            model.clone().slower(3).agent_cost(2),
            3 * model.agent_cost(2)
        );
    }
}
