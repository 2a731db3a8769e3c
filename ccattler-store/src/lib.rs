//! # ccattler-store: the fact stores
//!
//! Implementations of [`ccattler_core::FactStore`], the contract every CCattler component reads
//! and writes facts through. Controllers never see which one they run on.
//!
//! ## Where to start
//!
//! - One process, tests, simulations: [`MemoryStore`], an in-memory store with etcd's semantics
//!   (revisions, idempotent put, transactions, watches with previous values, compaction, leases).
//!   Tune it with [`MemoryConfig`].
//! - Several clusters in one store: wrap any store in [`Namespaced`].
//! - Several machines: `EtcdStore` (feature `etcd`), a thin mapping onto a real etcd cluster.
//! - Agents on other machines than the store: the store protocol, every `FactStore` operation
//!   over HTTP. `http::HttpStore` (feature `http`) is its client; `http_server::router`
//!   (feature `http-server`) is an axum `Router` serving it over any store, with the rules of
//!   who may write what (a node writes only its own facts: `http_server::node_may_write`).
//!   The platform says who a caller is (an `http_server::Authorizer`); issuing and storing
//!   credentials stays the platform's policy.
//!
//! ## Layout
//!
//! | module | what it holds |
//! |---|---|
//! | [`memory`] | [`MemoryStore`], [`MemoryConfig`], the [`MemoryWatch`] stream |
//! | [`namespaced`] | [`Namespaced`], the [`NamespacedWatch`] stream |
//! | `metered` (feature `metrics`) | `Metered`, any store's calls counted and timed through the `metrics` facade, and the `MeteredWatch` stream |
//! | `etcd` (feature `etcd`) | `EtcdStore`, `EtcdConfig`, the `EtcdWatch` stream, `LeaseKeeper`, test support in `etcd::server` |
//! | `wire` (features `http`, `http-server`, `wire`) | the store protocol's routes (`Route`) and JSON shapes, shared by client and server |
//! | `http` (feature `http`) | `HttpStore`, the protocol's client, and `WATCH_IDLE_LIMIT` |
//! | `http_server` (feature `http-server`) | `router`, the `Authorizer` trait, `Principal`, `node_may_write`, `StaticTokens`, `ServerError` |
//!
//! ## Feature flags
//!
//! | feature | enables | pulls in |
//! |---|---|---|
//! | `etcd` | `EtcdStore`, the distributed backend, on etcd's v3 API | etcd-client, tonic, tokio (protoc at build time) |
//! | `http` | `HttpStore`, a client of the store protocol | hyper, hyper-util, tokio, serde |
//! | `http-server` | the store protocol's axum `Router` and its credential rules | axum, serde |
//! | `metrics` | `Metered`, store metrics through the `metrics` facade | metrics |
//! | `wire` | the protocol's wire format alone (enabled by both above) | serde, serde_json, base64 |
//!
//! With no feature (or `wire` alone), this crate depends on no async runtime: its futures complete on first poll
//! and its watch streams wake tasks through their `Waker`, so any executor drives them.
//!
//! ## Example
//!
//! ```
//! use ccattler_core::{FactStore, Key, Revision};
//! use ccattler_store::MemoryStore;
//! # fn block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     let mut f = std::pin::pin!(f);
//! #     let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
//! #     loop { if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) { return v; } }
//! # }
//!
//! let store = MemoryStore::new();
//! let key = Key::new("desired/service/web")?;
//! let rev = block_on(store.put(&key, r#"{"replicas":3}"#.into()))?;
//! assert_eq!(rev, Revision(1));
//! // Writing the same value again writes nothing.
//! assert_eq!(block_on(store.put(&key, r#"{"replicas":3}"#.into()))?, Revision(1));
//! let scan = block_on(store.scan("desired/"))?;
//! assert_eq!(scan.facts.len(), 1);
//! assert_eq!(scan.revision, Revision(1));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]

pub mod memory;
pub mod namespaced;

pub use memory::{MemoryConfig, MemoryStore, MemoryWatch};
pub use namespaced::{Namespaced, NamespacedWatch};

#[cfg(feature = "metrics")]
pub mod metered;
#[cfg(feature = "metrics")]
pub use metered::{Metered, MeteredWatch};

#[cfg(feature = "etcd")]
pub mod etcd;
#[cfg(feature = "etcd")]
pub use etcd::{EtcdConfig, EtcdStore, EtcdWatch};

#[cfg(feature = "wire")]
pub mod wire;

#[cfg(feature = "http")]
pub mod http;

#[cfg(feature = "http-server")]
pub mod http_server;

#[cfg(test)]
mod test_util;
