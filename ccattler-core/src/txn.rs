//! Transactions: compares, then-operations and else-operations, committed atomically.

use std::time::Duration;

use crate::{Key, LeaseId, Revision, StoreError, Value};

/// How a [`Compare`] relates the stored attribute to the given one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CmpOp {
    /// Stored == given.
    Equal,
    /// Stored != given.
    NotEqual,
    /// Stored > given.
    Greater,
    /// Stored < given.
    Less,
}

impl CmpOp {
    /// Applies the comparison to two ordered values (stored first).
    pub fn holds<T: Ord + ?Sized>(self, stored: &T, given: &T) -> bool {
        match self {
            CmpOp::Equal => stored == given,
            CmpOp::NotEqual => stored != given,
            CmpOp::Greater => stored > given,
            CmpOp::Less => stored < given,
        }
    }
}

/// What a [`Compare`] looks at, and the value it compares with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CompareTarget {
    /// The stored value. A compare on the value of a missing key is always false, as in etcd.
    Value(Value),
    /// The key's mod revision (0 when the key is missing).
    ModRevision(Revision),
    /// The key's create revision (0 when the key is missing).
    CreateRevision(Revision),
    /// The key's version (0 when the key is missing).
    Version(u64),
}

/// A condition on one key that a transaction checks before choosing its branch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Compare {
    /// The key to look at.
    pub key: Key,
    /// The relation between stored and given.
    pub op: CmpOp,
    /// What to compare.
    pub target: CompareTarget,
}

impl Compare {
    /// The key exists.
    pub fn exists(key: Key) -> Self {
        Compare {
            key,
            op: CmpOp::Greater,
            target: CompareTarget::CreateRevision(Revision::ZERO),
        }
    }

    /// The key does not exist.
    pub fn absent(key: Key) -> Self {
        Compare {
            key,
            op: CmpOp::Equal,
            target: CompareTarget::CreateRevision(Revision::ZERO),
        }
    }

    /// The key's value equals `value` (false when the key is missing).
    pub fn value_equals(key: Key, value: impl Into<Value>) -> Self {
        Compare {
            key,
            op: CmpOp::Equal,
            target: CompareTarget::Value(value.into()),
        }
    }

    /// The key's mod revision is exactly `revision`: nothing wrote it since it was read at that
    /// revision. `Revision::ZERO` means the key must be missing.
    pub fn mod_revision(key: Key, revision: Revision) -> Self {
        Compare {
            key,
            op: CmpOp::Equal,
            target: CompareTarget::ModRevision(revision),
        }
    }

    /// A compare with any operator and target.
    pub fn new(key: Key, op: CmpOp, target: CompareTarget) -> Self {
        Compare { key, op, target }
    }
}

/// One write in a transaction branch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Write `value` at `key`, attached to `lease` if given (detaching it from any lease otherwise).
    Put {
        /// The key to write.
        key: Key,
        /// The new value.
        value: Value,
        /// The lease to attach the key to.
        lease: Option<LeaseId>,
    },
    /// Remove `key`; a missing key is not an error and writes nothing.
    Delete {
        /// The key to remove.
        key: Key,
    },
}

impl Op {
    /// A put without lease.
    pub fn put(key: Key, value: impl Into<Value>) -> Self {
        Op::Put {
            key,
            value: value.into(),
            lease: None,
        }
    }

    /// A delete.
    pub fn delete(key: Key) -> Self {
        Op::Delete { key }
    }

    /// The key the operation writes.
    pub fn key(&self) -> &Key {
        match self {
            Op::Put { key, .. } | Op::Delete { key } => key,
        }
    }
}

/// An atomic transaction: if every compare holds, apply `then`, otherwise apply `otherwise`.
///
/// # Guarantees
///
/// All operations of the chosen branch commit at one revision, or none commit. Unlike a plain
/// [`put`](crate::FactStore::put), a put inside a transaction always writes, even when the value
/// is unchanged (this is etcd's behaviour, and both backends keep it). A branch whose operations
/// change nothing (only deletes of missing keys, or no operations) leaves the revision as it is.
///
/// # Errors
///
/// Stores reject, before writing anything: more than [`StoreLimits::max_txn_ops`] compares or
/// operations in one branch, and a branch that writes the same key twice.
///
/// ```
/// use ccattler_core::{Compare, Key, Op, Revision, Txn};
///
/// let key = Key::new("desired/instance/web-1")?;
/// let txn = Txn::new()
///     .when(Compare::absent(key.clone()))
///     .then(Op::put(key, "{}"));
/// assert_eq!(txn.then.len(), 1);
/// # Ok::<(), ccattler_core::KeyError>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Txn {
    /// Conditions, all of which must hold for `then` to run.
    pub compares: Vec<Compare>,
    /// Operations applied when every compare holds.
    pub then: Vec<Op>,
    /// Operations applied when some compare fails.
    pub otherwise: Vec<Op>,
}

impl Txn {
    /// An empty transaction.
    pub fn new() -> Self {
        Txn::default()
    }

    /// Adds a compare.
    #[must_use]
    pub fn when(mut self, compare: Compare) -> Self {
        self.compares.push(compare);
        self
    }

    /// Adds an operation to the success branch.
    #[must_use]
    pub fn then(mut self, op: Op) -> Self {
        self.then.push(op);
        self
    }

    /// Adds an operation to the failure branch.
    #[must_use]
    pub fn otherwise(mut self, op: Op) -> Self {
        self.otherwise.push(op);
        self
    }
}

/// The outcome of a committed transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxnResponse {
    /// Whether every compare held (so `then` ran rather than `otherwise`).
    pub succeeded: bool,
    /// The store's revision after the transaction.
    pub revision: Revision,
}

/// The limits a store enforces on every request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreLimits {
    /// Most compares, and most operations per branch, in one transaction (etcd's default is 128).
    pub max_txn_ops: usize,
    /// Largest value in bytes (etcd's default request limit is 1.5 MiB).
    pub max_value_bytes: usize,
}

impl StoreLimits {
    /// Checks what a transaction can be checked for without reading the store: at most
    /// `max_txn_ops` compares and operations per branch, no key written twice in one branch, no
    /// value over `max_value_bytes`. Every backend calls it before writing anything, so they all
    /// reject the same transactions with the same errors.
    ///
    /// # Errors
    ///
    /// [`StoreError::TooManyOps`], [`StoreError::DuplicateKey`] or [`StoreError::ValueTooLarge`].
    pub fn check_txn(&self, txn: &Txn) -> Result<(), StoreError> {
        if txn.compares.len() > self.max_txn_ops {
            return Err(StoreError::TooManyOps {
                what: "compares",
                count: txn.compares.len(),
                limit: self.max_txn_ops,
            });
        }
        for branch in [&txn.then, &txn.otherwise] {
            if branch.len() > self.max_txn_ops {
                return Err(StoreError::TooManyOps {
                    what: "operations in one branch",
                    count: branch.len(),
                    limit: self.max_txn_ops,
                });
            }
            let mut keys: Vec<&Key> = branch.iter().map(Op::key).collect();
            keys.sort_unstable();
            if let Some(pair) = keys.windows(2).find(|pair| pair[0] == pair[1]) {
                return Err(StoreError::DuplicateKey(pair[0].clone()));
            }
        }
        for op in txn.then.iter().chain(&txn.otherwise) {
            if let Op::Put { key, value, .. } = op {
                self.check_value(key, value.len())?;
            }
        }
        Ok(())
    }

    /// Checks a value's size against `max_value_bytes`.
    ///
    /// # Errors
    ///
    /// [`StoreError::ValueTooLarge`].
    pub fn check_value(&self, key: &Key, size: usize) -> Result<(), StoreError> {
        if size > self.max_value_bytes {
            return Err(StoreError::ValueTooLarge {
                key: key.clone(),
                size,
                limit: self.max_value_bytes,
            });
        }
        Ok(())
    }
}

impl Default for StoreLimits {
    fn default() -> Self {
        StoreLimits {
            max_txn_ops: 128,
            max_value_bytes: 1536 * 1024,
        }
    }
}

/// A granted lease: its id and time to live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The id to put keys with and to keep alive.
    pub id: LeaseId,
    /// How long the lease lives without a keep-alive.
    pub ttl: Duration,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> Key {
        Key::new(s).unwrap()
    }

    #[test]
    fn limits_reject_what_no_backend_may_write() {
        let limits = StoreLimits {
            max_txn_ops: 2,
            max_value_bytes: 4,
        };
        let many = Txn::new()
            .when(Compare::exists(key("a")))
            .when(Compare::exists(key("b")))
            .when(Compare::exists(key("c")));
        assert!(matches!(
            limits.check_txn(&many),
            Err(StoreError::TooManyOps {
                what: "compares",
                count: 3,
                limit: 2
            })
        ));
        let long = Txn::new()
            .otherwise(Op::delete(key("a")))
            .otherwise(Op::delete(key("b")))
            .otherwise(Op::delete(key("c")));
        assert!(matches!(
            limits.check_txn(&long),
            Err(StoreError::TooManyOps {
                what: "operations in one branch",
                ..
            })
        ));
        let dup = Txn::new()
            .then(Op::put(key("a"), "1"))
            .then(Op::delete(key("a")));
        assert!(
            matches!(limits.check_txn(&dup), Err(StoreError::DuplicateKey(k)) if k == key("a"))
        );
        let big = Txn::new().otherwise(Op::put(key("a"), "12345"));
        assert!(matches!(
            limits.check_txn(&big),
            Err(StoreError::ValueTooLarge {
                size: 5,
                limit: 4,
                ..
            })
        ));
        let same_key_both_branches = Txn::new()
            .then(Op::put(key("a"), "1"))
            .otherwise(Op::put(key("a"), "2"));
        assert!(limits.check_txn(&same_key_both_branches).is_ok());
    }
}
