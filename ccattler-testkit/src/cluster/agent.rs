//! [`FakeAgent`]: a minimal stand-in for a node agent, so the standard controllers have someone to
//! talk to. The real agent (runtimes, probes, local cache) lives in `ccattler-runtime`.

use std::time::Duration;

use ccattler_core::schema::{self, NodeStatus, ObservedState};
use ccattler_core::{FactStore, LeaseId, Op, StoreError, Txn, Value, WatchEvent};
use futures_util::{FutureExt, StreamExt};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::world::World;

/// How long the stand-in's instances take to start and to stop.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AgentTiming {
    /// Time spent in `starting` before `running` (0: running at once).
    pub start_delay: Duration,
    /// Time an instance asked to stop keeps its state before it reports `stopped`.
    pub stop_delay: Duration,
}

/// Pause before a session starts again after a store error.
const RETRY: Duration = Duration::from_millis(100);

/// A minimal node agent: it runs nothing, it only reports.
///
/// # Expected flow
///
/// 1. Grants a store lease, writes `lease/node/{node}` with it and `observed/node/{node}` (one
///    transaction), and renews the lease every third of its TTL.
/// 2. Lists `placement/{node}/`, `desired/instance/` and its own `observed/instance/{node}/`
///    (re-adopting whatever it reported before a restart), then watches the first two. It keeps
///    only the desired records of its own instances; a record written before its placement was
///    seen is read with one `get` when the placement arrives. Every report carries the lease
///    ([`InstanceObservation::lease`](ccattler_core::schema::InstanceObservation::lease)), as
///    the node agent's do: after registering under a new lease it writes every adopted report
///    anew, so the controllers no longer take them for stale reports of an earlier
///    registration.
/// 3. For every instance placed on its node: desired `running` → `starting` (if a start delay is
///    set) then `running` with address `{node}:{port}` (a port per instance, from 20000), ready
///    and healthy; desired `stopped` → `stopped`; no desired record (forgotten, being gone) →
///    nothing. When the placement goes, the observation goes too.
///
/// # Guarantees
///
/// Event-driven (watches, no polling) and idempotent: it writes an observation only when it
/// differs from the one it last wrote, and batches all writes of one burst of events into as few
/// transactions as the store's op limit allows. A failed (`failed`/`exited`) instance, set by
/// [`AgentControl::set_instance_state`], stays so: like a real agent, it leaves replacement to
/// the instance controller.
///
/// # Caveats
///
/// No runtime, no probes, no resource usage, no image: `image` stays empty. A store error (or a
/// compacted watch) restarts the session: it lists again and carries on.
#[derive(Debug)]
pub struct FakeAgent<S> {
    store: S,
    status: NodeStatus,
    lease_ttl: Duration,
    timing: AgentTiming,
    commands: mpsc::UnboundedReceiver<(String, ObservedState)>,
}

/// Sends instructions to a running [`FakeAgent`].
#[derive(Clone, Debug)]
pub struct AgentControl {
    commands: mpsc::UnboundedSender<(String, ObservedState)>,
}

impl AgentControl {
    /// Makes instance `id` (if it is on this node) be in `state` from now on, as if it had
    /// crashed (`failed`) or ended (`exited`). Ignored when the agent is not running.
    pub fn set_instance_state(&self, id: &str, state: ObservedState) {
        let _ = self.commands.send((id.to_owned(), state));
    }
}

impl<S: FactStore> FakeAgent<S> {
    /// An agent reporting `status` on `store`, with node leases of `lease_ttl`.
    pub fn new(
        store: S,
        status: NodeStatus,
        lease_ttl: Duration,
        timing: AgentTiming,
    ) -> (Self, AgentControl) {
        let (tx, rx) = mpsc::unbounded_channel();
        let agent = FakeAgent {
            store,
            status,
            lease_ttl,
            timing,
            commands: rx,
        };
        (agent, AgentControl { commands: tx })
    }

    /// Runs until the task is aborted.
    pub async fn run(mut self) {
        let mut lease = None;
        loop {
            if self.session(&mut lease).await.is_err() {
                tokio::time::sleep(RETRY).await;
            }
        }
    }

    /// Registers (if needed), lists, watches and reports until a store error.
    async fn session(&mut self, lease: &mut Option<LeaseId>) -> Result<(), StoreError> {
        let node = self.status.name.clone();
        let lease_id = match *lease {
            Some(id) => id,
            None => {
                let id = self.register().await?;
                *lease = Some(id);
                id
            }
        };
        let own = format!("{}{node}/", schema::PLACEMENTS);
        let observed = format!("{}{node}/", schema::OBSERVED_INSTANCES);
        let placed = self.store.scan(&own).await?;
        let desired = self.store.scan(schema::INSTANCES).await?;
        let reported = self.store.scan(&observed).await?;
        let mut placements = self.store.watch(&own, placed.revision.next()).await?;
        let mut instances = self
            .store
            .watch(schema::INSTANCES, desired.revision.next())
            .await?;
        let mut world = World::new(node, lease_id, self.timing);
        for fact in &placed.facts {
            world.placement(&fact.key, Some(fact));
        }
        for fact in desired.facts {
            world.desired(&fact.key.clone(), Some(fact));
        }
        for fact in &reported.facts {
            world.adopt(fact);
        }
        let mut keep_alive = tokio::time::interval(self.lease_ttl / 3);
        keep_alive.tick().await;
        loop {
            for key in world.take_fetches() {
                let fact = self.store.get(&key).await?;
                if let Some(fact) = fact {
                    world.desired(&key, Some(fact));
                }
            }
            world.converge(Instant::now());
            world.report(&self.store).await?;
            let next_timer = world.next_timer();
            // Biased: the same inputs give the same order of work, run after run.
            tokio::select! {
                biased;
                Some((id, state)) = self.commands.recv() => world.set_state(&id, state),
                item = instances.next() => world.event(&unwrap(item)?),
                item = placements.next() => world.event(&unwrap(item)?),
                _ = sleep_until(next_timer), if next_timer.is_some() => world.fire(Instant::now()),
                _ = keep_alive.tick() => {
                    if let Err(err) = self.store.keep_alive(lease_id).await {
                        *lease = None; // expired or revoked: register again
                        return Err(err);
                    }
                }
            }
            // Take in everything already delivered, so one burst makes one report.
            while let Some(item) = instances.next().now_or_never() {
                world.event(&unwrap(item)?);
            }
            while let Some(item) = placements.next().now_or_never() {
                world.event(&unwrap(item)?);
            }
        }
    }

    /// Grants a lease and writes the liveness key and the node status in one transaction.
    async fn register(&self) -> Result<LeaseId, StoreError> {
        let name = &self.status.name;
        let lease = self.store.grant_lease(self.lease_ttl).await?;
        let txn = Txn::new()
            .then(Op::Put {
                key: schema::keys::node_lease(name)?,
                value: Value::from(name.clone()),
                lease: Some(lease.id),
            })
            .then(Op::put(
                schema::keys::node(name)?,
                schema::encode(&self.status),
            ));
        self.store.txn(txn).await?;
        Ok(lease.id)
    }
}

fn unwrap(item: Option<Result<WatchEvent, StoreError>>) -> Result<WatchEvent, StoreError> {
    item.ok_or_else(|| StoreError::unavailable("watch ended"))?
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
