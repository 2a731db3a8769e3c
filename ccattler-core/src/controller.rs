//! The [`Controller`] trait and what a reconcile takes and returns.

use std::fmt;
use std::time::{Duration, SystemTime};

use crate::{Event, FactView, Key, KeyError, Value};

/// A proposed change to one fact. Controllers return changes; the runner commits them.
///
/// Its [`Display`](fmt::Display) form is one line, `+ KEY = VALUE` or `- KEY` (the value as text
/// when it is, else escaped; see [`plan`](crate::plan)), and a [`Plan`](crate::Plan) renders a list
/// of them sorted by key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// Make `key` hold `value`.
    Put {
        /// The key to write.
        key: Key,
        /// The value it should hold.
        value: Value,
    },
    /// Make `key` absent.
    Delete {
        /// The key to remove.
        key: Key,
    },
}

impl Change {
    /// A put.
    pub fn put(key: Key, value: impl Into<Value>) -> Self {
        Change::Put {
            key,
            value: value.into(),
        }
    }

    /// A delete.
    pub fn delete(key: Key) -> Self {
        Change::Delete { key }
    }

    /// The key the change writes.
    pub fn key(&self) -> &Key {
        match self {
            Change::Put { key, .. } | Change::Delete { key } => key,
        }
    }
}

/// A source of fresh ids for the facts a controller creates.
///
/// Ids are an input of reconcile, like time, so that tests can make them deterministic.
pub trait IdSource: Send + fmt::Debug {
    /// A new id: lowercase letters and digits, unique with overwhelming probability.
    fn next_id(&mut self) -> String;
}

/// Ids of 16 hex digits (64 random bits) from a seedable generator.
///
/// `RandomIds::from_entropy()` is what a production runner uses; `RandomIds::seeded(n)` replays the
/// same ids in tests.
#[derive(Debug, Clone)]
pub struct RandomIds {
    rng: crate::seeded::Seeded,
}

impl RandomIds {
    /// A generator whose ids are the same on every run with the same seed.
    pub fn seeded(seed: u64) -> Self {
        RandomIds {
            rng: crate::seeded::Seeded::new(seed),
        }
    }

    /// A generator seeded from the operating system.
    pub fn from_entropy() -> Self {
        RandomIds {
            rng: crate::seeded::Seeded::from_entropy(),
        }
    }
}

impl IdSource for RandomIds {
    fn next_id(&mut self) -> String {
        format!("{:016x}", self.rng.u64())
    }
}

/// Ids `prefix0`, `prefix1`, ... : readable ids for tests and snapshots.
#[derive(Debug, Clone)]
pub struct SequentialIds {
    prefix: String,
    next: u64,
}

impl SequentialIds {
    /// Ids `{prefix}0`, `{prefix}1`, ...
    pub fn new(prefix: impl Into<String>) -> Self {
        SequentialIds {
            prefix: prefix.into(),
            next: 0,
        }
    }
}

impl IdSource for SequentialIds {
    fn next_id(&mut self) -> String {
        let id = format!("{}{}", self.prefix, self.next);
        self.next += 1;
        id
    }
}

/// Everything a reconcile may use besides the facts: the time and an id source; and what it
/// may ask of the runner besides its changes: events to write with them, and a pass by a time.
#[derive(Debug)]
pub struct ReconcileContext<'a> {
    now: SystemTime,
    ids: &'a mut dyn IdSource,
    events: Vec<Event>,
    requeue: Option<Duration>,
}

impl<'a> ReconcileContext<'a> {
    /// A context at wall-clock time `now` drawing ids from `ids`.
    pub fn new(now: SystemTime, ids: &'a mut dyn IdSource) -> Self {
        ReconcileContext {
            now,
            ids,
            events: Vec::new(),
            requeue: None,
        }
    }

    /// The time of this reconcile. Use it instead of reading a clock.
    pub fn now(&self) -> SystemTime {
        self.now
    }

    /// A fresh id.
    pub fn new_id(&mut self) -> String {
        self.ids.next_id()
    }

    /// Records an event explaining this reconcile's changes (stamped with its time). The runner
    /// writes the events in the same transaction as the changes, and none when the reconcile
    /// changes nothing (see [`crate::event`]).
    pub fn record(&mut self, event: Event) {
        let event = event.at(self.now);
        self.events.push(event);
    }

    /// The events recorded so far, taken out (the runner calls it after the reconcile).
    pub fn take_events(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.events)
    }

    /// Asks for another pass within `after` even if none of the facts changes: for a
    /// controller whose result depends on [`now`](Self::now) as well as on the facts (a
    /// deadline, a periodic judgement). Several calls keep the soonest. Without it, the runner
    /// reconciles only when the facts change (see [`Controller`]'s "Expected flow").
    pub fn requeue_after(&mut self, after: Duration) {
        self.requeue = Some(self.requeue.map_or(after, |soonest| soonest.min(after)));
    }

    /// The pass asked for with [`requeue_after`](Self::requeue_after), taken out (the runner
    /// calls it after the reconcile).
    pub fn take_requeue(&mut self) -> Option<Duration> {
        self.requeue.take()
    }
}

/// Why a reconcile failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReconcileError {
    /// The controller could not compute its changes this time; the runner restarts it with backoff.
    #[error("reconcile failed: {message}")]
    Failed {
        /// What went wrong.
        message: String,
        /// The underlying error, if any.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// The controller cannot go on at all; the runner stops every controller and returns the error.
    #[error("fatal controller error: {message}")]
    Fatal {
        /// What went wrong.
        message: String,
    },
    /// The controller built an invalid key.
    #[error("controller built an invalid key")]
    InvalidKey(#[from] KeyError),
}

impl ReconcileError {
    /// A retryable failure with a message.
    pub fn failed(message: impl Into<String>) -> Self {
        ReconcileError::Failed {
            message: message.into(),
            source: None,
        }
    }

    /// A fatal failure with a message.
    pub fn fatal(message: impl Into<String>) -> Self {
        ReconcileError::Fatal {
            message: message.into(),
        }
    }
}

/// A pure rule: compares the facts it watches and proposes changes.
///
/// # Expected flow
///
/// The runner lists the controller's [`watches`](Controller::watches) prefixes, keeps a local
/// [`FactView`] up to date from a watch, and calls [`reconcile`](Controller::reconcile) with an
/// immutable snapshot whenever the view changed (bursts are coalesced). It commits the returned
/// changes in one transaction guarded by the mod revisions of the keys it writes, then waits
/// until its view includes its own commit before reconciling again.
///
/// It lists again periodically (a resync, every 30 s by default) to recover from anything a
/// watch may have missed; a resync that finds the facts the view already holds changes nothing
/// and calls no reconcile. So a cluster where nothing changes costs no pass at all. A
/// controller whose result depends on the time as well (a deadline, a periodic judgement)
/// asks for its next pass with [`ReconcileContext::requeue_after`].
///
/// # Assumptions
///
/// - `reconcile` is a pure function of the view and of `ctx`: no I/O, no clock reads, no
///   randomness of its own. Same input, same output.
/// - It is level-triggered: it derives everything from the facts, never from memory of what it did
///   before, so it may be restarted, run twice, or run on a replica at any time.
/// - Every change lies in the [`write_domain`](Controller::write_domain); the runner rejects the
///   whole reconcile otherwise. No two controllers should share a write domain.
///
/// # Caveats
///
/// A reconcile that returns more changes than the store takes in one transaction (128 operations
/// on etcd, the commit marker and the leader's fences among them) is committed in consecutive
/// transactions in the order returned, each change still guarded by the revision of the view it
/// was planned on; a conflict drops the rest, and the runner reconciles again. Readers may see
/// the first transactions of such a pass before the rest: a pass whose changes must land
/// together must fit in one transaction.
///
/// ```
/// use ccattler_core::{Change, Controller, FactView, Key, ReconcileContext, ReconcileError};
///
/// /// Mirrors every `input/x` to `output/x`.
/// struct Mirror;
///
/// impl Controller for Mirror {
///     fn name(&self) -> &str { "mirror" }
///     fn watches(&self) -> Vec<String> { vec!["input/".into(), "output/".into()] }
///     fn write_domain(&self) -> Vec<String> { vec!["output/".into()] }
///     fn reconcile(&self, facts: &FactView, _ctx: &mut ReconcileContext<'_>)
///         -> Result<Vec<Change>, ReconcileError>
///     {
///         let mut changes = Vec::new();
///         for fact in facts.scan("input/") {
///             let name = fact.key.strip_prefix("input/").unwrap_or_default();
///             let out = Key::new(format!("output/{name}"))?;
///             if facts.get(out.as_str()).map(|f| &f.value) != Some(&fact.value) {
///                 changes.push(Change::put(out, fact.value.clone()));
///             }
///         }
///         Ok(changes)
///     }
/// }
/// ```
pub trait Controller: Send + Sync + 'static {
    /// A short, unique name used in logs, metrics and errors.
    fn name(&self) -> &str;

    /// The key prefixes whose facts the controller reads.
    fn watches(&self) -> Vec<String>;

    /// The key prefixes the controller may write.
    fn write_domain(&self) -> Vec<String>;

    /// Computes the changes that move the facts towards what this controller wants.
    ///
    /// # Errors
    ///
    /// [`ReconcileError::Failed`] to be restarted with backoff, [`ReconcileError::Fatal`] to stop
    /// the runner.
    fn reconcile(
        &self,
        facts: &FactView,
        ctx: &mut ReconcileContext<'_>,
    ) -> Result<Vec<Change>, ReconcileError>;
}
