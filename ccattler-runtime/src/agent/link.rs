//! The agent's side of the store: registration, the lease, the placement watch, reports.

use ccattler_core::schema::{self, Assignment, ServiceSpec};
use ccattler_core::{EventKind, FactStore, Key, LeaseId, Op, StoreError, Txn, Value, WatchEvent};

use super::NodeAgent;
use super::cache::Desired;
use ccattler_core::Runtime;

impl<S: FactStore + Clone, R: Runtime> NodeAgent<S, R> {
    /// Holds a lease (resuming the cached one when it still lives) and writes the node's
    /// liveness key and status in one transaction.
    pub(super) async fn register(&self, desired: &mut Desired) -> Result<LeaseId, StoreError> {
        let resumed = match desired.lease_id() {
            Some(lease) => self.store.keep_alive(lease).await.ok().map(|_| lease),
            None => None,
        };
        let lease = match resumed {
            Some(lease) => lease,
            None => self.store.grant_lease(self.config.lease_ttl).await?.id,
        };
        let node = &self.config.node;
        let txn = Txn::new()
            .then(Op::Put {
                key: schema::keys::node_lease(node).map_err(StoreError::from)?,
                value: Value::from(node.clone()),
                lease: Some(lease),
            })
            .then(Op::put(
                schema::keys::node(node).map_err(StoreError::from)?,
                schema::encode(&self.config.status()),
            ));
        self.store.txn(txn).await?;
        desired.lease = Some(lease.0);
        Ok(lease)
    }

    /// Lists this node's placements (replacing what the cache said), fetches what they need, and
    /// watches for changes from just after the list.
    pub(super) async fn follow(&self, desired: &mut Desired) -> Result<S::Watch, StoreError> {
        let prefix = self.placement_prefix();
        let scan = self.store.scan(&prefix).await?;
        desired.placements.clear();
        for fact in &scan.facts {
            if let Ok(assignment) = schema::decode::<Assignment>(fact) {
                desired
                    .placements
                    .insert(assignment.instance.clone(), assignment);
            }
        }
        let placed: Vec<Assignment> = desired.placements.values().cloned().collect();
        for assignment in &placed {
            self.fetch_for(assignment, desired).await?;
        }
        self.store.watch(&prefix, scan.revision.next()).await
    }

    /// Applies one placement event.
    pub(super) async fn apply_event(
        &self,
        event: WatchEvent,
        desired: &mut Desired,
    ) -> Result<(), StoreError> {
        match event.kind {
            EventKind::Put => {
                if let Ok(assignment) = schema::decode::<Assignment>(&event.fact) {
                    self.fetch_for(&assignment, desired).await?;
                    desired
                        .placements
                        .insert(assignment.instance.clone(), assignment);
                }
            }
            EventKind::Delete => {
                let prefix = self.placement_prefix();
                if let Some(id) = event.fact.key.strip_prefix(&prefix) {
                    desired.placements.remove(id);
                }
            }
        }
        Ok(())
    }

    /// Fetches the spec (when its version is new to us) and the secrets an instance needs.
    async fn fetch_for(
        &self,
        assignment: &Assignment,
        desired: &mut Desired,
    ) -> Result<(), StoreError> {
        let known = desired
            .specs
            .get(&assignment.service)
            .is_some_and(|spec| spec.version() == assignment.version);
        if !known {
            let key = schema::keys::service(&assignment.service).map_err(StoreError::from)?;
            if let Some(fact) = self.store.get(&key).await?
                && let Ok(spec) = schema::decode::<ServiceSpec>(&fact)
            {
                desired.specs.insert(spec.name.clone(), spec);
            }
        }
        let secrets: Vec<String> = desired
            .specs
            .get(&assignment.service)
            .map(|spec| spec.secrets.iter().map(|s| s.name.clone()).collect())
            .unwrap_or_default();
        for name in secrets {
            let key = schema::keys::secret(&name).map_err(StoreError::from)?;
            if let Some(fact) = self.store.get(&key).await? {
                desired.secrets.insert(name, fact.value.to_vec());
            }
        }
        Ok(())
    }

    /// Writes changed observations and deletes those of instances no longer placed here, in
    /// transactions of at most the store's op limit.
    pub(super) async fn write(
        &self,
        puts: Vec<(Key, Value)>,
        deletes: Vec<Key>,
    ) -> Result<(), StoreError> {
        let ops: Vec<Op> = puts
            .into_iter()
            .map(|(key, value)| Op::put(key, value))
            .chain(deletes.into_iter().map(Op::delete))
            .collect();
        let limit = self.store.limits().max_txn_ops.max(1);
        for chunk in ops.chunks(limit) {
            let txn = Txn {
                then: chunk.to_vec(),
                ..Txn::default()
            };
            self.store.txn(txn).await?;
        }
        Ok(())
    }

    fn placement_prefix(&self) -> String {
        format!("{}{}/", schema::PLACEMENTS, self.config.node)
    }
}
