//! Applying desired facts: one guarded transaction, a dry run that shows the diff, and pruning.

use std::collections::BTreeMap;
use std::fmt;

use ccattler_core::schema::APPLIED;
use ccattler_core::{Compare, Fact, FactStore, Key, Op, Revision, StoreError, Txn};

use crate::lang::{self, Diagnostics, SourceFile};

/// How many times [`apply`] re-reads and retries when another writer changed the same keys
/// between its read and its commit.
const ATTEMPTS: usize = 3;

pub use crate::lang::DesiredFacts;

/// How to apply.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ApplyOptions {
    /// Compute and return the plan, write nothing.
    pub dry_run: bool,
    /// Also remove desired objects the document no longer declares.
    pub prune: bool,
}

impl ApplyOptions {
    /// Sets `dry_run`.
    #[must_use]
    pub fn dry_run(mut self, dry_run: bool) -> Self {
        self.dry_run = dry_run;
        self
    }

    /// Sets `prune`.
    #[must_use]
    pub fn prune(mut self, prune: bool) -> Self {
        self.prune = prune;
        self
    }
}

/// What an apply adds, changes and removes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ApplyPlan {
    /// Keys the document declares that the store lacks.
    pub added: Vec<Key>,
    /// Keys whose stored value differs from the document's.
    pub changed: Vec<Key>,
    /// Keys the store holds that the document no longer declares; removed only with `prune`.
    pub removed: Vec<Key>,
    /// Keys already as declared.
    pub unchanged: usize,
    /// Whether `removed` will be (or was) deleted.
    pub prune: bool,
}

impl ApplyPlan {
    /// Whether applying would write anything.
    pub fn is_noop(&self) -> bool {
        self.added.is_empty() && self.changed.is_empty() && (!self.prune || self.removed.is_empty())
    }
}

impl fmt::Display for ApplyPlan {
    /// One line per key: `+` added, `~` changed, `-` removed (or `?` not declared, kept without
    /// prune), then a summary line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for key in &self.added {
            writeln!(f, "+ {key}")?;
        }
        for key in &self.changed {
            writeln!(f, "~ {key}")?;
        }
        let removed_mark = if self.prune { '-' } else { '?' };
        for key in &self.removed {
            writeln!(f, "{removed_mark} {key}")?;
        }
        write!(
            f,
            "{} to add, {} to change, {} {}, {} unchanged",
            self.added.len(),
            self.changed.len(),
            self.removed.len(),
            if self.prune {
                "to remove"
            } else {
                "no longer declared (kept; apply with prune to remove)"
            },
            self.unchanged
        )
    }
}

/// What [`apply`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApplyReport {
    /// The diff.
    pub plan: ApplyPlan,
    /// The revision the transaction committed at; `None` for a dry run or when nothing changed.
    pub revision: Option<Revision>,
}

/// Why an apply failed. Nothing was written in every case.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApplyError {
    /// The document has errors (all of them are in the diagnostics).
    #[error("the document has errors; nothing was applied\n{0}")]
    Invalid(Diagnostics),
    /// The store failed.
    #[error("the store failed during apply")]
    Store(#[from] StoreError),
    /// The changes do not fit in one transaction of this store.
    #[error(
        "the document changes {changes} objects, more than the {limit} one transaction of this \
         store takes; nothing was applied. Apply it in smaller files, or raise the store's limit \
         (etcd: --max-txn-ops)"
    )]
    TooLarge {
        /// Writes the apply needs.
        changes: usize,
        /// The store's per-transaction limit.
        limit: usize,
    },
    /// Other writers kept changing the same objects.
    #[error(
        "other writers changed the same objects {0} times in a row; nothing was applied, try again"
    )]
    Conflict(usize),
}

/// Applies `desired` to `store` in one transaction: all of it lands or none of it.
///
/// # Guarantees
///
/// - Only differences are written: applying the same document twice changes no revision.
/// - The transaction is guarded by the mod revision of every key it writes, so a concurrent
///   change to one of them makes it re-read and retry (up to three times) instead of overwriting.
/// - With `prune`, desired objects (`desired/service/`, `desired/volume/`, `desired/network/`)
///   that `desired` does not declare are deleted in the same transaction.
///
/// # Caveats
///
/// `prune` treats `desired` as the whole desired state: objects applied from another document
/// are removed too.
///
/// # Errors
///
/// [`ApplyError`]; nothing is written when it is returned.
pub async fn apply<S: FactStore>(
    store: &S,
    desired: &DesiredFacts,
    options: ApplyOptions,
) -> Result<ApplyReport, ApplyError> {
    for _ in 0..ATTEMPTS {
        let current = read_applied(store).await?;
        let plan = diff(desired, &current, options.prune);
        if options.dry_run || plan.is_noop() {
            return Ok(ApplyReport {
                plan,
                revision: None,
            });
        }
        let txn = transaction(&plan, desired, &current);
        let limit = store.limits().max_txn_ops;
        if txn.then.len() > limit {
            return Err(ApplyError::TooLarge {
                changes: txn.then.len(),
                limit,
            });
        }
        let response = store.txn(txn).await?;
        if response.succeeded {
            return Ok(ApplyReport {
                plan,
                revision: Some(response.revision),
            });
        }
    }
    Err(ApplyError::Conflict(ATTEMPTS))
}

/// Checks and compiles a `.cca` file, then [`apply`]s it.
///
/// # Errors
///
/// [`ApplyError::Invalid`] with every diagnostic when the file has any error (nothing is
/// written), or any error of [`apply`].
pub async fn apply_file<S: FactStore>(
    store: &S,
    file: &SourceFile,
    options: ApplyOptions,
) -> Result<ApplyReport, ApplyError> {
    let compiled = lang::check(file).map_err(ApplyError::Invalid)?;
    apply(store, &compiled.to_facts(), options).await
}

/// Reads every desired object a user's apply owns.
async fn read_applied<S: FactStore>(store: &S) -> Result<BTreeMap<Key, Fact>, StoreError> {
    let mut current = BTreeMap::new();
    for prefix in APPLIED {
        for fact in store.scan(prefix).await?.facts {
            current.insert(fact.key.clone(), fact);
        }
    }
    Ok(current)
}

/// Compares the declared facts with the stored ones.
pub fn diff(desired: &DesiredFacts, current: &BTreeMap<Key, Fact>, prune: bool) -> ApplyPlan {
    let mut plan = ApplyPlan {
        prune,
        ..ApplyPlan::default()
    };
    for (key, value) in desired {
        match current.get(key) {
            None => plan.added.push(key.clone()),
            Some(fact) if fact.value != *value => plan.changed.push(key.clone()),
            Some(_) => plan.unchanged += 1,
        }
    }
    plan.removed = current
        .keys()
        .filter(|key| !desired.contains_key(*key))
        .cloned()
        .collect();
    plan
}

fn transaction(plan: &ApplyPlan, desired: &DesiredFacts, current: &BTreeMap<Key, Fact>) -> Txn {
    let mut txn = Txn::new();
    let held = |key: &Key| current.get(key).map(|f| f.mod_revision).unwrap_or_default();
    for key in plan.added.iter().chain(&plan.changed) {
        if let Some(value) = desired.get(key) {
            txn.compares
                .push(Compare::mod_revision(key.clone(), held(key)));
            txn.then.push(Op::put(key.clone(), value.clone()));
        }
    }
    if plan.prune {
        for key in &plan.removed {
            txn.compares
                .push(Compare::mod_revision(key.clone(), held(key)));
            txn.then.push(Op::delete(key.clone()));
        }
    }
    txn
}

#[cfg(test)]
mod tests {
    use super::*;
    use ccattler_core::Value;
    use ccattler_store::MemoryStore;

    fn key(k: &str) -> Key {
        Key::new(k).unwrap()
    }

    fn desired(pairs: &[(&str, &str)]) -> DesiredFacts {
        pairs
            .iter()
            .map(|(k, v)| (key(k), Value::from(v.to_string())))
            .collect()
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        let mut f = std::pin::pin!(f);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        loop {
            if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
                return v;
            }
        }
    }

    #[test]
    fn applies_all_at_once_and_twice_changes_nothing() {
        let store = MemoryStore::new();
        let doc = desired(&[("desired/service/web", "1"), ("desired/volume/data", "2")]);
        let first = block_on(apply(&store, &doc, ApplyOptions::default())).unwrap();
        assert_eq!(first.plan.added.len(), 2);
        let revision = first.revision.unwrap();
        assert_eq!(
            block_on(store.revision()).unwrap(),
            revision,
            "one revision for the file"
        );
        let second = block_on(apply(&store, &doc, ApplyOptions::default())).unwrap();
        assert!(second.plan.is_noop());
        assert_eq!(second.revision, None);
        assert_eq!(block_on(store.revision()).unwrap(), revision);
    }

    #[test]
    fn dry_run_shows_the_diff_and_writes_nothing() {
        let store = MemoryStore::new();
        block_on(apply(
            &store,
            &desired(&[("desired/service/web", "1"), ("desired/service/old", "x")]),
            ApplyOptions::default(),
        ))
        .unwrap();
        let before = block_on(store.revision()).unwrap();
        let doc = desired(&[("desired/service/web", "2"), ("desired/service/new", "3")]);
        let report = block_on(apply(
            &store,
            &doc,
            ApplyOptions::default().dry_run(true).prune(true),
        ))
        .unwrap();
        assert_eq!(report.plan.added, [key("desired/service/new")]);
        assert_eq!(report.plan.changed, [key("desired/service/web")]);
        assert_eq!(report.plan.removed, [key("desired/service/old")]);
        assert_eq!(
            report.plan.to_string(),
            "+ desired/service/new\n~ desired/service/web\n- desired/service/old\n\
             1 to add, 1 to change, 1 to remove, 0 unchanged"
        );
        assert_eq!(block_on(store.revision()).unwrap(), before);
    }

    #[test]
    fn prune_removes_what_is_no_longer_declared_in_the_same_transaction() {
        let store = MemoryStore::new();
        block_on(apply(
            &store,
            &desired(&[("desired/service/a", "1"), ("desired/service/b", "1")]),
            ApplyOptions::default(),
        ))
        .unwrap();
        let keep = block_on(apply(
            &store,
            &desired(&[("desired/service/a", "1")]),
            ApplyOptions::default(),
        ))
        .unwrap();
        assert_eq!(
            keep.revision, None,
            "without prune, b is kept and nothing changes"
        );
        let before = block_on(store.revision()).unwrap();
        let pruned = block_on(apply(
            &store,
            &desired(&[("desired/service/a", "2")]),
            ApplyOptions::default().prune(true),
        ))
        .unwrap();
        assert_eq!(pruned.revision, Some(before.next()));
        assert!(
            block_on(store.get(&key("desired/service/b")))
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn too_many_changes_for_one_transaction_write_nothing() {
        let store = MemoryStore::new();
        let pairs: Vec<(String, String)> = (0..200)
            .map(|i| (format!("desired/service/s{i}"), "x".to_owned()))
            .collect();
        let doc: DesiredFacts = pairs
            .iter()
            .map(|(k, v)| (key(k), Value::from(v.clone())))
            .collect();
        let err = block_on(apply(&store, &doc, ApplyOptions::default())).unwrap_err();
        assert!(
            matches!(
                err,
                ApplyError::TooLarge {
                    changes: 200,
                    limit: 128
                }
            ),
            "{err}"
        );
        assert_eq!(block_on(store.revision()).unwrap(), Revision::ZERO);
    }
}
