//! # ccattler-controllers
//!
//! The pure scheduler, the standard controllers and the `.cca` language.
//!
//! ## Where to start
//!
//! - Reading `.cca` files: [`lang`]. [`lang::parse`] turns a [`lang::SourceFile`] into a checked
//!   [`lang::Document`] or a [`lang::Diagnostics`] that renders every problem with its line and a
//!   caret; [`lang::format`](fn@lang::format) prints a document in the canonical layout.
//!
//! - Applying them: [`lang::check`](fn@lang::check) compiles a file to the standard schema's records, and
//!   [`apply::apply_file`] writes them to a store in one guarded transaction (with dry run and
//!   prune).
//!
//! ## Layout
//!
//! | module | what it holds |
//! |---|---|
//! | [`apply`] | apply desired facts in one transaction: diff, dry run, prune |
//! | [`lang`] | lexer, parser, grammar checks, diagnostics and formatter of the `.cca` language |
//! | [`standard`] | the standard controllers: intent, instances, scheduler, endpoints, status |
//! | [`scheduler`] | the pure scheduler: filters, ranking, unsatisfied reasons, rebalancing moves |

#![deny(missing_docs)]

pub mod apply;
pub mod lang;
pub mod scheduler;
pub mod standard;
