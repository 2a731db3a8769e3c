//! The tokens the [lexer](super::lexer) produces.

use std::fmt;

use super::span::Span;

/// An operator: the only punctuation the language has besides braces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// `=`, as in `require disk = ssd` or `env KEY = VALUE`.
    Assign,
    /// `==`.
    Eq,
    /// `!=`.
    Ne,
    /// `->`, as in `allow web -> db`.
    Arrow,
}

impl Op {
    /// The operator as written.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Op::Assign => "=",
            Op::Eq => "==",
            Op::Ne => "!=",
            Op::Arrow => "->",
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What kind of token was read. Word, path and number tokens keep no text: it is the source under
/// the token's span.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenKind {
    /// An identifier: `image`, `nginx:1.28`, `team/web`, `payments.pending`.
    Word,
    /// A path starting with `/`: `/health/ready`, `/var/lib/x`.
    Path,
    /// A number with an optional unit, kept raw: `8080`, `500m`, `1.5Gi`, `60%`, `-3`.
    Number,
    /// A one-line string, escapes already decoded.
    Str(String),
    /// A `"""` string, content verbatim.
    Block3(String),
    /// An operator.
    Op(Op),
    /// `{`.
    LBrace,
    /// `}`.
    RBrace,
    /// The end of a line (also produced for a stray `;`, after reporting it).
    Newline,
    /// A `#` comment; the text after `#`, trailing whitespace removed.
    Comment(String),
    /// The end of the input (also produced once the diagnostics cap is reached).
    Eof,
}

impl TokenKind {
    /// How the token is described in messages: "number", "`{`", "end of line".
    #[must_use]
    pub fn describe(&self) -> &'static str {
        match self {
            TokenKind::Word => "word",
            TokenKind::Path => "path",
            TokenKind::Number => "number",
            TokenKind::Str(_) => "string",
            TokenKind::Block3(_) => "\"\"\" string",
            TokenKind::Op(Op::Assign) => "`=`",
            TokenKind::Op(Op::Eq) => "`==`",
            TokenKind::Op(Op::Ne) => "`!=`",
            TokenKind::Op(Op::Arrow) => "`->`",
            TokenKind::LBrace => "`{`",
            TokenKind::RBrace => "`}`",
            TokenKind::Newline => "end of line",
            TokenKind::Comment(_) => "comment",
            TokenKind::Eof => "end of file",
        }
    }
}

/// A token and where it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Token {
    /// What was read.
    pub kind: TokenKind,
    /// Where it was read.
    pub span: Span,
}
