//! What an [`ElectionLoop`] asks of its driver, what the store answers, and how those answers are
//! obtained from a [`FactStore`].
//!
//! The tokio driver (`LeaseElection`, feature `tokio`) and the testkit's simulation both perform
//! the store requests through [`perform_election`], so they make the same store calls; they
//! differ only in when an answer is delivered.

use std::time::Duration;

use super::ElectionLoop;
use crate::{Compare, Fact, FactStore, Key, Lease, LeaseId, Op, Revision, StoreError, Txn};

/// Settings of a leader election (of [`ElectionLoop`] and `LeaseElection`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseElectionConfig {
    /// The leader key; it exists exactly while someone leads, attached to the leader's lease.
    pub key: Key,
    /// This replica's name, written as the leader key's value.
    pub identity: String,
    /// Lease TTL: how long a crashed leader blocks the others. The leader renews every third of
    /// it. Default 10 s.
    pub ttl: Duration,
    /// Pause before retrying after a store error (a campaign, a renewal, a watch). Default
    /// 500 ms.
    pub retry: Duration,
}

impl LeaseElectionConfig {
    /// A config for leader key `key` and replica name `identity`, with default timings.
    pub fn new(key: Key, identity: impl Into<String>) -> Self {
        LeaseElectionConfig {
            key,
            identity: identity.into(),
            ttl: Duration::from_secs(10),
            retry: Duration::from_millis(500),
        }
    }

    /// Sets the lease TTL.
    #[must_use]
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Sets the retry pause.
    #[must_use]
    pub fn retry(mut self, retry: Duration) -> Self {
        self.retry = retry;
        self
    }
}

/// What the driver of an [`ElectionLoop`] must do next. Drain them with
/// [`ElectionLoop::next_action`].
///
/// The first four are store requests ([`is_store_request`](Self::is_store_request)): perform
/// them with [`perform_election`] (or the same calls) and feed the answer back. The others are
/// for the driver itself.
#[derive(Debug)]
#[non_exhaustive]
pub enum ElectionAction {
    /// Grant a lease of `ttl`, then create `key` with `identity` as its value, attached to that
    /// lease, in a transaction guarded by "`key` is absent"; revoke the lease when the
    /// transaction fails or is not applied. Report with [`ElectionLoop::campaigned`].
    Campaign {
        /// The leader key.
        key: Key,
        /// The value to write.
        identity: String,
        /// The TTL to ask for.
        ttl: Duration,
    },
    /// Keep `lease` alive. Report with [`ElectionLoop::renewed`].
    Renew {
        /// The leader's lease.
        lease: LeaseId,
    },
    /// Read the store's revision, then `key`. Report with [`ElectionLoop::checked`]. Asked for
    /// when the leader's watch of its key failed.
    Check {
        /// The leader key.
        key: Key,
    },
    /// Revoke `lease` (which deletes the leader key if it is still attached). Nothing to
    /// report: a lease that cannot be revoked expires on its own.
    Resign {
        /// The lease to give up.
        lease: LeaseId,
    },
    /// Replace any watch of the election by one of `key` from revision `from`. Feed its events
    /// with [`ElectionLoop::event`]; report a watch that cannot start, fails or ends with
    /// [`ElectionLoop::watch_failed`]. The watch is a prefix watch: events of other keys are
    /// ignored.
    Watch {
        /// The leader key.
        key: Key,
        /// The first revision to deliver.
        from: Revision,
    },
    /// This replica leads from now on: every commit must carry `fence` until [`Lost`](Self::Lost).
    Won {
        /// The revision at which this leader created the key.
        term: Revision,
        /// The lease the key is attached to.
        lease: LeaseId,
        /// `create_revision(key) == term`.
        fence: Compare,
    },
    /// This replica no longer leads (or can no longer be sure it does): stop committing.
    Lost {
        /// The term that ended.
        term: Revision,
        /// Why, for people.
        reason: String,
    },
    /// A store request failed and is retried after `retry_in`. For logs.
    Failed {
        /// What failed, for people.
        reason: String,
        /// When the loop tries again.
        retry_in: Duration,
    },
    /// A campaign failed with an error that waiting does not cure (an invalid TTL or key, a
    /// denied request): the loop stopped.
    Fatal {
        /// The store's error.
        error: StoreError,
    },
}

impl ElectionAction {
    /// Whether this is a store request ([`Campaign`](Self::Campaign), [`Renew`](Self::Renew),
    /// [`Check`](Self::Check), [`Resign`](Self::Resign)), which [`perform_election`] performs.
    pub fn is_store_request(&self) -> bool {
        matches!(
            self,
            ElectionAction::Campaign { .. }
                | ElectionAction::Renew { .. }
                | ElectionAction::Check { .. }
                | ElectionAction::Resign { .. }
        )
    }
}

/// What a campaign found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CampaignAnswer {
    /// The key was created at `revision`, attached to `lease`.
    Won {
        /// The lease granted for this term (its TTL is the one the store granted).
        lease: Lease,
        /// The revision of the transaction that created the key.
        revision: Revision,
    },
    /// The key exists (someone else leads); the lease granted for the attempt was revoked.
    Taken {
        /// The store's revision at the failed transaction: the watch for a vacancy starts after
        /// it.
        revision: Revision,
    },
}

/// The answer to one store request, to hand back with [`feed`](Self::feed).
#[derive(Debug)]
#[non_exhaustive]
pub enum ElectionOutcome {
    /// Of [`ElectionAction::Campaign`].
    Campaigned(Result<CampaignAnswer, StoreError>),
    /// Of [`ElectionAction::Renew`]: the TTL the lease lives from the renewal on.
    Renewed(Result<Duration, StoreError>),
    /// Of [`ElectionAction::Check`]: the revision read first, then the key.
    Checked(Result<(Revision, Option<Fact>), StoreError>),
}

impl ElectionOutcome {
    /// Hands the answer to the loop's matching input.
    pub fn feed(self, machine: &mut ElectionLoop) {
        match self {
            ElectionOutcome::Campaigned(result) => machine.campaigned(result),
            ElectionOutcome::Renewed(result) => machine.renewed(result),
            ElectionOutcome::Checked(result) => machine.checked(result),
        }
    }

    /// The answer to `action` when the request failed with `error` before reaching the store
    /// (an unreachable control plane). `None` for [`ElectionAction::Resign`] and the actions
    /// that are not store requests.
    pub fn failed(action: &ElectionAction, error: StoreError) -> Option<ElectionOutcome> {
        match action {
            ElectionAction::Campaign { .. } => Some(ElectionOutcome::Campaigned(Err(error))),
            ElectionAction::Renew { .. } => Some(ElectionOutcome::Renewed(Err(error))),
            ElectionAction::Check { .. } => Some(ElectionOutcome::Checked(Err(error))),
            _ => None,
        }
    }
}

/// Performs a store request of the election against `store` and returns the answer to feed.
///
/// `None` for [`ElectionAction::Resign`] (performed, nothing to feed; its error is dropped, as
/// the lease expires anyway) and for actions that are not store requests (nothing done).
///
/// ```
/// use ccattler_core::runner::{ElectionLoop, LeaseElectionConfig, perform_election};
/// use ccattler_core::Key;
/// use ccattler_store::MemoryStore;
/// # fn block_on<F: std::future::Future>(f: F) -> F::Output {
/// #     let mut f = std::pin::pin!(f);
/// #     let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
/// #     loop { if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) { return v; } }
/// # }
///
/// let store = MemoryStore::new();
/// let mut machine = ElectionLoop::new(LeaseElectionConfig::new(Key::new("app/leader")?, "a"));
/// let campaign = machine.next_action().expect("it campaigns at once");
/// let answer = block_on(perform_election(&store, campaign)).expect("a campaign is answered");
/// answer.feed(&mut machine);
/// assert!(machine.term().is_some(), "the only candidate wins");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub async fn perform_election<S: FactStore>(
    store: &S,
    action: ElectionAction,
) -> Option<ElectionOutcome> {
    match action {
        ElectionAction::Campaign { key, identity, ttl } => Some(ElectionOutcome::Campaigned(
            campaign(store, key, identity, ttl).await,
        )),
        ElectionAction::Renew { lease } => {
            Some(ElectionOutcome::Renewed(store.keep_alive(lease).await))
        }
        ElectionAction::Check { key } => Some(ElectionOutcome::Checked(check(store, &key).await)),
        ElectionAction::Resign { lease } => {
            let _ = store.revoke_lease(lease).await;
            None
        }
        _ => None,
    }
}

async fn campaign<S: FactStore>(
    store: &S,
    key: Key,
    identity: String,
    ttl: Duration,
) -> Result<CampaignAnswer, StoreError> {
    let lease = store.grant_lease(ttl).await?;
    let txn = Txn::new().when(Compare::absent(key.clone())).then(Op::Put {
        key,
        value: identity.into(),
        lease: Some(lease.id),
    });
    match store.txn(txn).await {
        Ok(response) if response.succeeded => Ok(CampaignAnswer::Won {
            lease,
            revision: response.revision,
        }),
        Ok(response) => {
            let _ = store.revoke_lease(lease.id).await;
            Ok(CampaignAnswer::Taken {
                revision: response.revision,
            })
        }
        Err(err) => {
            // The transaction may have been applied: revoking deletes the key with the lease.
            let _ = store.revoke_lease(lease.id).await;
            Err(err)
        }
    }
}

async fn check<S: FactStore>(store: &S, key: &Key) -> Result<(Revision, Option<Fact>), StoreError> {
    let revision = store.revision().await?;
    let fact = store.get(key).await?;
    Ok((revision, fact))
}
