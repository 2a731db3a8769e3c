//! [`Batches`]: one reconcile's changes, committed in as many transactions as the store's op
//! limit needs.
//!
//! # Why committing a pass in several transactions is as safe as one
//!
//! Each change keeps the guard it was given when the reconcile returned: the mod revision the
//! reconciled view held for its key. A later transaction of the same pass is built from those
//! guards, never from the live view (which watch events move on meanwhile), so a key another
//! writer changed since the reconcile read it conflicts in whichever transaction carries it,
//! exactly as it would in one. A pass writes each key once, so no transaction of a pass can
//! move a key that a later one guards. The commit marker is guarded in the first transaction by
//! the view's revision and in each later one by the revision of the transaction before, which
//! this loop wrote: a commit of any other loop of the controller in between conflicts. Every
//! transaction carries the fences. A conflict drops what is left of the pass and the loop
//! reconciles again, as after any conflict.
//!
//! What a pass loses against one transaction is atomicity: a reader may see the first
//! transactions of a pass before the rest. A controller whose changes must land together keeps
//! them within one transaction's op limit. What it gains: a pass of n changes costs one
//! reconcile instead of about n / limit, each of which would read and plan the whole view again
//! (quadratic in the pass).

use std::collections::VecDeque;

use super::step::MARKER_VALUE;
use crate::{Change, Compare, FactView, Key, Op, Revision, Txn};

/// The part of a reconcile's changes (and the events explaining them) not committed yet.
#[derive(Debug, Default)]
pub(super) struct Batches {
    /// Changes not committed yet, each with its guard from the reconciled view.
    changes: VecDeque<(Change, Revision)>,
    /// The events' puts, written after every change.
    events: VecDeque<Op>,
    /// The commit marker and the revision its next rewrite is guarded by.
    marker: Option<(Key, Revision)>,
}

impl Batches {
    /// The changes of a reconcile of `view`, guarded by what `view` holds; `marker` is the
    /// commit marker to rewrite in every transaction.
    pub(super) fn new(changes: Vec<Change>, view: &FactView, marker: Option<&Key>) -> Self {
        let held = |key: &Key| {
            view.get(key.as_str())
                .map(|f| f.mod_revision)
                .unwrap_or_default()
        };
        Batches {
            changes: changes
                .into_iter()
                .map(|change| {
                    let guard = held(change.key());
                    (change, guard)
                })
                .collect(),
            events: VecDeque::new(),
            marker: marker.map(|key| (key.clone(), held(key))),
        }
    }

    /// Adds an event's put, to be written after every change.
    pub(super) fn push_event(&mut self, op: Op) {
        self.events.push_back(op);
    }

    /// Whether everything was handed out.
    pub(super) fn is_done(&self) -> bool {
        self.changes.is_empty() && self.events.is_empty()
    }

    /// The next transaction, with `fences`, within `max_ops` operations and fences together
    /// (at least one change or event each, whatever the limit), and the changes it carries.
    pub(super) fn next_txn(&mut self, max_ops: usize, fences: &[Compare]) -> (Txn, Vec<Change>) {
        let overhead = usize::from(self.marker.is_some()) + fences.len();
        let room = max_ops.saturating_sub(overhead).max(1);
        let mut txn = Txn::new();
        let mut changes = Vec::new();
        while txn.then.len() < room {
            let Some((change, guard)) = self.changes.pop_front() else {
                break;
            };
            txn.compares
                .push(Compare::mod_revision(change.key().clone(), guard));
            txn.then.push(match &change {
                Change::Put { key, value } => Op::put(key.clone(), value.clone()),
                Change::Delete { key } => Op::delete(key.clone()),
            });
            changes.push(change);
        }
        while txn.then.len() < room {
            let Some(op) = self.events.pop_front() else {
                break;
            };
            txn.then.push(op);
        }
        if let Some((marker, guard)) = &self.marker {
            txn.compares
                .push(Compare::mod_revision(marker.clone(), *guard));
            txn.then.push(Op::put(marker.clone(), MARKER_VALUE));
        }
        txn.compares.extend(fences.iter().cloned());
        (txn, changes)
    }

    /// The transaction handed out last committed at `revision`: the next one guards the
    /// marker by it.
    pub(super) fn committed(&mut self, revision: Revision) {
        if let Some((_, guard)) = &mut self.marker {
            *guard = revision;
        }
    }
}
