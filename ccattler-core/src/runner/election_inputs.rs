//! The inputs of [`ElectionLoop`]: the answers to its store requests, and its watch's events.

use std::time::Duration;

use super::election::{ElectionLoop, Pending, Phase, Term};
use super::{CampaignAnswer, ElectionAction};
use crate::{EventKind, Fact, Revision, StoreError, WatchEvent};

impl ElectionLoop {
    /// The answer to an [`ElectionAction::Campaign`].
    pub fn campaigned(&mut self, result: Result<CampaignAnswer, StoreError>) {
        let Phase::Campaigning { sent } = self.phase else {
            // Not asked for (the loop resigned meanwhile): a lease won now is nobody's.
            if let Ok(CampaignAnswer::Won { lease, .. }) = result {
                self.outbox
                    .push_back(ElectionAction::Resign { lease: lease.id });
            }
            return;
        };
        match result {
            Ok(CampaignAnswer::Won { lease, revision }) => {
                let expires_at = sent.saturating_add(lease.ttl);
                if self.now >= expires_at {
                    self.outbox
                        .push_back(ElectionAction::Resign { lease: lease.id });
                    self.phase = Phase::Candidate { at: self.now };
                    return;
                }
                self.phase = Phase::Leading(Term {
                    lease: lease.id,
                    revision,
                    expires_at,
                    renewal: Pending::Due(self.now.saturating_add(self.config.ttl / 3)),
                    check: None,
                });
                self.outbox.push_back(ElectionAction::Won {
                    term: revision,
                    lease: lease.id,
                    fence: self.fence_of(revision),
                });
                self.watch_from(revision.next());
            }
            Ok(CampaignAnswer::Taken { revision }) => {
                self.phase = Phase::Following {
                    from: revision,
                    until: self.now.saturating_add(self.config.ttl),
                };
                self.watch_from(revision.next());
            }
            Err(err) if err.is_retryable() => {
                self.phase = Phase::Candidate {
                    at: self.now.saturating_add(self.config.retry),
                };
                self.failed(format!("campaign failed: {err}"));
            }
            Err(error) => {
                self.phase = Phase::Stopped;
                self.outbox.push_back(ElectionAction::Fatal { error });
            }
        }
    }

    /// The answer to an [`ElectionAction::Renew`]: the TTL the lease lives from then on.
    pub fn renewed(&mut self, result: Result<Duration, StoreError>) {
        let Phase::Leading(term) = &mut self.phase else {
            return;
        };
        let Pending::Sent(sent) = term.renewal else {
            return;
        };
        match result {
            Ok(ttl) => {
                term.expires_at = term.expires_at.max(sent.saturating_add(ttl));
                term.renewal = Pending::Due(self.now.saturating_add(self.config.ttl / 3));
            }
            Err(err) if err.is_retryable() => {
                term.renewal = Pending::Due(self.now.saturating_add(self.config.retry));
                let until = term.expires_at;
                self.failed(format!(
                    "renewing the leader lease failed: {err}; leading until {until:?} at most"
                ));
            }
            Err(err) => {
                let may_live = !matches!(err, StoreError::LeaseNotFound(_));
                self.lose(format!("renewing the leader lease failed: {err}"), may_live);
            }
        }
    }

    /// The answer to an [`ElectionAction::Check`]: the store's revision, then the leader key.
    pub fn checked(&mut self, result: Result<(Revision, Option<Fact>), StoreError>) {
        let Phase::Leading(term) = &mut self.phase else {
            return;
        };
        if !matches!(term.check, Some(Pending::Sent(_))) {
            return;
        }
        match result {
            Ok((revision, Some(fact))) if fact.create_revision == term.revision => {
                term.check = None;
                self.watch_from(revision.next());
            }
            Ok((_, Some(fact))) => {
                let reason = format!(
                    "the leader key was re-created at revision {} (a later term)",
                    fact.create_revision
                );
                self.lose(reason, true);
            }
            Ok((_, None)) => self.lose("the leader key is gone".to_owned(), true),
            Err(err) => {
                term.check = Some(Pending::Due(self.now.saturating_add(self.config.retry)));
                self.failed(format!("reading the leader key failed: {err}"));
            }
        }
    }

    /// An event of the watch asked for by the last [`ElectionAction::Watch`].
    pub fn event(&mut self, event: WatchEvent) {
        if *event.key() != self.config.key {
            return;
        }
        let revision = event.revision();
        match self.phase {
            Phase::Following { from, .. } if event.kind == EventKind::Delete && revision > from => {
                self.phase = Phase::Candidate { at: self.now };
            }
            Phase::Leading(term) if revision > term.revision => match event.kind {
                EventKind::Delete => {
                    let reason = format!("the leader key was deleted at revision {revision}");
                    self.lose(reason, true);
                }
                EventKind::Put if event.fact.create_revision != term.revision => {
                    let reason = format!(
                        "the leader key was re-created at revision {} (a later term)",
                        event.fact.create_revision
                    );
                    self.lose(reason, true);
                }
                EventKind::Put => {}
            },
            _ => {}
        }
    }

    /// The watch could not start, failed or ended. A follower campaigns again after `retry`; a
    /// leader reads its key ([`ElectionAction::Check`]) and watches again.
    pub fn watch_failed(&mut self, error: StoreError) {
        match &mut self.phase {
            Phase::Following { .. } => {
                self.phase = Phase::Candidate {
                    at: self.now.saturating_add(self.config.retry),
                };
                self.failed(format!("watching the leader key failed: {error}"));
            }
            Phase::Leading(term) if term.check.is_none() => {
                term.check = Some(Pending::Due(self.now));
            }
            _ => {}
        }
    }
}
