//! What went wrong, where, and what would be accepted: [`Diagnostic`] and the capped
//! [`Diagnostics`] list, rendered with carets by `miette`.
//!
//! The parser, the shape checks and the compiler all push into one [`Diagnostics`], so a user sees
//! every problem of a file in one go. The list is capped ([`Diagnostics::DEFAULT_CAP`]): once full,
//! further diagnostics are dropped, the parser stops reading, and the rendering ends with a note.
//! The cap is what keeps a large file of garbage cheap to reject.
//!
//! Rendering is deterministic (no colour, no terminal probing, fixed width), so snapshots of it
//! are stable.

use std::fmt;

use miette::{GraphicalReportHandler, GraphicalTheme, LabeledSpan, MietteError, SourceCode};

use super::span::{SourceFile, Span};

/// How bad a [`Diagnostic`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Severity {
    /// The file is rejected; nothing is applied.
    Error,
    /// Worth fixing, but the file is accepted.
    Warning,
}

/// A secondary label: another place that explains the diagnostic ("first given here").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Label {
    /// Where.
    pub span: Span,
    /// What to say there.
    pub message: String,
}

/// One problem in a source file.
///
/// Build one with [`Diagnostic::error`] and the `with_*` methods:
///
/// ```
/// use ccattler_controllers::lang::{Diagnostic, Span};
///
/// let d = Diagnostic::error("cca::port-range", Span::new(10, 15), "port 70000 is out of range")
///     .with_label("not a port")
///     .with_help("a port is a whole number from 1 to 65535");
/// assert_eq!(d.code, "cca::port-range");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// Error or warning.
    pub severity: Severity,
    /// A stable identifier of the class of problem, such as `cca::unknown-field`. Tests and tools
    /// match on it rather than on the message.
    pub code: &'static str,
    /// The one-line summary, lowercase, without a trailing period.
    pub message: String,
    /// The culprit: the caret goes here.
    pub span: Span,
    /// Text shown under the caret.
    pub label: Option<String>,
    /// What would be accepted, or how to fix it.
    pub help: Option<String>,
    /// Other places worth showing.
    pub secondary: Vec<Label>,
}

impl Diagnostic {
    /// An error of class `code` at `span`.
    #[must_use]
    pub fn error(code: &'static str, span: Span, message: impl Into<String>) -> Self {
        Self {
            severity: Severity::Error,
            code,
            message: message.into(),
            span,
            label: None,
            help: None,
            secondary: Vec::new(),
        }
    }

    /// A warning of class `code` at `span`.
    #[must_use]
    pub fn warning(code: &'static str, span: Span, message: impl Into<String>) -> Self {
        Self {
            severity: Severity::Warning,
            ..Self::error(code, span, message)
        }
    }

    /// Sets the text under the caret.
    #[must_use]
    pub fn with_label(mut self, label: impl Into<String>) -> Self {
        self.label = Some(label.into());
        self
    }

    /// Sets the help line.
    #[must_use]
    pub fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    /// Adds a secondary label.
    #[must_use]
    pub fn with_secondary(mut self, span: Span, message: impl Into<String>) -> Self {
        self.secondary.push(Label {
            span,
            message: message.into(),
        });
        self
    }
}

/// Every diagnostic of one [`SourceFile`], capped, renderable, and usable as an error.
///
/// `Display` renders all diagnostics, sorted by position, each with `file:line:col`, the source
/// line, a caret under the culprit and the help.
#[derive(Clone, Debug)]
pub struct Diagnostics {
    source: SourceFile,
    items: Vec<Diagnostic>,
    cap: usize,
    truncated: bool,
}

impl Diagnostics {
    /// How many diagnostics a list keeps unless told otherwise.
    pub const DEFAULT_CAP: usize = 50;

    /// An empty list for `source`, capped at [`Self::DEFAULT_CAP`].
    #[must_use]
    pub fn new(source: SourceFile) -> Self {
        Self {
            source,
            items: Vec::new(),
            cap: Self::DEFAULT_CAP,
            truncated: false,
        }
    }

    /// Sets the cap (at least 1).
    #[must_use]
    pub fn with_cap(mut self, cap: usize) -> Self {
        self.cap = cap.max(1);
        self
    }

    /// The file the diagnostics point into.
    #[must_use]
    pub fn source(&self) -> &SourceFile {
        &self.source
    }

    /// Adds `diagnostic`, or drops it (and marks the list truncated) when the list is full.
    /// Returns whether it was kept.
    pub fn push(&mut self, diagnostic: Diagnostic) -> bool {
        if self.is_full() {
            self.truncated = true;
            return false;
        }
        self.items.push(diagnostic);
        true
    }

    /// Whether the cap is reached: callers should stop looking for more problems.
    #[must_use]
    pub fn is_full(&self) -> bool {
        self.items.len() >= self.cap
    }

    /// Marks the list as truncated: there were more problems than it holds (or the reader stopped
    /// looking because the list was full).
    pub fn mark_truncated(&mut self) {
        self.truncated = true;
    }

    /// Whether some diagnostics were dropped or not looked for because of the cap.
    #[must_use]
    pub fn is_truncated(&self) -> bool {
        self.truncated
    }

    /// The cap.
    #[must_use]
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// Number of diagnostics kept.
    #[must_use]
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether there is no diagnostic at all.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Whether any kept diagnostic is an error (a truncated list always has).
    #[must_use]
    pub fn has_errors(&self) -> bool {
        self.items.iter().any(|d| d.severity == Severity::Error)
    }

    /// The diagnostics in the order they were found.
    pub fn iter(&self) -> std::slice::Iter<'_, Diagnostic> {
        self.items.iter()
    }

    /// The classes of the diagnostics, in the order found: handy in tests.
    #[must_use]
    pub fn codes(&self) -> Vec<&'static str> {
        self.items.iter().map(|d| d.code).collect()
    }

    /// Renders every diagnostic (see the type docs). Same as `to_string()`.
    #[must_use]
    pub fn render(&self) -> String {
        self.to_string()
    }
}

impl<'a> IntoIterator for &'a Diagnostics {
    type Item = &'a Diagnostic;
    type IntoIter = std::slice::Iter<'a, Diagnostic>;

    fn into_iter(self) -> Self::IntoIter {
        self.items.iter()
    }
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let handler = GraphicalReportHandler::new_themed(GraphicalTheme::unicode_nocolor())
            .with_width(100)
            .with_links(false);
        let mut sorted: Vec<&Diagnostic> = self.items.iter().collect();
        sorted.sort_by_key(|d| d.span.start);
        if self.items.is_empty() && !self.truncated {
            return Ok(());
        }
        let starts = line_starts(self.source.text());
        let src = Named {
            name: self.source.name(),
            text: self.source.text(),
            line_starts: &starts,
        };
        for (i, d) in sorted.into_iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            let mut out = String::new();
            handler.render_report(&mut out, &Report { d, src })?;
            f.write_str(&out)?;
        }
        if self.truncated {
            writeln!(
                f,
                "too many problems: stopped after {} diagnostics; fix these and check again",
                self.cap
            )?;
        }
        Ok(())
    }
}

impl std::error::Error for Diagnostics {}

/// Source text with a name and a line index, borrowed, so rendering copies nothing and finds
/// lines without rescanning the file for every diagnostic.
#[derive(Clone, Copy, Debug)]
struct Named<'a> {
    name: &'a str,
    text: &'a str,
    /// Byte offset of the start of each line.
    line_starts: &'a [usize],
}

impl Named<'_> {
    /// 0-based line of byte `offset`.
    fn line_of(&self, offset: usize) -> usize {
        self.line_starts
            .partition_point(|&s| s <= offset)
            .saturating_sub(1)
    }

    /// Start of line `line` (0-based), or the end of the text past the last line.
    fn start_of(&self, line: usize) -> usize {
        self.line_starts
            .get(line)
            .copied()
            .unwrap_or(self.text.len())
    }
}

/// Lines longer than this are shown as a window around the culprit.
const LONG_LINE: usize = 400;
/// How much of a long line to show on each side of the culprit.
const WINDOW: usize = 60;
/// The longest underline drawn; longer spans are cut.
const MAX_UNDERLINE: usize = 120;

/// The largest char boundary of `text` at or before `i`.
fn floor_boundary(text: &str, mut i: usize) -> usize {
    i = i.min(text.len());
    while !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn line_starts(text: &str) -> Vec<usize> {
    std::iter::once(0)
        .chain(
            text.bytes()
                .enumerate()
                .filter(|(_, b)| *b == b'\n')
                .map(|(i, _)| i + 1),
        )
        .collect()
}

impl SourceCode for Named<'_> {
    fn read_span<'a>(
        &'a self,
        span: &miette::SourceSpan,
        context_lines_before: usize,
        context_lines_after: usize,
    ) -> Result<Box<dyn miette::SpanContents<'a> + 'a>, MietteError> {
        let len = self.text.len();
        let start = span.offset();
        let end = start.saturating_add(span.len());
        if start > len || end > len {
            return Err(MietteError::OutOfBounds);
        }
        let first = self.line_of(start);
        let column_of = |offset: usize| {
            let line_start = self.start_of(self.line_of(offset));
            self.text
                .get(line_start..offset)
                .map_or(0, |s| s.chars().count())
        };
        let (from, to, line, column) = if context_lines_before == 0 && context_lines_after == 0 {
            // Only the span: miette reads the line and column of the primary label this way.
            (start, end, first, column_of(start))
        } else if self
            .start_of(first + 1)
            .saturating_sub(self.start_of(first))
            > LONG_LINE
        {
            // A huge line (minified or garbage input): show a window around the span only.
            let line_end = self.start_of(first + 1);
            let line_end = if self.text.get(..line_end).is_some_and(|t| t.ends_with('\n')) {
                line_end - 1
            } else {
                line_end
            };
            let from = floor_boundary(
                self.text,
                start.saturating_sub(WINDOW).max(self.start_of(first)),
            );
            let to = floor_boundary(
                self.text,
                end.max(start).saturating_add(WINDOW).min(line_end),
            );
            (from, to.max(end), first, column_of(from))
        } else {
            let last = self.line_of(end.saturating_sub(1).max(start));
            let top = first.saturating_sub(context_lines_before);
            let bottom = last.saturating_add(context_lines_after).saturating_add(1);
            (self.start_of(top), self.start_of(bottom), top, 0)
        };
        let data = self.text.get(from..to).ok_or(MietteError::OutOfBounds)?;
        let line_count = data.bytes().filter(|&b| b == b'\n').count();
        Ok(Box::new(miette::MietteSpanContents::new_named(
            self.name.to_owned(),
            data.as_bytes(),
            (from, to - from).into(),
            line,
            column,
            line_count,
        )))
    }
}

/// One diagnostic seen through miette's eyes.
#[derive(Debug)]
struct Report<'a> {
    d: &'a Diagnostic,
    src: Named<'a>,
}

impl fmt::Display for Report<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.d.message)
    }
}

impl std::error::Error for Report<'_> {}

impl Report<'_> {
    /// `span` as miette wants it, within the text and cut to [`MAX_UNDERLINE`].
    fn source_span(&self, span: Span) -> miette::SourceSpan {
        let start = floor_boundary(self.src.text, span.start);
        let end = floor_boundary(self.src.text, span.end.min(start + MAX_UNDERLINE)).max(start);
        (start, end - start).into()
    }
}

impl miette::Diagnostic for Report<'_> {
    fn code<'b>(&'b self) -> Option<Box<dyn fmt::Display + 'b>> {
        Some(Box::new(self.d.code))
    }

    fn severity(&self) -> Option<miette::Severity> {
        Some(match self.d.severity {
            Severity::Error => miette::Severity::Error,
            Severity::Warning => miette::Severity::Warning,
        })
    }

    fn help<'b>(&'b self) -> Option<Box<dyn fmt::Display + 'b>> {
        self.d
            .help
            .as_ref()
            .map(|h| Box::new(h) as Box<dyn fmt::Display>)
    }

    fn source_code(&self) -> Option<&dyn SourceCode> {
        Some(&self.src)
    }

    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        let primary =
            LabeledSpan::new_primary_with_span(self.d.label.clone(), self.source_span(self.d.span));
        let secondary =
            self.d.secondary.iter().map(|l| {
                LabeledSpan::new_with_span(Some(l.message.clone()), self.source_span(l.span))
            });
        Some(Box::new(std::iter::once(primary).chain(secondary)))
    }
}
