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
//!   (what it returns).
//! - Running controllers: [`runner`] (the deterministic loop logic, and with the `tokio` feature,
//!   the tokio runner and leader election).
//! - Writing a store backend: [`FactStore`]; the conformance suite in `ccattler-testkit` checks
//!   every guarantee it lists.
//!
//! ## Layout
//!
//! | module | what it holds |
//! |---|---|
//! | [`key`] | [`Key`], the validated path that names a fact |
//! | [`fact`] | [`Fact`], [`Revision`], [`LeaseId`], [`WatchEvent`] |
//! | [`txn`] | [`Compare`], [`Op`], [`Txn`], [`StoreLimits`] |
//! | [`store`] | the [`FactStore`] trait |
//! | [`error`] | [`StoreError`] |
//! | [`view`] | [`FactView`], the immutable snapshot a reconcile reads |
//! | [`controller`] | the [`Controller`] trait, [`Change`], [`ReconcileContext`], id sources |
//! | [`clock`] | [`Clock`], [`SystemClock`], [`ManualClock`] |
//! | [`runtime`] | the [`Runtime`] contract for node agents |
//! | [`schema`] | the standard schema: service specs, instances, placements, nodes, the key table |
//! | [`runner`] | the controller loop state machine, the [`Runner`] trait, leader election |
//!
//! ## Feature flags
//!
//! | feature | enables | pulls in |
//! |---|---|---|
//! | `tokio` | `runner::TokioRunner`, `runner::LeaseElection`, metrics and tracing | tokio, tracing, metrics |
//!
//! With no feature, this crate depends on no async runtime.

#![deny(missing_docs)]

pub mod clock;
pub mod controller;
pub mod error;
pub mod fact;
pub mod key;
pub mod runner;
pub mod runtime;
pub mod schema;
pub mod store;
pub mod txn;
pub mod view;

pub use clock::{Clock, ManualClock, SystemClock};
pub use controller::{
    Change, Controller, IdSource, RandomIds, ReconcileContext, ReconcileError, SequentialIds,
};
pub use error::StoreError;
pub use fact::{EventKind, Fact, LeaseId, Revision, Value, WatchEvent};
pub use key::{Key, KeyError};
pub use runner::Runner;
pub use runtime::{
    ExecOutput, FileSpec, InstanceSpec, InstanceState, InstanceStats, MountSpec, ObservedInstance,
    Runtime, RuntimeError,
};
pub use store::{FactStore, Scan};
pub use txn::{CmpOp, Compare, CompareTarget, Lease, Op, StoreLimits, Txn, TxnResponse};
pub use view::FactView;
