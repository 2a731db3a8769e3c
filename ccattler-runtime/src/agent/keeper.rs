//! The lease keeper: performs an [`Action::KeepLease`] apart from the agent's loop.
//!
//! A node is alive to the control plane only as long as its lease is renewed. A renewal that
//! waits for its turn behind other work is a renewal that comes late: with hundreds of agents in
//! one process (`cca dev`, a platform embedding agents beside its controllers), a burst of
//! placements keeps an executor's threads busy for seconds, and a timer that fired on time
//! still waits in the run queue behind every agent the burst woke. So the keeper renews on a
//! schedule of its own, by default from a thread of its own ([`RenewOn::LivenessThread`]) that
//! no work of the agents or the controllers runs on: one thread for the whole process, whose
//! only work is renewals.

use std::sync::OnceLock;
use std::time::Duration;

use ccattler_core::{FactStore, LeaseId};
use tokio::runtime::Handle;
use tokio::sync::mpsc;

use super::local;
use super::perform::{self, Outcome};

/// Where an agent's lease is renewed ([`AgentConfig::renew_on`](super::AgentConfig::renew_on)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum RenewOn {
    /// On the process's liveness thread, with a runtime of its own: no task of the agent's
    /// runtime can delay a renewal. The default.
    #[default]
    LivenessThread,
    /// As a task of the agent's own runtime: apart from the agent's loop, but behind whatever
    /// else that runtime runs. For a runtime on a virtual clock (tokio's paused time in tests),
    /// whose leases expire by that clock, which the liveness thread does not follow.
    AgentRuntime,
}

/// The renewals of one lease, under way until dropped.
#[derive(Debug)]
pub(super) struct Keeper {
    task: tokio::task::AbortHandle,
}

impl Keeper {
    /// Renews `lease` in `store` every `every`, first `every` from now, until dropped. The
    /// first renewal that fails is sent to `failed` and ends the keeper (the loop registers
    /// again, resuming the lease if it still lives).
    pub(super) fn start<S: FactStore + Clone>(
        store: &S,
        lease: LeaseId,
        every: Duration,
        on: RenewOn,
        failed: mpsc::UnboundedSender<Outcome>,
    ) -> Keeper {
        let store = store.clone();
        let renewals = async move {
            let mut due = tokio::time::Instant::now() + every;
            loop {
                tokio::time::sleep_until(due).await;
                due = tokio::time::Instant::now() + every;
                let outcome = perform::renew(&store, lease).await;
                if outcome.error().is_some() {
                    local::store_error("renew_lease");
                    // The loop may have ended meanwhile; then nobody needs to hear of it.
                    let _ = failed.send(outcome);
                    return;
                }
            }
        };
        let own_thread = match on {
            RenewOn::LivenessThread => liveness(),
            RenewOn::AgentRuntime => None,
        };
        let task = match own_thread {
            Some(handle) => handle.spawn(renewals),
            None => tokio::spawn(renewals),
        };
        Keeper {
            task: task.abort_handle(),
        }
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The process's liveness runtime: one thread, started with the first keeper, that runs
/// renewals only. `None` when the thread cannot be started (the keeper then runs on the
/// agent's runtime, and a warning says so once).
fn liveness() -> Option<&'static Handle> {
    static LIVENESS: OnceLock<Option<Handle>> = OnceLock::new();
    LIVENESS
        .get_or_init(|| match start_liveness_thread() {
            Ok(handle) => Some(handle),
            Err(err) => {
                tracing::warn!(
                    "cannot start the lease keepers' thread ({err}); leases are renewed on the \
                     agents' runtime, where busy work can delay them"
                );
                None
            }
        })
        .as_ref()
}

fn start_liveness_thread() -> std::io::Result<Handle> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let handle = runtime.handle().clone();
    std::thread::Builder::new()
        .name("ccattler-liveness".into())
        .spawn(move || runtime.block_on(std::future::pending::<()>()))?;
    Ok(handle)
}
