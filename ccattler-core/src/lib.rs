//! # ccattler-core: facts in, proposed changes out
//!
//! The contracts every CCattler component agrees on. Desired and observed state live as
//! [`Fact`]s in a [`FactStore`]; pure [`Controller`]s compare them and return [`Change`]s; a runner
//! commits those changes transactionally; node agents drive a [`Runtime`] to make the world match
//! and report back as facts.
//!
//! ## Where to start
//!
//! - Writing a controller: read [`Controller`], then [`FactView`] (what it reads) and [`Change`]
//!   (what it returns). [`Plan`] renders its changes as the stable text snapshot tests store.
//! - Running controllers: [`runner`] (the deterministic loop logic and leader election, and with
//!   the `tokio` feature, the tokio runner and `LeaseElection` that drive them).
//! - Writing a store backend: [`FactStore`]; the conformance suite in `ccattler-testkit` checks
//!   every guarantee it lists.
//! - Choosing the store or runtime at run time (from a config file): [`dynamic`].
//!
//! ## Generics or `dyn`
//!
//! [`FactStore`] and [`Runtime`] use `async fn` in traits, so components take them as generics
//! (`S: FactStore`): one compiled copy per backend, static calls, no allocation. When the
//! backend is only known at run time, hold it as `Arc<dyn DynFactStore>` or
//! `Arc<dyn DynRuntime>` instead ([`DynFactStore`], [`DynRuntime`]): every store and runtime
//! converts to it, and it implements the generic trait itself, so the same components take it
//! unchanged, at the cost of one boxed future per call.
//!
//! ## Layout
//!
//! | module | what it holds |
//! |---|---|
//! | [`key`] | [`Key`], the validated path that names a fact |
//! | [`fact`] | [`Fact`], [`Revision`], [`LeaseId`], [`WatchEvent`] |
//! | [`txn`] | [`Compare`], [`Op`], [`Txn`], [`StoreLimits`] |
//! | [`store`] | the [`FactStore`] trait |
//! | [`dynamic`] | [`DynFactStore`] and [`DynRuntime`], the object-safe forms for run-time choice |
//! | [`error`] | [`StoreError`] |
//! | [`view`] | [`FactView`], the immutable snapshot a reconcile reads |
//! | [`controller`] | the [`Controller`] trait, [`Change`], [`ReconcileContext`], id sources |
//! | [`plan`] | [`Plan`]: changes as stable text, one per line, sorted by key (what snapshots store) |
//! | [`clock`] | [`Clock`], [`SystemClock`], [`ManualClock`] |
//! | [`runtime`] | the [`Runtime`] contract for node agents |
//! | [`schema`] | the standard schema: service specs, instances, placements, nodes, the key table |
//! | [`runner`] | the controller loop state machine, the [`Runner`] trait, leader election |
//! | [`telemetry`] | the table of every metric CCattler records |
//!
//! ## Feature flags
//!
//! | feature | enables | pulls in |
//! |---|---|---|
//! | `tokio` | `runner::TokioRunner`, `runner::LeaseElection`, metrics and tracing | tokio, tracing, metrics |
//!
//! With no feature, this crate depends on no async runtime: a crate that depends on
//! `ccattler-core` alone has 25 crates in its dependency tree, this one included (no tokio, no
//! gRPC, no HTTP; `scripts/test` keeps it so).

#![deny(missing_docs)]

pub mod clock;
pub mod controller;
pub mod dynamic;
pub mod error;
pub mod event;
pub mod fact;
pub mod key;
pub mod plan;
pub mod runner;
pub mod runtime;
pub mod schema;
mod seeded;
pub mod store;
pub mod telemetry;
pub mod txn;
pub mod view;

pub use clock::{Clock, ManualClock, SystemClock};
pub use controller::{
    Change, Controller, IdSource, RandomIds, ReconcileContext, ReconcileError, SequentialIds,
};
pub use dynamic::{DynFactStore, DynRuntime, DynWatch};
pub use error::StoreError;
pub use event::{Event, EventRing};
pub use fact::{EventKind, Fact, LeaseId, Revision, Value, WatchEvent};
pub use key::{Key, KeyError};
pub use plan::Plan;
pub use runner::Runner;
pub use runtime::{
    ExecOutput, FileSpec, InstanceSpec, InstanceState, InstanceStats, MountSpec, ObservedInstance,
    Runtime, RuntimeError,
};
pub use store::{FactStore, Scan};
pub use txn::{CmpOp, Compare, CompareTarget, Lease, Op, StoreLimits, Txn, TxnResponse};
pub use view::FactView;
