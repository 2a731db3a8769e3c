//! [`ElectionLoop`]: leader election on a store lease, as a pure state machine.

use std::collections::VecDeque;
use std::time::Duration;

use super::{ElectionAction, LeaseElectionConfig};
#[cfg(doc)]
use crate::StoreError;
use crate::{CmpOp, Compare, CompareTarget, LeaseId, Revision};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    /// Campaigns once `at` has come.
    Candidate { at: Duration },
    /// A campaign sent at `sent` is in flight.
    Campaigning { sent: Duration },
    /// Someone else leads (the key existed at `from`): campaigns when the key is deleted after
    /// `from`, or at `until` in any case.
    Following { from: Revision, until: Duration },
    /// Leads.
    Leading(Term),
    /// Resigned for good.
    Resigned,
    /// Stopped for good after a fatal error.
    Stopped,
}

/// A request of the leader that is either due at a time or in flight since a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Pending {
    Due(Duration),
    Sent(Duration),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Term {
    pub(super) lease: LeaseId,
    /// The revision at which this leader created the key.
    pub(super) revision: Revision,
    /// The earliest time at which the store may let the lease expire.
    pub(super) expires_at: Duration,
    pub(super) renewal: Pending,
    /// `None` while the watch of the key runs; a check of the key after it failed.
    pub(super) check: Option<Pending>,
}

/// The leader-election protocol on a store lease, as a pure state machine.
///
/// # Expected flow
///
/// Inputs: [`tick`](Self::tick) (time moved), [`campaigned`](Self::campaigned),
/// [`renewed`](Self::renewed), [`checked`](Self::checked), [`event`](Self::event),
/// [`watch_failed`](Self::watch_failed), [`resign`](Self::resign). Outputs:
/// [`next_action`](Self::next_action) until `None`, then wait for a watch event or for
/// [`deadline`](Self::deadline). At most one request of each kind is outstanding at a time
/// (a leader may wait for a renewal and a check together).
///
/// # Protocol
///
/// - A candidate [campaigns](ElectionAction::Campaign): it grants a lease and creates the leader
///   key on it, guarded by "the key is absent". Winning at revision R makes it leader of term R,
///   with the fence `create_revision(key) == R` ([`ElectionAction::Won`]). Losing makes it watch
///   the key from the campaign's revision: it campaigns again when the key is deleted, or after
///   one TTL in any case. A store error retries the campaign after
///   [`retry`](LeaseElectionConfig::retry); an error waiting does not cure stops the loop
///   ([`ElectionAction::Fatal`]).
/// - A leader renews its lease every third of the TTL and watches its key. It has lost
///   ([`ElectionAction::Lost`]) when the key is deleted or re-created (another create
///   revision), when a renewal fails with an error that is not retryable (the lease is gone),
///   or when the lease could have expired (see below). Then it revokes its lease if that may
///   still live, and campaigns again at once.
///
/// # Renewal errors
///
/// A renewal that fails with an error that is not retryable (the lease is gone,
/// [`StoreError::LeaseNotFound`], or the request was denied) steps down at once. One that fails
/// with a retryable error ([`StoreError::is_retryable`]: the store is unreachable or slow) is
/// retried after `retry`, and the replica keeps leading **until the lease could have expired**:
/// until the time it sent the last request that the store answered by creating or renewing
/// the lease, plus the TTL the store granted then ([`lease_deadline`](Self::lease_deadline)).
/// The store counts a lease's TTL from when it handles the request, which is after the request
/// was sent, so before that deadline no other replica can have taken over; from then on one
/// may have, and the replica steps down without waiting for the store to answer. A renewal
/// still in flight at the deadline does not save the term. A campaign won but answered after
/// that deadline is not taken up: the lease is revoked and the loop campaigns again.
///
/// Stepping down at the first error would turn every transient error into a leaderless
/// TTL (the old lease still holds the key); leading on until the store answers would let a
/// partitioned replica believe it leads long after another took over. This rule is as safe as
/// the first (no replica can lead before the deadline anyway) without its outages.
///
/// # Guarantees
///
/// - **Fencing.** Every later term creates the key anew at a higher revision, so the fence of
///   term R fails once another replica leads, even for a leader that has not noticed yet.
/// - **No belief past the lease.** From its first tick at or after the lease deadline, the loop
///   no longer reports leading, provided the driver's clock does not run slower than the
///   store's. A paused process notices at its first tick after the pause; the commits it makes
///   before that are kept out by the fence.
/// - **Determinism.** No clock, no I/O, no randomness: the same inputs give the same actions.
#[derive(Debug)]
pub struct ElectionLoop {
    pub(super) config: LeaseElectionConfig,
    pub(super) phase: Phase,
    pub(super) now: Duration,
    pub(super) outbox: VecDeque<ElectionAction>,
}

impl ElectionLoop {
    /// A candidate that campaigns at its first [`next_action`](Self::next_action).
    pub fn new(config: LeaseElectionConfig) -> Self {
        ElectionLoop {
            config,
            phase: Phase::Candidate { at: Duration::ZERO },
            now: Duration::ZERO,
            outbox: VecDeque::new(),
        }
    }

    /// The settings.
    pub fn config(&self) -> &LeaseElectionConfig {
        &self.config
    }

    /// The term this replica leads (the revision at which it created the key), if it leads.
    pub fn term(&self) -> Option<Revision> {
        match self.phase {
            Phase::Leading(term) => Some(term.revision),
            _ => None,
        }
    }

    /// The lease of the term it leads, if it leads.
    pub fn lease(&self) -> Option<LeaseId> {
        match self.phase {
            Phase::Leading(term) => Some(term.lease),
            _ => None,
        }
    }

    /// The fence of the term it leads, if it leads: `create_revision(key) == term`.
    pub fn fence(&self) -> Option<Compare> {
        self.term().map(|term| self.fence_of(term))
    }

    /// While leading: the time at which the lease could have expired, when the loop steps down
    /// unless a renewal succeeded before.
    pub fn lease_deadline(&self) -> Option<Duration> {
        match self.phase {
            Phase::Leading(term) => Some(term.expires_at),
            _ => None,
        }
    }

    /// Whether the loop stopped for good (resigned, or a fatal error).
    pub fn is_stopped(&self) -> bool {
        matches!(self.phase, Phase::Resigned | Phase::Stopped)
    }

    /// The next time at which [`tick`](Self::tick) has work to do, if any.
    pub fn deadline(&self) -> Option<Duration> {
        match self.phase {
            Phase::Candidate { at } => Some(at),
            Phase::Following { until, .. } => Some(until),
            Phase::Leading(term) => {
                let due = |p: Option<Pending>| match p {
                    Some(Pending::Due(at)) => at,
                    _ => Duration::MAX,
                };
                Some(
                    term.expires_at
                        .min(due(Some(term.renewal)))
                        .min(due(term.check)),
                )
            }
            Phase::Campaigning { .. } | Phase::Resigned | Phase::Stopped => None,
        }
    }

    /// Time moved to `now` (monotonic, from the driver's origin). Call it before feeding inputs
    /// and before asking for actions.
    pub fn tick(&mut self, now: Duration) {
        self.now = self.now.max(now);
        match self.phase {
            Phase::Following { until, .. } if self.now >= until => {
                self.phase = Phase::Candidate { at: self.now };
            }
            Phase::Leading(term) if self.now >= term.expires_at => {
                let reason = format!(
                    "the lease could have expired at {:?} and no renewal succeeded since",
                    term.expires_at
                );
                self.lose(reason, true);
            }
            _ => {}
        }
    }

    /// The next thing the driver must do, or `None` when the loop waits.
    pub fn next_action(&mut self) -> Option<ElectionAction> {
        if let Some(action) = self.outbox.pop_front() {
            return Some(action);
        }
        let now = self.now;
        match &mut self.phase {
            Phase::Candidate { at } if now >= *at => {
                self.phase = Phase::Campaigning { sent: now };
                Some(ElectionAction::Campaign {
                    key: self.config.key.clone(),
                    identity: self.config.identity.clone(),
                    ttl: self.config.ttl,
                })
            }
            Phase::Leading(term) => match (term.renewal, term.check) {
                (Pending::Due(at), _) if now >= at => {
                    term.renewal = Pending::Sent(now);
                    Some(ElectionAction::Renew { lease: term.lease })
                }
                (_, Some(Pending::Due(at))) if now >= at => {
                    term.check = Some(Pending::Sent(now));
                    Some(ElectionAction::Check {
                        key: self.config.key.clone(),
                    })
                }
                _ => None,
            },
            _ => None,
        }
    }

    /// Stops for good: drops every pending action but the resignations, and resigns the term
    /// it leads ([`ElectionAction::Resign`], no [`ElectionAction::Lost`]). A campaign answered
    /// later has its lease revoked too.
    pub fn resign(&mut self) {
        self.outbox
            .retain(|action| matches!(action, ElectionAction::Resign { .. }));
        if let Phase::Leading(term) = self.phase {
            self.outbox
                .push_back(ElectionAction::Resign { lease: term.lease });
        }
        self.phase = Phase::Resigned;
    }

    pub(super) fn fence_of(&self, term: Revision) -> Compare {
        Compare::new(
            self.config.key.clone(),
            CmpOp::Equal,
            CompareTarget::CreateRevision(term),
        )
    }

    pub(super) fn watch_from(&mut self, from: Revision) {
        self.outbox.push_back(ElectionAction::Watch {
            key: self.config.key.clone(),
            from,
        });
    }

    pub(super) fn failed(&mut self, reason: String) {
        self.outbox.push_back(ElectionAction::Failed {
            reason,
            retry_in: self.config.retry,
        });
    }

    /// Ends the term: lost, the lease revoked when it `may_live`, a campaign at once.
    pub(super) fn lose(&mut self, reason: String, may_live: bool) {
        let Phase::Leading(term) = self.phase else {
            return;
        };
        self.outbox.push_back(ElectionAction::Lost {
            term: term.revision,
            reason,
        });
        if may_live {
            self.outbox
                .push_back(ElectionAction::Resign { lease: term.lease });
        }
        self.phase = Phase::Candidate { at: self.now };
    }
}
