//! [`Plan`]: a reconcile's changes as stable, line-oriented text, and the text form of one
//! [`Change`].
//!
//! This is the text that snapshot tests store (see `ccattler_testkit::harness`), so its format
//! is part of the API: changing it changes every snapshot.
//!
//! # Format
//!
//! One line per change, each ending in `\n`:
//!
//! | change | line |
//! |---|---|
//! | [`Change::Put`] | `+ KEY = VALUE` |
//! | [`Change::Delete`] | `- KEY` |
//!
//! The key is written as it is. The value is written as it is when it is *plain text*: valid
//! UTF-8, not empty, without control characters (`\n`, `\t`, ...: Unicode's `Cc`), without
//! whitespace at either end, and not starting with `b"`. Any other value is written as a Rust
//! byte string literal, `b"..."`: printable ASCII as itself, `\\`, `\"`, `\n`, `\r`, `\t` and
//! `\0` escaped, every other byte as `\xNN` (two lowercase hex digits). So a line never breaks
//! inside a value, an empty value is `b""`, and a value shown as `b"..."` always is the escaped
//! form.
//!
//! A [`Plan`] sorts its changes by key (byte order, as stores order keys; changes to the same key
//! keep the order they were given in) and renders the empty plan as the single line
//! `(no changes)`.
//!
//! ```
//! use ccattler_core::{Change, Key, Plan};
//!
//! let plan = Plan::new([
//!     Change::put(Key::new("dns/web")?, "10.0.0.7"),
//!     Change::delete(Key::new("dns/old")?),
//!     Change::put(Key::new("dns/raw")?, &b"\x00\xff"[..]),
//! ]);
//! assert_eq!(plan.to_string(), "- dns/old\n+ dns/raw = b\"\\0\\xff\"\n+ dns/web = 10.0.0.7\n");
//! assert_eq!(Plan::default().to_string(), "(no changes)\n");
//! # Ok::<(), ccattler_core::KeyError>(())
//! ```
//!
//! # Caveats
//!
//! The text is for reading and diffing, not for parsing back: keys are written as they are, so
//! a key holding a line break or ` = ` makes its line ambiguous (no standard key does).

use std::fmt;

use crate::Change;

/// A list of changes in a stable order: sorted by key, rendered one change per line by its
/// [`Display`](fmt::Display) implementation (see the [module docs](self) for the format).
///
/// # Guarantees
///
/// The same set of changes renders to the same text whatever order a controller returned them
/// in (unless it changes one key twice, which the runner rejects anyway).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    changes: Vec<Change>,
}

impl Plan {
    /// A plan of `changes`, sorted by key (stably: changes to one key keep their order).
    pub fn new(changes: impl IntoIterator<Item = Change>) -> Self {
        let mut changes: Vec<Change> = changes.into_iter().collect();
        changes.sort_by(|a, b| a.key().cmp(b.key()));
        Plan { changes }
    }

    /// The changes, sorted by key.
    pub fn changes(&self) -> &[Change] {
        &self.changes
    }

    /// The changes, sorted by key, by value.
    pub fn into_changes(self) -> Vec<Change> {
        self.changes
    }

    /// How many changes the plan holds.
    pub fn len(&self) -> usize {
        self.changes.len()
    }

    /// Whether the plan changes nothing.
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }
}

impl From<Vec<Change>> for Plan {
    fn from(changes: Vec<Change>) -> Self {
        Plan::new(changes)
    }
}

impl FromIterator<Change> for Plan {
    fn from_iter<I: IntoIterator<Item = Change>>(changes: I) -> Self {
        Plan::new(changes)
    }
}

impl fmt::Display for Plan {
    /// One line per change, each ending in `\n`; `(no changes)\n` when empty.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.changes.is_empty() {
            return f.write_str("(no changes)\n");
        }
        for change in &self.changes {
            writeln!(f, "{change}")?;
        }
        Ok(())
    }
}

impl fmt::Display for Change {
    /// `+ KEY = VALUE` for a put, `- KEY` for a delete, without a line break; the value as the
    /// [module docs](crate::plan) say (plain text as it is, anything else as `b"..."`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Change::Put { key, value } => write!(f, "+ {key} = {}", value_text(value)),
            Change::Delete { key } => write!(f, "- {key}"),
        }
    }
}

/// A value as a plan writes it: plain text as it is, anything else as a `b"..."` byte string
/// literal (the rules are in the [module docs](self)). Never contains a line break.
///
/// ```
/// use ccattler_core::plan::value_text;
///
/// assert_eq!(value_text(b"{\"port\":80}").to_string(), "{\"port\":80}");
/// assert_eq!(value_text(b"two\nlines").to_string(), "b\"two\\nlines\"");
/// assert_eq!(value_text(b"").to_string(), "b\"\"");
/// ```
pub fn value_text(value: &[u8]) -> impl fmt::Display + '_ {
    ValueText(value)
}

struct ValueText<'a>(&'a [u8]);

impl fmt::Display for ValueText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(text) = plain_text(self.0) {
            return f.write_str(text);
        }
        f.write_str("b\"")?;
        for &byte in self.0 {
            match byte {
                b'\\' => f.write_str("\\\\")?,
                b'"' => f.write_str("\\\"")?,
                b'\n' => f.write_str("\\n")?,
                b'\r' => f.write_str("\\r")?,
                b'\t' => f.write_str("\\t")?,
                b'\0' => f.write_str("\\0")?,
                0x20..=0x7e => write!(f, "{}", char::from(byte))?,
                _ => write!(f, "\\x{byte:02x}")?,
            }
        }
        f.write_str("\"")
    }
}

/// The value as text, when it may be written as it is.
fn plain_text(value: &[u8]) -> Option<&str> {
    let text = std::str::from_utf8(value).ok()?;
    let plain = !text.is_empty()
        && !text.chars().any(char::is_control)
        && !text.starts_with(char::is_whitespace)
        && !text.ends_with(char::is_whitespace)
        && !text.starts_with("b\"");
    plain.then_some(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Key;

    fn key(k: &str) -> Key {
        Key::new(k).unwrap()
    }

    #[test]
    fn puts_and_deletes_have_one_line_each() {
        assert_eq!(
            Change::put(key("a/b"), r#"{"x": 1}"#).to_string(),
            r#"+ a/b = {"x": 1}"#
        );
        assert_eq!(Change::delete(key("a/b")).to_string(), "- a/b");
        assert_eq!(
            Change::put(key("k"), "grüße").to_string(),
            "+ k = grüße",
            "UTF-8 beyond ASCII is text"
        );
    }

    #[test]
    fn values_that_are_not_plain_text_are_escaped() {
        let cases: [(&[u8], &str); 8] = [
            (b"", r#"b"""#),
            (b"a\nb", r#"b"a\nb""#),
            (b" padded", r#"b" padded""#),
            (b"trailing ", r#"b"trailing ""#),
            (b"b\"looks escaped\"", r#"b"b\"looks escaped\"""#),
            (b"\xff\x00\t\r\\", r#"b"\xff\0\t\r\\""#),
            ("é\u{7}".as_bytes(), r#"b"\xc3\xa9\x07""#),
            (b"\x7f", r#"b"\x7f""#),
        ];
        for (value, shown) in cases {
            assert_eq!(value_text(value).to_string(), shown, "{value:?}");
            assert!(!value_text(value).to_string().contains('\n'));
        }
    }

    #[test]
    fn a_plan_is_sorted_by_key_and_stable_for_one_key() {
        let plan = Plan::new([
            Change::put(key("b"), "2"),
            Change::put(key("a/z"), "1"),
            Change::delete(key("a")),
            Change::put(key("b"), "again"),
        ]);
        assert_eq!(plan.to_string(), "- a\n+ a/z = 1\n+ b = 2\n+ b = again\n");
        assert_eq!(plan.len(), 4);
        let same: Plan = plan.changes().iter().rev().cloned().collect();
        assert_eq!(same.changes()[0], Change::delete(key("a")));
    }

    #[test]
    fn the_empty_plan_says_so() {
        let plan = Plan::from(Vec::new());
        assert!(plan.is_empty());
        assert_eq!(plan.to_string(), "(no changes)\n");
    }
}
