//! The canonical layout of a `.cca` file.
//!
//! - four spaces of indent per block, one statement per line, `}` on its own line;
//! - one blank line between top-level declarations, none inside blocks;
//! - single spaces between arguments, so `disk=ssd` prints as `disk = ssd`;
//! - comments kept where they were (above a statement, at the end of its line, after `{` or `}`,
//!   or before a `}`);
//! - `"..."` strings re-escaped (`\"`, `\\`, `\n`, `\t`), `"""` strings kept verbatim.
//!
//! # Guarantees
//!
//! For any text `x`, `parse(format(parse(x)))` is the same tree as `parse(x)`
//! ([`Document::same_tree`]), and formatting is idempotent. Both are property-tested.

use std::fmt::Write as _;

use super::syntax::{Arg, ArgKind, Block, Comment, Document, Statement};

/// Prints `doc` in the canonical layout.
#[must_use]
pub fn format(doc: &Document) -> String {
    let mut out = String::new();
    for (i, st) in doc.statements.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        statement(&mut out, st, 0);
    }
    if !doc.trailing_comments.is_empty() && !doc.statements.is_empty() {
        out.push('\n');
    }
    comment_lines(&mut out, &doc.trailing_comments, 0);
    out
}

fn indent(out: &mut String, depth: usize) {
    for _ in 0..depth {
        out.push_str("    ");
    }
}

fn comment_lines(out: &mut String, comments: &[Comment], depth: usize) {
    for c in comments {
        indent(out, depth);
        out.push('#');
        out.push_str(&c.text);
        out.push('\n');
    }
}

fn trailing(out: &mut String, c: Option<&Comment>) {
    if let Some(c) = c {
        out.push_str(" #");
        out.push_str(&c.text);
    }
}

fn statement(out: &mut String, st: &Statement, depth: usize) {
    comment_lines(out, &st.comments, depth);
    indent(out, depth);
    out.push_str(&st.keyword.text);
    for a in &st.args {
        out.push(' ');
        arg(out, a);
    }
    match &st.block {
        None => {
            trailing(out, st.trailing_comment.as_ref());
            out.push('\n');
        }
        Some(b) => block(out, b, st.trailing_comment.as_ref(), depth),
    }
}

fn block(out: &mut String, b: &Block, head: Option<&Comment>, depth: usize) {
    out.push_str(" {");
    trailing(out, head);
    out.push('\n');
    for st in &b.statements {
        statement(out, st, depth + 1);
    }
    comment_lines(out, &b.trailing_comments, depth + 1);
    indent(out, depth);
    out.push('}');
    trailing(out, b.close_comment.as_ref());
    out.push('\n');
}

fn arg(out: &mut String, a: &Arg) {
    match &a.kind {
        ArgKind::Word(s) | ArgKind::Path(s) | ArgKind::Number(s) => out.push_str(s),
        ArgKind::Str(s) => {
            out.push('"');
            for c in s.chars() {
                match c {
                    '"' => out.push_str("\\\""),
                    '\\' => out.push_str("\\\\"),
                    '\n' => out.push_str("\\n"),
                    '\t' => out.push_str("\\t"),
                    c => out.push(c),
                }
            }
            out.push('"');
        }
        ArgKind::Block3(s) => {
            let _ = write!(out, "\"\"\"{s}\"\"\"");
        }
        ArgKind::Op(op) => out.push_str(op.as_str()),
    }
}
