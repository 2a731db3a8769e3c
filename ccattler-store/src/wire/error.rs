//! Store errors on the wire: [`WireError`].

use std::time::Duration;

use ccattler_core::{Key, LeaseId, Revision, StoreError};
use serde::{Deserialize, Serialize};

use super::millis;

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
