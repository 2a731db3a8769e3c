//! Checks of the global revision, per-key revisions and versions, idempotent put, delete and scan.

use ccattler_core::{FactStore, Op, Txn};

use super::StoreHarness;
use super::support::{
    assert_no_event, assert_put_event, assert_revision, get, get_some, key, keys_of, next_events,
    ok, open_watch, put, revision,
};

/// A fresh store holds nothing, and a scan of it reports the current revision.
pub async fn fresh_store_is_empty<H: StoreHarness>(harness: &H) {
    const CHECK: &str = "revisions::fresh_store_is_empty";
    let store = harness.fresh().await;
    let now = revision(&store, CHECK).await;
    let scan = ok(store.scan("").await, CHECK, "scan(\"\")");
    assert!(
        scan.facts.is_empty(),
        "{CHECK}: a fresh store holds {:?}, expected nothing",
        keys_of(&scan.facts)
    );
    assert_eq!(
        scan.revision, now,
        "{CHECK}: scan revision {} differs from the store revision {now}",
        scan.revision
    );
}

/// Every committed write raises the global revision by exactly one, a transaction of several
/// operations included; reads never raise it.
pub async fn writes_raise_revision_by_one<H: StoreHarness>(harness: &H) {
    const CHECK: &str = "revisions::writes_raise_revision_by_one";
    let store = harness.fresh().await;
    let (a, b, c) = (key("r/a"), key("r/b"), key("r/c"));
    let r0 = revision(&store, CHECK).await;

    let r1 = put(&store, &a, "1", CHECK).await;
    assert_eq!(
        r1,
        r0.next(),
        "{CHECK}: first put returned {r1} at store revision {r0}"
    );
    assert_revision(&store, r1, CHECK, "after the first put").await;

    // Reads of every kind leave the revision alone.
    get(&store, &a, CHECK).await;
    get(&store, &b, CHECK).await;
    ok(store.scan("").await, CHECK, "scan(\"\")");
    ok(store.scan("r/").await, CHECK, "scan(\"r/\")");
    revision(&store, CHECK).await;
    assert_revision(&store, r1, CHECK, "after reads").await;

    let r2 = put(&store, &b, "1", CHECK).await;
    assert_eq!(
        r2,
        r1.next(),
        "{CHECK}: second put returned {r2} after {r1}"
    );
    let deleted = ok(store.delete(&a).await, CHECK, "delete(r/a)");
    assert!(deleted.is_some(), "{CHECK}: delete(r/a) returned None");
    assert_revision(&store, r2.next(), CHECK, "after a delete").await;

    let txn = Txn::new()
        .then(Op::put(a.clone(), "2"))
        .then(Op::put(c.clone(), "1"))
        .then(Op::delete(b.clone()));
    let response = ok(store.txn(txn).await, CHECK, "three-op txn");
    let r4 = r2.next().next();
    assert!(
        response.succeeded,
        "{CHECK}: a txn without compares did not succeed"
    );
    assert_eq!(
        response.revision,
        r4,
        "{CHECK}: a three-op txn moved the revision from {} to {}, expected one step",
        r2.next(),
        response.revision
    );
    assert_revision(&store, r4, CHECK, "after a three-op txn").await;
    for k in [&a, &c] {
        let fact = get_some(&store, k, CHECK).await;
        assert_eq!(
            fact.mod_revision, r4,
            "{CHECK}: {k} written by the txn has mod_revision {}, expected {r4}",
            fact.mod_revision
        );
    }
}

/// `create_revision`, `mod_revision` and `version` follow the writes to each key; a delete and
/// re-put starts the key over.
pub async fn key_metadata_tracks_writes<H: StoreHarness>(harness: &H) {
    const CHECK: &str = "revisions::key_metadata_tracks_writes";
    let store = harness.fresh().await;
    let (a, other) = (key("m/a"), key("m/other"));

    let r1 = put(&store, &a, "v1", CHECK).await;
    let fact = get_some(&store, &a, CHECK).await;
    assert_eq!(
        (fact.create_revision, fact.mod_revision, fact.version),
        (r1, r1, 1),
        "{CHECK}: after create, (create, mod, version) differ: {fact:?}"
    );
    assert_eq!(fact.value_str(), Some("v1"), "{CHECK}: value after create");
    assert_eq!(fact.lease, None, "{CHECK}: a plain put attached a lease");
    assert_eq!(fact.key, a, "{CHECK}: get returned a different key");

    let other_rev = put(&store, &other, "x", CHECK).await;
    let r2 = put(&store, &a, "v2", CHECK).await;
    assert_eq!(r2, other_rev.next(), "{CHECK}: update got revision {r2}");
    let fact = get_some(&store, &a, CHECK).await;
    assert_eq!(
        (fact.create_revision, fact.mod_revision, fact.version),
        (r1, r2, 2),
        "{CHECK}: after an update, (create, mod, version) differ: {fact:?}"
    );
    assert_eq!(fact.value_str(), Some("v2"), "{CHECK}: value after update");

    let r3 = put(&store, &a, "v3", CHECK).await;
    let fact = get_some(&store, &a, CHECK).await;
    assert_eq!(
        (fact.create_revision, fact.mod_revision, fact.version),
        (r1, r3, 3),
        "{CHECK}: after a second update, (create, mod, version) differ: {fact:?}"
    );

    // Writes to `a` leave `other` alone.
    let o = get_some(&store, &other, CHECK).await;
    assert_eq!(
        (o.create_revision, o.mod_revision, o.version),
        (other_rev, other_rev, 1),
        "{CHECK}: writes to m/a changed m/other: {o:?}"
    );

    ok(store.delete(&a).await, CHECK, "delete(m/a)");
    let r5 = put(&store, &a, "v4", CHECK).await;
    let fact = get_some(&store, &a, CHECK).await;
    assert_eq!(
        (fact.create_revision, fact.mod_revision, fact.version),
        (r5, r5, 1),
        "{CHECK}: after delete and re-put, the key must start over: {fact:?}"
    );
    assert!(
        r5 > r3.next(),
        "{CHECK}: re-put revision {r5} not after the delete"
    );
}

/// A put of the value already stored writes nothing: same revision, no event.
pub async fn put_of_equal_value_writes_nothing<H: StoreHarness>(harness: &H) {
    const CHECK: &str = "revisions::put_of_equal_value_writes_nothing";
    let store = harness.fresh().await;
    let (a, b) = (key("e/a"), key("e/b"));
    let r1 = put(&store, &a, "same", CHECK).await;
    let before = get_some(&store, &a, CHECK).await;
    let mut watch = open_watch(&store, "e/", r1.next(), CHECK).await;

    let again = put(&store, &a, "same", CHECK).await;
    assert_eq!(
        again, r1,
        "{CHECK}: put of an equal value returned {again}, expected the existing mod revision {r1}"
    );
    assert_revision(&store, r1, CHECK, "after a put of an equal value").await;
    let after = get_some(&store, &a, CHECK).await;
    assert_eq!(
        after, before,
        "{CHECK}: put of an equal value changed the fact"
    );

    // The next event the watch delivers is the put of `b`, not a phantom write of `a`.
    let r2 = put(&store, &b, "other", CHECK).await;
    assert_eq!(
        r2,
        r1.next(),
        "{CHECK}: put after an equal put returned {r2}"
    );
    let events = next_events(&mut watch, 1, CHECK, "watch across an equal put").await;
    let fact_b = get_some(&store, &b, CHECK).await;
    assert_put_event(
        &events[0],
        &fact_b,
        None,
        CHECK,
        "first event after an equal put",
    );
    assert_no_event(&mut watch, CHECK, "after the put of e/b").await;
}

/// A delete returns what the key held and raises the revision; deleting a missing key returns
/// `None` and writes nothing.
pub async fn delete_returns_previous_fact<H: StoreHarness>(harness: &H) {
    const CHECK: &str = "revisions::delete_returns_previous_fact";
    let store = harness.fresh().await;
    let a = key("d/a");
    put(&store, &a, "1", CHECK).await;
    let r = put(&store, &a, "2", CHECK).await;
    let before = get_some(&store, &a, CHECK).await;

    let prev = ok(store.delete(&a).await, CHECK, "delete(d/a)");
    assert_eq!(
        prev.as_ref(),
        Some(&before),
        "{CHECK}: delete returned a different fact than get did before it"
    );
    assert_revision(&store, r.next(), CHECK, "after a delete").await;
    assert_eq!(
        get(&store, &a, CHECK).await,
        None,
        "{CHECK}: key survived its delete"
    );

    let again = ok(store.delete(&a).await, CHECK, "second delete(d/a)");
    assert_eq!(
        again, None,
        "{CHECK}: deleting a deleted key returned {again:?}"
    );
    let never = ok(
        store.delete(&key("d/never")).await,
        CHECK,
        "delete(d/never)",
    );
    assert_eq!(
        never, None,
        "{CHECK}: deleting a missing key returned {never:?}"
    );
    assert_revision(&store, r.next(), CHECK, "after deletes of missing keys").await;
}

/// A scan returns the facts whose keys start with the prefix (a plain string prefix, not a path
/// segment), sorted by key, equal to what `get` returns.
pub async fn scan_is_sorted_by_plain_prefix<H: StoreHarness>(harness: &H) {
    const CHECK: &str = "revisions::scan_is_sorted_by_plain_prefix";
    let store = harness.fresh().await;
    for path in ["p/b", "q/a", "p/ab", "pa/x", "p/a", "p/a/c"] {
        put(&store, &key(path), path, CHECK).await;
    }
    let now = revision(&store, CHECK).await;
    let cases: [(&str, &[&str]); 6] = [
        ("p/", &["p/a", "p/a/c", "p/ab", "p/b"]),
        ("p/a", &["p/a", "p/a/c", "p/ab"]),
        ("p", &["p/a", "p/a/c", "p/ab", "p/b", "pa/x"]),
        ("", &["p/a", "p/a/c", "p/ab", "p/b", "pa/x", "q/a"]),
        ("p/a/", &["p/a/c"]),
        ("zz", &[]),
    ];
    for (prefix, expected) in cases {
        let scan = ok(
            store.scan(prefix).await,
            CHECK,
            &format!("scan({prefix:?})"),
        );
        assert_eq!(
            keys_of(&scan.facts),
            expected,
            "{CHECK}: scan({prefix:?}) returned the wrong keys or order"
        );
        assert_eq!(
            scan.revision, now,
            "{CHECK}: scan({prefix:?}) reported revision {}, the store is at {now}",
            scan.revision
        );
        for fact in &scan.facts {
            let got = get_some(&store, &fact.key, CHECK).await;
            assert_eq!(&got, fact, "{CHECK}: scan({prefix:?}) and get disagree");
        }
    }
}

/// A watch from a scan's revision + 1 sees exactly the changes made after the scan.
pub async fn scan_revision_joins_watch<H: StoreHarness>(harness: &H) {
    const CHECK: &str = "revisions::scan_revision_joins_watch";
    let store = harness.fresh().await;
    let (a, b, outside) = (key("s/a"), key("s/b"), key("t/a"));
    put(&store, &a, "1", CHECK).await;
    put(&store, &b, "1", CHECK).await;
    let scan = ok(store.scan("s/").await, CHECK, "scan(\"s/\")");
    assert_eq!(keys_of(&scan.facts), ["s/a", "s/b"], "{CHECK}: scan keys");

    let before_a = get_some(&store, &a, CHECK).await;
    put(&store, &a, "2", CHECK).await;
    put(&store, &outside, "1", CHECK).await;
    let after_a = get_some(&store, &a, CHECK).await;

    let mut watch = open_watch(&store, "s/", scan.revision.next(), CHECK).await;
    let events = next_events(&mut watch, 1, CHECK, "watch from scan revision + 1").await;
    assert_put_event(
        &events[0],
        &after_a,
        Some(&before_a),
        CHECK,
        "change after the scan",
    );
    assert_no_event(&mut watch, CHECK, "after the one change under s/").await;
}
