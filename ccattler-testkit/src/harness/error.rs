//! Why a harness could not take a fact, or could not plan or run.

use ccattler_core::{Change, KeyError, ReconcileError};

/// A fact the harness was given that no store would hold.
///
/// The builder methods ([`fact`](super::Harness::fact), [`json`](super::Harness::json),
/// [`facts`](super::Harness::facts)) keep the first such error and
/// [`plan`](super::Harness::plan) and [`run`](super::Harness::run) return it, so a test can
/// chain them without a `?` on each.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FactError {
    /// The key given to `fact` or `json` is not a valid key.
    #[error("cannot add the fact {key:?}: {error}")]
    Key {
        /// The key as given.
        key: String,
        /// Why it is not a key.
        error: KeyError,
    },
    /// The record given to `json` does not encode as JSON.
    #[error(
        "cannot add the fact {key}: its record does not encode as JSON ({message}); maps need \
         string keys"
    )]
    Encode {
        /// The fact's key.
        key: String,
        /// serde_json's message.
        message: String,
    },
    /// The value is larger than a store accepts.
    #[error(
        "cannot add the fact {key}: its value of {size} bytes is over the store's limit of \
         {limit} bytes; make it smaller"
    )]
    TooLarge {
        /// The fact's key.
        key: String,
        /// The value's size in bytes.
        size: usize,
        /// The limit: etcd's default, [`StoreLimits::default`](ccattler_core::StoreLimits).
        limit: usize,
    },
    /// A line of the text given to `facts` is not a fact.
    #[error("facts text, line {line} `{text}`: {message}")]
    Line {
        /// The 1-based line in the text given to one `facts` call.
        line: usize,
        /// The line, trimmed.
        text: String,
        /// What is wrong with it and what is expected instead.
        message: String,
    },
}

/// Why [`Harness::plan`](super::Harness::plan) or [`Harness::run`](super::Harness::run) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HarnessError {
    /// A fact given to the harness was invalid (the first one, if several were).
    #[error(transparent)]
    Fact(#[from] FactError),
    /// The harness was built from an empty list of controllers.
    #[error("the harness has no controllers; give it one with Harness::new or Harness::with")]
    NoControllers,
    /// [`plan_of`](super::Harness::plan_of) named a controller the harness does not have.
    #[error("no controller `{name}`; the controllers are {}", .known.join(", "))]
    UnknownController {
        /// The name asked for.
        name: String,
        /// The names the harness has, in order.
        known: Vec<String>,
    },
    /// A controller's reconcile returned an error.
    #[error("controller {controller} failed: {error}")]
    Reconcile {
        /// The controller's name.
        controller: String,
        /// What it returned.
        error: ReconcileError,
    },
    /// A controller returned changes the runner would reject: a key outside its write domain
    /// (the reason names the key and the domain), or one key changed twice.
    #[error("controller {controller}: {reason}")]
    Rejected {
        /// The controller's name.
        controller: String,
        /// The runner's reason, from [`check_changes`](ccattler_core::runner::check_changes).
        reason: String,
    },
    /// [`run`](super::Harness::run) found no fixpoint within its bound on rounds.
    #[error(
        "no fixpoint after {rounds} rounds (a livelock); the last round changed {} facts:\n{}\n\
         a controller whose facts already match what it wants must propose nothing; raise \
         Harness::max_rounds only if it converges slowly",
        .last.len(),
        show(.last)
    )]
    Livelock {
        /// The bound that was reached.
        rounds: usize,
        /// What the last round committed: each controller's name and change.
        last: Vec<(String, Change)>,
    },
}

/// The first 20 changes, one per line.
fn show(last: &[(String, Change)]) -> String {
    let mut lines: Vec<String> = last
        .iter()
        .take(20)
        .map(|(by, change)| format!("  {by}: {change}"))
        .collect();
    if last.len() > 20 {
        lines.push(format!("  ... and {} more", last.len() - 20));
    }
    lines.join("\n")
}
