//! Leases on etcd: grant, one-shot keep-alive, revoke, and [`LeaseKeeper`], a task that keeps a
//! lease alive in the background.

use std::time::Duration;

use ccattler_core::{Lease, LeaseId, StoreError};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::EtcdStore;
use super::error::timed;

/// The longest TTL a lease may have.
const MAX_TTL: Duration = Duration::from_secs(365 * 24 * 3600);

impl EtcdStore {
    /// Grants a lease of `ttl`, rounded up to whole seconds. etcd may raise a short TTL to its
    /// minimum (1.5 × its election timeout); the returned lease carries the TTL etcd granted.
    pub(super) async fn grant(&self, ttl: Duration) -> Result<Lease, StoreError> {
        if ttl < Duration::from_secs(1) || ttl > MAX_TTL {
            return Err(StoreError::InvalidTtl(ttl));
        }
        let seconds = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
        let mut lease = self.shared.lease.clone();
        let call = lease.grant(i64::try_from(seconds).unwrap_or(i64::MAX), None);
        let response = timed(self.timeout(), "lease grant", call).await?;
        if !response.error().is_empty() {
            return Err(StoreError::unavailable(format!(
                "etcd refused the lease grant: {}",
                response.error()
            )));
        }
        Ok(Lease {
            id: LeaseId(response.id()),
            ttl: Duration::from_secs(u64::try_from(response.ttl()).unwrap_or(0)),
        })
    }

    /// Renews `lease` once, over a short keep-alive stream, returning its TTL.
    pub(super) async fn renew(&self, lease: LeaseId) -> Result<Duration, StoreError> {
        let t = self.timeout();
        let result = self
            .retrying(|| async {
                let mut client = self.shared.lease.clone();
                // Opening the stream sends one keep-alive and checks its answer (TTL > 0).
                let (mut keeper, mut stream) =
                    timed(t, "lease keep-alive", client.keep_alive(lease.0)).await?;
                // The first answer is consumed inside; a second one tells the TTL.
                timed(t, "lease keep-alive", keeper.keep_alive()).await?;
                let answer = timed(t, "lease keep-alive", stream.message()).await?;
                match answer {
                    Some(answer) if answer.ttl() > 0 => Ok(Duration::from_secs(
                        u64::try_from(answer.ttl()).unwrap_or(0),
                    )),
                    Some(_) => Err(StoreError::LeaseNotFound(lease)),
                    None => Err(StoreError::unavailable(
                        "etcd closed the keep-alive stream without answering",
                    )),
                }
            })
            .await;
        result.map_err(|e| self.rejected(e, Some(lease), None))
    }

    pub(super) async fn revoke(&self, lease: LeaseId) -> Result<(), StoreError> {
        let mut client = self.shared.lease.clone();
        let call = client.revoke(lease.0);
        match timed(self.timeout(), "lease revoke", call).await {
            Ok(_) => Ok(()),
            Err(e) => Err(self.rejected(e, Some(lease), None)),
        }
    }

    /// Keeps `lease` alive in a background task, renewing it every `interval` (a third of its
    /// TTL is a good choice), until the returned [`LeaseKeeper`] is dropped.
    ///
    /// Failed renewals (etcd unreachable) are retried at the next tick; the keeper reports the
    /// lease lost only when etcd says it no longer exists.
    pub fn keep_lease_alive(&self, lease: LeaseId, interval: Duration) -> LeaseKeeper {
        let (lost_tx, lost) = watch::channel(false);
        let store = self.clone();
        let task = tokio::spawn(async move {
            let mut ticker = tokio::time::interval(interval);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticker.tick().await;
                match store.renew(lease).await {
                    Ok(_) => {}
                    Err(StoreError::LeaseNotFound(_)) => {
                        let _ = lost_tx.send(true);
                        return;
                    }
                    Err(e) => tracing::warn!(%lease, error = %e, "lease keep-alive failed"),
                }
            }
        });
        LeaseKeeper { lease, task, lost }
    }
}

/// A background task that keeps one lease alive; see [`EtcdStore::keep_lease_alive`].
///
/// Dropping it stops the renewals (the lease then expires after its TTL; revoke it to end it
/// at once).
#[derive(Debug)]
pub struct LeaseKeeper {
    lease: LeaseId,
    task: JoinHandle<()>,
    lost: watch::Receiver<bool>,
}

impl LeaseKeeper {
    /// The lease kept alive.
    pub fn lease(&self) -> LeaseId {
        self.lease
    }

    /// Completes when etcd reports the lease gone (expired or revoked); never otherwise.
    pub async fn lost(&mut self) {
        if self.lost.wait_for(|lost| *lost).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Whether the lease was found gone.
    pub fn is_lost(&self) -> bool {
        *self.lost.borrow()
    }
}

impl Drop for LeaseKeeper {
    fn drop(&mut self) {
        self.task.abort();
    }
}
