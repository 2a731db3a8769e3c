//! # ccattler-controllers
//!
//! The pure scheduler, the standard controllers and the `.cca` language.
//!
//! ## Where to start
//!
//! - Reading `.cca` files: [`lang`]. [`lang::parse`] turns a [`lang::SourceFile`] into a checked
//!   [`lang::Document`] or a [`lang::Diagnostics`] that renders every problem with its line and a
//!   caret; [`lang::format`] prints a document in the canonical layout.
//!
//! The compiler from documents to desired facts, the scheduler and the controllers are being
//! built (see the project's issues).
//!
//! ## Layout
//!
//! | module | what it holds |
//! |---|---|
//! | [`lang`] | lexer, parser, grammar checks, diagnostics and formatter of the `.cca` language |

#![deny(missing_docs)]

pub mod lang;
