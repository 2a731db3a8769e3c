//! [`Snapshot`]: the whole store at one revision, read the way the standard controllers read it;
//! [`Recording`]: a value computed from every revision the store goes through.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use ccattler_controllers::scheduler::{self, Existing, Node, Rebalance, Request, ScheduleInput};
use ccattler_controllers::standard::{Cluster, Instance, IntentResolver, NetworkInputs, Standing};
use ccattler_core::schema::{
    self, DesiredState, Endpoints, InitStatus, InstanceObservation, NodeRules, NodeStatus,
    RecordKey, Rollout, RolloutPhase, ServiceSpec, ServiceStatus,
};
use ccattler_core::{Fact, FactStore, FactView, Key, KeyError, Revision, StoreError, WatchEvent};
use ccattler_store::MemoryStore;
use futures_util::{FutureExt, StreamExt};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Every fact of the store at one revision, with typed readers.
#[derive(Clone, Debug)]
pub struct Snapshot {
    view: FactView,
    cluster: OnceLock<Cluster>,
}

impl Snapshot {
    pub(crate) fn new(view: FactView) -> Self {
        Snapshot {
            view,
            cluster: OnceLock::new(),
        }
    }

    /// The raw facts.
    pub fn view(&self) -> &FactView {
        &self.view
    }

    /// The revision the snapshot reflects.
    pub fn revision(&self) -> Revision {
        self.view.revision()
    }

    /// The standard records, decoded and cross-referenced as the controllers see them (computed on
    /// first use).
    pub fn cluster(&self) -> &Cluster {
        self.cluster.get_or_init(|| Cluster::read(&self.view))
    }

    fn fact(&self, key: Result<Key, KeyError>) -> Option<&Fact> {
        self.view.get(key.ok()?.as_str())
    }

    /// `status/service/{svc}`.
    pub fn status(&self, service: &str) -> Option<ServiceStatus> {
        schema::decode(self.fact(schema::keys::service_status(service))?).ok()
    }

    /// `endpoint/service/{svc}`.
    pub fn endpoints(&self, service: &str) -> Option<Endpoints> {
        schema::decode(self.fact(schema::keys::endpoints(service))?).ok()
    }

    /// `observed/node/{node}`.
    pub fn node(&self, node: &str) -> Option<NodeStatus> {
        schema::decode(self.fact(schema::keys::node(node))?).ok()
    }

    /// Whether `lease/node/{node}` exists.
    pub fn node_alive(&self, node: &str) -> bool {
        schema::keys::node_lease(node).is_ok_and(|key| self.view.contains(key.as_str()))
    }

    /// `observed/instance/{node}/{id}`.
    pub fn observed(&self, node: &str, id: &str) -> Option<InstanceObservation> {
        schema::decode(self.fact(schema::keys::observed_instance(node, id))?).ok()
    }

    /// The desired instances of `service` (running or stopping), in id order.
    pub fn instances(&self, service: &str) -> Vec<&Instance> {
        self.cluster().instances_of(service).collect()
    }

    /// How many `placement/{node}/` keys each node holds (nodes without any are absent).
    pub fn placements(&self) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for fact in self.view.scan(schema::PLACEMENTS) {
            if let Some(RecordKey::Placement { node, .. }) = RecordKey::parse(&fact.key) {
                *counts.entry(node.to_owned()).or_default() += 1;
            }
        }
        counts
    }

    /// Instances of `service` that should run, are placed on a live node and run there, per node.
    pub fn spread(&self, service: &str) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for instance in self.cluster().instances_of(service) {
            if instance.desired.state == DesiredState::Running
                && instance.node_alive
                && instance.is_running()
                && let Some(node) = &instance.node
            {
                *counts.entry(node.clone()).or_default() += 1;
            }
        }
        counts
    }

    /// Whether every desired service is fully converged: exactly its count of current-version
    /// instances, all running and ready on live nodes, none stopping (an instance that ended
    /// and that its restart policy leaves ended, under `never` or a clean exit under
    /// `on_failure`, counts as converged: present, neither running nor ready); status desired =
    /// present, running = ready = present minus those; endpoints list each that serves at an
    /// address; no placement left over; nothing is left of deleted services; and the spread is
    /// the one a clean start would choose: no alive node holds two instances of a service more
    /// than the node one more instance would be placed on (asked of the pure scheduler, the
    /// rule the scheduler controller's rebalancing follows). Stateful services, those with
    /// `max_extra 0` and those with an instance that ended for good are exempt from the spread:
    /// the instance controller never moves them (an identity; no room for a replacement before
    /// the stop; a move waits for every instance to be ready). [`gaps`](Self::gaps) says what
    /// is missing.
    pub fn is_converged(&self) -> bool {
        self.gaps().is_empty()
    }

    /// What keeps the store from being converged ([`is_converged`](Self::is_converged)), one
    /// line each, for people; empty when it is converged.
    pub fn gaps(&self) -> Vec<String> {
        let cluster = self.cluster();
        let mut gaps = Vec::new();
        for (name, spec) in &cluster.services {
            let Some(effective) = cluster.effective.get(name) else {
                gaps.push(format!("{name}: no effective record yet"));
                continue;
            };
            if *effective != IntentResolver::read(&self.view, spec) {
                gaps.push(format!("{name}: the effective record lags the spec"));
                continue;
            }
            let rollout = schema::keys::rollout(name)
                .ok()
                .and_then(|key| self.view.get(key.as_str()))
                .and_then(|fact| schema::decode::<Rollout>(fact).ok());
            if let Some(rollout) = rollout.filter(|r| r.phase == RolloutPhase::Progressing) {
                gaps.push(format!(
                    "{name}: the rollout of version {} is still progressing ({})",
                    rollout.version, rollout.reason
                ));
            }
            let n = effective.instances;
            let instances: Vec<&Instance> = cluster.instances_of(name).collect();
            // Ended, and left ended by its restart policy (`never`, or a clean exit under
            // `on_failure`): as converged as the user asked it to be.
            let finished =
                |i: &Instance| i.node_alive && i.standing(spec.restart) == Standing::Finished;
            let mut ended = 0;
            for i in &instances {
                let why = if i.desired.state != DesiredState::Running {
                    "is stopping"
                } else if i.desired.version != effective.version {
                    "runs an old version"
                } else if i.node.is_none() {
                    let reason = schema::keys::unschedulable(&i.id)
                        .ok()
                        .and_then(|key| self.view.get(key.as_str()))
                        .and_then(|f| schema::decode::<schema::Unschedulable>(f).ok());
                    if let Some(reason) = reason {
                        gaps.push(format!(
                            "{name}: instance {} is not placed: {}",
                            i.id, reason.reason
                        ));
                        continue;
                    }
                    "is not placed"
                } else if !i.node_alive {
                    "is on a dead node"
                } else if finished(i) {
                    ended += 1;
                    continue;
                } else if !i.is_ready() {
                    "is not running and ready"
                } else {
                    continue;
                };
                gaps.push(format!("{name}: instance {} {why}", i.id));
            }
            if instances.len() != n as usize {
                gaps.push(format!(
                    "{name}: {} instances for {n} desired",
                    instances.len()
                ));
            }
            let status = ServiceStatus {
                desired: n,
                present: n,
                running: n - ended,
                ready: n - ended,
                deleting: false,
            };
            if self.status(name).as_ref() != Some(&status) {
                gaps.push(format!("{name}: status {:?}", self.status(name)));
            }
            // Every instance through its init steps (or, left ended by its restart policy,
            // failed in one).
            let init = schema::keys::init_status(name)
                .ok()
                .and_then(|key| self.view.get(key.as_str()))
                .and_then(|fact| schema::decode::<InitStatus>(fact).ok());
            let steps = spec.init.len() as u32;
            match init {
                None if steps > 0 => gaps.push(format!("{name}: no init record")),
                Some(_) if steps == 0 => gaps.push(format!("{name}: an init record without steps")),
                Some(init)
                    if init.steps != steps
                        || init.waiting + init.running > 0
                        || init.done + init.failed != n =>
                {
                    gaps.push(format!("{name}: init {init:?}"));
                }
                _ => {}
            }
            // Every ready instance that serves at an address (one that exposes a port).
            let serving = instances
                .iter()
                .filter(|i| i.is_ready() && i.report().is_some_and(|o| o.address.is_some()))
                .count();
            let listed = self.endpoints(name).map(|e| e.endpoints.len());
            if listed != Some(serving) {
                gaps.push(format!(
                    "{name}: endpoints list {listed:?} of {serving} addresses"
                ));
            }
        }
        for i in cluster.instances.values() {
            if !cluster.services.contains_key(&i.desired.service) {
                gaps.push(format!(
                    "instance {} of deleted {} is left",
                    i.id, i.desired.service
                ));
            }
        }
        for key in cluster.orphan_placements() {
            gaps.push(format!("placement {key} has no instance"));
        }
        for f in self.view.scan(schema::SERVICE_STATUSES) {
            let Some(RecordKey::ServiceStatus(name)) = RecordKey::parse(&f.key) else {
                continue;
            };
            if !cluster.services.contains_key(name) {
                gaps.push(format!("status of deleted {name} is left"));
            }
        }
        for f in self.view.scan(schema::INIT_STATUSES) {
            let Some(RecordKey::InitStatus(name)) = RecordKey::parse(&f.key) else {
                continue;
            };
            if !cluster.services.contains_key(name) {
                gaps.push(format!("init record of deleted {name} is left"));
            }
        }
        if gaps.is_empty() {
            gaps.extend(self.spread_gaps());
        }
        if gaps.is_empty() {
            gaps.extend(self.network_gaps());
        }
        gaps
    }

    /// The nodes whose network rules (`network/node/`) are not those the policy gives for the
    /// placements and node addresses in the store, derived afresh from them (by
    /// [`NetworkInputs`], independently of the network controller's cached passes). Judged only
    /// once everything else is converged.
    fn network_gaps(&self) -> Vec<String> {
        let mut inputs = NetworkInputs::default();
        for prefix in [
            schema::DESIRED_NETWORK_POLICY,
            schema::PLACEMENTS,
            schema::OBSERVED_NODES,
        ] {
            for fact in self.view.scan(prefix) {
                inputs.apply(&fact.key, Some(fact));
            }
        }
        let mut wanted = inputs.rules();
        let mut gaps = Vec::new();
        for fact in self.view.scan(schema::NODE_RULES) {
            let Some(RecordKey::NodeRules(node)) = RecordKey::parse(&fact.key) else {
                gaps.push(format!("{} is not a node's rule set", fact.key));
                continue;
            };
            let held = schema::decode::<NodeRules>(fact).ok();
            if held != wanted.remove(node) {
                gaps.push(format!("network rules of node {node} lag the policy"));
            }
        }
        gaps.extend(
            wanted
                .into_keys()
                .map(|node| format!("node {node} has no network rules yet")),
        );
        gaps
    }

    /// The services whose spread is not the one a clean start chooses, by the rule the
    /// scheduler controller documents (`standard/spread.rs`): the alive node holding the most
    /// instances of the service holds at most one more than the node one more instance would
    /// go to. "Where one more would go" is asked of the pure scheduler
    /// ([`scheduler::schedule`], every alive instance of every service reserving its node),
    /// independently of the controller's own reading. Judged only once everything else is
    /// converged.
    fn spread_gaps(&self) -> Vec<String> {
        let cluster = self.cluster();
        let nodes: Vec<Node<'_>> = cluster
            .nodes
            .iter()
            .map(|(name, status)| Node::from_status(status, cluster.alive.contains(name)))
            .collect();
        // The services the instance controller rebalances: a stateful one's instances are
        // identities, never moved; one with `max_extra 0` has no room to start a replacement
        // before stopping the old instance; and a move starts only when every instance of the
        // service is ready, so one that ended for good (restart `never`) holds its service
        // where it is. Their spread is the one they were placed with.
        let ended: std::collections::BTreeSet<&str> = cluster
            .instances
            .values()
            .filter(|i| {
                cluster
                    .services
                    .get(&i.desired.service)
                    .is_some_and(|spec| i.standing(spec.restart) == Standing::Finished)
            })
            .map(|i| i.desired.service.as_str())
            .collect();
        let moved = |spec: &ServiceSpec| {
            !spec.stateful && spec.update.max_extra > 0 && !ended.contains(spec.name.as_str())
        };
        let existing: Vec<Existing<'_>> = cluster
            .instances
            .values()
            .filter(|i| i.node_alive)
            .filter_map(|i| {
                let spec = cluster.services.get(&i.desired.service)?;
                Some(Existing {
                    instance: &i.id,
                    service: &i.desired.service,
                    node: i.node.as_deref()?,
                    resources: spec.resources,
                    placement: &spec.placement,
                    ports: &[],
                    needs: ccattler_controllers::scheduler::Ports::NONE,
                    pinned: false,
                })
            })
            .collect();
        let mut gaps = Vec::new();
        for (name, spec) in &cluster.services {
            if !moved(spec) {
                continue;
            }
            let spread = self.spread(name);
            let Some((from, most)) = spread
                .iter()
                .max_by_key(|(node, n)| (**n, std::cmp::Reverse(*node)))
            else {
                continue;
            };
            let probe = [Request {
                instance: "\0next",
                service: name,
                resources: spec.resources,
                placement: &spec.placement,
                ports: ccattler_controllers::scheduler::Ports::NONE,
                volumes: &[],
            }];
            let plan = scheduler::schedule(&ScheduleInput {
                nodes: &nodes,
                existing: &existing,
                requests: &probe,
                rebalance: Rebalance::Off,
                ..ScheduleInput::default()
            });
            let Some(to) = plan.placements.get("\0next") else {
                continue; // no room for one more anywhere: nothing to move to
            };
            let there = spread.get(*to).copied().unwrap_or(0);
            if *most >= there + 2 {
                gaps.push(format!(
                    "{name}: the spread is not a clean start's: {from} holds {most} instances, \
                     {to}, where one more would go, holds {there}"
                ));
            }
        }
        gaps
    }

    /// One line per service: its status, and the placement counts per node, for messages.
    pub fn summary(&self) -> String {
        let mut out = format!("at revision {}:", self.revision());
        for fact in self.view.scan(schema::SERVICE_STATUSES) {
            out.push_str(&format!(
                "\n  {} {}",
                fact.key,
                fact.value_str().unwrap_or("?")
            ));
        }
        out.push_str(&format!("\n  placements {:?}", self.placements()));
        out
    }

    /// Applies one watch event.
    fn apply(&mut self, event: WatchEvent) {
        if self.view.apply_event(event) {
            self.cluster = OnceLock::new();
        }
    }
}

/// A [`wait_until`](super::TestCluster::wait_until) whose condition did not hold in time.
pub struct WaitTimeout {
    /// How long it waited.
    pub waited: Duration,
    /// The last state seen.
    pub last: Snapshot,
}

impl fmt::Display for WaitTimeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "condition not met within {:?}; last state {}",
            self.waited,
            self.last.summary()
        )
    }
}

impl fmt::Debug for WaitTimeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for WaitTimeout {}

/// Reads the whole store, then follows it: a snapshot after each burst of events, or after
/// each revision.
pub(crate) struct Follower {
    snapshot: Snapshot,
    watch: <MemoryStore as FactStore>::Watch,
    /// The first event of the next revision, read while looking for the end of one.
    pending: Option<WatchEvent>,
}

impl Follower {
    pub(crate) async fn start(store: &MemoryStore) -> Self {
        let scan = store.scan("").await.expect("scan the memory store");
        let watch = store
            .watch("", scan.revision.next())
            .await
            .expect("watch the memory store");
        let snapshot = Snapshot::new(FactView::from_facts(scan.revision, scan.facts));
        Follower {
            snapshot,
            watch,
            pending: None,
        }
    }

    pub(crate) fn snapshot(&self) -> &Snapshot {
        &self.snapshot
    }

    /// Waits for the next change and applies it: every event already delivered, or (with
    /// `per_revision`) exactly the events of the next revision.
    pub(crate) async fn next(&mut self, per_revision: bool) {
        let mut event = match self.pending.take() {
            Some(event) => event,
            None => unwrap_event(self.watch.next().await),
        };
        loop {
            let revision = event.revision();
            self.snapshot.apply(event);
            let Some(item) = self.watch.next().now_or_never() else {
                return;
            };
            let next = unwrap_event(item);
            if per_revision && next.revision() != revision {
                self.pending = Some(next);
                return;
            }
            event = next;
        }
    }
}

fn unwrap_event(item: Option<Result<WatchEvent, StoreError>>) -> WatchEvent {
    item.expect("a memory store watch does not end")
        .expect("the harness keeps up with its watch (the history is large enough)")
}

/// Values computed from every revision of the store, from the revision
/// [`TestCluster::record`](super::TestCluster::record) was called at on; consecutive equal values
/// are kept once.
#[derive(Debug)]
pub struct Recording<T> {
    store: MemoryStore,
    task: JoinHandle<()>,
    seen: watch::Receiver<Revision>,
    history: Arc<Mutex<Vec<(Revision, T)>>>,
}

impl<T: PartialEq + Send + 'static> Recording<T> {
    pub(crate) async fn start<F>(store: &MemoryStore, mut f: F) -> Self
    where
        F: FnMut(&Snapshot) -> T + Send + 'static,
    {
        let mut follower = Follower::start(store).await;
        let history = Arc::new(Mutex::new(Vec::new()));
        let (seen_tx, seen) = watch::channel(Revision::default());
        let shared = Arc::clone(&history);
        let task = tokio::spawn(async move {
            loop {
                let snapshot = follower.snapshot();
                let value = f(snapshot);
                {
                    let mut history = shared.lock().expect("recording lock");
                    if history.last().is_none_or(|(_, last)| *last != value) {
                        history.push((snapshot.revision(), value));
                    }
                }
                let _ = seen_tx.send(snapshot.revision());
                follower.next(true).await;
            }
        });
        Recording {
            store: store.clone(),
            task,
            seen,
            history,
        }
    }

    /// Waits until every revision committed so far is recorded, stops, and returns the values
    /// with the revision at which each first held.
    pub async fn finish(mut self) -> Vec<(Revision, T)> {
        let target = self.store.revision().await.expect("memory store revision");
        self.seen
            .wait_for(|seen| *seen >= target)
            .await
            .expect("the recording task runs until finished");
        self.task.abort();
        std::mem::take(&mut *self.history.lock().expect("recording lock"))
    }
}

impl<T> Drop for Recording<T> {
    fn drop(&mut self) {
        self.task.abort();
    }
}
