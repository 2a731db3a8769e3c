//! The lease table: ids, time to live, deadlines and the keys attached to each lease.
//!
//! Deadlines are kept ordered in a `BTreeSet<(deadline, id)>` so that "has anything expired?" is
//! one look at the first element; the store mirrors that first deadline into an atomic so reads
//! can skip the lock entirely when nothing is due.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use ccattler_core::{Key, LeaseId, StoreError};

/// The shortest TTL a lease may have.
pub(crate) const MIN_TTL: Duration = Duration::from_secs(1);
/// The longest TTL a lease may have (one year).
pub(crate) const MAX_TTL: Duration = Duration::from_secs(365 * 24 * 60 * 60);

/// One granted lease.
#[derive(Debug)]
struct LeaseEntry {
    ttl: Duration,
    deadline: Duration,
    keys: BTreeSet<Key>,
}

/// Every live lease of one store.
#[derive(Debug)]
pub(crate) struct Leases {
    next_id: i64,
    table: HashMap<LeaseId, LeaseEntry>,
    deadlines: BTreeSet<(Duration, LeaseId)>,
}

impl Default for Leases {
    fn default() -> Self {
        Leases {
            next_id: 1,
            table: HashMap::new(),
            deadlines: BTreeSet::new(),
        }
    }
}

impl Leases {
    /// Checks a TTL against the allowed range.
    pub(crate) fn check_ttl(ttl: Duration) -> Result<(), StoreError> {
        if (MIN_TTL..=MAX_TTL).contains(&ttl) {
            Ok(())
        } else {
            Err(StoreError::InvalidTtl(ttl))
        }
    }

    /// Grants a new lease expiring at `now + ttl`.
    pub(crate) fn grant(&mut self, ttl: Duration, now: Duration) -> LeaseId {
        let id = LeaseId(self.next_id);
        self.next_id = self.next_id.saturating_add(1);
        let deadline = now.saturating_add(ttl);
        self.table.insert(
            id,
            LeaseEntry {
                ttl,
                deadline,
                keys: BTreeSet::new(),
            },
        );
        self.deadlines.insert((deadline, id));
        id
    }

    /// Whether the lease exists (it has not been revoked or expired and removed).
    pub(crate) fn contains(&self, id: LeaseId) -> bool {
        self.table.contains_key(&id)
    }

    /// Renews a lease to `now + ttl`, returning its TTL; `None` when it does not exist.
    pub(crate) fn renew(&mut self, id: LeaseId, now: Duration) -> Option<Duration> {
        let entry = self.table.get_mut(&id)?;
        self.deadlines.remove(&(entry.deadline, id));
        entry.deadline = now.saturating_add(entry.ttl);
        self.deadlines.insert((entry.deadline, id));
        Some(entry.ttl)
    }

    /// Removes a lease, returning the keys that were attached to it.
    pub(crate) fn remove(&mut self, id: LeaseId) -> Option<BTreeSet<Key>> {
        let entry = self.table.remove(&id)?;
        self.deadlines.remove(&(entry.deadline, id));
        Some(entry.keys)
    }

    /// Removes the lease with the earliest deadline if that deadline is at or before `now`.
    pub(crate) fn pop_expired(&mut self, now: Duration) -> Option<(LeaseId, BTreeSet<Key>)> {
        let &(deadline, id) = self.deadlines.first()?;
        if deadline > now {
            return None;
        }
        let keys = self.remove(id).unwrap_or_default();
        Some((id, keys))
    }

    /// Records that `key` is attached to lease `id` (which must exist).
    pub(crate) fn attach(&mut self, id: LeaseId, key: &Key) {
        if let Some(entry) = self.table.get_mut(&id) {
            entry.keys.insert(key.clone());
        }
    }

    /// Records that `key` is no longer attached to lease `id`.
    pub(crate) fn detach(&mut self, id: LeaseId, key: &str) {
        if let Some(entry) = self.table.get_mut(&id) {
            entry.keys.remove(key);
        }
    }

    /// The earliest deadline in nanoseconds, or `u64::MAX` when there is no lease.
    pub(crate) fn next_deadline_nanos(&self) -> u64 {
        self.deadlines.first().map_or(u64::MAX, |(deadline, _)| {
            u64::try_from(deadline.as_nanos()).unwrap_or(u64::MAX - 1)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> Key {
        Key::new(s).unwrap()
    }

    #[test]
    fn ttl_bounds() {
        assert!(Leases::check_ttl(Duration::from_millis(999)).is_err());
        assert!(Leases::check_ttl(MIN_TTL).is_ok());
        assert!(Leases::check_ttl(MAX_TTL).is_ok());
        assert!(Leases::check_ttl(MAX_TTL + Duration::from_nanos(1)).is_err());
    }

    #[test]
    fn ids_count_up_from_one_and_expire_in_deadline_order() {
        let mut leases = Leases::default();
        let a = leases.grant(Duration::from_secs(10), Duration::ZERO);
        let b = leases.grant(Duration::from_secs(5), Duration::ZERO);
        assert_eq!((a, b), (LeaseId(1), LeaseId(2)));
        leases.attach(a, &key("x"));
        assert_eq!(leases.next_deadline_nanos(), 5_000_000_000);
        assert!(leases.pop_expired(Duration::from_secs(4)).is_none());
        let (id, keys) = leases.pop_expired(Duration::from_secs(10)).unwrap();
        assert_eq!(id, b);
        assert!(keys.is_empty());
        let (id, keys) = leases.pop_expired(Duration::from_secs(10)).unwrap();
        assert_eq!(id, a);
        assert_eq!(keys.into_iter().collect::<Vec<_>>(), vec![key("x")]);
        assert_eq!(leases.next_deadline_nanos(), u64::MAX);
    }

    #[test]
    fn renew_moves_the_deadline() {
        let mut leases = Leases::default();
        let a = leases.grant(Duration::from_secs(10), Duration::ZERO);
        assert_eq!(
            leases.renew(a, Duration::from_secs(8)),
            Some(Duration::from_secs(10))
        );
        assert!(leases.pop_expired(Duration::from_secs(17)).is_none());
        assert!(leases.pop_expired(Duration::from_secs(18)).is_some());
        assert_eq!(leases.renew(a, Duration::from_secs(18)), None);
    }

    #[test]
    fn detach_forgets_the_key() {
        let mut leases = Leases::default();
        let a = leases.grant(Duration::from_secs(10), Duration::ZERO);
        leases.attach(a, &key("x"));
        leases.detach(a, "x");
        assert!(leases.remove(a).unwrap().is_empty());
        assert!(!leases.contains(a));
    }
}
