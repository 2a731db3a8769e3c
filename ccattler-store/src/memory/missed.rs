//! Where in the history the events under one watched prefix are, while a watcher of that
//! prefix is behind: a watcher that catches up visits only its own events, not every event
//! written since it fell behind.
//!
//! Without it, a thousand agents each watching `placement/{node}/` that fell behind during a
//! burst would each scan the whole burst under the store's read lock to find their few events:
//! the cost of catching up grew with the writes times the watchers.

use std::collections::VecDeque;

/// The history sequence numbers of one prefix's events, recorded while a watcher of the prefix
/// is behind.
///
/// Invariant: when recording (`from` is set), every event under the prefix logged at sequence
/// number `from` or later and still needed is in `seqs`, in ascending order.
#[derive(Debug, Default)]
pub(crate) struct Missed {
    from: Option<u64>,
    seqs: VecDeque<u64>,
}

/// Where catching up goes next from a sequence number.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// The index does not cover that position: look at the events one by one.
    Unknown,
    /// The first event under the prefix at or after the position.
    At(u64),
    /// No event under the prefix at or after the position, up to the newest.
    None,
}

impl Missed {
    /// Recording nothing.
    pub(crate) const EMPTY: Missed = Missed {
        from: None,
        seqs: VecDeque::new(),
    };

    /// Notes the event at `seq` (under the prefix), offered to the prefix's watchers.
    /// `oldest_behind` is the first undelivered position of the furthest-behind watcher of the
    /// prefix (`None`: all are live, and recording stops); positions before it or before
    /// `first_kept` (the oldest one the history holds) are needed by no one and are dropped.
    pub(crate) fn record(&mut self, seq: u64, oldest_behind: Option<u64>, first_kept: u64) {
        let Some(oldest) = oldest_behind else {
            self.from = None;
            self.seqs.clear();
            return;
        };
        let from = self.from.get_or_insert(seq);
        self.seqs.push_back(seq);
        let needed = oldest.max(first_kept);
        while self.seqs.front().is_some_and(|&s| s < needed) {
            self.seqs.pop_front();
        }
        *from = (*from).max(needed.min(seq));
    }

    /// Where the next event under the prefix is, from position `seq` on.
    pub(crate) fn next(&self, seq: u64) -> Next {
        match self.from {
            Some(from) if from <= seq => {
                let at = self.seqs.partition_point(|&s| s < seq);
                self.seqs.get(at).map_or(Next::None, |&s| Next::At(s))
            }
            _ => Next::Unknown,
        }
    }

    /// How many positions are held (for tests of the bound).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.seqs.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn covers_nothing_until_a_watcher_is_behind() {
        let mut missed = Missed::default();
        missed.record(3, None, 0);
        assert_eq!(missed.next(0), Next::Unknown);
        missed.record(5, Some(5), 0);
        assert_eq!(missed.next(4), Next::Unknown, "before recording began");
        assert_eq!(missed.next(5), Next::At(5));
        assert_eq!(missed.next(6), Next::None);
        missed.record(9, Some(5), 0);
        assert_eq!(missed.next(6), Next::At(9));
    }

    #[test]
    fn keeps_only_what_a_behind_watcher_or_the_history_may_need() {
        let mut missed = Missed::default();
        for seq in 10..20 {
            missed.record(seq, Some(10), 0);
        }
        missed.record(20, Some(15), 0);
        assert_eq!(missed.len(), 6, "15 to 20");
        assert_eq!(missed.next(12), Next::Unknown, "no longer covered");
        assert_eq!(missed.next(15), Next::At(15));
        missed.record(21, Some(15), 18);
        assert_eq!(
            missed.next(15),
            Next::Unknown,
            "the history dropped 15 to 17"
        );
        assert_eq!(missed.next(18), Next::At(18));
        missed.record(22, None, 18);
        assert_eq!((missed.len(), missed.next(22)), (0, Next::Unknown));
    }
}
