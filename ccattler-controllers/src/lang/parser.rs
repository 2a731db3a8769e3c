//! Tokens to a [`Document`]: recursive descent with error recovery.
//!
//! # Guarantees
//!
//! - Every problem found goes to the [`Diagnostics`]; parsing goes on after each one (skipping to
//!   the end of the line, or over a whole `{ ... }` block), so one run reports all of them.
//! - Once the diagnostics are full, the lexer answers end-of-file and parsing stops: the work done
//!   on garbage is bounded by the cap, not by the file size.
//! - Linear time, no panic, and blocks nest at most [`MAX_DEPTH`] deep: deeper blocks are reported
//!   and skipped without recursion.
//!
//! Syntax problems:
//!
//! | code | when |
//! |---|---|
//! | `cca::expected-keyword` | a line starts with something other than a word |
//! | `cca::unexpected-close-brace` | a `}` with no open block |
//! | `cca::unclosed-brace` | a `{` never closed |
//! | `cca::after-close-brace` | something after `}` on its line |
//! | `cca::nesting-too-deep` | a block nested deeper than [`MAX_DEPTH`] |

use super::diagnostic::{Diagnostic, Diagnostics};
use super::lexer::Lexer;
use super::span::{SourceFile, Span};
use super::syntax::{Arg, ArgKind, Block, Comment, Document, Statement, Word};
use super::token::{Token, TokenKind};

/// How deep blocks may nest. The language needs 4 (`service`, `scale`, `horizontal`,
/// `stabilization`); the limit only guards against pathological input.
pub const MAX_DEPTH: usize = 32;

/// Parses `file` into a tree, pushing problems to `diags`, and calls `on_top` on each top-level
/// statement as soon as it is parsed (so checks also stop early once `diags` is full).
pub fn parse_tree(
    file: &SourceFile,
    diags: &mut Diagnostics,
    on_top: &mut dyn FnMut(&Statement, &mut Diagnostics),
) -> Document {
    let text = file.text();
    let mut lexer = Lexer::new(text);
    let tok = lexer.next_token(diags);
    let mut p = Parser {
        lexer,
        text,
        tok,
        diags,
        pending: Vec::new(),
    };
    p.document(on_top)
}

struct Parser<'a, 'd> {
    lexer: Lexer<'a>,
    text: &'a str,
    tok: Token,
    diags: &'d mut Diagnostics,
    /// Comment lines read but not yet attached.
    pending: Vec<Comment>,
}

enum End {
    Eof,
    Close(Span),
}

impl Parser<'_, '_> {
    fn advance(&mut self) {
        self.tok = self.lexer.next_token(self.diags);
    }

    fn slice(&self, span: Span) -> String {
        self.text.get(span.start..span.end).unwrap_or("").to_owned()
    }

    /// The current token for messages: "number `8080`", "`{`".
    fn describe_token(&self) -> String {
        let kind = self.tok.kind.describe();
        match self.tok.kind {
            TokenKind::Word | TokenKind::Path | TokenKind::Number => {
                let text = self
                    .text
                    .get(self.tok.span.start..self.tok.span.end)
                    .unwrap_or("");
                let short: String = text.chars().take(24).collect();
                let more = if short.len() < text.len() { "..." } else { "" };
                format!("{kind} `{short}{more}`")
            }
            _ => kind.to_owned(),
        }
    }

    /// Skips blank lines, collecting comment lines into `pending`.
    fn comment_lines(&mut self) {
        loop {
            match &mut self.tok.kind {
                TokenKind::Newline => {}
                TokenKind::Comment(text) => self.pending.push(Comment {
                    text: std::mem::take(text),
                    span: self.tok.span,
                }),
                _ => return,
            }
            self.advance();
        }
    }

    fn document(&mut self, on_top: &mut dyn FnMut(&Statement, &mut Diagnostics)) -> Document {
        let mut doc = Document::default();
        loop {
            self.comment_lines();
            match self.tok.kind {
                TokenKind::Eof => break,
                TokenKind::RBrace => {
                    self.diags.push(
                        Diagnostic::error(
                            "cca::unexpected-close-brace",
                            self.tok.span,
                            "unexpected `}`",
                        )
                        .with_label("no block is open here")
                        .with_help("remove it, or look for a missing `{` above"),
                    );
                    self.advance();
                }
                TokenKind::Word => {
                    let st = self.statement(0);
                    on_top(&st, self.diags);
                    doc.statements.push(st);
                }
                _ => self.not_a_statement(),
            }
        }
        doc.trailing_comments = std::mem::take(&mut self.pending);
        doc
    }

    /// Reports a line that does not start with a word and skips it.
    fn not_a_statement(&mut self) {
        let (message, help) = if self.tok.kind == TokenKind::LBrace {
            (
                "a block needs a keyword before `{`".to_owned(),
                "write `keyword {`, for example `resources {`",
            )
        } else {
            (
                format!("expected a field name, found {}", self.describe_token()),
                "each line starts with a keyword such as `service`, `image` or `expose`; \
                 statements end at a newline",
            )
        };
        self.diags.push(
            Diagnostic::error("cca::expected-keyword", self.tok.span, message)
                .with_label("a statement starts with a word")
                .with_help(help),
        );
        self.skip_line();
    }

    /// Skips to the end of the line (a `}` is left for the caller), skipping whole blocks.
    fn skip_line(&mut self) {
        loop {
            match self.tok.kind {
                TokenKind::Newline => {
                    self.advance();
                    return;
                }
                TokenKind::Eof | TokenKind::RBrace => return,
                TokenKind::LBrace => {
                    let open = self.tok.span;
                    self.advance();
                    self.skip_block(open);
                }
                _ => self.advance(),
            }
        }
    }

    /// Skips to the `}` matching an already consumed `{` at `open`, without recursion.
    fn skip_block(&mut self, open: Span) -> Span {
        let mut level = 1usize;
        loop {
            match self.tok.kind {
                TokenKind::LBrace => level += 1,
                TokenKind::RBrace => {
                    level -= 1;
                    if level == 0 {
                        let close = self.tok.span;
                        self.advance();
                        return open.to(close);
                    }
                }
                TokenKind::Eof => {
                    self.unclosed(open);
                    return open.to(self.tok.span);
                }
                _ => {}
            }
            self.advance();
        }
    }

    fn unclosed(&mut self, open: Span) {
        if self.lexer.swallowed_rest() {
            return;
        }
        self.diags.push(
            Diagnostic::error("cca::unclosed-brace", open, "unclosed `{`")
                .with_label("this block is never closed")
                .with_help("add a `}` on its own line where the block ends"),
        );
    }

    /// Parses a statement; the current token is its keyword. `depth` is the number of blocks
    /// around it.
    fn statement(&mut self, depth: usize) -> Statement {
        let keyword = Word {
            text: self.slice(self.tok.span),
            span: self.tok.span,
        };
        self.advance();
        let mut args = Vec::new();
        loop {
            let kind = match &mut self.tok.kind {
                TokenKind::Word => ArgKind::Word(self.slice(self.tok.span)),
                TokenKind::Path => ArgKind::Path(self.slice(self.tok.span)),
                TokenKind::Number => ArgKind::Number(self.slice(self.tok.span)),
                TokenKind::Str(s) => ArgKind::Str(std::mem::take(s)),
                TokenKind::Block3(s) => ArgKind::Block3(std::mem::take(s)),
                TokenKind::Op(op) => ArgKind::Op(*op),
                _ => break,
            };
            args.push(Arg {
                kind,
                span: self.tok.span,
            });
            self.advance();
        }
        let mut st = Statement {
            comments: std::mem::take(&mut self.pending),
            span: keyword
                .span
                .to(args.last().map_or(keyword.span, |a| a.span)),
            keyword,
            args,
            trailing_comment: None,
            block: None,
        };
        match &mut self.tok.kind {
            TokenKind::Comment(text) => {
                st.trailing_comment = Some(Comment {
                    text: std::mem::take(text),
                    span: self.tok.span,
                });
                self.advance();
            }
            TokenKind::Newline => self.advance(),
            TokenKind::LBrace => {
                let block = self.block(depth + 1, &mut st.trailing_comment);
                st.span = st.span.to(block.span);
                st.block = Some(Box::new(block));
            }
            _ => {}
        }
        st
    }

    /// Parses a block at nesting `depth`; the current token is its `{`. A comment on the line of
    /// the `{` goes to `head_comment`.
    fn block(&mut self, depth: usize, head_comment: &mut Option<Comment>) -> Block {
        let open = self.tok.span;
        self.advance();
        let mut block = Block {
            statements: Vec::new(),
            trailing_comments: Vec::new(),
            close_comment: None,
            span: open,
        };
        if depth > MAX_DEPTH {
            self.diags.push(
                Diagnostic::error(
                    "cca::nesting-too-deep",
                    open,
                    format!("blocks nest deeper than {MAX_DEPTH} levels"),
                )
                .with_label("this block is too deep")
                .with_help("the language needs at most 4 levels; look for unbalanced `{`"),
            );
            block.span = self.skip_block(open);
            self.end_after_close();
            return block;
        }
        if let TokenKind::Comment(text) = &mut self.tok.kind {
            *head_comment = Some(Comment {
                text: std::mem::take(text),
                span: self.tok.span,
            });
            self.advance();
        }
        let end = loop {
            self.comment_lines();
            match self.tok.kind {
                TokenKind::Eof => break End::Eof,
                TokenKind::RBrace => break End::Close(self.tok.span),
                TokenKind::Word => {
                    let st = self.statement(depth);
                    block.statements.push(st);
                }
                _ => self.not_a_statement(),
            }
        };
        block.trailing_comments = std::mem::take(&mut self.pending);
        match end {
            End::Eof => {
                self.unclosed(open);
                block.span = open.to(self.tok.span);
            }
            End::Close(close) => {
                block.span = open.to(close);
                self.advance();
                block.close_comment = self.end_after_close();
            }
        }
        block
    }

    /// After a `}`: an optional comment, then the end of the line (or another `}`).
    fn end_after_close(&mut self) -> Option<Comment> {
        match &mut self.tok.kind {
            TokenKind::Comment(text) => {
                let c = Comment {
                    text: std::mem::take(text),
                    span: self.tok.span,
                };
                self.advance();
                Some(c)
            }
            TokenKind::Newline => {
                self.advance();
                None
            }
            TokenKind::Eof | TokenKind::RBrace => None,
            _ => {
                self.diags.push(
                    Diagnostic::error(
                        "cca::after-close-brace",
                        self.tok.span,
                        format!(
                            "expected the end of the line after `}}`, found {}",
                            self.describe_token()
                        ),
                    )
                    .with_label("put this on its own line")
                    .with_help("statements end at a newline, and `}` stands on its own line"),
                );
                self.skip_line();
                None
            }
        }
    }
}
