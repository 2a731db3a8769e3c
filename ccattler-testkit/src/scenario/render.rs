//! Plain-text renderings of changes and facts for snapshots and error messages.

use ccattler_core::{Change, Fact, Value};

/// `put KEY VALUE` or `delete KEY`.
pub(crate) fn change(change: &Change) -> String {
    match change {
        Change::Put { key, value } => format!("put {key} {}", text(value)),
        Change::Delete { key } => format!("delete {key}"),
    }
}

/// One line per change, or `(no changes)`.
pub(crate) fn plan(changes: &[Change]) -> String {
    if changes.is_empty() {
        return "(no changes)\n".to_owned();
    }
    changes.iter().map(|c| change(c) + "\n").collect()
}

/// One `KEY VALUE` line per fact, or `(no facts)`.
pub(crate) fn facts<'a>(facts: impl Iterator<Item = &'a Fact>) -> String {
    let lines: String = facts
        .map(|f| format!("{} {}\n", f.key, text(&f.value)))
        .collect();
    if lines.is_empty() {
        "(no facts)\n".to_owned()
    } else {
        lines
    }
}

/// A value as text: UTF-8 as is (the standard schema's JSON), anything else escaped.
fn text(value: &Value) -> String {
    match std::str::from_utf8(value) {
        Ok(text) => text.to_owned(),
        Err(_) => format!("{:?}", value),
    }
}
