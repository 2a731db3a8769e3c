//! The compiler's argument readers: each reads one argument of a statement as a name, a text,
//! a whole number, a port, a quantity or a duration, and reports what would be accepted when it
//! is not one.

use std::str::FromStr;

use ccattler_core::schema;

use super::compile::{Checked, Compiler};
use super::span::Span;
use super::syntax::{Arg, ArgKind, Statement};
use super::token::Op;

impl Compiler<'_> {
    pub(super) fn arg<'s>(
        &mut self,
        st: &'s Statement,
        index: usize,
        what: &str,
    ) -> Checked<&'s Arg> {
        match st.args.get(index) {
            Some(arg) => Ok(arg),
            None => Err(self.error(
                "cca::missing-argument",
                st.span,
                format!("`{}` needs {what}", st.name()),
                "",
            )),
        }
    }

    /// A name: a word, or a string.
    pub(super) fn name(
        &mut self,
        st: &Statement,
        index: usize,
        what: &str,
    ) -> Checked<(String, Span)> {
        let arg = self.arg(st, index, what)?;
        match &arg.kind {
            ArgKind::Word(text) | ArgKind::Str(text) => Ok((text.clone(), arg.span)),
            other => Err(self.error(
                "cca::expected-name",
                arg.span,
                format!("expected {what}, found {}", other.describe()),
                "names are words like `web` or `team/web`",
            )),
        }
    }

    pub(super) fn text(
        &mut self,
        st: &Statement,
        index: usize,
        what: &str,
    ) -> Checked<(String, Span)> {
        let arg = self.arg(st, index, what)?;
        match (&arg.kind, arg.kind.text().or(arg.kind.string())) {
            (ArgKind::Op(_), _) | (_, None) => Err(self.error(
                "cca::expected-value",
                arg.span,
                format!("expected {what}, found {}", arg.kind.describe()),
                "",
            )),
            (_, Some(text)) => Ok((text.to_owned(), arg.span)),
        }
    }

    pub(super) fn whole(&mut self, st: &Statement, index: usize, what: &str) -> Checked<u64> {
        let arg = self.arg(st, index, what)?;
        let text = match &arg.kind {
            ArgKind::Number(text) => text.as_str(),
            other => {
                return Err(self.error(
                    "cca::expected-number",
                    arg.span,
                    format!("{what} must be a whole number, found {}", other.describe()),
                    "write a number such as `3`",
                ));
            }
        };
        if let Some(rest) = text.strip_prefix('-') {
            let _ = rest;
            return Err(self.error(
                "cca::negative",
                arg.span,
                format!("{what} cannot be negative (`{text}`)"),
                "use 0 or a positive whole number",
            ));
        }
        if !text.bytes().all(|b| b.is_ascii_digit()) {
            return Err(self.error(
                "cca::not-whole",
                arg.span,
                format!("{what} must be a whole number, not `{text}`"),
                "write a number without fraction or unit, such as `3`",
            ));
        }
        text.parse().map_err(|_| {
            self.error(
                "cca::too-large",
                arg.span,
                format!("{what} `{text}` is too large"),
                "",
            )
        })
    }

    pub(super) fn count(&mut self, st: &Statement, index: usize, what: &str) -> Checked<u32> {
        let value = self.whole(st, index, what)?;
        u32::try_from(value).map_err(|_| {
            let span = st.args.get(index).map_or(st.span, |a| a.span);
            self.error(
                "cca::too-large",
                span,
                format!("{what} `{value}` is too large"),
                "the largest count is 4294967295",
            )
        })
    }

    pub(super) fn port(&mut self, st: &Statement, index: usize) -> Checked<u16> {
        let span = st.args.get(index).map_or(st.span, |a| a.span);
        let value = self.whole(st, index, "a port")?;
        match u16::try_from(value) {
            Ok(port) if port >= 1 => Ok(port),
            _ => Err(self.error(
                "cca::port-range",
                span,
                format!("port {value} is outside 1-65535"),
                "ports are whole numbers from 1 to 65535",
            )),
        }
    }

    pub(super) fn parsed<T: FromStr<Err = schema::SchemaError>>(
        &mut self,
        st: &Statement,
        index: usize,
        what: &str,
    ) -> Checked<T> {
        let arg = self.arg(st, index, what)?;
        let text = arg.kind.text().unwrap_or_default();
        text.parse().map_err(|err: schema::SchemaError| {
            self.error("cca::bad-unit", arg.span, err.to_string(), "")
        })
    }

    pub(super) fn duration(
        &mut self,
        st: &Statement,
        index: usize,
    ) -> Checked<std::time::Duration> {
        let arg = self.arg(st, index, "a duration")?;
        let text = arg.kind.text().unwrap_or_default();
        schema::parse_duration(text)
            .map_err(|err| self.error("cca::bad-unit", arg.span, err.to_string(), ""))
    }

    pub(super) fn flag(&mut self, st: &Statement, index: usize) -> Checked<bool> {
        let arg = self.arg(st, index, "`true` or `false`")?;
        match arg.kind.text() {
            Some("true") => Ok(true),
            Some("false") => Ok(false),
            _ => Err(self.error(
                "cca::expected-bool",
                arg.span,
                format!("expected `true` or `false`, found {}", arg.kind.describe()),
                "",
            )),
        }
    }

    /// `KEY VALUE` or `KEY = VALUE` starting at `index`.
    pub(super) fn pair(
        &mut self,
        st: &Statement,
        index: usize,
        what: &str,
    ) -> Checked<(String, String)> {
        let (key, _) = self.text(st, index, what)?;
        let value_index = match st.args.get(index + 1) {
            Some(Arg {
                kind: ArgKind::Op(Op::Assign),
                ..
            }) => index + 2,
            _ => index + 1,
        };
        let (value, _) = self.text(st, value_index, "a value")?;
        Ok((key, value))
    }
}
