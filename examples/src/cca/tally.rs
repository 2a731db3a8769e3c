//! The facts the cluster's status is made of, counted per service and kept current one change
//! at a time.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use ccattler_core::schema::{
    self, Assignment, DesiredState, EffectiveService, RebalanceMove, RecordKey, ScaleIntent,
    ServiceSpec, ServiceStatus, Unschedulable,
};
use ccattler_core::{EventKind, Fact, FactStore, Key, Revision, StoreError, WatchEvent};
use serde::de::DeserializeOwned;

use super::progress::{Autoscaling, ClusterStatus, ServiceRow};

/// The prefixes the status reads (disjoint: a key is under one at most).
const PREFIXES: [&str; 8] = [
    schema::DESIRED_SERVICES,
    schema::AUTOSCALER_INTENTS,
    schema::EFFECTIVE_SERVICES,
    schema::SERVICE_STATUSES,
    schema::REBALANCE_MOVES,
    schema::PLACEMENTS,
    schema::UNSCHEDULABLE,
    schema::NODE_LEASES,
];

/// Per prefix, the records that decode, and running placements and unplaced instances counted
/// per service, so that [`status`](Tally::status) costs the services, not the facts.
#[derive(Debug, Default)]
pub(super) struct Tally {
    /// Per prefix, the revision its facts were scanned at: a change at or before it is in.
    scanned: BTreeMap<&'static str, Revision>,
    specs: BTreeMap<Key, ServiceSpec>,
    /// The autoscaler's recommendation per service, with its reason.
    autoscaler: BTreeMap<String, Autoscaling>,
    effective: BTreeMap<String, EffectiveService>,
    status: BTreeMap<String, ServiceStatus>,
    moves: BTreeMap<String, RebalanceMove>,
    /// Placements meant to run. One on a dead node is held there (not replaced twice, stopped
    /// once its node is back) and does not count: a service whose replacement of it runs is
    /// settled.
    placed: OnNodes,
    /// Placements asked to stop. One on a live node is an instance still stopping, and its
    /// service is not settled until it is gone.
    stopping: OnNodes,
    /// Unplaced instances by key: their service and the scheduler's reason.
    unplaced: HashMap<Key, (String, String)>,
    /// Per service, each distinct reason and how many instances it holds back.
    reasons: BTreeMap<String, BTreeMap<String, u32>>,
    /// Live nodes, by name.
    nodes: BTreeSet<String>,
}

impl Tally {
    /// Scans every prefix of the status once.
    pub(super) async fn scan<S: FactStore>(store: &S) -> Result<Self, StoreError> {
        let mut tally = Tally::default();
        for prefix in PREFIXES {
            let scan = store.scan(prefix).await?;
            tally.scanned.insert(prefix, scan.revision);
            for fact in &scan.facts {
                tally.insert(prefix, fact);
            }
        }
        Ok(tally)
    }

    /// Takes one change in. A change its prefix's scan already holds is ignored, so a watch
    /// opened before the scans may replay older changes harmlessly.
    pub(super) fn apply(&mut self, event: &WatchEvent) {
        let Some(prefix) = PREFIXES.into_iter().find(|p| event.key().has_prefix(p)) else {
            return;
        };
        if self
            .scanned
            .get(prefix)
            .is_some_and(|&at| event.revision() <= at)
        {
            return;
        }
        self.remove(prefix, event.key());
        if event.kind == EventKind::Put {
            self.insert(prefix, &event.fact);
        }
    }

    fn insert(&mut self, prefix: &'static str, fact: &Fact) {
        let name = || fact.key.strip_prefix(prefix).unwrap_or_default().to_owned();
        match prefix {
            schema::DESIRED_SERVICES => {
                if let Some(spec) = decoded::<ServiceSpec>(fact) {
                    self.specs.insert(fact.key.clone(), spec);
                }
            }
            schema::AUTOSCALER_INTENTS => {
                if let Some(intent) = decoded::<ScaleIntent>(fact) {
                    let recommended = Autoscaling {
                        instances: intent.instances,
                        reason: intent.reason,
                    };
                    self.autoscaler.insert(name(), recommended);
                }
            }
            schema::EFFECTIVE_SERVICES => {
                if let Some(effective) = decoded(fact) {
                    self.effective.insert(name(), effective);
                }
            }
            schema::SERVICE_STATUSES => {
                if let Some(status) = decoded(fact) {
                    self.status.insert(name(), status);
                }
            }
            schema::REBALANCE_MOVES => {
                if let Some(suggested) = decoded(fact) {
                    self.moves.insert(name(), suggested);
                }
            }
            schema::PLACEMENTS => {
                if let Some(a) = decoded::<Assignment>(fact)
                    && let Some(RecordKey::Placement { node, .. }) = RecordKey::parse(&fact.key)
                {
                    let counted = if a.state == DesiredState::Running {
                        &mut self.placed
                    } else {
                        &mut self.stopping
                    };
                    counted.insert(fact.key.clone(), node, a.service, &self.nodes);
                }
            }
            schema::UNSCHEDULABLE => {
                if let Some(u) = decoded::<Unschedulable>(fact) {
                    let reasons = self.reasons.entry(u.service.clone()).or_default();
                    *reasons.entry(u.reason.clone()).or_default() += 1;
                    self.unplaced
                        .insert(fact.key.clone(), (u.service, u.reason));
                }
            }
            _ => {
                if let Some(RecordKey::NodeLease(node)) = RecordKey::parse(&fact.key)
                    && self.nodes.insert(node.to_owned())
                {
                    self.placed.node_up(node);
                    self.stopping.node_up(node);
                }
            }
        }
    }

    fn remove(&mut self, prefix: &'static str, key: &Key) {
        let name = || key.strip_prefix(prefix).unwrap_or_default();
        match prefix {
            schema::DESIRED_SERVICES => {
                self.specs.remove(key);
            }
            schema::AUTOSCALER_INTENTS => {
                self.autoscaler.remove(name());
            }
            schema::EFFECTIVE_SERVICES => {
                self.effective.remove(name());
            }
            schema::SERVICE_STATUSES => {
                self.status.remove(name());
            }
            schema::REBALANCE_MOVES => {
                self.moves.remove(name());
            }
            schema::PLACEMENTS => {
                self.placed.remove(key, &self.nodes);
                self.stopping.remove(key, &self.nodes);
            }
            schema::UNSCHEDULABLE => {
                if let Some((service, reason)) = self.unplaced.remove(key)
                    && let Some(reasons) = self.reasons.get_mut(&service)
                {
                    count_down(reasons, &reason, 1);
                    if reasons.is_empty() {
                        self.reasons.remove(&service);
                    }
                }
            }
            _ => {
                if let Some(RecordKey::NodeLease(node)) = RecordKey::parse(key)
                    && self.nodes.remove(node)
                {
                    self.placed.node_down(node);
                    self.stopping.node_down(node);
                }
            }
        }
    }

    /// One row per declared service, in the order of their keys.
    pub(super) fn status(&self) -> ClusterStatus {
        let services = self.specs.values().map(|spec| self.row(spec)).collect();
        ClusterStatus {
            services,
            nodes: self.nodes.len(),
        }
    }

    /// The row of `spec`.
    fn row(&self, spec: &ServiceSpec) -> ServiceRow {
        let resolved = self.effective.get(&spec.name);
        let desired = resolved.map_or(spec.instances, |e| e.instances);
        let counted = self.status.get(&spec.name);
        let reasons = self.reasons.get(&spec.name);
        let unplaced = reasons.map_or(0, |r| r.values().sum());
        let converged = resolved.is_some()
            && counted.is_some_and(|s| {
                s.desired == desired
                    && s.present == desired
                    && s.running == desired
                    && s.ready == desired
                    && !s.deleting
            })
            && unplaced == 0;
        // Settled too: no rebalancing move in flight (an extra instance placed) or about to
        // start (a suggestion the instance controller acts on), and no instance still stopping.
        let placed = self.placed.live(&spec.name);
        let stopping = self.stopping.live(&spec.name);
        let moving = placed > desired
            || (self.moves.contains_key(&spec.name) && !spec.stateful && spec.update.max_extra > 0);
        let counted = counted.cloned().unwrap_or_default();
        ServiceRow {
            name: spec.name.clone(),
            desired,
            placed,
            running: counted.running,
            ready: counted.ready,
            unplaced,
            reasons: reasons
                .into_iter()
                .flat_map(|r| r.keys().cloned())
                .collect(),
            converged: converged && !moving && stopping == 0,
            autoscaler: self.autoscaler.get(&spec.name).cloned(),
        }
    }
}

/// The record, or `None` for a fact that does not decode (skipped, as a status read skips it).
fn decoded<T: DeserializeOwned>(fact: &Fact) -> Option<T> {
    schema::decode(fact).ok()
}

/// Placements by key, counted per service over the live nodes, so that a node's lease coming
/// or going moves its placements' counts at once.
#[derive(Debug, Default)]
struct OnNodes {
    /// By key: the node and the service.
    by_key: HashMap<Key, (String, String)>,
    /// Per node, by service.
    by_node: HashMap<String, BTreeMap<String, u32>>,
    /// On live nodes, by service.
    live: BTreeMap<String, u32>,
}

impl OnNodes {
    /// Counts the placement `key` of `service` on `node`; `nodes` are the live ones.
    fn insert(&mut self, key: Key, node: &str, service: String, nodes: &BTreeSet<String>) {
        let per_node = self.by_node.entry(node.to_owned()).or_default();
        *per_node.entry(service.clone()).or_default() += 1;
        if nodes.contains(node) {
            *self.live.entry(service.clone()).or_default() += 1;
        }
        self.by_key.insert(key, (node.to_owned(), service));
    }

    /// Forgets the placement `key`, if counted; `nodes` are the live ones.
    fn remove(&mut self, key: &Key, nodes: &BTreeSet<String>) {
        let Some((node, service)) = self.by_key.remove(key) else {
            return;
        };
        if nodes.contains(&node) {
            count_down(&mut self.live, &service, 1);
        }
        if let Some(per_node) = self.by_node.get_mut(&node) {
            count_down(per_node, &service, 1);
            if per_node.is_empty() {
                self.by_node.remove(&node);
            }
        }
    }

    /// `node` became live: its placements count.
    fn node_up(&mut self, node: &str) {
        for (service, n) in self.by_node.get(node).into_iter().flatten() {
            *self.live.entry(service.clone()).or_default() += n;
        }
    }

    /// `node` is no longer live: its placements do not count.
    fn node_down(&mut self, node: &str) {
        for (service, n) in self.by_node.get(node).into_iter().flatten() {
            count_down(&mut self.live, service, *n);
        }
    }

    /// The placements of `service` on live nodes.
    fn live(&self, service: &str) -> u32 {
        self.live.get(service).copied().unwrap_or(0)
    }
}

/// One less of `name`, forgetting it at zero.
fn count_down(counts: &mut BTreeMap<String, u32>, name: &str, by: u32) {
    if let Some(count) = counts.get_mut(name) {
        *count = count.saturating_sub(by);
        if *count == 0 {
            counts.remove(name);
        }
    }
}

#[cfg(test)]
mod tests {
    use ccattler_core::schema::{ServiceSpec, keys};
    use ccattler_store::MemoryStore;

    use super::super::progress::StatusFollower;
    use super::*;

    fn spec(name: &str, instances: u32) -> Vec<u8> {
        schema::encode(&ServiceSpec {
            name: name.into(),
            instances,
            ..ServiceSpec::default()
        })
        .to_vec()
    }

    fn placed(service: &str, state: &str) -> Vec<u8> {
        format!(r#"{{"instance":"i","service":"{service}","node":"n1","state":"{state}"}}"#)
            .into_bytes()
    }

    fn unplaced(service: &str, reason: &str) -> Vec<u8> {
        format!(r#"{{"service":"{service}","reason":"{reason}"}}"#).into_bytes()
    }

    /// Every change, followed one at a time, leaves the same status as a scan from scratch:
    /// records replaced by ones of another service or reason, stopped placements, deletes,
    /// facts that do not decode.
    #[tokio::test]
    async fn a_followed_status_is_the_status_read_afresh() -> Result<(), Box<dyn std::error::Error>>
    {
        let store = MemoryStore::new();
        store
            .put(&keys::service("web")?, spec("web", 3).into())
            .await?;
        let mut follower = StatusFollower::new(&store).await?;
        assert_eq!(follower.next().await?, ClusterStatus::read(&store).await?);
        let steps: Vec<(Key, Option<Vec<u8>>)> = vec![
            (keys::node_lease("n1")?, Some(b"{}".to_vec())),
            (keys::service("db")?, Some(spec("db", 1))),
            (
                keys::effective("web")?,
                Some(br#"{"version":"v1","instances":2}"#.to_vec()),
            ),
            (
                keys::placement("n1", "web-1")?,
                Some(placed("web", "running")),
            ),
            (
                keys::placement("n1", "web-2")?,
                Some(placed("web", "running")),
            ),
            (
                keys::placement("n1", "db-0")?,
                Some(placed("db", "running")),
            ),
            (
                keys::placement("n1", "web-2")?,
                Some(placed("web", "stopped")),
            ),
            (
                keys::unschedulable("web-3")?,
                Some(unplaced("web", "no room")),
            ),
            (
                keys::unschedulable("web-4")?,
                Some(unplaced("web", "no room")),
            ),
            (
                keys::unschedulable("web-4")?,
                Some(unplaced("db", "no zone")),
            ),
            (keys::unschedulable("web-3")?, None),
            (
                keys::service_status("web")?,
                Some(br#"{"desired":2,"present":2,"running":2,"ready":2}"#.to_vec()),
            ),
            // A placement on a node without a lease counts only while the node lives.
            (
                keys::placement("n2", "web-5")?,
                Some(placed("web", "running")),
            ),
            (keys::node_lease("n2")?, Some(b"{}".to_vec())),
            (keys::node_lease("n2")?, None),
            (keys::placement("n1", "db-0")?, Some(b"not json".to_vec())),
            (keys::placement("n1", "web-1")?, None),
            (
                keys::scale_intent("db")?,
                Some(br#"{"instances":9,"reason":"cpu 90% of 60%; asks 9"}"#.to_vec()),
            ),
            (
                keys::scale_intent("web")?,
                Some(br#"{"instances":4,"reason":"cpu 120% of 60%; asks 4"}"#.to_vec()),
            ),
            (keys::scale_intent("db")?, None),
            (keys::service("db")?, None),
            (keys::node_lease("n1")?, None),
        ];
        let mut seen = Vec::new();
        for (key, value) in steps {
            match value {
                Some(value) => drop(store.put(&key, value.into()).await?),
                None => drop(store.delete(&key).await?),
            }
            let followed = follower.next().await?;
            assert_eq!(
                followed,
                ClusterStatus::read(&store).await?,
                "after {key:?}"
            );
            seen.push(followed);
        }
        // What the counts must be, written out (the fresh read shares the tally's code).
        let row = |status: &ClusterStatus, name: &str| {
            status.services.iter().find(|r| r.name == name).cloned()
        };
        let web = row(&seen[5], "web").expect("web");
        assert_eq!((web.desired, web.placed), (2, 2), "two running placements");
        assert_eq!(row(&seen[5], "db").map(|r| r.placed), Some(1));
        assert_eq!(
            row(&seen[6], "web").map(|r| r.placed),
            Some(1),
            "a stopped one"
        );
        let web = row(&seen[8], "web").expect("web");
        assert_eq!(
            (web.unplaced, web.reasons.clone()),
            (2, vec!["no room".to_owned()])
        );
        assert_eq!(
            row(&seen[9], "web").map(|r| r.unplaced),
            Some(1),
            "one moved to db"
        );
        assert_eq!(row(&seen[9], "db").map(|r| r.unplaced), Some(1));
        let placed = |i: usize| row(&seen[i], "web").map(|r| r.placed);
        assert_eq!(
            (placed(12), placed(13), placed(14)),
            (Some(1), Some(2), Some(1)),
            "web-5 counts while n2 lives"
        );
        assert_eq!((seen[12].nodes, seen[13].nodes), (1, 2));
        let last = seen.last().expect("a status");
        assert_eq!(last.services.len(), 1, "db deleted: {last:?}");
        assert_eq!(last.nodes, 0);
        let web = row(last, "web").expect("web");
        assert_eq!(
            (
                web.desired,
                web.placed,
                web.running,
                web.ready,
                web.unplaced
            ),
            (2, 0, 2, 2, 0)
        );
        assert!(
            web.converged,
            "web-5, held on dead n2, is not a move: {web:?}"
        );
        assert_eq!(
            web.autoscaler.map(|a| a.line()),
            Some("autoscaler recommends 4: cpu 120% of 60%; asks 4".to_owned())
        );
        let db_scaling =
            |back: usize| row(&seen[seen.len() - back], "db").and_then(|r| r.autoscaler);
        assert_eq!(db_scaling(4).map(|a| a.instances), Some(9));
        assert_eq!(db_scaling(3), None, "its intent deleted");
        Ok(())
    }

    /// A service whose count is met is not settled while an instance of it on a live node is
    /// still stopping (its process may still run).
    #[tokio::test]
    async fn an_instance_still_stopping_holds_convergence() -> Result<(), Box<dyn std::error::Error>>
    {
        let store = MemoryStore::new();
        let put = async |key: Key, value: &[u8]| store.put(&key, value.to_vec().into()).await;
        put(keys::service("web")?, &spec("web", 1)).await?;
        put(keys::node_lease("n1")?, b"{}").await?;
        put(
            keys::effective("web")?,
            br#"{"version":"v1","instances":1}"#,
        )
        .await?;
        put(
            keys::service_status("web")?,
            br#"{"desired":1,"present":1,"running":1,"ready":1}"#,
        )
        .await?;
        put(keys::placement("n1", "web-1")?, &placed("web", "running")).await?;
        put(keys::placement("n1", "web-0")?, &placed("web", "stopped")).await?;
        let web = |status: &ClusterStatus| status.services[0].converged;
        assert!(
            !web(&ClusterStatus::read(&store).await?),
            "web-0 is stopping"
        );
        store.delete(&keys::placement("n1", "web-0")?).await?;
        assert!(web(&ClusterStatus::read(&store).await?), "web-0 is gone");
        Ok(())
    }
}
