//! Checks of concurrent writers: unique revisions, every write seen once and in order, and
//! compare-and-swap that loses no update.

use std::collections::BTreeSet;

use ccattler_core::{Compare, FactStore, Op, Revision, Txn};

use super::StoreHarness;
use super::support::{
    assert_no_event, assert_revision, get_some, key, next_events, ok, open_watch, put, revision,
};

const TASKS: usize = 4;
const WRITES_PER_TASK: usize = 25;

/// Several tasks writing at once each get a distinct revision, the revision rises by exactly the
/// number of writes, and a watcher sees every write exactly once, in revision order.
pub async fn concurrent_writes_get_unique_revisions<H: StoreHarness>(harness: &H) {
    const CHECK: &str = "concurrency::concurrent_writes_get_unique_revisions";
    let store = harness.fresh().await;
    let r0 = revision(&store, CHECK).await;
    let mut watch = open_watch(&store, "cw/", r0.next(), CHECK).await;

    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut written = Vec::new();
            for i in 0..WRITES_PER_TASK {
                // Half the writes are plain puts, half single-op transactions.
                let k = key(&format!("cw/{task}/{}", i % 5));
                let value = format!("{task}-{i}");
                let rev = if i % 2 == 0 {
                    put(&store, &k, &value, CHECK).await
                } else {
                    let txn = Txn::new().then(Op::put(k.clone(), value.clone()));
                    ok(store.txn(txn).await, CHECK, "concurrent txn").revision
                };
                written.push((rev, k.as_str().to_owned(), value));
            }
            written
        }));
    }
    let mut writes = Vec::new();
    for task in tasks {
        let written = task
            .await
            .unwrap_or_else(|e| panic!("{CHECK}: a writer task failed: {e}"));
        for pair in written.windows(2) {
            assert!(
                pair[0].0 < pair[1].0,
                "{CHECK}: one task's later write got an earlier revision: {pair:?}"
            );
        }
        writes.extend(written);
    }
    writes.sort();
    let total = TASKS * WRITES_PER_TASK;
    let revisions: BTreeSet<Revision> = writes.iter().map(|w| w.0).collect();
    assert_eq!(
        revisions.len(),
        total,
        "{CHECK}: {total} writes got only {} distinct revisions",
        revisions.len()
    );
    let last = Revision(r0.0 + total as u64);
    assert_revision(&store, last, CHECK, "after the concurrent writes").await;
    assert!(
        writes.first().is_some_and(|w| w.0 == r0.next())
            && writes.last().is_some_and(|w| w.0 == last),
        "{CHECK}: revisions of the writes are not exactly {}..={last}",
        r0.next()
    );

    let events = next_events(&mut watch, total, CHECK, "events of the concurrent writes").await;
    let seen: Vec<(Revision, String, String)> = events
        .iter()
        .map(|e| {
            let value = e.fact.value_str().unwrap_or_default().to_owned();
            (e.revision(), e.key().as_str().to_owned(), value)
        })
        .collect();
    assert_eq!(
        seen, writes,
        "{CHECK}: watched events differ from the writes, in revision order"
    );
    assert_no_event(&mut watch, CHECK, "after every concurrent write").await;
}

/// Tasks incrementing one counter by compare-and-swap on its mod revision lose no increment, and
/// a watcher sees every value once, in order.
pub async fn concurrent_compare_and_swap_is_atomic<H: StoreHarness>(harness: &H) {
    const CHECK: &str = "concurrency::concurrent_compare_and_swap_is_atomic";
    const INCREMENTS: u64 = 10;
    let store = harness.fresh().await;
    let counter = key("cas/counter");
    let r0 = put(&store, &counter, "0", CHECK).await;
    let mut watch = open_watch(&store, "cas/", r0.next(), CHECK).await;

    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let (store, counter) = (store.clone(), counter.clone());
        tasks.push(tokio::spawn(async move {
            let mut done = 0;
            while done < INCREMENTS {
                let fact = get_some(&store, &counter, CHECK).await;
                let n: u64 = fact
                    .value_str()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or_else(|| {
                        panic!("{CHECK}: counter holds {:?}, not a number", fact.value)
                    });
                let txn = Txn::new()
                    .when(Compare::mod_revision(counter.clone(), fact.mod_revision))
                    .then(Op::put(counter.clone(), (n + 1).to_string()));
                if ok(store.txn(txn).await, CHECK, "compare-and-swap").succeeded {
                    done += 1;
                }
                tokio::task::yield_now().await;
            }
        }));
    }
    for task in tasks {
        task.await
            .unwrap_or_else(|e| panic!("{CHECK}: an incrementing task failed: {e}"));
    }

    let total = TASKS as u64 * INCREMENTS;
    let fact = get_some(&store, &counter, CHECK).await;
    assert_eq!(
        (fact.value_str(), fact.version),
        (Some(total.to_string().as_str()), total + 1),
        "{CHECK}: counter after {total} increments (value, version)"
    );
    let events = next_events(&mut watch, total as usize, CHECK, "counter events").await;
    for (i, event) in events.iter().enumerate() {
        let expected = (i as u64 + 1).to_string();
        assert_eq!(
            event.fact.value_str(),
            Some(expected.as_str()),
            "{CHECK}: counter event {i} out of order or missing"
        );
        assert_eq!(
            event.revision(),
            Revision(r0.0 + i as u64 + 1),
            "{CHECK}: counter event {i}'s revision"
        );
    }
    assert_no_event(&mut watch, CHECK, "after every increment").await;
}
