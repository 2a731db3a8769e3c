//! Transactions: validation before anything is written, compare evaluation, and applying the
//! chosen branch at one revision.

use std::task::Waker;

use ccattler_core::{Compare, CompareTarget, Op, StoreError, Txn};

use super::state::State;

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

    #[test]
    fn compares_on_missing_keys() {
        let state = State::new(crate::memory::config::HistoryLimit::Fixed(10));
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
