//! Transactions: validation before anything is written, compare evaluation, and applying the
//! chosen branch at one revision.

use std::task::Waker;

use ccattler_core::{Compare, CompareTarget, Op, StoreError, StoreLimits, Txn};

use super::state::State;

/// Checks everything that does not depend on the store's contents: counts, duplicate keys and
/// value sizes, in both branches.
pub(crate) fn validate(txn: &Txn, limits: &StoreLimits) -> Result<(), StoreError> {
    if txn.compares.len() > limits.max_txn_ops {
        return Err(StoreError::TooManyOps {
            what: "compares",
            count: txn.compares.len(),
            limit: limits.max_txn_ops,
        });
    }
    for branch in [&txn.then, &txn.otherwise] {
        if branch.len() > limits.max_txn_ops {
            return Err(StoreError::TooManyOps {
                what: "operations in one branch",
                count: branch.len(),
                limit: limits.max_txn_ops,
            });
        }
    }
    for branch in [&txn.then, &txn.otherwise] {
        check_duplicates(branch)?;
    }
    for op in txn.then.iter().chain(&txn.otherwise) {
        if let Op::Put { key, value, .. } = op {
            check_value_size(key, value.len(), limits)?;
        }
    }
    Ok(())
}

/// Rejects a value larger than the limit.
pub(crate) fn check_value_size(
    key: &ccattler_core::Key,
    size: usize,
    limits: &StoreLimits,
) -> Result<(), StoreError> {
    if size > limits.max_value_bytes {
        return Err(StoreError::ValueTooLarge {
            key: key.clone(),
            size,
            limit: limits.max_value_bytes,
        });
    }
    Ok(())
}

/// Rejects a branch that writes one key twice.
fn check_duplicates(ops: &[Op]) -> Result<(), StoreError> {
    if ops.len() < 2 {
        return Ok(());
    }
    let mut keys: Vec<&ccattler_core::Key> = ops.iter().map(Op::key).collect();
    keys.sort_unstable();
    match keys.windows(2).find(|pair| pair[0] == pair[1]) {
        Some(pair) => Err(StoreError::DuplicateKey(pair[0].clone())),
        None => Ok(()),
    }
}

/// Whether one compare holds against the current state.
fn holds(state: &State, compare: &Compare) -> bool {
    let entry = state.kv.get(compare.key.as_str());
    let op = compare.op;
    match &compare.target {
        // etcd: a compare on the value of a missing key is false, whatever the operator.
        CompareTarget::Value(value) => entry.is_some_and(|e| op.holds(&e.value[..], &value[..])),
        CompareTarget::ModRevision(rev) => op.holds(&entry.map_or(0, |e| e.mod_revision), &rev.0),
        CompareTarget::CreateRevision(rev) => {
            op.holds(&entry.map_or(0, |e| e.create_revision), &rev.0)
        }
        CompareTarget::Version(version) => op.holds(&entry.map_or(0, |e| e.version), version),
    }
}

/// Evaluates the compares, checks the chosen branch's leases, and applies it at the next
/// revision. Returns whether the compares held. Nothing is written when an error is returned.
pub(crate) fn execute(
    state: &mut State,
    txn: Txn,
    wake: &mut Vec<Waker>,
) -> Result<bool, StoreError> {
    let succeeded = txn.compares.iter().all(|c| holds(state, c));
    let ops = if succeeded { txn.then } else { txn.otherwise };
    // As in etcd, only the branch that runs must name live leases.
    for op in &ops {
        if let Op::Put {
            lease: Some(lease), ..
        } = op
            && !state.leases.contains(*lease)
        {
            return Err(StoreError::LeaseNotFound(*lease));
        }
    }
    let rev = state.next_revision();
    let mut changed = false;
    for op in ops {
        match op {
            Op::Put { key, value, lease } => {
                // Unlike a plain put, a put in a transaction always writes (etcd's behaviour).
                state.apply_put(&key, value, lease, rev, wake);
                changed = true;
            }
            Op::Delete { key } => {
                changed |= state.apply_delete(key.as_str(), rev, wake).is_some();
            }
        }
    }
    state.commit(rev, changed);
    Ok(succeeded)
}

#[cfg(test)]
mod tests {
    use ccattler_core::{CmpOp, Key, Revision};

    use super::*;

    fn key(s: &str) -> Key {
        Key::new(s).unwrap()
    }

    fn limits() -> StoreLimits {
        StoreLimits {
            max_txn_ops: 2,
            max_value_bytes: 4,
        }
    }

    #[test]
    fn validation_order_and_errors() {
        let many = Txn::new()
            .when(Compare::exists(key("a")))
            .when(Compare::exists(key("b")))
            .when(Compare::exists(key("c")));
        assert!(matches!(
            validate(&many, &limits()),
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
            validate(&long, &limits()),
            Err(StoreError::TooManyOps {
                what: "operations in one branch",
                ..
            })
        ));
        let dup = Txn::new()
            .then(Op::put(key("a"), "1"))
            .then(Op::delete(key("a")));
        assert!(
            matches!(validate(&dup, &limits()), Err(StoreError::DuplicateKey(k)) if k == key("a"))
        );
        let big = Txn::new().otherwise(Op::put(key("a"), "12345"));
        assert!(matches!(
            validate(&big, &limits()),
            Err(StoreError::ValueTooLarge { size: 5, .. })
        ));
        let same_key_both_branches = Txn::new()
            .then(Op::put(key("a"), "1"))
            .otherwise(Op::put(key("a"), "2"));
        assert!(validate(&same_key_both_branches, &limits()).is_ok());
    }

    #[test]
    fn compares_on_missing_keys() {
        let state = State::new(10);
        let missing = key("missing");
        for op in [CmpOp::Equal, CmpOp::NotEqual, CmpOp::Greater, CmpOp::Less] {
            let c = Compare::new(missing.clone(), op, CompareTarget::Value("".into()));
            assert!(!holds(&state, &c), "value compare {op:?} on a missing key");
        }
        assert!(holds(&state, &Compare::absent(missing.clone())));
        assert!(!holds(&state, &Compare::exists(missing.clone())));
        assert!(holds(
            &state,
            &Compare::mod_revision(missing.clone(), Revision::ZERO)
        ));
        let version = Compare::new(missing, CmpOp::Equal, CompareTarget::Version(0));
        assert!(holds(&state, &version));
    }
}
