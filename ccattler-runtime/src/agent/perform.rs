//! How the driver performs an [`Action`] against a store or a runtime, and feeds the result back.
//!
//! The tokio driver and the testkit's simulation both perform actions through these functions,
//! so the simulation runs the same store and runtime calls as a real agent; they differ only in
//! when a result is delivered.

use std::collections::BTreeSet;
use std::time::Duration;

use ccattler_core::schema::{self, ProbeCheck};
use ccattler_core::{
    Fact, FactStore, Key, LeaseId, Op, Runtime, RuntimeError, StoreError, Txn, Value,
};

use super::action::{Action, Listing, Sample};
use super::machine::AgentLoop;
use super::probe;

/// The result of one store or runtime action, to hand back with [`Outcome::feed`].
#[derive(Debug)]
#[non_exhaustive]
pub enum Outcome {
    /// Of [`Action::Register`].
    Registered(Result<LeaseId, StoreError>),
    /// Of [`Action::List`].
    Listed(Result<Listing, StoreError>),
    /// Of [`Action::FetchSpecs`].
    FetchedSpecs(Result<Vec<Option<Fact>>, StoreError>),
    /// Of [`Action::FetchSecrets`].
    FetchedSecrets(Result<Vec<Option<Fact>>, StoreError>),
    /// Of one renewal of the lease an [`Action::KeepLease`] keeps ([`renew`]).
    Renewed {
        /// The lease renewed.
        lease: LeaseId,
        /// What the store answered.
        result: Result<(), StoreError>,
    },
    /// Of [`Action::Report`].
    Reported(Result<(), StoreError>),
    /// Of [`Action::WriteTelemetry`].
    TelemetryWritten(Result<(), StoreError>),
    /// Of [`Action::Observe`].
    Observed(Result<Vec<Sample>, RuntimeError>),
    /// Of [`Action::EnsureRunning`], [`Action::EnsureStopped`], [`Action::UpdateFiles`] and
    /// [`Action::Remove`] of runtime id `id` (the spec's id for a start).
    Done {
        /// The id the action named.
        id: String,
        /// What the runtime answered.
        result: Result<(), RuntimeError>,
    },
    /// Of [`Action::ReadOutput`] of init step `id`.
    ReadOutput {
        /// The init step.
        id: String,
        /// The lines, or why they could not be read.
        result: Result<String, RuntimeError>,
    },
    /// Of [`Action::MeasureVolumes`].
    VolumesMeasured(super::VolumeDisk),
    /// Of [`Action::Probe`] of instance `id`.
    Probed {
        /// The instance probed.
        id: String,
        /// Whether the check passed, or why not.
        result: Result<(), String>,
    },
}

impl Outcome {
    /// Hands the result to the loop's matching input.
    pub fn feed(self, machine: &mut AgentLoop) {
        match self {
            Outcome::Registered(r) => machine.registered(r),
            Outcome::Listed(r) => machine.listed(r),
            Outcome::FetchedSpecs(r) => machine.fetched_specs(r),
            Outcome::FetchedSecrets(r) => machine.fetched_secrets(r),
            Outcome::Renewed { lease, result } => machine.renewed(lease, result),
            Outcome::Reported(r) => machine.reported(r),
            Outcome::TelemetryWritten(r) => machine.telemetry_written(r),
            Outcome::Observed(r) => machine.observed(r),
            Outcome::Done { id, result } => machine.done(&id, result),
            Outcome::ReadOutput { id, result } => machine.read_output(&id, result),
            Outcome::Probed { id, result } => machine.probed(&id, result),
            Outcome::VolumesMeasured(disk) => machine.volumes_measured(disk),
        }
    }

    /// The error, for people, when the action failed.
    pub fn error(&self) -> Option<String> {
        match self {
            Outcome::Registered(Err(e)) | Outcome::Listed(Err(e)) => Some(e.to_string()),
            Outcome::FetchedSpecs(Err(e)) | Outcome::FetchedSecrets(Err(e)) => Some(e.to_string()),
            Outcome::Renewed { result: Err(e), .. }
            | Outcome::Reported(Err(e))
            | Outcome::TelemetryWritten(Err(e)) => Some(e.to_string()),
            Outcome::Observed(Err(e))
            | Outcome::Done { result: Err(e), .. }
            | Outcome::ReadOutput { result: Err(e), .. } => Some(e.to_string()),
            Outcome::Probed { result: Err(e), .. } => Some(e.clone()),
            _ => None,
        }
    }
}

/// Performs a store action ([`Lane::Store`](super::Lane::Store), but not [`Action::Watch`],
/// which the driver keeps as a stream). `lease_ttl` is the TTL of a newly granted lease; `node`
/// the node's name. Returns `None` for any other action ([`Action::KeepLease`] is a standing
/// order: its driver calls [`renew`] on its own schedule).
pub async fn store_action<S: FactStore>(
    store: &S,
    node: &str,
    lease_ttl: Duration,
    action: Action,
) -> Option<Outcome> {
    Some(match action {
        Action::Register { lease, status } => {
            Outcome::Registered(register(store, node, lease_ttl, lease, status).await)
        }
        Action::List {
            placements,
            observations,
        } => Outcome::Listed(
            async {
                Ok(Listing {
                    placements: store.scan(&placements).await?,
                    observations: store.scan(&observations).await?,
                })
            }
            .await,
        ),
        Action::FetchSpecs { keys } => Outcome::FetchedSpecs(get_each(store, &keys).await),
        Action::FetchSecrets { keys } => Outcome::FetchedSecrets(get_each(store, &keys).await),
        Action::Report {
            puts,
            deletes,
            events,
            event_deletes,
            lease,
        } => {
            let ops: Vec<Op> = puts
                .into_iter()
                .map(|(key, value)| Op::put(key, value))
                .chain(deletes.into_iter().map(Op::delete))
                .chain(events.into_iter().map(|(key, value)| Op::Put {
                    key,
                    value,
                    lease: Some(lease),
                }))
                .chain(event_deletes.into_iter().map(Op::delete))
                .collect();
            let limit = store.limits().max_txn_ops.max(1);
            Outcome::Reported(
                async {
                    for chunk in ops.chunks(limit) {
                        let txn = Txn {
                            then: chunk.to_vec(),
                            ..Txn::default()
                        };
                        store.txn(txn).await?;
                    }
                    Ok(())
                }
                .await,
            )
        }
        Action::WriteTelemetry { key, value, lease } => {
            Outcome::TelemetryWritten(store.put_with_lease(&key, value, lease).await.map(|_| ()))
        }
        _ => return None,
    })
}

/// One renewal of the lease an [`Action::KeepLease`] keeps.
pub async fn renew<S: FactStore>(store: &S, lease: LeaseId) -> Outcome {
    let result = store.keep_alive(lease).await.map(|_| ());
    Outcome::Renewed { lease, result }
}

/// The outcome of store action `action` failing with `error`, as if the store had answered so:
/// what a fault layer or a simulation feeds back for a store it makes fail. `None` for an action
/// of another lane.
pub fn store_failure(action: &Action, error: StoreError) -> Option<Outcome> {
    Some(match action {
        Action::Register { .. } => Outcome::Registered(Err(error)),
        Action::List { .. } => Outcome::Listed(Err(error)),
        Action::FetchSpecs { .. } => Outcome::FetchedSpecs(Err(error)),
        Action::FetchSecrets { .. } => Outcome::FetchedSecrets(Err(error)),
        Action::Report { .. } => Outcome::Reported(Err(error)),
        Action::WriteTelemetry { .. } => Outcome::TelemetryWritten(Err(error)),
        _ => return None,
    })
}

/// Gets each key, all at once: one fact or `None` per key, in order; the first error fails all.
async fn get_each<S: FactStore>(store: &S, keys: &[Key]) -> Result<Vec<Option<Fact>>, StoreError> {
    futures_util::future::try_join_all(keys.iter().map(|key| store.get(key))).await
}

/// Holds a lease (resuming `resume` when it still lives) and writes the node's liveness key and
/// status in one transaction.
async fn register<S: FactStore>(
    store: &S,
    node: &str,
    lease_ttl: Duration,
    resume: Option<LeaseId>,
    status: Value,
) -> Result<LeaseId, StoreError> {
    let resumed = match resume {
        Some(lease) => store.keep_alive(lease).await.ok().map(|_| lease),
        None => None,
    };
    let lease = match resumed {
        Some(lease) => lease,
        None => store.grant_lease(lease_ttl).await?.id,
    };
    let txn = Txn::new()
        .then(Op::Put {
            key: schema::keys::node_lease(node).map_err(StoreError::from)?,
            value: Value::from(node.to_owned()),
            lease: Some(lease),
        })
        .then(Op::put(
            schema::keys::node(node).map_err(StoreError::from)?,
            status,
        ));
    store.txn(txn).await?;
    Ok(lease)
}

/// Performs a runtime action ([`Lane::Runtime`](super::Lane::Runtime)): observing includes the
/// stats of what runs, and a probe is
/// answered by the runtime ([`Runtime::network_probe`], a simulator) or checked for real
/// ([`probe::check`]). Returns `None` for any other action.
pub async fn runtime_action<R: Runtime>(runtime: &R, action: Action) -> Option<Outcome> {
    Some(match action {
        Action::Observe { ids } => Outcome::Observed(observe(runtime, ids.as_ref()).await),
        Action::EnsureRunning { spec } => {
            let result = runtime.ensure_running(&spec).await;
            Outcome::Done {
                id: spec.id,
                result,
            }
        }
        Action::EnsureStopped { id, grace, .. } => {
            let result = runtime.ensure_stopped(&id, grace).await;
            Outcome::Done { id, result }
        }
        Action::UpdateFiles { id, files } => {
            let result = runtime.update_files(&id, &files).await;
            Outcome::Done { id, result }
        }
        Action::Remove { id, data } => {
            let mut result = runtime.remove(&id).await;
            if let (Ok(()), Some(data)) = (&result, data) {
                result = remove_data(&id, &data);
            }
            Outcome::Done { id, result }
        }
        Action::ReadOutput { id, lines } => {
            let result = runtime.logs(&id, lines).await;
            Outcome::ReadOutput { id, result }
        }
        Action::Probe {
            id, probe, address, ..
        } => {
            let answered = match probe.check {
                ProbeCheck::Exec { .. } => None,
                ProbeCheck::Tcp | ProbeCheck::Http { .. } => runtime.network_probe(&id).await,
            };
            let result = match answered {
                Some(result) => result,
                None => probe::check(&probe, runtime, &id, address.as_deref()).await,
            };
            Outcome::Probed { id, result }
        }
        _ => return None,
    })
}

/// Every instance the runtime knows of (`ids: None`) or those of `ids`, with the stats of those
/// that run.
pub async fn observe<R: Runtime>(
    runtime: &R,
    ids: Option<&BTreeSet<String>>,
) -> Result<Vec<Sample>, RuntimeError> {
    let seen = match ids {
        None => runtime.observe().await?,
        Some(ids) => runtime.observe_some(ids).await?,
    };
    let mut samples = Vec::with_capacity(seen.len());
    for instance in seen {
        let stats = if instance.state == ccattler_core::InstanceState::Running {
            runtime.stats(&instance.id).await.ok()
        } else {
            None
        };
        samples.push(Sample { instance, stats });
    }
    Ok(samples)
}

/// Deletes `data`, the directory of removed instance `id`'s volumes that go with it (gone
/// already: nothing to do). On the calling thread, so that a driver polling actions outside
/// any async runtime (the simulation) hears the answer at once; the node's lease is renewed
/// apart from every action, so a large directory delays nothing but this instance's lane.
fn remove_data(id: &str, data: &std::path::Path) -> Result<(), RuntimeError> {
    match std::fs::remove_dir_all(data) {
        Err(err) if err.kind() != std::io::ErrorKind::NotFound => {
            Err(RuntimeError::DataNotRemoved {
                id: id.to_owned(),
                path: data.to_owned(),
                reason: err.to_string(),
            })
        }
        _ => Ok(()),
    }
}
