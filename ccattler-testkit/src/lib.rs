//! # ccattler-testkit: checks every CCattler backend must pass
//!
//! ## Layout
//!
//! | module | what it holds |
//! |---|---|
//! | [`toy`] | [`toy::ReplicaController`], a small real controller for runner tests, examples and benches |
//! | [`conformance`] | the [`FactStore`](ccattler_core::FactStore) conformance suite: a harness trait and one entry point |

#![deny(missing_docs)]

pub mod conformance;
pub mod toy;
