//! Text to [`Token`]s, on demand, reporting lexical problems as it goes.
//!
//! The lexer is pulled one token at a time by the parser, so a file is never held twice in memory
//! and reading stops as soon as the diagnostics cap is reached: the lexer then answers
//! [`TokenKind::Eof`].
//!
//! Lexical problems and how reading goes on after them:
//!
//! | code | when | recovery |
//! |---|---|---|
//! | `cca::stray-semicolon` | `;` | read as the end of the statement |
//! | `cca::stray-comma` | `,` | skipped |
//! | `cca::unexpected-character` | a run of characters no token starts with | skipped |
//! | `cca::unterminated-string` | `"` with no closing `"` on its line | the string ends at the line end |
//! | `cca::unterminated-triple-string` | `"""` with no closing `"""` | the string ends at the end of file |
//! | `cca::bad-escape` | `\x` in a string, other than `\"` `\\` `\n` `\t` | the character is kept |

use super::diagnostic::{Diagnostic, Diagnostics};
use super::span::Span;
use super::token::{Op, Token, TokenKind};

/// Reads tokens from a text.
#[derive(Debug)]
pub struct Lexer<'a> {
    text: &'a str,
    pos: usize,
    open_triple: bool,
}

/// Whether `c` may continue an identifier (`-` is checked separately, for `->`).
fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | ':' | '/')
}

/// Whether `c` may start an identifier.
pub(crate) fn is_word_start(c: char) -> bool {
    c.is_alphabetic() || c == '_'
}

/// Whether `c` may continue a number (the unit is kept raw).
fn is_number_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '%')
}

/// Whether `c` may continue a path.
pub(crate) fn is_path_char(c: char) -> bool {
    !c.is_whitespace() && !matches!(c, '{' | '}' | '"' | ';' | ',' | '#')
}

/// Whether some token (or whitespace) can start with `c`.
fn starts_something(c: char) -> bool {
    c.is_whitespace()
        || is_word_start(c)
        || c.is_ascii_digit()
        || matches!(c, '#' | '{' | '}' | ';' | ',' | '=' | '/' | '"' | '-' | '!')
}

impl<'a> Lexer<'a> {
    /// A lexer at the start of `text`.
    #[must_use]
    pub fn new(text: &'a str) -> Self {
        Self {
            text,
            pos: 0,
            open_triple: false,
        }
    }

    /// Whether an unterminated `"""` string swallowed the rest of the text (blocks left open
    /// by it are not worth reporting).
    #[must_use]
    pub fn swallowed_rest(&self) -> bool {
        self.open_triple
    }

    fn rest(&self) -> &'a str {
        self.text.get(self.pos..).unwrap_or("")
    }

    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    fn peek2(&self) -> Option<char> {
        let mut it = self.rest().chars();
        it.next();
        it.next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    fn eat_while(&mut self, mut pred: impl FnMut(char) -> bool) {
        let rest = self.rest();
        let n = rest.find(|c: char| !pred(c)).unwrap_or(rest.len());
        self.pos += n;
    }

    fn token(&self, kind: TokenKind, start: usize) -> Token {
        Token {
            kind,
            span: Span::new(start, self.pos),
        }
    }

    /// The next token. Problems are pushed to `diags`; once it is full the answer is always
    /// [`TokenKind::Eof`].
    pub fn next_token(&mut self, diags: &mut Diagnostics) -> Token {
        loop {
            if diags.is_full() {
                if self.pos < self.text.len() {
                    diags.mark_truncated();
                }
                self.pos = self.text.len();
                return self.token(TokenKind::Eof, self.pos);
            }
            let start = self.pos;
            let Some(c) = self.bump() else {
                return self.token(TokenKind::Eof, start);
            };
            match c {
                '\n' => return self.token(TokenKind::Newline, start),
                c if c.is_whitespace() => {}
                '#' => {
                    self.eat_while(|c| c != '\n');
                    let text = self.text.get(start + 1..self.pos).unwrap_or("");
                    return self.token(TokenKind::Comment(text.trim_end().to_owned()), start);
                }
                '{' => return self.token(TokenKind::LBrace, start),
                '}' => return self.token(TokenKind::RBrace, start),
                ';' => {
                    diags.push(
                        Diagnostic::error(
                            "cca::stray-semicolon",
                            Span::new(start, self.pos),
                            "`;` is not part of the language",
                        )
                        .with_label("remove this")
                        .with_help("statements end at a newline: put the next one on its own line"),
                    );
                    return self.token(TokenKind::Newline, start);
                }
                ',' => {
                    diags.push(
                        Diagnostic::error(
                            "cca::stray-comma",
                            Span::new(start, self.pos),
                            "`,` is not part of the language",
                        )
                        .with_label("remove this")
                        .with_help(
                            "arguments are separated by spaces, and statements end at a newline",
                        ),
                    );
                }
                '=' => {
                    let op = if self.peek() == Some('=') {
                        self.pos += 1;
                        Op::Eq
                    } else {
                        Op::Assign
                    };
                    return self.token(TokenKind::Op(op), start);
                }
                '!' if self.peek() == Some('=') => {
                    self.pos += 1;
                    return self.token(TokenKind::Op(Op::Ne), start);
                }
                '-' if self.peek() == Some('>') => {
                    self.pos += 1;
                    return self.token(TokenKind::Op(Op::Arrow), start);
                }
                '-' if self.peek().is_some_and(|c| c.is_ascii_digit()) => {
                    self.eat_while(is_number_char);
                    return self.token(TokenKind::Number, start);
                }
                '/' => {
                    self.eat_while(is_path_char);
                    return self.token(TokenKind::Path, start);
                }
                '"' if self.peek() == Some('"') && self.peek2() == Some('"') => {
                    return self.triple(start, diags);
                }
                '"' => return self.string(start, diags),
                c if c.is_ascii_digit() => {
                    self.eat_while(is_number_char);
                    return self.token(TokenKind::Number, start);
                }
                c if is_word_start(c) => {
                    self.word_rest();
                    return self.token(TokenKind::Word, start);
                }
                _ => self.unexpected(start, diags),
            }
        }
    }

    fn word_rest(&mut self) {
        while let Some(c) = self.peek() {
            if !is_word_char(c) || (c == '-' && self.peek2() == Some('>')) {
                break;
            }
            self.pos += c.len_utf8();
        }
    }

    fn unexpected(&mut self, start: usize, diags: &mut Diagnostics) {
        self.eat_while(|c| !starts_something(c));
        let span = Span::new(start, self.pos);
        let text = self.text.get(start..self.pos).unwrap_or("");
        let shown: String = text.chars().take(20).collect();
        let more = if shown.len() < text.len() { "..." } else { "" };
        let what = if text.chars().nth(1).is_some() {
            "characters"
        } else {
            "character"
        };
        diags.push(
            Diagnostic::error(
                "cca::unexpected-character",
                span,
                format!("unexpected {what} `{shown}{more}`"),
            )
            .with_label("not part of the language")
            .with_help(
                "a statement is made of words, numbers (with units), /paths, \"strings\", \
                 `=` `==` `!=` `->`, and `{ }`; `#` starts a comment",
            ),
        );
    }

    fn string(&mut self, start: usize, diags: &mut Diagnostics) -> Token {
        let mut value = String::new();
        loop {
            match self.peek() {
                None | Some('\n') => {
                    diags.push(
                        Diagnostic::error(
                            "cca::unterminated-string",
                            Span::new(start, start + 1),
                            "unterminated string",
                        )
                        .with_label("this string is not closed on its line")
                        .with_help(
                            "close it with `\"` before the end of the line, \
                             or use `\"\"\"` for a string across lines",
                        ),
                    );
                    return self.token(TokenKind::Str(value), start);
                }
                Some('"') => {
                    self.pos += 1;
                    return self.token(TokenKind::Str(value), start);
                }
                Some('\\') => {
                    let esc_start = self.pos;
                    self.pos += 1;
                    match self.peek() {
                        Some('"') => value.push('"'),
                        Some('\\') => value.push('\\'),
                        Some('n') => value.push('\n'),
                        Some('t') => value.push('\t'),
                        None | Some('\n') => continue,
                        Some(other) => {
                            value.push(other);
                            diags.push(
                                Diagnostic::error(
                                    "cca::bad-escape",
                                    Span::new(esc_start, esc_start + 1 + other.len_utf8()),
                                    format!("unknown escape `\\{other}`"),
                                )
                                .with_label("not an escape")
                                .with_help(
                                    "accepted escapes: \\\" \\\\ \\n \\t; \
                                     use a \"\"\" string for text taken verbatim",
                                ),
                            );
                        }
                    }
                    self.bump();
                }
                Some(_) => {
                    let rest = self.rest();
                    let n = rest.find(['"', '\\', '\n']).unwrap_or(rest.len());
                    value.push_str(rest.get(..n).unwrap_or(""));
                    self.pos += n;
                }
            }
        }
    }

    fn triple(&mut self, start: usize, diags: &mut Diagnostics) -> Token {
        self.pos += 2;
        let rest = self.rest();
        match rest.find("\"\"\"") {
            Some(mut n) => {
                // In a run of more than three quotes the last three close the string, so content
                // ending in `"` survives a round trip through the formatter.
                while rest.get(n + 3..n + 4) == Some("\"") {
                    n += 1;
                }
                let content = rest.get(..n).unwrap_or("").to_owned();
                self.pos += n + 3;
                self.token(TokenKind::Block3(content), start)
            }
            None => {
                diags.push(
                    Diagnostic::error(
                        "cca::unterminated-triple-string",
                        Span::new(start, start + 3),
                        "unterminated `\"\"\"` string",
                    )
                    .with_label("this string is never closed")
                    .with_help("close it with `\"\"\"`; everything up to there is taken verbatim"),
                );
                let content = rest.to_owned();
                self.pos = self.text.len();
                self.open_triple = true;
                self.token(TokenKind::Block3(content), start)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lang::SourceFile;

    fn kinds(text: &str) -> (Vec<(TokenKind, String)>, Vec<&'static str>) {
        let mut diags = Diagnostics::new(SourceFile::new("t.cca", text));
        let mut lx = Lexer::new(text);
        let mut out = Vec::new();
        loop {
            let t = lx.next_token(&mut diags);
            if t.kind == TokenKind::Eof {
                break;
            }
            out.push((t.kind, text[t.span.start..t.span.end].to_owned()));
        }
        (out, diags.codes())
    }

    #[test]
    fn words_paths_numbers() {
        let (toks, errs) = kinds("image nginx:1.28 team/web /health/ready 1.5Gi 60% -3 1h30m");
        assert!(errs.is_empty());
        let texts: Vec<_> = toks.iter().map(|t| t.1.as_str()).collect();
        assert_eq!(
            texts,
            [
                "image",
                "nginx:1.28",
                "team/web",
                "/health/ready",
                "1.5Gi",
                "60%",
                "-3",
                "1h30m"
            ]
        );
        assert_eq!(toks[3].0, TokenKind::Path);
        assert_eq!(toks[6].0, TokenKind::Number);
    }

    #[test]
    fn arrow_splits_words() {
        let (toks, _) = kinds("web->db a-b = == != ->");
        let texts: Vec<_> = toks.iter().map(|t| t.1.as_str()).collect();
        assert_eq!(texts, ["web", "->", "db", "a-b", "=", "==", "!=", "->"]);
    }

    #[test]
    fn strings_and_escapes() {
        let (toks, errs) = kinds(
            r#""a\"b\\c\n\t" """x "y"
z""""#,
        );
        assert!(errs.is_empty());
        assert_eq!(toks[0].0, TokenKind::Str("a\"b\\c\n\t".into()));
        assert_eq!(toks[1].0, TokenKind::Block3("x \"y\"\nz".into()));
    }

    #[test]
    fn lexical_errors() {
        let (_, errs) = kinds("a; b, \"open\n\"\"\"never");
        assert_eq!(
            errs,
            [
                "cca::stray-semicolon",
                "cca::stray-comma",
                "cca::unterminated-string",
                "cca::unterminated-triple-string"
            ]
        );
        let (_, errs) = kinds("a @@@ \"\\q\"");
        assert_eq!(errs, ["cca::unexpected-character", "cca::bad-escape"]);
    }
}
