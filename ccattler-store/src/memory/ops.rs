//! The [`FactStore`] operations of [`MemoryStore`]: each takes the lock once, expires due
//! leases, does its work, and wakes watchers after releasing the lock.

use std::ops::Bound;
use std::sync::Arc;
use std::time::Duration;

use ccattler_core::key::validate_prefix;
use ccattler_core::{
    Fact, FactStore, Key, Lease, LeaseId, Revision, Scan, StoreError, StoreLimits, Txn,
    TxnResponse, Value,
};

use super::lease::Leases;
use super::{MemoryStore, MemoryWatch, delete_all, txn, wake_all};

impl MemoryStore {
    fn get_now(&self, key: &Key) -> Option<Fact> {
        self.expire_leases();
        self.shared.state.read().get(key.as_str())
    }

    fn put_now(
        &self,
        key: &Key,
        value: Value,
        lease: Option<LeaseId>,
    ) -> Result<Revision, StoreError> {
        self.shared.limits.check_value(key, value.len())?;
        let (mut state, wake) = self.write();
        let mut wake = wake;
        if let Some(id) = lease
            && !state.leases.contains(id)
        {
            return Err(StoreError::LeaseNotFound(id));
        }
        if let Some(entry) = state.kv.get(key.as_str())
            && entry.lease() == lease
            && entry.value == value
        {
            return Ok(Revision(entry.mod_revision));
        }
        let rev = state.next_revision();
        state.apply_put(key, value, lease, rev, &mut wake);
        state.commit(rev, true);
        drop(state);
        wake_all(wake);
        Ok(Revision(rev))
    }

    fn delete_now(&self, key: &Key) -> Option<Fact> {
        let (mut state, mut wake) = self.write();
        let rev = state.next_revision();
        let prev = state.apply_delete(key.as_str(), rev, &mut wake);
        state.commit(rev, prev.is_some());
        drop(state);
        wake_all(wake);
        prev
    }

    fn scan_now(&self, prefix: &str) -> Result<Scan, StoreError> {
        validate_prefix(prefix)?;
        self.expire_leases();
        let state = self.shared.state.read();
        let facts = state
            .kv
            .range::<str, _>((Bound::Included(prefix), Bound::Unbounded))
            .take_while(|(key, _)| key.has_prefix(prefix))
            .map(|(key, entry)| entry.to_fact(key))
            .collect();
        Ok(Scan {
            revision: Revision(state.revision),
            facts,
        })
    }

    fn watch_now(&self, prefix: &str, start: Revision) -> Result<MemoryWatch, StoreError> {
        validate_prefix(prefix)?;
        let (mut state, wake) = self.write();
        let current = state.revision;
        let start = if start == Revision::ZERO {
            current + 1
        } else {
            start.0
        };
        if start < state.history.compact_rev {
            return Err(StoreError::Compacted {
                requested: Revision(start),
                earliest: Revision(state.history.compact_rev),
            });
        }
        let replay = (start <= current).then(|| state.history.seq_of(start));
        let watch = state.watchers.register(
            Arc::from(prefix),
            start,
            self.shared.watch_buffer,
            replay,
            Arc::downgrade(&self.shared),
            Arc::clone(&self.shared.delivered),
        );
        drop(state);
        wake_all(wake);
        Ok(watch)
    }

    fn txn_now(&self, txn: Txn) -> Result<TxnResponse, StoreError> {
        self.shared.limits.check_txn(&txn)?;
        let (mut state, mut wake) = self.write();
        let result = txn::execute(&mut state, txn, &mut wake).map(|succeeded| TxnResponse {
            succeeded,
            revision: Revision(state.revision),
        });
        drop(state);
        wake_all(wake);
        result
    }

    fn compact_now(&self, revision: Revision) -> Result<(), StoreError> {
        let (mut state, wake) = self.write();
        let result = if revision.0 > state.revision {
            Err(StoreError::FutureRevision {
                requested: revision,
                current: Revision(state.revision),
            })
        } else if revision.0 <= state.history.compact_rev {
            Err(StoreError::Compacted {
                requested: revision,
                earliest: Revision(state.history.compact_rev),
            })
        } else {
            state.history.compact(revision.0);
            Ok(())
        };
        drop(state);
        wake_all(wake);
        result
    }

    fn grant_now(&self, ttl: Duration) -> Result<Lease, StoreError> {
        Leases::check_ttl(ttl)?;
        let (mut state, wake) = self.write();
        let id = state.leases.grant(ttl, self.shared.clock.now());
        self.sync_deadline(&state);
        drop(state);
        wake_all(wake);
        self.start_reaper();
        Ok(Lease { id, ttl })
    }

    fn keep_alive_now(&self, lease: LeaseId) -> Result<Duration, StoreError> {
        // `write` expires due leases first, so an expired lease is not found here.
        let (mut state, wake) = self.write();
        let ttl = state.leases.renew(lease, self.shared.clock.now());
        self.sync_deadline(&state);
        drop(state);
        wake_all(wake);
        ttl.ok_or(StoreError::LeaseNotFound(lease))
    }

    fn revoke_now(&self, lease: LeaseId) -> Result<(), StoreError> {
        let (mut state, mut wake) = self.write();
        let found = match state.leases.remove(lease) {
            Some(keys) => {
                delete_all(&mut state, keys, &mut wake);
                self.sync_deadline(&state);
                true
            }
            None => false,
        };
        drop(state);
        wake_all(wake);
        if found {
            Ok(())
        } else {
            Err(StoreError::LeaseNotFound(lease))
        }
    }
}

impl FactStore for MemoryStore {
    type Watch = MemoryWatch;

    async fn get(&self, key: &Key) -> Result<Option<Fact>, StoreError> {
        Ok(self.get_now(key))
    }

    async fn put(&self, key: &Key, value: Value) -> Result<Revision, StoreError> {
        self.put_now(key, value, None)
    }

    async fn put_with_lease(
        &self,
        key: &Key,
        value: Value,
        lease: LeaseId,
    ) -> Result<Revision, StoreError> {
        self.put_now(key, value, Some(lease))
    }

    async fn delete(&self, key: &Key) -> Result<Option<Fact>, StoreError> {
        Ok(self.delete_now(key))
    }

    async fn scan(&self, prefix: &str) -> Result<Scan, StoreError> {
        self.scan_now(prefix)
    }

    async fn watch(&self, prefix: &str, start: Revision) -> Result<MemoryWatch, StoreError> {
        self.watch_now(prefix, start)
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse, StoreError> {
        self.txn_now(txn)
    }

    async fn revision(&self) -> Result<Revision, StoreError> {
        self.expire_leases();
        Ok(Revision(self.shared.state.read().revision))
    }

    async fn compact(&self, revision: Revision) -> Result<(), StoreError> {
        self.compact_now(revision)
    }

    async fn grant_lease(&self, ttl: Duration) -> Result<Lease, StoreError> {
        self.grant_now(ttl)
    }

    async fn keep_alive(&self, lease: LeaseId) -> Result<Duration, StoreError> {
        self.keep_alive_now(lease)
    }

    async fn revoke_lease(&self, lease: LeaseId) -> Result<(), StoreError> {
        self.revoke_now(lease)
    }

    fn limits(&self) -> StoreLimits {
        self.shared.limits
    }
}

#[cfg(test)]
mod tests {
    use ccattler_core::{CmpOp, Compare, CompareTarget, Op, StoreLimits};

    use super::*;
    use crate::MemoryConfig;
    use crate::test_util::{block_on, drain, key};

    fn rev(store: &MemoryStore) -> Revision {
        block_on(store.revision()).unwrap()
    }

    #[test]
    fn put_is_idempotent_for_equal_value_without_lease() {
        let store = MemoryStore::new();
        let a = key("a");
        let mut watch = block_on(store.watch("", Revision::ZERO)).unwrap();
        assert_eq!(block_on(store.put(&a, "1".into())).unwrap(), Revision(1));
        assert_eq!(block_on(store.put(&a, "1".into())).unwrap(), Revision(1));
        assert_eq!(rev(&store), Revision(1));
        assert_eq!(drain(&mut watch).len(), 1);
        assert_eq!(
            block_on(store.put(&key("b"), "x".into())).unwrap(),
            Revision(2)
        );
        // The existing mod revision of `a`, not the store's.
        assert_eq!(block_on(store.put(&a, "1".into())).unwrap(), Revision(1));
        assert_eq!(block_on(store.put(&a, "2".into())).unwrap(), Revision(3));
    }

    #[test]
    fn put_with_lease_writes_unless_same_value_and_lease() {
        let store = MemoryStore::new();
        let a = key("a");
        let lease = block_on(store.grant_lease(Duration::from_secs(60))).unwrap();
        block_on(store.put(&a, "1".into())).unwrap();
        assert_eq!(
            block_on(store.put_with_lease(&a, "1".into(), lease.id)).unwrap(),
            Revision(2)
        );
        assert_eq!(
            block_on(store.put_with_lease(&a, "1".into(), lease.id)).unwrap(),
            Revision(2)
        );
        // A plain put of the same value detaches the lease, so it writes.
        assert_eq!(block_on(store.put(&a, "1".into())).unwrap(), Revision(3));
        assert_eq!(block_on(store.get(&a)).unwrap().unwrap().lease, None);
        assert!(matches!(
            block_on(store.put_with_lease(&a, "1".into(), LeaseId(99))),
            Err(StoreError::LeaseNotFound(LeaseId(99)))
        ));
        assert_eq!(rev(&store), Revision(3));
    }

    #[test]
    fn revisions_and_versions() {
        let store = MemoryStore::new();
        let (a, b) = (key("a"), key("b"));
        assert_eq!(rev(&store), Revision::ZERO);
        block_on(store.put(&a, "1".into())).unwrap();
        block_on(store.put(&b, "1".into())).unwrap();
        block_on(store.put(&a, "2".into())).unwrap();
        let fact = block_on(store.get(&a)).unwrap().unwrap();
        assert_eq!(
            (fact.create_revision, fact.mod_revision, fact.version),
            (Revision(1), Revision(3), 2)
        );
        assert_eq!(fact.value_str(), Some("2"));
        // Reads never raise the revision.
        block_on(store.scan("")).unwrap();
        assert_eq!(rev(&store), Revision(3));
        // Re-creating after delete starts over.
        block_on(store.delete(&a)).unwrap();
        block_on(store.put(&a, "3".into())).unwrap();
        let fact = block_on(store.get(&a)).unwrap().unwrap();
        assert_eq!((fact.create_revision, fact.version), (Revision(5), 1));
    }

    #[test]
    fn delete_returns_prev_and_missing_key_writes_nothing() {
        let store = MemoryStore::new();
        let a = key("a");
        assert_eq!(block_on(store.delete(&a)).unwrap(), None);
        assert_eq!(rev(&store), Revision::ZERO);
        block_on(store.put(&a, "1".into())).unwrap();
        let prev = block_on(store.delete(&a)).unwrap().unwrap();
        assert_eq!(
            (prev.value_str(), prev.mod_revision),
            (Some("1"), Revision(1))
        );
        assert_eq!(rev(&store), Revision(2));
        assert_eq!(block_on(store.get(&a)).unwrap(), None);
    }

    #[test]
    fn scan_is_sorted_by_key_and_filtered_by_plain_prefix() {
        let store = MemoryStore::new();
        for k in ["b/2", "a/1", "b/1", "ba", "c"] {
            block_on(store.put(&key(k), "v".into())).unwrap();
        }
        let scan = block_on(store.scan("b")).unwrap();
        let keys: Vec<_> = scan.facts.iter().map(|f| f.key.as_str()).collect();
        assert_eq!(keys, ["b/1", "b/2", "ba"]);
        assert_eq!(scan.revision, Revision(5));
        assert_eq!(block_on(store.scan("")).unwrap().facts.len(), 5);
        assert!(block_on(store.scan("zz")).unwrap().facts.is_empty());
        assert!(matches!(
            block_on(store.scan("/b")),
            Err(StoreError::InvalidKey(_))
        ));
    }

    #[test]
    fn oversized_values_are_rejected_before_writing() {
        let limits = StoreLimits {
            max_txn_ops: 4,
            max_value_bytes: 3,
        };
        let store = MemoryStore::with_config(MemoryConfig::default().limits(limits));
        assert_eq!(store.limits(), limits);
        assert!(matches!(
            block_on(store.put(&key("a"), "1234".into())),
            Err(StoreError::ValueTooLarge {
                size: 4,
                limit: 3,
                ..
            })
        ));
        assert_eq!(
            block_on(store.put(&key("a"), "123".into())).unwrap(),
            Revision(1)
        );
    }

    #[test]
    fn txn_compares_every_target() {
        let store = MemoryStore::new();
        let a = key("a");
        block_on(store.put(&a, "m".into())).unwrap(); // rev 1
        block_on(store.put(&key("x"), "x".into())).unwrap(); // rev 2
        block_on(store.put(&a, "n".into())).unwrap(); // rev 3, version 2
        let check = |target: CompareTarget, op: CmpOp| {
            let txn = Txn::new().when(Compare::new(a.clone(), op, target));
            block_on(store.txn(txn)).unwrap().succeeded
        };
        assert!(check(CompareTarget::Value("n".into()), CmpOp::Equal));
        assert!(check(CompareTarget::Value("m".into()), CmpOp::Greater));
        assert!(check(CompareTarget::Value("o".into()), CmpOp::Less));
        assert!(check(CompareTarget::Value("m".into()), CmpOp::NotEqual));
        assert!(check(CompareTarget::ModRevision(Revision(3)), CmpOp::Equal));
        assert!(check(
            CompareTarget::CreateRevision(Revision(1)),
            CmpOp::Equal
        ));
        assert!(check(CompareTarget::Version(2), CmpOp::Equal));
        assert!(!check(CompareTarget::Version(2), CmpOp::Greater));
        // Missing key: value compares are false, the others see 0.
        let missing = key("missing");
        let value_ne = Compare::new(
            missing.clone(),
            CmpOp::NotEqual,
            CompareTarget::Value("".into()),
        );
        assert!(
            !block_on(store.txn(Txn::new().when(value_ne)))
                .unwrap()
                .succeeded
        );
        let absent = Txn::new()
            .when(Compare::absent(missing.clone()))
            .when(Compare::mod_revision(missing, Revision::ZERO));
        assert!(block_on(store.txn(absent)).unwrap().succeeded);
        // Compare-only transactions write nothing.
        assert_eq!(rev(&store), Revision(3));
    }

    #[test]
    fn txn_branches_commit_at_one_revision_and_puts_always_write() {
        let store = MemoryStore::new();
        let (a, b, c) = (key("a"), key("b"), key("c"));
        block_on(store.put(&a, "1".into())).unwrap();
        let mut watch = block_on(store.watch("", Revision::ZERO)).unwrap();
        let txn = Txn::new()
            .when(Compare::value_equals(a.clone(), "1"))
            .then(Op::put(a.clone(), "1"))
            .then(Op::put(b.clone(), "2"))
            .then(Op::delete(c.clone()))
            .otherwise(Op::delete(a.clone()));
        let response = block_on(store.txn(txn)).unwrap();
        assert_eq!(
            response,
            TxnResponse {
                succeeded: true,
                revision: Revision(2)
            }
        );
        let events = drain(&mut watch);
        let keys: Vec<_> = events
            .iter()
            .map(|e| (e.key().as_str(), e.revision()))
            .collect();
        assert_eq!(keys, [("a", Revision(2)), ("b", Revision(2))]);
        assert_eq!(block_on(store.get(&a)).unwrap().unwrap().version, 2);
        // A branch that changes nothing leaves the revision alone.
        let noop = Txn::new()
            .when(Compare::exists(c.clone()))
            .otherwise(Op::delete(c));
        let response = block_on(store.txn(noop)).unwrap();
        assert_eq!(
            (response.succeeded, response.revision),
            (false, Revision(2))
        );
        assert!(drain(&mut watch).is_empty());
    }

    #[test]
    fn txn_validation_errors_write_nothing() {
        let limits = StoreLimits {
            max_txn_ops: 2,
            max_value_bytes: 3,
        };
        let store = MemoryStore::with_config(MemoryConfig::default().limits(limits));
        let (a, b) = (key("a"), key("b"));
        let bad = [
            Txn::new()
                .then(Op::put(a.clone(), "1"))
                .then(Op::put(a.clone(), "2")),
            Txn::new()
                .then(Op::put(a.clone(), "1"))
                .then(Op::put(b.clone(), "2"))
                .then(Op::delete(key("c"))),
            Txn::new()
                .then(Op::put(a.clone(), "1"))
                .then(Op::put(b.clone(), "toolong")),
            Txn::new().then(Op::put(a.clone(), "1")).then(Op::Put {
                key: b.clone(),
                value: "2".into(),
                lease: Some(LeaseId(7)),
            }),
        ];
        for txn in bad {
            assert!(block_on(store.txn(txn)).is_err());
        }
        assert_eq!(rev(&store), Revision::ZERO);
        assert_eq!(block_on(store.get(&a)).unwrap(), None);
    }

    #[test]
    fn compact_rules() {
        let store = MemoryStore::new();
        for v in ["1", "2", "3"] {
            block_on(store.put(&key("a"), v.into())).unwrap();
        }
        assert!(matches!(
            block_on(store.compact(Revision(4))),
            Err(StoreError::FutureRevision {
                requested: Revision(4),
                current: Revision(3)
            })
        ));
        block_on(store.compact(Revision(2))).unwrap();
        assert!(matches!(
            block_on(store.compact(Revision(2))),
            Err(StoreError::Compacted {
                requested: Revision(2),
                earliest: Revision(2)
            })
        ));
        block_on(store.compact(Revision(3))).unwrap();
        // Compaction drops history, not facts.
        assert_eq!(block_on(store.scan("")).unwrap().facts.len(), 1);
    }

    #[test]
    fn store_is_shared_by_clones_and_send_sync() {
        fn assert_send_sync<T: Send + Sync + 'static>() {}
        assert_send_sync::<MemoryStore>();
        let store = MemoryStore::new();
        let clone = store.clone();
        block_on(clone.put(&key("a"), "1".into())).unwrap();
        assert!(block_on(store.get(&key("a"))).unwrap().is_some());
        assert!(format!("{store:?}").contains("revision: 1"));
        let _ = Arc::strong_count(&store.shared);
    }
}
