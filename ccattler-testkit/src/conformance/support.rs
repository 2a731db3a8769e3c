//! Helpers the checks share: keys from literals, store calls that name the check when they fail,
//! and watch reads that time out instead of hanging.
//!
//! Every helper takes the check's name (`check`) and what the caller was doing (`what`) so that a
//! failure message says where it happened.

use std::fmt::Debug;
use std::time::Duration;

use ccattler_core::{EventKind, Fact, FactStore, Key, Revision, StoreError, WatchEvent};
use futures_util::{Stream, StreamExt};

/// How long a watch may take to deliver the events a check expects before the check fails.
pub const EVENT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a watch must stay silent for [`assert_no_event`] to pass.
pub const QUIET_WINDOW: Duration = Duration::from_millis(100);

/// A key from a literal the check knows to be valid.
///
/// # Errors
///
/// Panics when `path` is not a valid key (a bug in the check).
pub fn key(path: &str) -> Key {
    Key::new(path).unwrap_or_else(|e| panic!("test key {path:?} is invalid: {e}"))
}

/// The value of a successful store call; panics naming the check when it failed.
pub fn ok<T>(result: Result<T, StoreError>, check: &str, what: &str) -> T {
    match result {
        Ok(value) => value,
        Err(e) => panic!("{check}: {what} failed: {e} ({e:?})"),
    }
}

/// The error of a store call that must fail; panics naming the check when it succeeded.
pub fn err<T: Debug>(result: Result<T, StoreError>, check: &str, what: &str) -> StoreError {
    match result {
        Ok(value) => panic!("{check}: {what} succeeded with {value:?}, expected an error"),
        Err(e) => e,
    }
}

/// The store's current revision.
pub async fn revision<S: FactStore>(store: &S, check: &str) -> Revision {
    ok(store.revision().await, check, "revision()")
}

/// Reads one key.
pub async fn get<S: FactStore>(store: &S, key: &Key, check: &str) -> Option<Fact> {
    ok(store.get(key).await, check, &format!("get({key})"))
}

/// Reads one key that must exist.
pub async fn get_some<S: FactStore>(store: &S, key: &Key, check: &str) -> Fact {
    get(store, key, check)
        .await
        .unwrap_or_else(|| panic!("{check}: get({key}) found nothing, expected a fact"))
}

/// Puts a value, returning the revision the store reports.
pub async fn put<S: FactStore>(store: &S, key: &Key, value: &str, check: &str) -> Revision {
    let what = format!("put({key}, {value:?})");
    ok(store.put(key, value.to_owned().into()).await, check, &what)
}

/// Opens a watch.
pub async fn open_watch<S: FactStore>(
    store: &S,
    prefix: &str,
    start: Revision,
    check: &str,
) -> S::Watch {
    let what = format!("watch({prefix:?}, {start})");
    ok(store.watch(prefix, start).await, check, &what)
}

/// Checks that the store's revision is still `expected` (nothing was written).
pub async fn assert_revision<S: FactStore>(store: &S, expected: Revision, check: &str, what: &str) {
    let now = revision(store, check).await;
    assert_eq!(
        now, expected,
        "{check}: {what}: store revision is {now}, expected {expected}"
    );
}

/// Collects the next `n` events of `watch`, failing if they do not all arrive within
/// [`EVENT_TIMEOUT`], or if the watch ends or fails first.
pub async fn next_events<W>(watch: &mut W, n: usize, check: &str, what: &str) -> Vec<WatchEvent>
where
    W: Stream<Item = Result<WatchEvent, StoreError>> + Unpin,
{
    let deadline = tokio::time::Instant::now() + EVENT_TIMEOUT;
    let mut events = Vec::with_capacity(n);
    while events.len() < n {
        match tokio::time::timeout_at(deadline, watch.next()).await {
            Ok(Some(Ok(event))) => events.push(event),
            Ok(Some(Err(e))) => panic!(
                "{check}: {what}: watch failed with {e} ({e:?}) after {} of {n} expected events: \
                 {events:#?}",
                events.len()
            ),
            Ok(None) => panic!(
                "{check}: {what}: watch ended after {} of {n} expected events: {events:#?}",
                events.len()
            ),
            Err(_) => panic!(
                "{check}: {what}: only {} of {n} expected events arrived within \
                 {EVENT_TIMEOUT:?}: {events:#?}",
                events.len()
            ),
        }
    }
    events
}

/// Checks that `watch` delivers nothing (and does not end) within [`QUIET_WINDOW`].
pub async fn assert_no_event<W>(watch: &mut W, check: &str, what: &str)
where
    W: Stream<Item = Result<WatchEvent, StoreError>> + Unpin,
{
    match tokio::time::timeout(QUIET_WINDOW, watch.next()).await {
        Err(_) => {}
        Ok(None) => panic!("{check}: {what}: watch ended, expected it to stay open and silent"),
        Ok(Some(item)) => panic!("{check}: {what}: unexpected watch item {item:#?}"),
    }
}

/// Checks that a watch from `start` is refused as compacted, either by the call or as the
/// stream's first item, and returns the error's `(requested, earliest)`.
pub async fn expect_compacted<S: FactStore>(
    store: &S,
    prefix: &str,
    start: Revision,
    check: &str,
) -> (Revision, Revision) {
    let error = match store.watch(prefix, start).await {
        Err(e) => e,
        Ok(mut watch) => match tokio::time::timeout(EVENT_TIMEOUT, watch.next()).await {
            Ok(Some(Err(e))) => e,
            Ok(other) => panic!(
                "{check}: watch({prefix:?}, {start}) after compaction yielded {other:#?}, \
                 expected StoreError::Compacted"
            ),
            Err(_) => panic!(
                "{check}: watch({prefix:?}, {start}) after compaction yielded nothing within \
                 {EVENT_TIMEOUT:?}, expected StoreError::Compacted"
            ),
        },
    };
    match error {
        StoreError::Compacted {
            requested,
            earliest,
        } => (requested, earliest),
        other => panic!(
            "{check}: watch({prefix:?}, {start}) after compaction failed with {other:?}, \
             expected StoreError::Compacted"
        ),
    }
}

/// Checks that `event` is the put that turned `prev` into `fact`.
pub fn assert_put_event(
    event: &WatchEvent,
    fact: &Fact,
    prev: Option<&Fact>,
    check: &str,
    what: &str,
) {
    assert_eq!(
        event.kind,
        EventKind::Put,
        "{check}: {what}: expected a put event, got {event:#?}"
    );
    assert_eq!(
        &event.fact, fact,
        "{check}: {what}: put event's fact differs from the stored fact"
    );
    assert_eq!(
        event.prev.as_ref(),
        prev,
        "{check}: {what}: put event's prev differs from the fact before the put"
    );
}

/// Checks that `event` is the delete, at `revision`, of the key that held `prev`.
pub fn assert_delete_event(
    event: &WatchEvent,
    prev: &Fact,
    revision: Revision,
    check: &str,
    what: &str,
) {
    assert_eq!(
        event.kind,
        EventKind::Delete,
        "{check}: {what}: expected a delete event, got {event:#?}"
    );
    assert_eq!(
        event.fact.key, prev.key,
        "{check}: {what}: delete event is for the wrong key"
    );
    assert!(
        event.fact.value.is_empty(),
        "{check}: {what}: delete event carries value {:?}, expected an empty value",
        event.fact.value
    );
    assert_eq!(
        event.fact.mod_revision, revision,
        "{check}: {what}: delete event's mod_revision is not the delete's revision"
    );
    assert_eq!(
        event.fact.version, 0,
        "{check}: {what}: delete event's version is {}, expected 0",
        event.fact.version
    );
    assert_eq!(
        event.prev.as_ref(),
        Some(prev),
        "{check}: {what}: delete event's prev differs from the fact before the delete"
    );
}

/// The keys of `facts`, as strings, in order.
pub fn keys_of(facts: &[Fact]) -> Vec<&str> {
    facts.iter().map(|f| f.key.as_str()).collect()
}
