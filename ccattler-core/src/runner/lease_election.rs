//! [`LeaseElection`]: leader election on a store lease, with a fencing compare.

use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::{LeaderElection, Leadership};
use crate::{
    CmpOp, Compare, CompareTarget, EventKind, FactStore, Key, LeaseId, Op, Revision, StoreError,
    Txn,
};

/// Settings of a [`LeaseElection`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseElectionConfig {
    /// The leader key; it exists exactly while someone leads, attached to the leader's lease.
    pub key: Key,
    /// This replica's name, written as the leader key's value.
    pub identity: String,
    /// Lease TTL: how long a crashed leader blocks the others. Default 10 s.
    pub ttl: Duration,
    /// Pause before retrying after a store error. Default 500 ms.
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

/// Leader election on a store lease.
///
/// # Expected flow
///
/// A candidate grants a lease and creates the leader key with it in a transaction guarded by
/// "the key is absent". The winner keeps the lease alive every TTL/3; the others watch the key and
/// try again when it is deleted (the leader resigned, or its lease expired).
///
/// # Guarantees
///
/// The fence is `create_revision(leader key) == R`, where R is the revision at which this
/// leader created the key. Any later leader creates the key anew at a higher revision, so a
/// deposed leader's commits fail even if it has not noticed yet (paused process, partition).
/// Leadership ends (and [`Leadership::lost`] completes) when a keep-alive finds the lease gone or
/// the key is deleted or re-created.
///
/// # Caveats
///
/// Needs a tokio runtime (a keep-alive task runs while leading). Dropping the [`Leadership`]
/// revokes the lease.
#[derive(Debug, Clone)]
pub struct LeaseElection<S> {
    store: S,
    config: LeaseElectionConfig,
}

impl<S: FactStore + Clone> LeaseElection<S> {
    /// An election on `store` with `config`.
    pub fn new(store: S, config: LeaseElectionConfig) -> Self {
        LeaseElection { store, config }
    }

    async fn try_lead(&self) -> Result<Option<Leadership>, StoreError> {
        let key = &self.config.key;
        let lease = self.store.grant_lease(self.config.ttl).await?;
        let txn = Txn::new().when(Compare::absent(key.clone())).then(Op::Put {
            key: key.clone(),
            value: self.config.identity.clone().into(),
            lease: Some(lease.id),
        });
        let response = match self.store.txn(txn).await {
            Ok(response) => response,
            Err(err) => {
                let _ = self.store.revoke_lease(lease.id).await;
                return Err(err);
            }
        };
        if !response.succeeded {
            let _ = self.store.revoke_lease(lease.id).await;
            return Ok(None);
        }
        let created = response.revision;
        let fence = Compare::new(
            key.clone(),
            CmpOp::Equal,
            CompareTarget::CreateRevision(created),
        );
        let (lost_tx, lost_rx) = oneshot::channel();
        let task = tokio::spawn(keep_leading(
            self.store.clone(),
            self.config.clone(),
            lease.id,
            created,
            lost_tx,
        ));
        tracing::info!(key = %key, identity = %self.config.identity, revision = %created, "became leader");
        let guard = Resign {
            store: self.store.clone(),
            lease: lease.id,
            task,
        };
        Ok(Some(
            Leadership::new(vec![fence], async move {
                let _ = lost_rx.await;
            })
            .with_guard(guard),
        ))
    }

    /// Waits until the leader key is deleted, or one TTL passed (to retry in any case).
    async fn wait_for_vacancy(&self) {
        let key = &self.config.key;
        let Ok(revision) = self.store.revision().await else {
            tokio::time::sleep(self.config.retry).await;
            return;
        };
        let watch = self.store.watch(key.as_str(), revision.next()).await;
        let Ok(mut watch) = watch else {
            tokio::time::sleep(self.config.retry).await;
            return;
        };
        // The key may have vanished between our failed attempt and the watch.
        if matches!(self.store.get(key).await, Ok(None)) {
            return;
        }
        let vacated = async {
            while let Some(item) = watch.next().await {
                match item {
                    Ok(event) if event.key() == key && event.kind == EventKind::Delete => return,
                    Ok(_) => {}
                    Err(_) => return,
                }
            }
        };
        let _ = tokio::time::timeout(self.config.ttl, vacated).await;
    }
}

impl<S: FactStore + Clone> LeaderElection for LeaseElection<S> {
    async fn campaign(&self) -> Result<Leadership, StoreError> {
        loop {
            match self.try_lead().await {
                Ok(Some(leadership)) => return Ok(leadership),
                Ok(None) => self.wait_for_vacancy().await,
                Err(err) if err.is_retryable() => {
                    tracing::warn!(error = %err, "leader election: store error, retrying");
                    tokio::time::sleep(self.config.retry).await;
                }
                Err(err) => return Err(err),
            }
        }
    }
}

/// Keeps the lease alive until it is lost, then signals.
async fn keep_leading<S: FactStore>(
    store: S,
    config: LeaseElectionConfig,
    lease: LeaseId,
    created: Revision,
    lost: oneshot::Sender<()>,
) {
    let key = &config.key;
    let mut ticker = tokio::time::interval(config.ttl / 3);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut watch = store.watch(key.as_str(), created.next()).await.ok();
    loop {
        let still_ours = tokio::select! {
            _ = ticker.tick() => match store.keep_alive(lease).await {
                Ok(_) => true,
                Err(err) if err.is_retryable() => true, // the lease may still live; the fence decides
                Err(_) => false,
            },
            item = next_event(&mut watch) => match item {
                Some(Ok(event)) if event.key() == key => {
                    event.kind == EventKind::Put && event.fact.create_revision == created
                }
                Some(Ok(_)) => true,
                Some(Err(_)) | None => {
                    watch = store.watch(key.as_str(), created.next()).await.ok();
                    matches!(store.get(key).await, Ok(Some(f)) if f.create_revision == created)
                }
            },
        };
        if !still_ours {
            tracing::warn!(key = %key, identity = %config.identity, "leadership lost");
            let _ = lost.send(());
            return;
        }
    }
}

async fn next_event<W>(watch: &mut Option<W>) -> Option<Result<crate::WatchEvent, StoreError>>
where
    W: futures_core::Stream<Item = Result<crate::WatchEvent, StoreError>> + Unpin,
{
    match watch {
        Some(watch) => watch.next().await,
        None => std::future::pending().await,
    }
}

/// Dropped with the [`Leadership`]: stops the keep-alive and revokes the lease.
struct Resign<S: FactStore + Clone> {
    store: S,
    lease: LeaseId,
    task: JoinHandle<()>,
}

impl<S: FactStore + Clone> Drop for Resign<S> {
    fn drop(&mut self) {
        self.task.abort();
        let store = self.store.clone();
        let lease = self.lease;
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                let _ = store.revoke_lease(lease).await;
            });
        }
    }
}
