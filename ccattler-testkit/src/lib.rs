//! # ccattler-testkit: checks every CCattler backend must pass
//!
//! ## Layout
//!
//! | module | what it holds |
//! |---|---|
//! | [`conformance`] | the [`FactStore`](ccattler_core::FactStore) conformance suite: a harness trait and one entry point |

#![deny(missing_docs)]

pub mod conformance;
