//! The store protocol's wire format: routes and JSON shapes shared by the client
//! ([`HttpStore`](crate::http::HttpStore), feature `http`) and the server
//! ([`http_server::router`](crate::http_server::router), feature `http-server`), with lossless
//! conversions to and from the core types.
//!
//! # Routes
//!
//! Bodies and answers are JSON in the shapes of this module; values are base64, so any bytes
//! round-trip exactly.
//!
//! | [`Route`] | method and path | body → answer |
//! |---|---|---|
//! | `Get` | `POST /store/get` | [`GetRequest`] `{key}` → [`GetAnswer`] `{fact}` (`null` when absent) |
//! | `Scan` | `POST /store/scan` | [`ScanRequest`] `{prefix}` → [`ScanAnswer`] `{revision, facts}` |
//! | `Put` | `POST /store/put` | [`PutRequest`] `{key, value, lease}` → [`RevisionBody`] `{revision}` |
//! | `Delete` | `POST /store/delete` | [`GetRequest`] `{key}` → [`GetAnswer`] (what was deleted) |
//! | `Txn` | `POST /store/txn` | [`WireTxn`] `{compare, then, else}` → [`TxnAnswer`] `{succeeded, revision}` |
//! | `Revision` | `GET /store/revision` | → [`RevisionBody`] |
//! | `Compact` | `POST /store/compact` | [`RevisionBody`] → `{}` |
//! | `LeaseGrant` | `POST /store/lease/grant` | [`WireLease`] `{ttl_ms}` → [`WireLease`] `{id, ttl_ms}` |
//! | `LeaseKeepAlive` | `POST /store/lease/keep-alive` | [`LeaseRequest`] `{id}` → [`WireLease`] |
//! | `LeaseRevoke` | `POST /store/lease/revoke` | [`LeaseRequest`] `{id}` → `{}` |
//! | `Watch` | `GET /store/watch?prefix=P&from=R` ([`WatchParams`]) | server-sent events: `change` ([`WireEvent`]), `error` ([`WireError`], then the stream ends), a keep-alive comment every [`WATCH_KEEP_ALIVE`] |
//!
//! # Errors on the wire
//!
//! A failed request answers with a 4xx or 5xx status and `{"error": "<message>"}`; when a store
//! operation failed, the body also has `store_error`, a [`WireError`] from which the client
//! rebuilds the same [`StoreError`] the server's store returned.

mod error;
mod txn;

pub use error::WireError;
pub use txn::{TxnAnswer, WireCompare, WireOp, WireTarget, WireTxn};

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use ccattler_core::{EventKind, Fact, Key, LeaseId, Revision, StoreError, Value, WatchEvent};
use serde::{Deserialize, Serialize};

/// How often an idle watch stream carries a keep-alive comment. A client may take a much longer
/// silence as a dead connection.
pub const WATCH_KEEP_ALIVE: Duration = Duration::from_secs(5);

/// The name of the server-sent event that carries a [`WireEvent`].
pub const CHANGE_EVENT: &str = "change";
/// The name of the server-sent event that carries a [`WireError`] and ends a watch.
pub const ERROR_EVENT: &str = "error";

/// One route of the store protocol; see the [module docs](self).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Route {
    /// `POST /store/get`.
    Get,
    /// `POST /store/scan`.
    Scan,
    /// `POST /store/put`.
    Put,
    /// `POST /store/delete`.
    Delete,
    /// `POST /store/txn`.
    Txn,
    /// `GET /store/revision`.
    Revision,
    /// `POST /store/compact`.
    Compact,
    /// `POST /store/lease/grant`.
    LeaseGrant,
    /// `POST /store/lease/keep-alive`.
    LeaseKeepAlive,
    /// `POST /store/lease/revoke`.
    LeaseRevoke,
    /// `GET /store/watch`.
    Watch,
}

impl Route {
    /// Every route.
    pub const ALL: [Route; 11] = [
        Route::Get,
        Route::Scan,
        Route::Put,
        Route::Delete,
        Route::Txn,
        Route::Revision,
        Route::Compact,
        Route::LeaseGrant,
        Route::LeaseKeepAlive,
        Route::LeaseRevoke,
        Route::Watch,
    ];

    /// The path, such as `/store/get` (without query).
    pub const fn path(self) -> &'static str {
        match self {
            Route::Get => "/store/get",
            Route::Scan => "/store/scan",
            Route::Put => "/store/put",
            Route::Delete => "/store/delete",
            Route::Txn => "/store/txn",
            Route::Revision => "/store/revision",
            Route::Compact => "/store/compact",
            Route::LeaseGrant => "/store/lease/grant",
            Route::LeaseKeepAlive => "/store/lease/keep-alive",
            Route::LeaseRevoke => "/store/lease/revoke",
            Route::Watch => "/store/watch",
        }
    }

    /// Whether the route is a `GET` (without body); every other route is a `POST` of JSON.
    pub const fn is_get(self) -> bool {
        matches!(self, Route::Revision | Route::Watch)
    }
}

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
            value: encode_value(&fact.value),
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
    /// [`StoreError::InvalidKey`] for a malformed key, [`StoreError::Unavailable`] for a value
    /// that is not base64 (either is a bad answer from the server).
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

/// Base64-decodes a value.
///
/// # Errors
///
/// [`StoreError::Unavailable`] naming the decoding error: a malformed value is a bad answer
/// (or, on the server, a bad request, which it answers with 400).
pub fn decode_value(text: &str) -> Result<Value, StoreError> {
    BASE64
        .decode(text)
        .map(Value::from)
        .map_err(|err| StoreError::unavailable(format!("a value is not base64: {err}")))
}

/// `{key}`: the body of `POST /store/get` and `POST /store/delete`.
#[derive(Debug, Serialize, Deserialize)]
pub struct GetRequest {
    /// The key read or deleted.
    pub key: String,
}

/// The answer to `POST /store/get` (the fact) and `POST /store/delete` (what was deleted).
#[derive(Debug, Serialize, Deserialize)]
pub struct GetAnswer {
    /// The fact, when the key exists.
    pub fact: Option<WireFact>,
}

/// `POST /store/put`: `{key, value, lease}` → [`RevisionBody`].
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

/// `POST /store/scan`: `{prefix}` → [`ScanAnswer`].
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

/// `POST /store/compact`: `{revision}`; also the answer of `GET /store/revision` and of a put.
#[derive(Debug, Serialize, Deserialize)]
pub struct RevisionBody {
    /// The revision.
    pub revision: u64,
}

/// The query of `GET /store/watch`: `prefix` and `from`.
#[derive(Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchParams {
    /// Plain string prefix.
    #[serde(default)]
    pub prefix: String,
    /// The first revision wanted (0: from the next write).
    #[serde(default)]
    pub from: u64,
}

impl WatchParams {
    /// The query string, `prefix=P&from=R`, with the prefix percent-encoded.
    pub fn to_query(&self) -> String {
        let mut prefix = String::with_capacity(self.prefix.len());
        for byte in self.prefix.bytes() {
            if byte.is_ascii_alphanumeric() || b"-_.~/".contains(&byte) {
                prefix.push(char::from(byte));
            } else {
                prefix.push_str(&format!("%{byte:02X}"));
            }
        }
        format!("prefix={prefix}&from={}", self.from)
    }
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
    /// A malformed event (a bad answer from the server): [`StoreError::InvalidKey`] or
    /// [`StoreError::Unavailable`].
    pub fn into_event(self) -> Result<WatchEvent, StoreError> {
        let kind = match self.kind.as_str() {
            "put" => EventKind::Put,
            "delete" => EventKind::Delete,
            other => {
                return Err(StoreError::unavailable(format!(
                    "unknown watch event kind {other:?}; expected put or delete"
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

/// A duration in whole milliseconds, saturating.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watch_queries_encode_the_prefix() {
        let params = WatchParams {
            prefix: "observed/instance/n 1&x=y/".to_owned(),
            from: 7,
        };
        assert_eq!(
            params.to_query(),
            "prefix=observed/instance/n%201%26x%3Dy/&from=7"
        );
    }

    #[test]
    fn events_round_trip_with_binary_values() {
        let fact = Fact {
            key: Key::new("a/b").expect("key"),
            value: Value::from_static(b"\x00\xff"),
            create_revision: Revision(2),
            mod_revision: Revision(5),
            version: 3,
            lease: Some(LeaseId(9)),
        };
        let event = WatchEvent {
            kind: EventKind::Put,
            fact: fact.clone(),
            prev: Some(fact),
        };
        let text = serde_json::to_string(&WireEvent::from(&event)).expect("encode");
        let back: WireEvent = serde_json::from_str(&text).expect("decode");
        assert_eq!(back.into_event().expect("event"), event);
    }

    #[test]
    fn paths_are_distinct_and_under_store() {
        let mut paths: Vec<&str> = Route::ALL.iter().map(|r| r.path()).collect();
        assert!(paths.iter().all(|p| p.starts_with("/store/")));
        paths.sort_unstable();
        paths.dedup();
        assert_eq!(paths.len(), Route::ALL.len());
    }
}
