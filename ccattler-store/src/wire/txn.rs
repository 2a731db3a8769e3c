//! Transactions on the wire: [`WireTxn`] and its [`WireCompare`]s and [`WireOp`]s.

use ccattler_core::{CmpOp, Compare, CompareTarget, Key, LeaseId, Op, Revision, StoreError, Txn};
use serde::{Deserialize, Serialize};

use super::{decode_value, encode_value};

/// A compare on the wire: `{key, op: "=="|"!="|">"|"<", value | mod_revision | create_revision | version}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireCompare {
    /// The key looked at.
    pub key: String,
    /// `==`, `!=`, `>` or `<`.
    pub op: String,
    /// What is compared.
    #[serde(flatten)]
    pub target: WireTarget,
}

/// What a [`WireCompare`] looks at.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WireTarget {
    /// The value, base64.
    Value(String),
    /// The mod revision.
    ModRevision(u64),
    /// The create revision.
    CreateRevision(u64),
    /// The version.
    Version(u64),
}

/// An operation on the wire.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum WireOp {
    /// A put; `value` is base64.
    Put {
        /// The key.
        key: String,
        /// The value, base64.
        value: String,
        /// The lease to attach the key to.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lease: Option<i64>,
    },
    /// A delete.
    Delete {
        /// The key.
        key: String,
    },
}

/// `POST /store/txn`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireTxn {
    /// Every compare must hold for `then` to run.
    #[serde(default)]
    pub compare: Vec<WireCompare>,
    /// Run when every compare holds.
    #[serde(default)]
    pub then: Vec<WireOp>,
    /// Run otherwise.
    #[serde(default, rename = "else")]
    pub otherwise: Vec<WireOp>,
}

/// The answer to `POST /store/txn`.
#[derive(Debug, Serialize, Deserialize)]
pub struct TxnAnswer {
    /// Whether `then` ran.
    pub succeeded: bool,
    /// The store's revision after the transaction.
    pub revision: u64,
}

impl From<&Txn> for WireTxn {
    fn from(txn: &Txn) -> Self {
        let compare = txn
            .compares
            .iter()
            .map(|c| WireCompare {
                key: c.key.as_str().to_owned(),
                op: match c.op {
                    CmpOp::Equal => "==",
                    CmpOp::NotEqual => "!=",
                    CmpOp::Greater => ">",
                    CmpOp::Less => "<",
                }
                .to_owned(),
                target: match &c.target {
                    CompareTarget::Value(v) => WireTarget::Value(encode_value(v)),
                    CompareTarget::ModRevision(r) => WireTarget::ModRevision(r.get()),
                    CompareTarget::CreateRevision(r) => WireTarget::CreateRevision(r.get()),
                    CompareTarget::Version(v) => WireTarget::Version(*v),
                },
            })
            .collect();
        let ops = |ops: &[Op]| ops.iter().map(WireOp::from).collect();
        WireTxn {
            compare,
            then: ops(&txn.then),
            otherwise: ops(&txn.otherwise),
        }
    }
}

impl From<&Op> for WireOp {
    fn from(op: &Op) -> Self {
        match op {
            Op::Put { key, value, lease } => WireOp::Put {
                key: key.as_str().to_owned(),
                value: encode_value(value),
                lease: lease.map(|l| l.0),
            },
            Op::Delete { key } => WireOp::Delete {
                key: key.as_str().to_owned(),
            },
        }
    }
}

impl WireTxn {
    /// Back into a [`Txn`].
    ///
    /// # Errors
    ///
    /// A malformed key, value or operator, as [`StoreError::InvalidKey`] or
    /// [`StoreError::Unavailable`] (the server answers both with 400).
    pub fn into_txn(self) -> Result<Txn, StoreError> {
        let mut txn = Txn::new();
        for c in self.compare {
            let op = match c.op.as_str() {
                "==" => CmpOp::Equal,
                "!=" => CmpOp::NotEqual,
                ">" => CmpOp::Greater,
                "<" => CmpOp::Less,
                other => {
                    return Err(StoreError::unavailable(format!(
                        "unknown compare op {other:?}; use ==, !=, > or <"
                    )));
                }
            };
            let target = match c.target {
                WireTarget::Value(v) => CompareTarget::Value(decode_value(&v)?),
                WireTarget::ModRevision(r) => CompareTarget::ModRevision(Revision(r)),
                WireTarget::CreateRevision(r) => CompareTarget::CreateRevision(Revision(r)),
                WireTarget::Version(v) => CompareTarget::Version(v),
            };
            txn.compares
                .push(Compare::new(Key::new(c.key)?, op, target));
        }
        for op in self.then {
            txn.then.push(op.into_op()?);
        }
        for op in self.otherwise {
            txn.otherwise.push(op.into_op()?);
        }
        Ok(txn)
    }
}

impl WireOp {
    /// The key the operation writes (unvalidated).
    pub fn key(&self) -> &str {
        match self {
            WireOp::Put { key, .. } | WireOp::Delete { key } => key,
        }
    }

    fn into_op(self) -> Result<Op, StoreError> {
        Ok(match self {
            WireOp::Put { key, value, lease } => Op::Put {
                key: Key::new(key)?,
                value: decode_value(&value)?,
                lease: lease.map(LeaseId),
            },
            WireOp::Delete { key } => Op::Delete {
                key: Key::new(key)?,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ccattler_core::Value;

    #[test]
    fn transactions_round_trip() {
        let key = |k: &str| Key::new(k).expect("key");
        let txn = Txn::new()
            .when(Compare::mod_revision(key("a"), Revision(3)))
            .when(Compare::value_equals(key("b"), &b"\xff\x00"[..]))
            .when(Compare::new(
                key("c"),
                CmpOp::Greater,
                CompareTarget::Version(2),
            ))
            .then(Op::Put {
                key: key("a"),
                value: Value::from_static(b"\x01binary"),
                lease: Some(LeaseId(7)),
            })
            .otherwise(Op::delete(key("b")));
        let wire = serde_json::to_string(&WireTxn::from(&txn)).expect("encode");
        let back: WireTxn = serde_json::from_str(&wire).expect("decode");
        assert_eq!(back.into_txn().expect("txn"), txn);
    }
}
