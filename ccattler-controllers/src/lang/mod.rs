//! The front end of the `.cca` language: text to a checked statement tree, diagnostics with
//! carets, and a canonical formatter.
//!
//! ```
//! use ccattler_controllers::lang::{self, SourceFile};
//!
//! let file = SourceFile::new("web.cca", "service web {\n    image nginx:1.28\n    instances 3\n}\n");
//! let doc = lang::parse(&file).expect("valid file");
//! assert_eq!(doc.statements[0].name(), "service");
//! assert_eq!(lang::format(&doc), file.text());
//!
//! let bad = SourceFile::new("bad.cca", "service web {\n    imgae nginx\n}\n");
//! let errors = lang::parse(&bad).unwrap_err();
//! assert_eq!(errors.codes(), ["cca::unknown-field"]);
//! assert!(errors.to_string().contains("did you mean `image`?"));
//! ```
//!
//! ## Pipeline
//!
//! 1. [`lexer`]: text to tokens; `;`, `,`, stray characters and unterminated strings are reported
//!    here.
//! 2. [`parser`]: tokens to a [`Document`] of generic [`Statement`]s (keyword, arguments, optional
//!    block), with spans and comments, recovering after each error.
//! 3. [`check`](mod@check): each statement held against the [`grammar`] table (known fields, argument shapes,
//!    blocks, repeats).
//! 4. [`compile`](mod@compile): gives the tree meaning (units, ranges, names and references) and produces the
//!    standard schema's records ([`Compiled`]). It pushes its own [`Diagnostic`]s onto the same
//!    [`Diagnostics`], whose spans point into the same [`SourceFile`].
//!
//! [`check`](fn@check) runs all four and is what `apply` and `cca check` use.
//!
//! [`format`](fn@format) prints any tree, valid or not, in the canonical layout.
//!
//! ## Layout
//!
//! | module | what it holds |
//! |---|---|
//! | [`span`] | [`Span`], [`SourceFile`] |
//! | [`token`] | [`Token`], [`TokenKind`], [`Op`] |
//! | [`lexer`] | [`Lexer`](lexer::Lexer) |
//! | [`syntax`] | the tree: [`Document`], [`Statement`], [`Block`], [`Arg`], [`ArgKind`], [`Comment`] |
//! | [`parser`] | [`parse_tree`](parser::parse_tree), [`MAX_DEPTH`](parser::MAX_DEPTH) |
//! | [`grammar`] | the table of blocks, fields and argument shapes |
//! | [`mod@check`] | shape checks against the grammar |
//! | [`mod@compile`] | the compiler to [`Compiled`] records and desired facts |
//! | [`diagnostic`] | [`Diagnostic`], [`Diagnostics`], rendering |
//! | [`mod@format`] | the canonical printer |
//!
//! ## Diagnostics emitted here
//!
//! Each module's docs list its codes: [`lexer`] (`cca::stray-semicolon`, `cca::stray-comma`,
//! `cca::unexpected-character`, `cca::unterminated-string`, `cca::unterminated-triple-string`,
//! `cca::bad-escape`), [`parser`] (`cca::expected-keyword`, `cca::unexpected-close-brace`,
//! `cca::unclosed-brace`, `cca::after-close-brace`, `cca::nesting-too-deep`) and [`check`](mod@check)
//! (`cca::unknown-field`, `cca::missing-argument`, `cca::wrong-argument`,
//! `cca::extra-argument`, `cca::missing-block`, `cca::unexpected-block`, `cca::repeated-field`,
//! `cca::conflicting-fields`).

mod args;
pub mod check;
pub mod compile;
pub mod diagnostic;
mod fields;
pub mod format;
pub mod grammar;
pub mod lexer;
pub mod parser;
pub mod span;
pub mod syntax;
pub mod token;

pub use compile::{Compiled, DesiredFacts, compile};
pub use diagnostic::{Diagnostic, Diagnostics, Label, Severity};
pub use format::format;
pub use span::{SourceFile, Span};
pub use syntax::{Arg, ArgKind, Block, Comment, Document, Statement, Word};
pub use token::{Op, Token, TokenKind};

/// Parses and shape-checks `file`: the tree when there is no error, else every diagnostic found
/// (capped at [`Diagnostics::DEFAULT_CAP`]).
///
/// # Errors
///
/// The [`Diagnostics`] of the file when any of them is an error.
pub fn parse(file: &SourceFile) -> Result<Document, Diagnostics> {
    let (doc, diags) = parse_with_diagnostics(file);
    if diags.has_errors() {
        Err(diags)
    } else {
        Ok(doc)
    }
}

/// Parses and shape-checks `file`, returning the tree (partial when there are errors) and every
/// diagnostic. This is the entry point for the compiler: it goes on with the tree and pushes its
/// own diagnostics onto the same list.
#[must_use]
pub fn parse_with_diagnostics(file: &SourceFile) -> (Document, Diagnostics) {
    let mut diags = Diagnostics::new(file.clone());
    let mut seen = Vec::new();
    let doc = parser::parse_tree(file, &mut diags, &mut |st, d| {
        check::check_top_statement(st, &mut seen, d);
    });
    (doc, diags)
}

/// Parses `file` without the grammar checks: only lexical and syntax errors are reported. Useful
/// to format files that use fields this version does not know.
#[must_use]
pub fn parse_syntax(file: &SourceFile) -> (Document, Diagnostics) {
    let mut diags = Diagnostics::new(file.clone());
    let doc = parser::parse_tree(file, &mut diags, &mut |_, _| {});
    (doc, diags)
}

/// Parses, checks and compiles `file`: the records it declares, or every diagnostic (syntax,
/// shape and meaning) when there is any error.
///
/// # Errors
///
/// The [`Diagnostics`] of the file when any of them is an error; nothing should be applied then.
pub fn check(file: &SourceFile) -> Result<Compiled, Diagnostics> {
    let (doc, mut diags) = parse_with_diagnostics(file);
    let compiled = compile::compile(&doc, &mut diags);
    if diags.has_errors() {
        Err(diags)
    } else {
        Ok(compiled)
    }
}
