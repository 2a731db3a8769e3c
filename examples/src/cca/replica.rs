//! The control plane's replicas: every `cca server` keeps a key of its own under
//! [`schema::REPLICAS`] (`runner/replica/{id}`), attached to a lease it renews, so the keys
//! present are the servers up; and every server on etcd logs who leads the controllers
//! ([`LEADER_KEY`]) whenever that changes (see [`super::leadership`]).
//!
//! The registration is a pure state machine, [`Registration`], and a thin driver,
//! [`register`].
//!
//! # Guarantees and caveats
//!
//! A server that stops cleanly revokes its lease: it leaves the list at once. A server killed
//! (or cut off from the store) leaves it when its lease expires, after [`REPLICA_TTL`] at most
//! (etcd may round a TTL up). A replica that finds its lease gone registers again under a new
//! one.

use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ccattler_core::schema::{self, keys};
use ccattler_core::{FactStore, Key, LeaseId, StoreError};
use serde::{Deserialize, Serialize};

/// The key the elected server holds while it runs the controllers; its value is the
/// replica's id.
pub const LEADER_KEY: &str = "leader/cca-controllers";

/// The lease TTL of a replica's key: how long a killed server stays listed.
pub const REPLICA_TTL: Duration = Duration::from_secs(10);

/// Pause before trying again after a store error.
const RETRY: Duration = Duration::from_secs(1);

/// The value of `runner/replica/{id}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaRecord {
    /// The replica's id (also its name in the leader election).
    pub id: String,
    /// The base URL it serves the API at.
    pub url: String,
    /// Whether it runs the controllers under leader election (`--store etcd`); a server without
    /// election (`--store memory`) runs them alone.
    pub elected: bool,
    /// When it started, in seconds since the Unix epoch.
    pub started: u64,
}

impl ReplicaRecord {
    /// A record of replica `id` serving `url`, started now.
    pub fn new(id: impl Into<String>, url: impl Into<String>, elected: bool) -> Self {
        ReplicaRecord {
            id: id.into(),
            url: url.into(),
            elected,
            started: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        }
    }
}

/// The default replica id: this machine's host name and the port served (`web-1:7420`), unique
/// among servers unless two on one machine serve the same port.
pub fn default_id(port: u16) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().replace('/', "-"))
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "cca-server".to_owned());
    format!("{host}:{port}")
}

/// What the registration does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Grant a lease of [`REPLICA_TTL`].
    Grant,
    /// Write the replica's key attached to this lease.
    Register(LeaseId),
    /// Renew this lease.
    Renew(LeaseId),
    /// Sleep this long, then ask again.
    Wait(Duration),
}

/// The registration of one replica: grant, register, renew every third of the TTL; a lost
/// lease starts over, any other error waits and retries the same step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registration {
    ttl: Duration,
    lease: Option<LeaseId>,
    registered: bool,
    wait: Option<Duration>,
}

impl Registration {
    /// A registration under leases of `ttl`.
    pub fn new(ttl: Duration) -> Self {
        Registration {
            ttl,
            lease: None,
            registered: false,
            wait: None,
        }
    }

    /// The lease the key is attached to, once registered.
    pub fn lease(&self) -> Option<LeaseId> {
        self.lease.filter(|_| self.registered)
    }

    /// The next step.
    pub fn next_step(&mut self) -> Step {
        if let Some(wait) = self.wait.take() {
            return Step::Wait(wait);
        }
        match (self.lease, self.registered) {
            (None, _) => Step::Grant,
            (Some(lease), false) => Step::Register(lease),
            (Some(lease), true) => Step::Renew(lease),
        }
    }

    /// A lease was granted.
    pub fn granted(&mut self, lease: LeaseId) {
        self.lease = Some(lease);
        self.registered = false;
    }

    /// The key was written, or the lease renewed: renew again after a third of the TTL.
    pub fn done(&mut self) {
        self.registered = self.lease.is_some();
        self.wait = Some(self.ttl / 3);
    }

    /// A step failed with `err`.
    pub fn failed(&mut self, err: &StoreError) {
        if matches!(err, StoreError::LeaseNotFound(_)) {
            self.lease = None;
            self.registered = false;
        } else {
            self.wait = Some(RETRY);
        }
    }
}

/// Keeps `record` registered in `store` until `shutdown` completes, then revokes its lease so
/// the replica leaves the list at once. Store errors are logged and retried.
pub async fn register<S: FactStore>(
    store: S,
    record: ReplicaRecord,
    shutdown: impl Future<Output = ()>,
) {
    let Ok(key) = keys::replica(&record.id) else {
        tracing::error!(id = %record.id, "the replica id is not one key segment; not registering");
        return;
    };
    let value = match serde_json::to_vec(&record) {
        Ok(value) => value,
        Err(err) => {
            tracing::error!(id = %record.id, "cannot encode the replica record: {err}");
            return;
        }
    };
    let mut machine = Registration::new(REPLICA_TTL);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let step = machine.next_step();
        let performed = tokio::select! {
            () = &mut shutdown => break,
            performed = perform(&store, &key, &value, step) => performed,
        };
        match performed {
            Ok(Some(lease)) => machine.granted(lease),
            Ok(None) if matches!(step, Step::Wait(_)) => {}
            Ok(None) => machine.done(),
            Err(err) => {
                tracing::warn!(id = %record.id, "keeping the replica registered: {err}");
                machine.failed(&err);
            }
        }
    }
    if let Some(lease) = machine.lease()
        && let Err(err) = store.revoke_lease(lease).await
    {
        tracing::warn!(id = %record.id, "leaving the replica list (it expires instead): {err}");
    }
}

/// Performs one step: the lease granted, if it granted one.
async fn perform<S: FactStore>(
    store: &S,
    key: &Key,
    value: &[u8],
    step: Step,
) -> Result<Option<LeaseId>, StoreError> {
    match step {
        Step::Grant => Ok(Some(store.grant_lease(REPLICA_TTL).await?.id)),
        Step::Register(lease) => {
            store
                .put_with_lease(key, value.to_vec().into(), lease)
                .await?;
            Ok(None)
        }
        Step::Renew(lease) => {
            store.keep_alive(lease).await?;
            Ok(None)
        }
        Step::Wait(pause) => {
            tokio::time::sleep(pause).await;
            Ok(None)
        }
    }
}

/// The replicas registered in `store`, by id.
///
/// # Errors
///
/// The store's error.
pub async fn replicas<S: FactStore>(store: &S) -> Result<Vec<ReplicaRecord>, StoreError> {
    let scan = store.scan(schema::REPLICAS).await?;
    Ok(scan
        .facts
        .iter()
        .filter(|fact| {
            matches!(
                schema::RecordKey::parse(&fact.key),
                Some(schema::RecordKey::Replica(_))
            )
        })
        .filter_map(|fact| serde_json::from_slice(&fact.value).ok())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registration_grants_registers_renews_and_starts_over_without_its_lease() {
        let mut m = Registration::new(Duration::from_secs(9));
        assert_eq!(m.next_step(), Step::Grant);
        m.granted(LeaseId(7));
        assert_eq!(m.next_step(), Step::Register(LeaseId(7)));
        assert_eq!(m.lease(), None, "not registered yet");
        m.done();
        assert_eq!(m.lease(), Some(LeaseId(7)));
        assert_eq!(m.next_step(), Step::Wait(Duration::from_secs(3)));
        assert_eq!(m.next_step(), Step::Renew(LeaseId(7)));
        m.failed(&StoreError::unavailable("down"));
        assert_eq!(m.next_step(), Step::Wait(RETRY));
        assert_eq!(
            m.next_step(),
            Step::Renew(LeaseId(7)),
            "the same step again"
        );
        m.failed(&StoreError::LeaseNotFound(LeaseId(7)));
        assert_eq!(m.next_step(), Step::Grant);
        assert_eq!(m.lease(), None);
    }

    #[test]
    fn the_default_id_is_one_key_segment() {
        let id = default_id(7420);
        assert!(id.ends_with(":7420"));
        assert!(keys::replica(&id).is_ok(), "{id}");
    }
}
