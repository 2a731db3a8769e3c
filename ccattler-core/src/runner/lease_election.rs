//! [`LeaseElection`]: the tokio driver of an [`ElectionLoop`] against a [`FactStore`].

use futures_util::StreamExt;
use tokio::sync::oneshot;

use super::{
    ElectionAction, ElectionLoop, LeaderElection, Leadership, LeaseElectionConfig, perform_election,
};
use crate::{Compare, FactStore, StoreError, WatchEvent};

/// Leader election on a store lease, with a fencing compare.
///
/// # Expected flow
///
/// A candidate grants a lease and creates the leader key with it in a transaction guarded by
/// "the key is absent". The winner keeps the lease alive every TTL/3; the others watch the key and
/// try again when it is deleted (the leader resigned, or its lease expired), or after one TTL.
/// The protocol is [`ElectionLoop`]'s; this type performs its actions on tokio.
///
/// # Guarantees
///
/// The fence is `create_revision(leader key) == R`, where R is the revision at which this
/// leader created the key. Any later leader creates the key anew at a higher revision, so a
/// deposed leader's commits fail even if it has not noticed yet (paused process, partition).
/// Leadership ends (and [`Leadership::lost`] completes) when a renewal finds the lease gone,
/// the key is deleted or re-created, or the lease could have expired because no renewal
/// succeeded for one TTL (retryable store errors are retried every
/// [`retry`](LeaseElectionConfig::retry) until then; see [`ElectionLoop`]).
///
/// # Errors
///
/// [`campaign`](LeaderElection::campaign) returns the store's error when a campaign fails with
/// one that waiting does not cure (not [`StoreError::is_retryable`]: an invalid TTL or key, a
/// denied request); retryable errors are retried after `retry`.
///
/// # Caveats
///
/// Needs a tokio runtime: a task renews the lease and watches the key while leading. Dropping
/// the [`Leadership`] resigns: that task revokes the lease, so another replica takes over at
/// once (if the runtime is shutting down, the lease expires after its TTL instead).
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
}

impl<S: FactStore + Clone> LeaderElection for LeaseElection<S> {
    async fn campaign(&self) -> Result<Leadership, StoreError> {
        let mut driver = Driver::new(self.store.clone(), self.config.clone());
        let fence = loop {
            match driver.next().await {
                Step::Won(fence) => break fence,
                Step::Lost(_) => {} // a loop that never won does not lose
                Step::Fatal(err) => return Err(err),
            }
        };
        let (lost_tx, lost_rx) = oneshot::channel();
        let (resign_tx, resign_rx) = oneshot::channel::<()>();
        tokio::spawn(keep_leading(driver, lost_tx, resign_rx));
        Ok(Leadership::new(vec![fence], async move {
            let _ = lost_rx.await;
        })
        .with_guard(resign_tx))
    }
}

/// Drives the loop of a leader until it loses or resigns (its [`Leadership`] was dropped, which
/// drops `resign`'s sender), then performs the resignations.
async fn keep_leading<S: FactStore>(
    mut driver: Driver<S>,
    lost: oneshot::Sender<()>,
    mut resign: oneshot::Receiver<()>,
) {
    let lost_because = tokio::select! {
        biased;
        _ = &mut resign => None,
        reason = driver.until_lost() => Some(reason),
    };
    if let Some(reason) = lost_because {
        tracing::warn!(
            key = %driver.machine.config().key,
            identity = %driver.machine.config().identity,
            "leadership lost: {reason}"
        );
        let _ = lost.send(());
    }
    driver.machine.resign();
    while let Some(action) = driver.machine.next_action() {
        let _ = perform_election(&driver.store, action).await;
    }
}

/// What the driver stops for.
enum Step {
    Won(Compare),
    Lost(String),
    Fatal(StoreError),
}

/// One [`ElectionLoop`], the store it acts on, and its watch.
struct Driver<S: FactStore> {
    store: S,
    machine: ElectionLoop,
    origin: tokio::time::Instant,
    watch: Option<S::Watch>,
}

impl<S: FactStore> Driver<S> {
    fn new(store: S, config: LeaseElectionConfig) -> Self {
        Driver {
            store,
            machine: ElectionLoop::new(config),
            origin: tokio::time::Instant::now(),
            watch: None,
        }
    }

    /// Runs the loop until leadership is lost (or the loop stopped); returns why.
    async fn until_lost(&mut self) -> String {
        loop {
            match self.next().await {
                Step::Won(_) => {}
                Step::Lost(reason) => return reason,
                Step::Fatal(err) => return format!("leader election failed: {err}"),
            }
        }
    }

    /// Performs actions and waits for events until the loop wins, loses or fails fatally.
    async fn next(&mut self) -> Step {
        loop {
            self.machine.tick(self.origin.elapsed());
            while let Some(action) = self.machine.next_action() {
                if let Some(step) = self.perform(action).await {
                    return step;
                }
                self.machine.tick(self.origin.elapsed());
            }
            let deadline = self
                .machine
                .deadline()
                .and_then(|d| self.origin.checked_add(d));
            tokio::select! {
                item = next_item(&mut self.watch) => match item {
                    Some(Ok(event)) => self.machine.event(event),
                    Some(Err(err)) => {
                        self.watch = None;
                        self.machine.watch_failed(err);
                    }
                    None => {
                        self.watch = None;
                        self.machine.watch_failed(StoreError::unavailable("the watch ended"));
                    }
                },
                _ = sleep_until(deadline), if deadline.is_some() => {}
            }
        }
    }

    async fn perform(&mut self, action: ElectionAction) -> Option<Step> {
        let config = self.machine.config();
        match action {
            ElectionAction::Watch { key, from } => {
                self.watch = None;
                match self.store.watch(key.as_str(), from).await {
                    Ok(watch) => self.watch = Some(watch),
                    Err(err) => self.machine.watch_failed(err),
                }
            }
            ElectionAction::Won { term, fence, .. } => {
                let (key, identity) = (&config.key, &config.identity);
                tracing::info!(key = %key, identity = %identity, revision = %term, "became leader");
                return Some(Step::Won(fence));
            }
            ElectionAction::Lost { reason, .. } => return Some(Step::Lost(reason)),
            ElectionAction::Failed { reason, retry_in } => {
                let (key, identity) = (&config.key, &config.identity);
                tracing::warn!(key = %key, identity = %identity, retry_in = ?retry_in,
                    "leader election: {reason}");
            }
            ElectionAction::Fatal { error } => return Some(Step::Fatal(error)),
            action => {
                if let Some(outcome) = perform_election(&self.store, action).await {
                    outcome.feed(&mut self.machine);
                }
            }
        }
        None
    }
}

async fn next_item<W>(watch: &mut Option<W>) -> Option<Result<WatchEvent, StoreError>>
where
    W: futures_core::Stream<Item = Result<WatchEvent, StoreError>> + Unpin,
{
    match watch {
        Some(watch) => watch.next().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
