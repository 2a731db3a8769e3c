//! [`Harness`]: snapshot tests of any controller, without a store or a runner.
//!
//! Give it controllers and facts, then ask for [`plan`](Harness::plan) (what one reconcile
//! proposes) or [`run`](Harness::run) (what the controllers change until nothing changes). Both
//! return a [`Plan`], whose text (one `+ KEY = VALUE` or `- KEY` line per change, sorted by key:
//! see [`ccattler_core::plan`]) is what `insta::assert_snapshot!` stores:
//!
//! ```
//! use ccattler_core::{Change, Controller, FactView, Key, ReconcileContext, ReconcileError};
//! use ccattler_testkit::harness::{Harness, HarnessError};
//!
//! /// Mirrors every `input/x` to `output/x`.
//! struct Mirror;
//!
//! impl Controller for Mirror {
//!     fn name(&self) -> &str { "mirror" }
//!     fn watches(&self) -> Vec<String> { vec!["input/".into()] }
//!     fn write_domain(&self) -> Vec<String> { vec!["output/".into()] }
//!     fn reconcile(&self, facts: &FactView, _ctx: &mut ReconcileContext<'_>)
//!         -> Result<Vec<Change>, ReconcileError>
//!     {
//!         let mut changes = Vec::new();
//!         for fact in facts.scan("input/") {
//!             let name = fact.key.strip_prefix("input/").unwrap_or_default();
//!             changes.push(Change::put(Key::join("output/", [name])?, fact.value.clone()));
//!         }
//!         Ok(changes)
//!     }
//! }
//!
//! let plan = Harness::new(Mirror)
//!     .fact("input/b", "2")
//!     .facts("input/a = 1\noutput/b = 2")
//!     .plan()?;
//! // In a test: insta::assert_snapshot!(plan);
//! assert_eq!(plan.to_string(), "+ output/a = 1\n"); // output/b already holds 2: a no-op
//! # Ok::<(), HarnessError>(())
//! ```
//!
//! # Guarantees
//!
//! - **The runner's rules.** Each reconcile sees only the facts under the prefixes the
//!   controller watches or writes; its changes are checked with
//!   [`check_changes`](ccattler_core::runner::check_changes), the runner's own rule (a key outside
//!   the write domain, or a key changed twice, fails with the key and the domain); changes that
//!   change nothing are dropped by [`FactView::is_noop`], as the runner drops them.
//! - **Deterministic.** Every reconcile happens at [`Harness::NOW`] (or the time given to
//!   [`at`](Harness::at)) and draws ids from one [`SequentialIds`] with prefix `i` (`i0`, `i1`,
//!   ...), so the same test gives the same text on every run.
//! - **Like a store.** Each fact given is put at the next revision, in order (a key given twice
//!   keeps the last value and counts two versions). In `run`, each reconcile that changes
//!   something commits its changes as one transaction at the next revision.
//!
//! # Caveats
//!
//! There are no leases, no watch delays and no commit markers (`runner/commit/{name}`); a
//! controller that depends on those needs the simulation in [`sim`](crate::sim).

mod error;
pub(crate) mod reconcile;
mod text;

pub use error::{FactError, HarnessError};

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use ccattler_core::{
    Change, Controller, Fact, FactView, Key, Plan, Revision, SequentialIds, StoreLimits, Value,
};
use serde::Serialize;

/// Rounds [`Harness::run`] tries, unless told otherwise, before it calls it a livelock.
pub const MAX_ROUNDS: usize = 100;

/// Controllers and the facts they reconcile, for snapshot tests. See the [module docs](self).
pub struct Harness {
    controllers: Vec<Arc<dyn Controller>>,
    facts: FactView,
    ids: SequentialIds,
    now: SystemTime,
    max_rounds: usize,
    error: Option<FactError>,
}

impl fmt::Debug for Harness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Harness")
            .field("controllers", &self.names())
            .field("facts", &self.facts.len())
            .field("revision", &self.facts.revision())
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

impl Harness {
    /// The time of every reconcile, as time since the Unix epoch: 2023-11-14T22:13:20Z (the
    /// same as [`World::NOW`](crate::scenario::World::NOW)).
    pub const NOW: Duration = Duration::from_secs(1_700_000_000);

    /// A harness with one controller and no facts.
    pub fn new(controller: impl Controller) -> Self {
        Harness::from_controllers([Arc::new(controller) as Arc<dyn Controller>])
    }

    /// A harness with these controllers, in this order (the order of each round of
    /// [`run`](Harness::run)), and no facts: for instance `standard::all()` of
    /// `ccattler-controllers`, with your own added by [`with`](Harness::with).
    ///
    /// An empty list makes [`plan`](Harness::plan) and [`run`](Harness::run) fail with
    /// [`HarnessError::NoControllers`].
    pub fn from_controllers(controllers: impl IntoIterator<Item = Arc<dyn Controller>>) -> Self {
        Harness {
            controllers: controllers.into_iter().collect(),
            facts: FactView::new(),
            ids: SequentialIds::new("i"),
            now: SystemTime::UNIX_EPOCH + Harness::NOW,
            max_rounds: MAX_ROUNDS,
            error: None,
        }
    }

    /// Adds a controller after the others.
    #[must_use]
    pub fn with(mut self, controller: impl Controller) -> Self {
        self.controllers.push(Arc::new(controller));
        self
    }

    /// Puts a fact: `value` as it is (text, or any bytes).
    ///
    /// An invalid key or a value over the store's limit ([`StoreLimits::default`]) is kept as
    /// the harness's error, naming the key: [`plan`](Harness::plan) and [`run`](Harness::run)
    /// return it. After an error, further facts are ignored.
    #[must_use]
    pub fn fact(mut self, key: impl AsRef<str>, value: impl Into<Value>) -> Self {
        let key = key.as_ref();
        match Key::new(key) {
            Ok(key) => self.put(key, value.into()),
            Err(error) => self.fail(FactError::Key {
                key: key.to_owned(),
                error,
            }),
        }
        self
    }

    /// Puts a fact holding `record` as compact JSON: the bytes
    /// [`schema::encode`](ccattler_core::schema::encode) writes, as the standard records are
    /// stored.
    ///
    /// Errors as for [`fact`](Harness::fact), and a record that does not encode (a map with
    /// keys that are not strings) is one too.
    #[must_use]
    pub fn json<T: Serialize + ?Sized>(mut self, key: impl AsRef<str>, record: &T) -> Self {
        match serde_json::to_vec(record) {
            Ok(json) => self.fact(key, json),
            Err(error) => {
                self.fail(FactError::Encode {
                    key: key.as_ref().to_owned(),
                    message: error.to_string(),
                });
                self
            }
        }
    }

    /// Deletes the fact at `key`, as another writer would (the user, an agent whose lease
    /// expired); nothing when there is none. An invalid key is kept as the harness's error, as
    /// for [`fact`](Harness::fact).
    #[must_use]
    pub fn without(mut self, key: impl AsRef<str>) -> Self {
        let key = key.as_ref();
        match Key::new(key) {
            Ok(key) if self.error.is_none() => {
                let revision = self.facts.revision().next();
                self.facts.apply([Change::delete(key)], revision);
            }
            Ok(_) => {}
            Err(error) => self.fail(FactError::Key {
                key: key.to_owned(),
                error,
            }),
        }
        self
    }

    /// Puts the facts of a plain text, one per line, in order:
    ///
    /// | line | effect |
    /// |---|---|
    /// | `put KEY VALUE` | puts `VALUE`: the rest of the line after the key |
    /// | `KEY = VALUE` | the same: the text before the first `=` is the key, the rest the value |
    /// | `# ...` or blank | nothing |
    ///
    /// Lines may be indented. Keys hold no spaces; values are trimmed and not empty (for an
    /// empty value, or one with spaces at its ends, use [`fact`](Harness::fact)). `#` starts a
    /// comment only at the start of a line, so values may hold it.
    ///
    /// A line that is not a fact, or holds an invalid key, is kept as the harness's error
    /// ([`FactError::Line`], naming the line); then no fact of this text is put.
    #[must_use]
    pub fn facts(mut self, text: &str) -> Self {
        match text::parse(text) {
            Ok(facts) => {
                for (key, value) in facts {
                    self.put(key, value);
                }
            }
            Err(error) => self.fail(error),
        }
        self
    }

    /// Reconciles at `now` instead of [`Harness::NOW`].
    #[must_use]
    pub fn at(mut self, now: SystemTime) -> Self {
        self.now = now;
        self
    }

    /// Lets [`run`](Harness::run) try `rounds` rounds (at least 1) instead of [`MAX_ROUNDS`].
    #[must_use]
    pub fn max_rounds(mut self, rounds: usize) -> Self {
        self.max_rounds = rounds.max(1);
        self
    }

    /// What one reconcile of every controller proposes on the facts as they are, not applied:
    /// each controller on its own view of the same facts, their changes in one plan. (Two
    /// controllers that change one key both show it: sharing a write domain is a bug the runner
    /// does not catch either.)
    ///
    /// Ids are drawn from a copy of the harness's ids, so a following [`run`](Harness::run)
    /// starts from the same ids.
    ///
    /// # Errors
    ///
    /// The harness's [`FactError`], [`HarnessError::NoControllers`], a reconcile's error
    /// ([`HarnessError::Reconcile`]) or changes the runner would reject
    /// ([`HarnessError::Rejected`]).
    pub fn plan(&self) -> Result<Plan, HarnessError> {
        self.ready()?;
        let mut ids = self.ids.clone();
        let mut changes = Vec::new();
        for controller in &self.controllers {
            changes.extend(reconcile::reconcile(
                controller.as_ref(),
                &self.facts,
                self.now,
                &mut ids,
            )?);
        }
        Ok(Plan::new(changes))
    }

    /// What one reconcile of the controller named `controller` proposes, as
    /// [`plan`](Harness::plan).
    ///
    /// # Errors
    ///
    /// As [`plan`](Harness::plan), and [`HarnessError::UnknownController`].
    pub fn plan_of(&self, controller: &str) -> Result<Plan, HarnessError> {
        self.ready()?;
        let found = self
            .controllers
            .iter()
            .find(|c| c.name() == controller)
            .ok_or_else(|| HarnessError::UnknownController {
                name: controller.to_owned(),
                known: self.names(),
            })?;
        let mut ids = self.ids.clone();
        let changes = reconcile::reconcile(found.as_ref(), &self.facts, self.now, &mut ids)?;
        Ok(Plan::new(changes))
    }

    /// Rounds to a fixpoint: in each round every controller, in order, reconciles on the facts
    /// as the one before it left them and commits what it changes. Returns the net change from
    /// the facts before to the facts at the fixpoint: a put of every key whose value differs
    /// (or that is new), a delete of every key that is gone. The harness keeps the new facts
    /// ([`get`](Harness::get), [`view`](Harness::view)) and the ids drawn.
    ///
    /// # Errors
    ///
    /// As [`plan`](Harness::plan), and [`HarnessError::Livelock`] when the
    /// [`max_rounds`](Harness::max_rounds)-th round still changed something (the facts are then
    /// as it left them).
    pub fn run(&mut self) -> Result<Plan, HarnessError> {
        self.ready()?;
        let before = self.facts.clone();
        let mut last = Vec::new();
        for _ in 0..self.max_rounds {
            let applied = self.round()?;
            if applied.is_empty() {
                return Ok(net(&before, &self.facts));
            }
            last = applied;
        }
        Err(HarnessError::Livelock {
            rounds: self.max_rounds,
            last,
        })
    }

    /// The fact at `key`.
    pub fn get(&self, key: &str) -> Option<&Fact> {
        self.facts.get(key)
    }

    /// Every fact, at the current revision.
    pub fn view(&self) -> &FactView {
        &self.facts
    }

    /// The current revision: one per fact put, plus one per commit of [`run`](Harness::run).
    pub fn revision(&self) -> Revision {
        self.facts.revision()
    }

    fn names(&self) -> Vec<String> {
        self.controllers
            .iter()
            .map(|c| c.name().to_owned())
            .collect()
    }

    fn put(&mut self, key: Key, value: Value) {
        if self.error.is_some() {
            return;
        }
        let limit = StoreLimits::default().max_value_bytes;
        if value.len() > limit {
            return self.fail(FactError::TooLarge {
                key: key.to_string(),
                size: value.len(),
                limit,
            });
        }
        let revision = self.facts.revision().next();
        self.facts.apply([Change::put(key, value)], revision);
    }

    fn fail(&mut self, error: FactError) {
        self.error.get_or_insert(error);
    }

    fn ready(&self) -> Result<(), HarnessError> {
        if let Some(error) = &self.error {
            return Err(HarnessError::Fact(error.clone()));
        }
        if self.controllers.is_empty() {
            return Err(HarnessError::NoControllers);
        }
        Ok(())
    }

    /// One round; returns every committed change with its controller's name.
    fn round(&mut self) -> Result<Vec<(String, Change)>, HarnessError> {
        let mut applied = Vec::new();
        for controller in &self.controllers {
            let changes =
                reconcile::reconcile(controller.as_ref(), &self.facts, self.now, &mut self.ids)?;
            if changes.is_empty() {
                continue;
            }
            let revision = self.facts.revision().next();
            self.facts.apply(changes.clone(), revision);
            let name = controller.name();
            applied.extend(changes.into_iter().map(|c| (name.to_owned(), c)));
        }
        Ok(applied)
    }
}

/// The changes that turn `before` into `after`, ignoring rewrites of the same value.
fn net(before: &FactView, after: &FactView) -> Plan {
    after
        .changes_since(before)
        .filter_map(|(key, old, new)| match (old, new) {
            (Some(old), Some(new)) if old.value == new.value => None,
            (_, Some(new)) => Some(Change::put(key.clone(), new.value.clone())),
            (Some(_), None) => Some(Change::delete(key.clone())),
            (None, None) => None,
        })
        .collect()
}
