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
//!
//! ## Layout
//!
//! | module | what it holds |
//! |---|---|
//! | [`memory`] | [`MemoryStore`], [`MemoryConfig`], the [`MemoryWatch`] stream |
//! | [`namespaced`] | [`Namespaced`], the [`NamespacedWatch`] stream |
//! | `etcd` (feature `etcd`) | `EtcdStore`, `EtcdConfig`, the `EtcdWatch` stream, `LeaseKeeper`, test support in `etcd::server` |
//!
//! ## Feature flags
//!
//! | feature | enables | pulls in |
//! |---|---|---|
//! | `etcd` | `EtcdStore`, the distributed backend, on etcd's v3 API | etcd-client, tonic, tokio (protoc at build time) |
//!
//! With no feature, this crate depends on no async runtime: its futures complete on first poll
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

#[cfg(feature = "etcd")]
pub mod etcd;
#[cfg(feature = "etcd")]
pub use etcd::{EtcdConfig, EtcdStore, EtcdWatch};

#[cfg(test)]
mod test_util;
