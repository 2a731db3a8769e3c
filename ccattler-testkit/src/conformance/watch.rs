//! Checks of watches: history replay then live events, previous values, prefix filtering, the
//! `Revision::ZERO` start, compaction and slow watchers.

use std::time::Duration;

use ccattler_core::{EventKind, Fact, FactStore, Op, Revision, StoreError, Txn};
use futures_util::StreamExt;

use super::StoreHarness;
use super::support::{
    EVENT_TIMEOUT, assert_delete_event, assert_no_event, assert_put_event, err, expect_compacted,
    get_some, key, next_events, ok, open_watch, put, revision,
};

/// Writes a fixed history under `w/` and returns, per write, its revision and the facts before and
/// after it (`None` for a missing key).
async fn write_history<S: FactStore>(
    store: &S,
    check: &str,
) -> Vec<(Revision, Option<Fact>, Option<Fact>)> {
    let (a, b) = (key("w/a"), key("w/b"));
    let mut history = Vec::new();
    for (k, value) in [
        (&a, Some("a1")),
        (&b, Some("b1")),
        (&a, Some("a2")),
        (&b, None),
    ] {
        let before = ok(store.get(k).await, check, "get before a write");
        let rev = match value {
            Some(v) => put(store, k, v, check).await,
            None => {
                ok(store.delete(k).await, check, "delete(w/b)");
                revision(store, check).await
            }
        };
        let after = ok(store.get(k).await, check, "get after a write");
        history.push((rev, before, after));
    }
    history
}

/// Checks `events` against `history` entry by entry.
fn assert_history(
    events: &[ccattler_core::WatchEvent],
    history: &[(Revision, Option<Fact>, Option<Fact>)],
    check: &str,
) {
    assert_eq!(events.len(), history.len(), "{check}: event count");
    for (i, (event, (rev, before, after))) in events.iter().zip(history).enumerate() {
        let what = format!("event {i} (revision {rev})");
        match (before, after) {
            (_, Some(after)) => assert_put_event(event, after, before.as_ref(), check, &what),
            (Some(before), None) => assert_delete_event(event, before, *rev, check, &what),
            (None, None) => unreachable!("history holds no write of nothing"),
        }
    }
}

/// A watch from a past revision replays every change since then in order, each with its previous
/// value, and then follows live changes.
pub async fn watch_replays_history_then_follows_live<H: StoreHarness>(harness: &H) {
    const CHECK: &str = "watch::watch_replays_history_then_follows_live";
    let store = harness.fresh().await;
    let history = write_history(&store, CHECK).await;
    let first = history[0].0;
    let mut watch = open_watch(&store, "w/", first, CHECK).await;
    let events = next_events(&mut watch, history.len(), CHECK, "history replay").await;
    assert_history(&events, &history, CHECK);

    let c = key("w/c");
    put(&store, &c, "c1", CHECK).await;
    let fact = get_some(&store, &c, CHECK).await;
    let live = next_events(&mut watch, 1, CHECK, "live event after replay").await;
    assert_put_event(&live[0], &fact, None, CHECK, "live put of w/c");
    assert_no_event(&mut watch, CHECK, "after the live event").await;
}

/// A watch from a revision in the middle of the history starts exactly there.
pub async fn watch_from_middle_of_history<H: StoreHarness>(harness: &H) {
    const CHECK: &str = "watch::watch_from_middle_of_history";
    let store = harness.fresh().await;
    let history = write_history(&store, CHECK).await;
    let mut watch = open_watch(&store, "w/", history[2].0, CHECK).await;
    let events = next_events(&mut watch, 2, CHECK, "replay from the third write").await;
    assert_history(&events, &history[2..], CHECK);
    assert_no_event(&mut watch, CHECK, "after the replayed tail").await;
}

/// A watch delivers only keys that start with its prefix (a plain string prefix), including
/// single events out of a transaction that also wrote elsewhere.
pub async fn watch_filters_by_plain_prefix<H: StoreHarness>(harness: &H) {
    const CHECK: &str = "watch::watch_filters_by_plain_prefix";
    let store = harness.fresh().await;
    let mut watch = open_watch(&store, "f/a", Revision::ZERO, CHECK).await;
    let mut expected = Vec::new();
    for path in ["f/a", "f/b", "f/ab", "g/a", "f", "f/a/x"] {
        let rev = put(&store, &key(path), "1", CHECK).await;
        if path.starts_with("f/a") {
            expected.push((path.to_owned(), rev));
        }
    }
    let txn = Txn::new()
        .then(Op::put(key("f/b/1"), "1"))
        .then(Op::put(key("f/a/1"), "1"))
        .then(Op::put(key("g/a/1"), "1"));
    let response = ok(store.txn(txn).await, CHECK, "txn over three prefixes");
    expected.push(("f/a/1".to_owned(), response.revision));

    let events = next_events(&mut watch, expected.len(), CHECK, "events under f/a").await;
    let got: Vec<(String, Revision)> = events
        .iter()
        .map(|e| (e.key().as_str().to_owned(), e.revision()))
        .collect();
    assert_eq!(
        got, expected,
        "{CHECK}: events under prefix \"f/a\" (key, revision)"
    );
    assert_no_event(&mut watch, CHECK, "after the events under f/a").await;
}

/// `Revision::ZERO`, like the current revision + 1, starts at the next write.
pub async fn watch_zero_starts_at_next_write<H: StoreHarness>(harness: &H) {
    const CHECK: &str = "watch::watch_zero_starts_at_next_write";
    let store = harness.fresh().await;
    let a = key("z/a");
    put(&store, &a, "1", CHECK).await;
    put(&store, &a, "2", CHECK).await;
    let now = revision(&store, CHECK).await;
    let mut zero = open_watch(&store, "z/", Revision::ZERO, CHECK).await;
    let mut next = open_watch(&store, "z/", now.next(), CHECK).await;
    assert_no_event(&mut zero, CHECK, "watch from ZERO before any new write").await;
    assert_no_event(
        &mut next,
        CHECK,
        "watch from revision + 1 before any new write",
    )
    .await;

    let before = get_some(&store, &a, CHECK).await;
    put(&store, &a, "3", CHECK).await;
    let after = get_some(&store, &a, CHECK).await;
    for (watch, name) in [(&mut zero, "ZERO"), (&mut next, "revision + 1")] {
        let events = next_events(watch, 1, CHECK, &format!("watch from {name}")).await;
        assert_put_event(&events[0], &after, Some(&before), CHECK, name);
        assert_no_event(watch, CHECK, &format!("watch from {name} after one write")).await;
    }
}

/// After `compact(rev)`, a watch from before `rev` fails with `Compacted { earliest: rev }`, a
/// watch from `rev` still replays; current facts are kept; compaction beyond the current revision
/// fails with `FutureRevision`.
pub async fn compaction_bounds_watches<H: StoreHarness>(harness: &H) {
    const CHECK: &str = "watch::compaction_bounds_watches";
    let store = harness.fresh().await;
    let (a, b) = (key("c/a"), key("c/b"));
    let r1 = put(&store, &a, "1", CHECK).await;
    let r2 = put(&store, &b, "1", CHECK).await;
    let before_r3 = get_some(&store, &a, CHECK).await;
    let r3 = put(&store, &a, "2", CHECK).await;
    let at_r3 = get_some(&store, &a, CHECK).await;
    let before_r4 = get_some(&store, &b, CHECK).await;
    let r4 = put(&store, &b, "2", CHECK).await;
    let at_r4 = get_some(&store, &b, CHECK).await;
    let scan_before = ok(store.scan("c/").await, CHECK, "scan before compaction");

    ok(store.compact(r3).await, CHECK, &format!("compact({r3})"));
    for start in [r1, r2] {
        let (requested, earliest) = expect_compacted(&store, "c/", start, CHECK).await;
        assert_eq!(
            (requested, earliest),
            (start, r3),
            "{CHECK}: Compacted error for a watch from {start} after compact({r3}) names \
             (requested, earliest) = ({requested}, {earliest})"
        );
    }

    let mut watch = open_watch(&store, "c/", r3, CHECK).await;
    let events = next_events(&mut watch, 2, CHECK, "watch from the compaction revision").await;
    assert_put_event(
        &events[0],
        &at_r3,
        Some(&before_r3),
        CHECK,
        "event at the compaction revision",
    );
    assert_put_event(
        &events[1],
        &at_r4,
        Some(&before_r4),
        CHECK,
        "event after the compaction revision",
    );
    assert_no_event(&mut watch, CHECK, "after the retained history").await;
    assert_eq!(
        r4,
        revision(&store, CHECK).await,
        "{CHECK}: compaction changed the revision"
    );

    let mut scan_after = ok(store.scan("c/").await, CHECK, "scan after compaction");
    scan_after.revision = scan_before.revision;
    assert_eq!(
        scan_after, scan_before,
        "{CHECK}: compaction changed the current facts"
    );

    ok(store.compact(r4).await, CHECK, "compact(current revision)");
    let future = r4.next();
    let e = err(
        store.compact(future).await,
        CHECK,
        &format!("compact({future})"),
    );
    assert!(
        matches!(e, StoreError::FutureRevision { requested, current } if requested == future && current == r4),
        "{CHECK}: compact({future}) at revision {r4} failed with {e:?}, expected \
         FutureRevision {{ requested: {future}, current: {r4} }}"
    );
}

/// A watch that is keeping up goes on delivering after the store compacts.
pub async fn live_watch_survives_compaction<H: StoreHarness>(harness: &H) {
    const CHECK: &str = "watch::live_watch_survives_compaction";
    let store = harness.fresh().await;
    let a = key("l/a");
    let mut watch = open_watch(&store, "l/", Revision::ZERO, CHECK).await;
    put(&store, &a, "1", CHECK).await;
    next_events(&mut watch, 1, CHECK, "event before compaction").await;
    let now = revision(&store, CHECK).await;
    ok(store.compact(now).await, CHECK, "compact(current revision)");

    let before = get_some(&store, &a, CHECK).await;
    put(&store, &a, "2", CHECK).await;
    let after = get_some(&store, &a, CHECK).await;
    let events = next_events(&mut watch, 1, CHECK, "event after compaction").await;
    assert_put_event(
        &events[0],
        &after,
        Some(&before),
        CHECK,
        "put after compaction",
    );
}

/// A watcher that does not read while many writes happen gets every event in order when it
/// reads, or, if the store could not hold them, an in-order prefix followed by `Compacted` and the
/// end of the stream. It never skips an event, and the writes do not wait for it.
pub async fn slow_watcher_never_skips<H: StoreHarness>(harness: &H) {
    const CHECK: &str = "watch::slow_watcher_never_skips";
    const WRITES: u64 = 2000;
    let store = harness.fresh().await;
    let k = key("slow/k");
    let mut watch = open_watch(&store, "slow/", Revision::ZERO, CHECK).await;
    let start = revision(&store, CHECK).await;
    let writes = async {
        for i in 0..WRITES {
            put(&store, &k, &i.to_string(), CHECK).await;
        }
    };
    if tokio::time::timeout(Duration::from_secs(60), writes)
        .await
        .is_err()
    {
        panic!(
            "{CHECK}: {WRITES} writes did not finish in 60 s; does an unread watch block writers?"
        );
    }

    let mut expected = start.next();
    let mut delivered = 0;
    loop {
        match tokio::time::timeout(EVENT_TIMEOUT, watch.next()).await {
            Err(_) => panic!(
                "{CHECK}: the slow watcher stalled after {delivered} of {WRITES} events, \
                 with neither more events nor a Compacted error"
            ),
            Ok(Some(Ok(event))) => {
                assert_eq!(
                    (event.revision(), event.kind, event.fact.value_str()),
                    (
                        expected,
                        EventKind::Put,
                        Some(delivered.to_string().as_str())
                    ),
                    "{CHECK}: slow watcher's event {delivered} skipped or reordered an event"
                );
                delivered += 1;
                expected = expected.next();
                if delivered == WRITES {
                    assert_no_event(&mut watch, CHECK, "after every write was delivered").await;
                    break;
                }
            }
            Ok(Some(Err(StoreError::Compacted { .. }))) => {
                let end = tokio::time::timeout(EVENT_TIMEOUT, watch.next()).await;
                assert!(
                    matches!(end, Ok(None)),
                    "{CHECK}: after its Compacted error the watch yielded {end:?}, expected its end"
                );
                break;
            }
            Ok(Some(Err(e))) => {
                panic!("{CHECK}: slow watcher failed with {e:?}, expected Compacted")
            }
            Ok(None) => {
                panic!("{CHECK}: slow watcher ended after {delivered} events without an error")
            }
        }
    }
}
