//! [`EtcdConfig`]: where the etcd cluster is, how long to wait for it, and the key prefix.

use std::time::Duration;

use ccattler_core::key::MAX_KEY_LEN;

/// etcd's default `--max-request-bytes`: 1.5 MiB.
pub const ETCD_MAX_REQUEST_BYTES: usize = 1536 * 1024;

/// etcd's default `--max-txn-ops`.
pub const ETCD_MAX_TXN_OPS: usize = 128;

/// Room kept in every request for the key (up to [`MAX_KEY_LEN`] plus the store prefix) and the
/// protobuf framing around the value.
const REQUEST_OVERHEAD: usize = MAX_KEY_LEN + 4096;

/// Settings of an [`EtcdStore`](super::EtcdStore).
///
/// # Defaults
///
/// | setting | default |
/// |---|---|
/// | `prefix` | `""` (keys stored as they are) |
/// | `connect_timeout` | 5 s |
/// | `request_timeout` | 5 s |
/// | `require_leader` | `true` |
/// | `keep_alive` | HTTP/2 ping every 10 s, dead after 5 s without answer |
/// | `max_request_bytes` | 1.5 MiB (etcd's default `--max-request-bytes`) |
/// | `max_txn_ops` | 128 (etcd's default `--max-txn-ops`) |
/// | `retries` | 3 attempts for reads, plain puts and keep-alives |
///
/// Set `max_request_bytes` and `max_txn_ops` to what the server runs with when it was started
/// with other values: the store checks requests against them before sending, so that an
/// oversized request fails with a typed error and nothing of it is written.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct EtcdConfig {
    /// Client URLs of the cluster's members, like `http://127.0.0.1:2379`.
    pub endpoints: Vec<String>,
    /// Prefix every key is stored under (empty, or ending with `/`), so that several CCattler
    /// clusters share one etcd. Keys coming out have it stripped.
    pub prefix: String,
    /// How long connecting (and the first request that proves the connection) may take.
    pub connect_timeout: Duration,
    /// How long one request may take before it fails with `StoreError::Timeout`.
    pub request_timeout: Duration,
    /// Ask etcd to refuse requests and cancel watches when the member has no leader, so that a
    /// client of a partitioned member fails fast (and its watches move to another member)
    /// instead of reading stale data or waiting forever.
    pub require_leader: bool,
    /// HTTP/2 keep-alive: ping interval and how long to wait for the answer. `None` turns it off.
    pub keep_alive: Option<(Duration, Duration)>,
    /// The server's request size limit.
    pub max_request_bytes: usize,
    /// The server's limit on compares and on operations per transaction branch.
    pub max_txn_ops: usize,
    /// Attempts (at least 1) for requests that are safe to repeat when the connection fails:
    /// get, scan, revision, the idempotent put and keep-alive.
    pub retries: u32,
}

impl EtcdConfig {
    /// A config for a cluster at `endpoints`, with the defaults above.
    pub fn new<I, S>(endpoints: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        EtcdConfig {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            prefix: String::new(),
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(5),
            require_leader: true,
            keep_alive: Some((Duration::from_secs(10), Duration::from_secs(5))),
            max_request_bytes: ETCD_MAX_REQUEST_BYTES,
            max_txn_ops: ETCD_MAX_TXN_OPS,
            retries: 3,
        }
    }

    /// Stores every key under `prefix` (empty, or ending with `/`; checked at connect).
    #[must_use]
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Sets the connect timeout.
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Sets the per-request timeout.
    #[must_use]
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Sets whether requests and watches need the member to have a leader.
    #[must_use]
    pub fn require_leader(mut self, require: bool) -> Self {
        self.require_leader = require;
        self
    }

    /// Sets the HTTP/2 keep-alive (ping interval, answer timeout); `None` turns it off.
    #[must_use]
    pub fn keep_alive(mut self, keep_alive: Option<(Duration, Duration)>) -> Self {
        self.keep_alive = keep_alive;
        self
    }

    /// Sets the server's request size limit.
    #[must_use]
    pub fn max_request_bytes(mut self, bytes: usize) -> Self {
        self.max_request_bytes = bytes;
        self
    }

    /// Sets the server's transaction operation limit.
    #[must_use]
    pub fn max_txn_ops(mut self, ops: usize) -> Self {
        self.max_txn_ops = ops;
        self
    }

    /// Sets the attempts for requests that are safe to repeat (at least 1).
    #[must_use]
    pub fn retries(mut self, attempts: u32) -> Self {
        self.retries = attempts.max(1);
        self
    }

    /// The largest value the store accepts: the request limit less room for the key and framing.
    pub fn max_value_bytes(&self) -> usize {
        self.max_request_bytes.saturating_sub(REQUEST_OVERHEAD)
    }
}

impl Default for EtcdConfig {
    /// A config for `http://127.0.0.1:2379`.
    fn default() -> Self {
        EtcdConfig::new(["http://127.0.0.1:2379"])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_setters() {
        let config = EtcdConfig::new(["http://a:1"])
            .prefix("blue/")
            .request_timeout(Duration::from_secs(1))
            .retries(0);
        assert_eq!(config.endpoints, ["http://a:1"]);
        assert_eq!(config.prefix, "blue/");
        assert_eq!(config.retries, 1);
        assert!(config.require_leader);
        assert!(config.max_value_bytes() < ETCD_MAX_REQUEST_BYTES);
        assert!(config.max_value_bytes() > 1024 * 1024);
        assert_eq!(EtcdConfig::default().endpoints, ["http://127.0.0.1:2379"]);
    }
}
