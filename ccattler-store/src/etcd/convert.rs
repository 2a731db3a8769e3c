//! Mapping between CCattler's types and etcd's: keys under the store prefix, key-values into
//! facts, compares and operations into an etcd transaction, and the checks made before sending.

use ccattler_core::{CmpOp, Compare, CompareTarget, Fact, Key, LeaseId, Op, Revision, Txn};
use etcd_client::{Compare as EtcdCompare, CompareOp, KeyValue, PutOptions, Txn as EtcdTxn, TxnOp};

/// The store's key prefix, and the conversions that depend on it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Prefix(pub(crate) String);

impl Prefix {
    /// The etcd key of `key`.
    pub(crate) fn key(&self, key: &Key) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.0.len() + key.as_str().len());
        out.extend_from_slice(self.0.as_bytes());
        out.extend_from_slice(key.as_str().as_bytes());
        out
    }

    /// The etcd key range `[start, end)` of every key starting with `prefix`.
    pub(crate) fn range(&self, prefix: &str) -> (Vec<u8>, Vec<u8>) {
        let mut start = Vec::with_capacity(self.0.len() + prefix.len());
        start.extend_from_slice(self.0.as_bytes());
        start.extend_from_slice(prefix.as_bytes());
        if start.is_empty() {
            // Every key: etcd's convention for "from the first key to the end".
            return (vec![0], vec![0]);
        }
        let end = range_end(&start);
        (start, end)
    }

    /// The fact an etcd key-value describes, with the prefix stripped; `None` for a key that is
    /// not a valid [`Key`] under the prefix (written by someone else; it is skipped).
    pub(crate) fn fact(&self, kv: &KeyValue) -> Option<Fact> {
        let key = self.strip(kv.key())?;
        Some(Fact {
            key,
            value: kv.value().to_vec().into(),
            create_revision: revision(kv.create_revision()),
            mod_revision: revision(kv.mod_revision()),
            version: u64::try_from(kv.version()).unwrap_or(0),
            lease: lease(kv.lease()),
        })
    }

    fn strip(&self, raw: &[u8]) -> Option<Key> {
        let rest = raw.strip_prefix(self.0.as_bytes())?;
        let text = std::str::from_utf8(rest).ok()?;
        match Key::new(text) {
            Ok(key) => Some(key),
            Err(e) => {
                tracing::warn!(key = %String::from_utf8_lossy(raw), error = %e, "skipping an etcd key that is not a valid CCattler key");
                None
            }
        }
    }
}

/// The smallest key greater than every key that starts with `start` (etcd's prefix range end).
fn range_end(start: &[u8]) -> Vec<u8> {
    let mut end = start.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// A revision from etcd's signed field.
pub(crate) fn revision(raw: i64) -> Revision {
    Revision(u64::try_from(raw).unwrap_or(0))
}

/// A revision for etcd's signed field.
pub(crate) fn raw_revision(revision: Revision) -> i64 {
    i64::try_from(revision.0).unwrap_or(i64::MAX)
}

/// A lease from etcd's field, where 0 means none.
pub(crate) fn lease(raw: i64) -> Option<LeaseId> {
    (raw != 0).then_some(LeaseId(raw))
}

/// The largest put of a transaction and the bytes of every key and value it sends, to name the
/// culprit when etcd finds the whole request too large.
pub(crate) fn request_size(txn: &Txn) -> (Option<&Key>, usize) {
    let mut largest: Option<(&Key, usize)> = None;
    let mut total = 0;
    for compare in &txn.compares {
        total += compare.key.as_str().len();
        if let CompareTarget::Value(value) = &compare.target {
            total += value.len();
        }
    }
    for op in txn.then.iter().chain(&txn.otherwise) {
        total += op.key().as_str().len();
        if let Op::Put { key, value, .. } = op {
            total += value.len();
            if largest.is_none_or(|(_, size)| value.len() > size) {
                largest = Some((key, value.len()));
            }
        }
    }
    (largest.map(|(key, _)| key), total)
}

fn cmp_op(op: CmpOp) -> CompareOp {
    match op {
        CmpOp::Equal => CompareOp::Equal,
        CmpOp::NotEqual => CompareOp::NotEqual,
        CmpOp::Greater => CompareOp::Greater,
        CmpOp::Less => CompareOp::Less,
    }
}

/// One compare, under the prefix.
pub(crate) fn compare(prefix: &Prefix, compare: &Compare) -> EtcdCompare {
    let key = prefix.key(&compare.key);
    let op = cmp_op(compare.op);
    match &compare.target {
        CompareTarget::Value(value) => EtcdCompare::value(key, op, value.to_vec()),
        CompareTarget::ModRevision(rev) => EtcdCompare::mod_revision(key, op, raw_revision(*rev)),
        CompareTarget::CreateRevision(rev) => {
            EtcdCompare::create_revision(key, op, raw_revision(*rev))
        }
        CompareTarget::Version(version) => {
            EtcdCompare::version(key, op, i64::try_from(*version).unwrap_or(i64::MAX))
        }
    }
}

/// One operation, under the prefix. A put without lease detaches the key from any lease, as in
/// etcd (lease 0).
pub(crate) fn op(prefix: &Prefix, op: &Op) -> TxnOp {
    match op {
        Op::Put { key, value, lease } => {
            let options = PutOptions::new().with_lease(lease.map_or(0, |l| l.0));
            TxnOp::put(prefix.key(key), value.to_vec(), Some(options))
        }
        Op::Delete { key } => TxnOp::delete(prefix.key(key), None),
    }
}

/// The whole transaction, under the prefix.
pub(crate) fn txn(prefix: &Prefix, txn: &Txn) -> EtcdTxn {
    let compares: Vec<EtcdCompare> = txn.compares.iter().map(|c| compare(prefix, c)).collect();
    let then: Vec<TxnOp> = txn.then.iter().map(|o| op(prefix, o)).collect();
    let otherwise: Vec<TxnOp> = txn.otherwise.iter().map(|o| op(prefix, o)).collect();
    EtcdTxn::new()
        .when(compares)
        .and_then(then)
        .or_else(otherwise)
}

/// The lease a transaction's puts name, for a `LeaseNotFound` error: the first one.
pub(crate) fn first_lease(txn: &Txn) -> Option<LeaseId> {
    txn.then
        .iter()
        .chain(&txn.otherwise)
        .find_map(|op| match op {
            Op::Put { lease, .. } => *lease,
            Op::Delete { .. } => None,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_cover_exactly_the_prefix() {
        let p = Prefix("blue/".into());
        assert_eq!(p.range("a"), (b"blue/a".to_vec(), b"blue/b".to_vec()));
        assert_eq!(p.range(""), (b"blue/".to_vec(), b"blue0".to_vec()));
        assert_eq!(Prefix::default().range(""), (vec![0], vec![0]));
        assert_eq!(range_end(&[b'a', 0xff]), b"b".to_vec());
        assert_eq!(range_end(&[0xff]), vec![0]);
    }

    #[test]
    fn request_size_and_first_lease() {
        let k = Key::new("a").unwrap();
        let big = Txn::new().then(Op::put(k.clone(), "12345"));
        assert_eq!(request_size(&big), (Some(&k), 6));
        assert_eq!(first_lease(&big), None);
    }
}
