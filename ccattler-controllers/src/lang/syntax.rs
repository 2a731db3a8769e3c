//! The statement tree: what the parser builds and the formatter prints.
//!
//! The tree is generic: every line is a [`Statement`] (a keyword, arguments, maybe a block), with
//! no knowledge of which keywords exist. The [grammar](super::grammar) says which shapes are
//! allowed and the compiler gives them meaning. Every node carries its [`Span`], and comments are
//! kept where they were so the [formatter](mod@super::format) can put them back.

use super::span::Span;
use super::token::Op;

/// A parsed `.cca` file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Document {
    /// The top-level declarations, in order.
    pub statements: Vec<Statement>,
    /// Comments after the last statement.
    pub trailing_comments: Vec<Comment>,
}

/// A `#` comment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Comment {
    /// The text after `#`, verbatim except trailing whitespace.
    pub text: String,
    /// Where the comment is, `#` included.
    pub span: Span,
}

/// A keyword: the identifier that starts a statement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Word {
    /// The identifier.
    pub text: String,
    /// Where it is.
    pub span: Span,
}

/// One statement: `keyword arg... [{ ... }]`, ended by a newline (or by the `}` of a one-line
/// block).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Statement {
    /// Comment lines right above the statement.
    pub comments: Vec<Comment>,
    /// The first word: `service`, `image`, `expose`...
    pub keyword: Word,
    /// Everything between the keyword and the end of line or `{`.
    pub args: Vec<Arg>,
    /// A comment on the same line, after the arguments (after the `{` for a block statement).
    pub trailing_comment: Option<Comment>,
    /// The `{ ... }` block, if any (boxed: most statements have none, and this keeps statements
    /// small).
    pub block: Option<Box<Block>>,
    /// From the keyword to the last argument or the closing `}`.
    pub span: Span,
}

impl Statement {
    /// The keyword's text.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.keyword.text
    }

    /// The statements of the block, or none when there is no block.
    #[must_use]
    pub fn children(&self) -> &[Statement] {
        self.block.as_ref().map_or(&[], |b| &b.statements)
    }
}

/// A `{ ... }` block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Block {
    /// The statements inside, in order.
    pub statements: Vec<Statement>,
    /// Comment lines after the last statement, before `}`.
    pub trailing_comments: Vec<Comment>,
    /// A comment on the line of the closing `}`.
    pub close_comment: Option<Comment>,
    /// From `{` to `}` inclusive.
    pub span: Span,
}

/// One argument of a statement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Arg {
    /// What it is.
    pub kind: ArgKind,
    /// Where it is (quotes included for strings).
    pub span: Span,
}

/// The kinds of argument. Numbers keep their raw text: units are the compiler's business.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ArgKind {
    /// An identifier: `nginx:1.28`, `payments.pending`, `team/web`, `spread`, `true`.
    Word(String),
    /// A path starting with `/`: `/health/ready`, `/var/lib/x`.
    Path(String),
    /// A number as written, unit included: `8080`, `500m`, `1.5Gi`, `60%`, `1h30m`, `-3`.
    Number(String),
    /// A `"..."` string, escapes decoded.
    Str(String),
    /// A `"""..."""` string, content verbatim.
    Block3(String),
    /// An operator: `=`, `==`, `!=`, `->`.
    Op(Op),
}

impl ArgKind {
    /// How the argument is described in messages: "word `web`", "number `8080`", "a string".
    #[must_use]
    pub fn describe(&self) -> String {
        fn short(s: &str) -> String {
            let mut out: String = s.chars().take(24).collect();
            if out.len() < s.len() {
                out.push_str("...");
            }
            out
        }
        match self {
            ArgKind::Word(w) => format!("word `{}`", short(w)),
            ArgKind::Path(p) => format!("path `{}`", short(p)),
            ArgKind::Number(n) => format!("number `{}`", short(n)),
            ArgKind::Str(_) => "a string".to_owned(),
            ArgKind::Block3(_) => "a \"\"\" string".to_owned(),
            ArgKind::Op(op) => format!("`{op}`"),
        }
    }

    /// The text of a word, a path or a number.
    #[must_use]
    pub fn text(&self) -> Option<&str> {
        match self {
            ArgKind::Word(s) | ArgKind::Path(s) | ArgKind::Number(s) => Some(s),
            _ => None,
        }
    }

    /// The content of either kind of string.
    #[must_use]
    pub fn string(&self) -> Option<&str> {
        match self {
            ArgKind::Str(s) | ArgKind::Block3(s) => Some(s),
            _ => None,
        }
    }
}

impl Document {
    /// The same tree with every span set to `0..0`: two documents that differ only in layout
    /// compare equal once stripped. Comments are kept.
    #[must_use]
    pub fn without_spans(&self) -> Document {
        let mut doc = self.clone();
        doc.statements.iter_mut().for_each(strip_statement);
        doc.trailing_comments.iter_mut().for_each(strip_comment);
        doc
    }

    /// Whether `self` and `other` are the same tree, comments included, spans ignored. This is
    /// the equality of the formatter's round-trip property.
    #[must_use]
    pub fn same_tree(&self, other: &Document) -> bool {
        self.without_spans() == other.without_spans()
    }
}

fn strip_comment(c: &mut Comment) {
    c.span = Span::default();
}

fn strip_statement(s: &mut Statement) {
    s.span = Span::default();
    s.keyword.span = Span::default();
    s.comments.iter_mut().for_each(strip_comment);
    s.trailing_comment.iter_mut().for_each(strip_comment);
    s.args.iter_mut().for_each(|a| a.span = Span::default());
    if let Some(b) = &mut s.block {
        b.span = Span::default();
        b.statements.iter_mut().for_each(strip_statement);
        b.trailing_comments.iter_mut().for_each(strip_comment);
        b.close_comment.iter_mut().for_each(strip_comment);
    }
}
