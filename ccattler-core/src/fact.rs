//! Facts, revisions, leases and watch events: the data every store hands out.

use std::fmt;

use crate::Key;

/// A fact's value: opaque bytes, cheap to clone.
///
/// The standard schema stores JSON so that `etcdctl get` shows something a person can read, but
/// the store itself never looks inside a value.
pub type Value = bytes::Bytes;

/// A point in the store's history.
///
/// The store has one global revision that every committed write raises by exactly one, however
/// many keys the write touched. Revision 0 means "never": a key that does not exist has mod and
/// create revision 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Revision(pub u64);

impl Revision {
    /// The revision before anything was written.
    pub const ZERO: Revision = Revision(0);

    /// The revision after this one.
    #[must_use]
    pub fn next(self) -> Revision {
        Revision(self.0.saturating_add(1))
    }

    /// The plain number.
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The id of a store lease. Keys put with a lease vanish when it expires or is revoked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LeaseId(pub i64);

impl fmt::Display for LeaseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:x}", self.0)
    }
}

/// A key, its value and the revisions the store gave it (etcd's `KeyValue`).
///
/// Two facts are equal when every field is. The revisions are compared first and a value is
/// read only when both facts do not share it, so comparing a fact with a clone of itself (as
/// the diff of two snapshots of a view does) reads neither its key nor its value.
#[derive(Clone, Debug, Eq)]
pub struct Fact {
    /// The key.
    pub key: Key,
    /// The value. Empty in the `fact` of a delete event.
    pub value: Value,
    /// The revision of the write that created the key (since it last did not exist).
    pub create_revision: Revision,
    /// The revision of the last write to the key; for a delete event, the revision of the delete.
    pub mod_revision: Revision,
    /// How many times the key was written since it was created: 1 after the first put.
    /// 0 in the `fact` of a delete event.
    pub version: u64,
    /// The lease the key is attached to, if any.
    pub lease: Option<LeaseId>,
}

impl PartialEq for Fact {
    fn eq(&self, other: &Self) -> bool {
        let same_value = || {
            let (a, b) = (&self.value, &other.value);
            (a.as_ptr() == b.as_ptr() && a.len() == b.len()) || a == b
        };
        self.mod_revision == other.mod_revision
            && self.create_revision == other.create_revision
            && self.version == other.version
            && self.lease == other.lease
            && self.key == other.key
            && same_value()
    }
}

impl Fact {
    /// The fact as a put that creates `key` at `revision` leaves it: created and last modified
    /// at `revision`, version 1, no lease. Handy for views built by hand in tests and benches.
    ///
    /// ```
    /// use ccattler_core::{Fact, Key, Revision};
    ///
    /// let fact = Fact::created(Key::new("desired/service/web")?, "{}".into(), Revision(7));
    /// assert_eq!((fact.create_revision, fact.version), (Revision(7), 1));
    /// # Ok::<(), ccattler_core::KeyError>(())
    /// ```
    pub fn created(key: Key, value: Value, revision: Revision) -> Fact {
        Fact {
            key,
            value,
            create_revision: revision,
            mod_revision: revision,
            version: 1,
            lease: None,
        }
    }

    /// The value as UTF-8 text, if it is.
    pub fn value_str(&self) -> Option<&str> {
        std::str::from_utf8(&self.value).ok()
    }
}

/// Whether a watch event wrote or removed its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// The key was created or updated.
    Put,
    /// The key was deleted (explicitly, or because its lease ended).
    Delete,
}

/// One change to one key, as a watch delivers it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchEvent {
    /// Put or delete.
    pub kind: EventKind,
    /// The key after the change. For a delete: the key, an empty value, `mod_revision` set to the
    /// revision of the delete and `version` 0.
    pub fact: Fact,
    /// The key as it was just before the change; `None` when the put created it.
    pub prev: Option<Fact>,
}

impl WatchEvent {
    /// The revision at which the change was committed.
    pub fn revision(&self) -> Revision {
        self.fact.mod_revision
    }

    /// The key the event is about.
    pub fn key(&self) -> &Key {
        &self.fact.key
    }
}
