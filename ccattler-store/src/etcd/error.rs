//! How etcd's errors become [`StoreError`]s.
//!
//! etcd reports most failures as gRPC statuses whose message is one of its well-known error
//! strings (`etcdserver: requested lease not found`, `mvcc: required revision has been
//! compacted`, ...). [`classify`] sorts them into the cases the store handles; [`into_store`]
//! turns the rest into retryable or non-retryable [`StoreError`]s.

use std::time::Duration;

use ccattler_core::StoreError;
use etcd_client::Error as EtcdError;
use tonic::Code;

/// What an etcd error means to the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// The lease named in the request does not exist.
    LeaseNotFound,
    /// The revision asked for was compacted.
    Compacted,
    /// The revision asked for is in the future.
    FutureRevision,
    /// The request is over the server's size limit.
    TooLarge,
    /// The transaction is over the server's operation limit.
    TooManyOps,
    /// The transaction writes one key twice.
    DuplicateKey,
    /// The member, its leader or the connection failed: worth retrying.
    Unavailable,
    /// The server gave up on the request's deadline.
    Timeout,
    /// Anything else: a bug in the request or an unexpected server answer.
    Other,
}

/// Sorts an etcd error by what the store should do with it.
pub(crate) fn classify(error: &EtcdError) -> Kind {
    match error {
        EtcdError::GRpcStatus(status) => {
            let message = status.message();
            if message.contains("requested lease not found") {
                Kind::LeaseNotFound
            } else if message.contains("required revision has been compacted") {
                Kind::Compacted
            } else if message.contains("required revision is a future revision") {
                Kind::FutureRevision
            } else if message.contains("request is too large")
                || status.code() == Code::ResourceExhausted
            {
                Kind::TooLarge
            } else if message.contains("too many operations in txn request") {
                Kind::TooManyOps
            } else if message.contains("duplicate key given in txn request") {
                Kind::DuplicateKey
            } else {
                match status.code() {
                    Code::DeadlineExceeded => Kind::Timeout,
                    Code::Unavailable | Code::Aborted | Code::Cancelled | Code::Unknown => {
                        Kind::Unavailable
                    }
                    _ if is_transient_message(message) => Kind::Unavailable,
                    _ => Kind::Other,
                }
            }
        }
        EtcdError::TransportError(_) | EtcdError::IoError(_) | EtcdError::WatchError(_) => {
            Kind::Unavailable
        }
        EtcdError::LeaseKeepAliveError(message) if message.contains("lease not found") => {
            Kind::LeaseNotFound
        }
        EtcdError::LeaseKeepAliveError(_) => Kind::Unavailable,
        _ => Kind::Other,
    }
}

/// etcd server errors that mean "try again later" whatever their gRPC code.
fn is_transient_message(message: &str) -> bool {
    [
        "no leader",
        "leader changed",
        "request timed out",
        "too many requests",
        "not capable",
        "server stopped",
        "raft proposal dropped",
    ]
    .iter()
    .any(|m| message.contains(m))
}

/// Turns an etcd error no call site handled into a [`StoreError`]: retryable
/// [`StoreError::Unavailable`] or [`StoreError::Timeout`] when retrying may help, a
/// non-retryable [`StoreError::Unavailable`] (with "rejected" in its message) otherwise.
pub(crate) fn into_store(error: EtcdError, what: &str, timeout: Duration) -> StoreError {
    match classify(&error) {
        Kind::Timeout => StoreError::Timeout(timeout),
        Kind::Unavailable => StoreError::Unavailable {
            message: format!("etcd {what} failed"),
            source: Some(Box::new(error)),
        },
        _ => StoreError::Unavailable {
            message: format!("etcd rejected {what}"),
            source: Some(Box::new(error)),
        },
    }
}

/// Runs one etcd call under the request timeout.
pub(crate) async fn timed<T, F>(timeout: Duration, what: &str, call: F) -> Result<T, StoreError>
where
    F: Future<Output = Result<T, EtcdError>>,
{
    match tokio::time::timeout(timeout, call).await {
        Ok(result) => result.map_err(|e| into_store_keep(e, what, timeout)),
        Err(_) => Err(StoreError::Timeout(timeout)),
    }
}

/// Like [`into_store`], but keeps errors that call sites classify again (lease not found,
/// compacted, ...) recognisable: see [`Classified`].
fn into_store_keep(error: EtcdError, what: &str, timeout: Duration) -> StoreError {
    match classify(&error) {
        Kind::Timeout | Kind::Unavailable => into_store(error, what, timeout),
        kind => StoreError::Unavailable {
            message: format!("etcd rejected {what}"),
            source: Some(Box::new(Classified { kind, error })),
        },
    }
}

/// An etcd error that a call site maps to a precise [`StoreError`] (it knows the lease id, the
/// revision or the key the error is about).
#[derive(Debug)]
pub(crate) struct Classified {
    pub(crate) kind: Kind,
    error: EtcdError,
}

impl std::fmt::Display for Classified {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for Classified {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

/// The [`Kind`] a [`timed`] call's error was classified as: `None` for connection failures and
/// timeouts (the errors worth retrying), `Some` for etcd's rejections.
pub(crate) fn kind_of(error: &StoreError) -> Option<Kind> {
    match error {
        StoreError::Unavailable {
            source: Some(source),
            ..
        } => source.downcast_ref::<Classified>().map(|c| c.kind),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: Code, message: &str) -> EtcdError {
        EtcdError::GRpcStatus(tonic::Status::new(code, message))
    }

    #[test]
    fn etcd_messages_are_classified() {
        let cases = [
            (
                Code::NotFound,
                "etcdserver: requested lease not found",
                Kind::LeaseNotFound,
            ),
            (
                Code::OutOfRange,
                "mvcc: required revision has been compacted",
                Kind::Compacted,
            ),
            (
                Code::OutOfRange,
                "mvcc: required revision is a future revision",
                Kind::FutureRevision,
            ),
            (
                Code::InvalidArgument,
                "etcdserver: request is too large",
                Kind::TooLarge,
            ),
            (
                Code::InvalidArgument,
                "etcdserver: too many operations in txn request",
                Kind::TooManyOps,
            ),
            (
                Code::InvalidArgument,
                "etcdserver: duplicate key given in txn request",
                Kind::DuplicateKey,
            ),
            (
                Code::Unavailable,
                "etcdserver: no leader",
                Kind::Unavailable,
            ),
            (
                Code::FailedPrecondition,
                "etcdserver: no leader",
                Kind::Unavailable,
            ),
            (
                Code::DeadlineExceeded,
                "context deadline exceeded",
                Kind::Timeout,
            ),
            (
                Code::InvalidArgument,
                "etcdserver: key is not provided",
                Kind::Other,
            ),
        ];
        for (code, message, kind) in cases {
            assert_eq!(classify(&status(code, message)), kind, "{message}");
        }
    }

    #[test]
    fn retryable_only_when_retrying_helps() {
        let t = Duration::from_secs(1);
        assert!(into_store(status(Code::Unavailable, "x"), "get", t).is_retryable());
        assert!(into_store(status(Code::DeadlineExceeded, "x"), "get", t).is_retryable());
        let rejected = into_store_keep(
            status(Code::NotFound, "requested lease not found"),
            "put",
            t,
        );
        assert_eq!(kind_of(&rejected), Some(Kind::LeaseNotFound));
        assert!(kind_of(&into_store(status(Code::Unavailable, "x"), "get", t)).is_none());
    }
}
