//! The error every [`FactStore`](crate::FactStore) operation returns.

use crate::{Key, KeyError, LeaseId, Revision};

/// What went wrong in a store operation.
///
/// # Caveats
///
/// Only [`StoreError::Unavailable`] and [`StoreError::Timeout`] are worth retrying as they are;
/// [`StoreError::Compacted`] asks the reader to list again; every other variant is a bug in the
/// request and fails the same way on retry. See [`StoreError::is_retryable`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// A key or prefix is malformed.
    #[error(transparent)]
    InvalidKey(#[from] KeyError),
    /// A transaction has more compares or operations than the store allows.
    #[error(
        "transaction has {count} {what}, more than the store's limit of {limit}; \
         split it into several transactions"
    )]
    TooManyOps {
        /// What is counted: "compares" or "operations in one branch".
        what: &'static str,
        /// How many the transaction has.
        count: usize,
        /// The store's limit.
        limit: usize,
    },
    /// A transaction branch writes the same key more than once.
    #[error("transaction writes key {0} more than once in one branch; merge the operations")]
    DuplicateKey(Key),
    /// A value is larger than the store accepts.
    #[error(
        "value of {size} bytes for key {key} is larger than the store's limit of {limit} bytes"
    )]
    ValueTooLarge {
        /// The key written.
        key: Key,
        /// The value's size.
        size: usize,
        /// The store's limit.
        limit: usize,
    },
    /// The requested revision was removed by compaction.
    #[error(
        "revision {requested} has been compacted; the earliest available revision is {earliest}: \
         list again and watch from the listed revision + 1"
    )]
    Compacted {
        /// The revision asked for.
        requested: Revision,
        /// The earliest revision still available.
        earliest: Revision,
    },
    /// A compaction asked for a revision the store has not reached.
    #[error("revision {requested} is in the future; the store is at revision {current}")]
    FutureRevision {
        /// The revision asked for.
        requested: Revision,
        /// The store's current revision.
        current: Revision,
    },
    /// The lease does not exist: it expired, was revoked or was never granted.
    #[error("lease {0} not found (expired or revoked); grant a new lease")]
    LeaseNotFound(LeaseId),
    /// A lease TTL is zero or too large.
    #[error("lease ttl of {0:?} is not allowed; use a ttl between 1 s and 1 year")]
    InvalidTtl(std::time::Duration),
    /// The store cannot be reached or failed internally; retrying may help.
    #[error("store unavailable: {message}")]
    Unavailable {
        /// What failed, in words.
        message: String,
        /// The underlying error, if any.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// The request did not complete in time; it may or may not have been applied.
    #[error("store request timed out after {0:?}; it may or may not have been applied")]
    Timeout(std::time::Duration),
    /// The store refused the request for the caller's credential: it may not read or write
    /// this key or lease. Retrying with the same credential fails the same way.
    #[error("the store refused the request: {0}; use a credential that is allowed to do this")]
    Denied(String),
}

impl StoreError {
    /// Whether the same request may succeed if sent again later.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            StoreError::Unavailable { .. } | StoreError::Timeout(_)
        )
    }

    /// A [`StoreError::Unavailable`] with a message and no source.
    pub fn unavailable(message: impl Into<String>) -> Self {
        StoreError::Unavailable {
            message: message.into(),
            source: None,
        }
    }
}
