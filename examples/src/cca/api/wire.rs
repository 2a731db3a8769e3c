//! The JSON shapes of the store protocol (`/store/...`, see [`super::store`]), shared by the
//! server and by [`HttpStore`](crate::cca::http_store::HttpStore), with lossless conversions
//! to and from the core types.
//!
//! Values travel base64-encoded, so any bytes round-trip exactly (unlike `/state`, which shows
//! JSON values parsed for people). A failed store request answers with the usual
//! `{"error": ...}` body plus `store_error`, a [`WireError`] from which the client rebuilds the
//! same [`StoreError`] the server's store returned.

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use ccattler_core::{
    CmpOp, Compare, CompareTarget, EventKind, Fact, Key, LeaseId, Op, Revision, StoreError, Txn,
    Value, WatchEvent,
};
use serde::{Deserialize, Serialize};

/// A fact on the wire.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireFact {
    /// The key.
    pub key: String,
    /// The value, base64.
    pub value: String,
    /// Revision of the key's creation.
    pub create_revision: u64,
    /// Revision of the key's last write.
    pub mod_revision: u64,
    /// Writes since creation.
    pub version: u64,
    /// The lease the key is attached to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<i64>,
}

impl From<&Fact> for WireFact {
    fn from(fact: &Fact) -> Self {
        WireFact {
            key: fact.key.as_str().to_owned(),
            value: BASE64.encode(&fact.value),
            create_revision: fact.create_revision.get(),
            mod_revision: fact.mod_revision.get(),
            version: fact.version,
            lease: fact.lease.map(|l| l.0),
        }
    }
}

impl WireFact {
    /// Back into a [`Fact`].
    ///
    /// # Errors
    ///
    /// A malformed key or value (a bad answer from the server).
    pub fn into_fact(self) -> Result<Fact, StoreError> {
        Ok(Fact {
            key: Key::new(self.key)?,
            value: decode_value(&self.value)?,
            create_revision: Revision(self.create_revision),
            mod_revision: Revision(self.mod_revision),
            version: self.version,
            lease: self.lease.map(LeaseId),
        })
    }
}

/// Base64-encodes a value.
pub fn encode_value(value: &[u8]) -> String {
    BASE64.encode(value)
}

/// Base64-decodes a value; a malformed one is a bad answer (or request).
///
/// # Errors
///
/// [`StoreError::Unavailable`] naming the decoding error.
pub fn decode_value(text: &str) -> Result<Value, StoreError> {
    BASE64
        .decode(text)
        .map(Value::from)
        .map_err(|err| StoreError::unavailable(format!("a value is not base64: {err}")))
}

/// `{key}`: the body of `POST /store/get` and `POST /store/delete`.
#[derive(Debug, Serialize, Deserialize)]
pub struct GetRequest {
    /// The key read.
    pub key: String,
}

/// The answer to `POST /store/get` (the fact) and `POST /store/delete` (what was deleted).
#[derive(Debug, Serialize, Deserialize)]
pub struct GetAnswer {
    /// The fact, when the key exists.
    pub fact: Option<WireFact>,
}

/// `POST /store/put`: `{key, value, lease}` → `{revision}`.
#[derive(Debug, Serialize, Deserialize)]
pub struct PutRequest {
    /// The key written.
    pub key: String,
    /// The value, base64.
    pub value: String,
    /// The lease to attach the key to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<i64>,
}

/// `POST /store/scan`: `{prefix}` → `{revision, facts}`; also the body of `/store/watch`'s
/// `prefix` and `from` query.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct ScanRequest {
    /// Plain string prefix.
    #[serde(default)]
    pub prefix: String,
}

/// The answer to `POST /store/scan`.
#[derive(Debug, Serialize, Deserialize)]
pub struct ScanAnswer {
    /// The store's revision at the scan.
    pub revision: u64,
    /// The facts, sorted by key.
    pub facts: Vec<WireFact>,
}

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
                    CompareTarget::Value(v) => WireTarget::Value(BASE64.encode(v)),
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
                value: BASE64.encode(value),
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

/// `POST /store/lease/grant` (`{ttl_ms}`) and the answer of grant and keep-alive (`{id, ttl_ms}`).
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct WireLease {
    /// The lease id (absent in a grant request).
    #[serde(default)]
    pub id: i64,
    /// The time to live, in milliseconds.
    pub ttl_ms: u64,
}

impl WireLease {
    /// Lease `id` (0 in a grant request) living `ttl`, rounded down to milliseconds.
    pub fn new(id: i64, ttl: Duration) -> Self {
        WireLease {
            id,
            ttl_ms: millis(ttl),
        }
    }

    /// The time to live.
    pub fn ttl(&self) -> Duration {
        Duration::from_millis(self.ttl_ms)
    }
}

/// `POST /store/lease/keep-alive` and `/store/lease/revoke`: `{id}`.
#[derive(Debug, Serialize, Deserialize)]
pub struct LeaseRequest {
    /// The lease.
    pub id: i64,
}

/// `POST /store/compact`: `{revision}`; also the answer of `GET /store/revision`.
#[derive(Debug, Serialize, Deserialize)]
pub struct RevisionBody {
    /// The revision.
    pub revision: u64,
}

/// One `change` event of `/store/watch`.
#[derive(Debug, Serialize, Deserialize)]
pub struct WireEvent {
    /// `put` or `delete`.
    pub kind: String,
    /// The fact after a put; the deleted key at the delete's revision after a delete.
    pub fact: WireFact,
    /// The fact before the event, when there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prev: Option<WireFact>,
}

impl From<&WatchEvent> for WireEvent {
    fn from(event: &WatchEvent) -> Self {
        WireEvent {
            kind: match event.kind {
                EventKind::Put => "put",
                EventKind::Delete => "delete",
            }
            .to_owned(),
            fact: WireFact::from(&event.fact),
            prev: event.prev.as_ref().map(WireFact::from),
        }
    }
}

impl WireEvent {
    /// Back into a [`WatchEvent`].
    ///
    /// # Errors
    ///
    /// A malformed event (a bad answer from the server).
    pub fn into_event(self) -> Result<WatchEvent, StoreError> {
        let kind = match self.kind.as_str() {
            "put" => EventKind::Put,
            "delete" => EventKind::Delete,
            other => {
                return Err(StoreError::unavailable(format!(
                    "unknown watch event kind {other:?}"
                )));
            }
        };
        Ok(WatchEvent {
            kind,
            fact: self.fact.into_fact()?,
            prev: self.prev.map(WireFact::into_fact).transpose()?,
        })
    }
}

/// A [`StoreError`] on the wire (the `store_error` field of an error answer, and the data of a
/// watch's `error` event).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum WireError {
    /// [`StoreError::TooManyOps`].
    TooManyOps {
        /// What was counted.
        what: String,
        /// How many.
        count: usize,
        /// The limit.
        limit: usize,
    },
    /// [`StoreError::DuplicateKey`].
    DuplicateKey {
        /// The key.
        key: String,
    },
    /// [`StoreError::ValueTooLarge`].
    ValueTooLarge {
        /// The key.
        key: String,
        /// The value's size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// [`StoreError::Compacted`].
    Compacted {
        /// Asked for.
        requested: u64,
        /// Earliest available.
        earliest: u64,
    },
    /// [`StoreError::FutureRevision`].
    FutureRevision {
        /// Asked for.
        requested: u64,
        /// The store's revision.
        current: u64,
    },
    /// [`StoreError::LeaseNotFound`].
    LeaseNotFound {
        /// The lease.
        id: i64,
    },
    /// [`StoreError::InvalidTtl`].
    InvalidTtl {
        /// The ttl asked for.
        ttl_ms: u64,
    },
    /// [`StoreError::Timeout`].
    Timeout {
        /// After how long.
        after_ms: u64,
    },
    /// [`StoreError::Denied`].
    Denied {
        /// Why.
        message: String,
    },
    /// Anything else ([`StoreError::Unavailable`], and a bad key, which a client validates
    /// before sending, so it only comes from a broken client).
    Other {
        /// The message.
        message: String,
    },
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl From<&StoreError> for WireError {
    fn from(err: &StoreError) -> Self {
        match err {
            StoreError::TooManyOps { what, count, limit } => WireError::TooManyOps {
                what: (*what).to_owned(),
                count: *count,
                limit: *limit,
            },
            StoreError::DuplicateKey(key) => WireError::DuplicateKey {
                key: key.as_str().to_owned(),
            },
            StoreError::ValueTooLarge { key, size, limit } => WireError::ValueTooLarge {
                key: key.as_str().to_owned(),
                size: *size,
                limit: *limit,
            },
            StoreError::Compacted {
                requested,
                earliest,
            } => WireError::Compacted {
                requested: requested.get(),
                earliest: earliest.get(),
            },
            StoreError::FutureRevision { requested, current } => WireError::FutureRevision {
                requested: requested.get(),
                current: current.get(),
            },
            StoreError::LeaseNotFound(id) => WireError::LeaseNotFound { id: id.0 },
            StoreError::InvalidTtl(ttl) => WireError::InvalidTtl {
                ttl_ms: millis(*ttl),
            },
            StoreError::Timeout(after) => WireError::Timeout {
                after_ms: millis(*after),
            },
            StoreError::Denied(message) => WireError::Denied {
                message: message.clone(),
            },
            other => WireError::Other {
                message: other.to_string(),
            },
        }
    }
}

impl WireError {
    /// Back into the [`StoreError`] it stands for. Keys that do not parse (a broken server)
    /// come back as [`StoreError::Unavailable`].
    pub fn into_store_error(self) -> StoreError {
        let key = |key: String| Key::new(key).map_err(StoreError::from);
        match self {
            WireError::TooManyOps { what, count, limit } => StoreError::TooManyOps {
                what: if what.starts_with("compare") {
                    "compares"
                } else {
                    "operations in one branch"
                },
                count,
                limit,
            },
            WireError::DuplicateKey { key: k } => match key(k) {
                Ok(k) => StoreError::DuplicateKey(k),
                Err(err) => err,
            },
            WireError::ValueTooLarge {
                key: k,
                size,
                limit,
            } => match key(k) {
                Ok(key) => StoreError::ValueTooLarge { key, size, limit },
                Err(err) => err,
            },
            WireError::Compacted {
                requested,
                earliest,
            } => StoreError::Compacted {
                requested: Revision(requested),
                earliest: Revision(earliest),
            },
            WireError::FutureRevision { requested, current } => StoreError::FutureRevision {
                requested: Revision(requested),
                current: Revision(current),
            },
            WireError::LeaseNotFound { id } => StoreError::LeaseNotFound(LeaseId(id)),
            WireError::InvalidTtl { ttl_ms } => {
                StoreError::InvalidTtl(Duration::from_millis(ttl_ms))
            }
            WireError::Timeout { after_ms } => StoreError::Timeout(Duration::from_millis(after_ms)),
            WireError::Denied { message } => StoreError::Denied(message),
            WireError::Other { message } => StoreError::unavailable(message),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn store_errors_round_trip() {
        for err in [
            StoreError::Compacted {
                requested: Revision(2),
                earliest: Revision(9),
            },
            StoreError::LeaseNotFound(LeaseId(4)),
            StoreError::TooManyOps {
                what: "compares",
                count: 200,
                limit: 128,
            },
            StoreError::Denied("no".to_owned()),
        ] {
            let wire = serde_json::to_string(&WireError::from(&err)).expect("encode");
            let back: WireError = serde_json::from_str(&wire).expect("decode");
            assert_eq!(back.into_store_error().to_string(), err.to_string());
        }
    }
}
