//! Checks that bad input gets a typed error and writes nothing.

use std::time::Duration;

use ccattler_core::{
    Compare, FactStore, Key, KeyError, LeaseId, Op, Revision, StoreError, Txn, Value,
};

use super::StoreHarness;
use super::support::{assert_revision, err, get, key, keys_of, ok, put, revision};

/// Checks that the store holds exactly `expected` keys and is still at `revision`.
async fn assert_unchanged<S: FactStore>(
    store: &S,
    revision: Revision,
    expected: &[&str],
    check: &str,
    what: &str,
) {
    assert_revision(store, revision, check, what).await;
    let scan = ok(store.scan("").await, check, "scan(\"\")");
    assert_eq!(
        keys_of(&scan.facts),
        expected,
        "{check}: {what}: keys in the store"
    );
}

/// Keys that are empty, start with `/` or contain NUL cannot be built, so no store sees them.
pub async fn invalid_keys_are_unrepresentable<H: StoreHarness>(_harness: &H) {
    const CHECK: &str = "bad_input::invalid_keys_are_unrepresentable";
    assert!(
        matches!(Key::new(""), Err(KeyError::Empty)),
        "{CHECK}: empty key accepted"
    );
    assert!(
        matches!(Key::new("/a"), Err(KeyError::LeadingSlash(_))),
        "{CHECK}: key with a leading slash accepted"
    );
    assert!(
        matches!(Key::new("a\0b"), Err(KeyError::Nul(_))),
        "{CHECK}: key with NUL accepted"
    );
}

/// Scans and watches with a malformed prefix fail with `InvalidKey`.
pub async fn invalid_prefixes_are_rejected<H: StoreHarness>(harness: &H) {
    const CHECK: &str = "bad_input::invalid_prefixes_are_rejected";
    let store = harness.fresh().await;
    let r = put(&store, &key("bp/a"), "1", CHECK).await;
    for prefix in ["/bp", "bp\0", "bp//"] {
        let e = err(
            store.scan(prefix).await,
            CHECK,
            &format!("scan({prefix:?})"),
        );
        assert!(
            matches!(e, StoreError::InvalidKey(_)),
            "{CHECK}: scan({prefix:?}) failed with {e:?}, expected InvalidKey"
        );
        let e = match store.watch(prefix, Revision::ZERO).await {
            Ok(_) => panic!("{CHECK}: watch({prefix:?}) succeeded, expected InvalidKey"),
            Err(e) => e,
        };
        assert!(
            matches!(e, StoreError::InvalidKey(_)),
            "{CHECK}: watch({prefix:?}) failed with {e:?}, expected InvalidKey"
        );
    }
    assert_unchanged(&store, r, &["bp/a"], CHECK, "after bad prefixes").await;
}

/// Transactions over the store's limit of compares or operations per branch fail with
/// `TooManyOps` and write nothing; exactly the limit is accepted.
pub async fn too_many_ops_are_rejected<H: StoreHarness>(harness: &H) {
    const CHECK: &str = "bad_input::too_many_ops_are_rejected";
    let store = harness.fresh().await;
    let max = store.limits().max_txn_ops;
    assert!(
        max >= 128,
        "{CHECK}: limits().max_txn_ops is {max}, expected at least 128"
    );
    let r = revision(&store, CHECK).await;
    let keys: Vec<Key> = (0..=max).map(|i| key(&format!("bo/{i:04}"))).collect();
    let puts =
        |n: usize| -> Vec<Op> { keys[..n].iter().map(|k| Op::put(k.clone(), "1")).collect() };

    let too_many = [
        (
            Txn {
                compares: keys.iter().map(|k| Compare::absent(k.clone())).collect(),
                then: puts(1),
                otherwise: vec![],
            },
            "compares",
        ),
        (
            Txn {
                compares: vec![],
                then: puts(max + 1),
                otherwise: vec![],
            },
            "then operations",
        ),
        (
            Txn {
                compares: vec![Compare::exists(keys[0].clone())],
                then: vec![],
                otherwise: puts(max + 1),
            },
            "otherwise operations",
        ),
    ];
    for (txn, what) in too_many {
        let e = err(
            store.txn(txn).await,
            CHECK,
            &format!("txn with {} {what}", max + 1),
        );
        assert!(
            matches!(e, StoreError::TooManyOps { count, limit, .. } if count == max + 1 && limit == max),
            "{CHECK}: txn with {} {what} failed with {e:?}, expected TooManyOps {{ count: {}, limit: {max} }}",
            max + 1,
            max + 1
        );
        assert_unchanged(&store, r, &[], CHECK, &format!("after too many {what}")).await;
    }

    let txn = Txn {
        compares: keys[..max]
            .iter()
            .map(|k| Compare::absent(k.clone()))
            .collect(),
        then: puts(max),
        otherwise: vec![],
    };
    let response = ok(store.txn(txn).await, CHECK, "txn at the limit");
    assert!(
        response.succeeded,
        "{CHECK}: txn at the limit did not succeed"
    );
    assert_eq!(
        response.revision,
        r.next(),
        "{CHECK}: txn at the limit: revision"
    );
    let scan = ok(store.scan("bo/").await, CHECK, "scan(\"bo/\")");
    assert_eq!(
        scan.facts.len(),
        max,
        "{CHECK}: txn at the limit wrote {} keys",
        scan.facts.len()
    );
}

/// A branch that writes one key twice fails with `DuplicateKey`, whichever branch would run.
pub async fn duplicate_keys_are_rejected<H: StoreHarness>(harness: &H) {
    const CHECK: &str = "bad_input::duplicate_keys_are_rejected";
    let store = harness.fresh().await;
    let (a, b) = (key("bd/a"), key("bd/b"));
    let r = put(&store, &b, "1", CHECK).await;
    let cases = [
        (
            Txn::new()
                .then(Op::put(a.clone(), "1"))
                .then(Op::put(a.clone(), "2")),
            "two puts",
        ),
        (
            Txn::new()
                .then(Op::put(a.clone(), "1"))
                .then(Op::delete(a.clone())),
            "put and delete",
        ),
        (
            Txn::new()
                .when(Compare::exists(b.clone()))
                .then(Op::put(b.clone(), "2"))
                .otherwise(Op::delete(a.clone()))
                .otherwise(Op::put(a.clone(), "1")),
            "in the branch that would not run",
        ),
    ];
    for (txn, what) in cases {
        let e = err(
            store.txn(txn).await,
            CHECK,
            &format!("txn with a duplicate key: {what}"),
        );
        assert!(
            matches!(&e, StoreError::DuplicateKey(k) if *k == a),
            "{CHECK}: duplicate key ({what}) failed with {e:?}, expected DuplicateKey(bd/a)"
        );
        assert_unchanged(&store, r, &["bd/b"], CHECK, what).await;
    }
    let txn = Txn::new()
        .then(Op::put(a.clone(), "1"))
        .otherwise(Op::put(a.clone(), "2"));
    ok(
        store.txn(txn).await,
        CHECK,
        "the same key once in each branch",
    );
}

/// A value over `limits().max_value_bytes` fails with `ValueTooLarge`, by put, put with lease
/// and transaction, and nothing of the request is written.
pub async fn large_values_are_rejected<H: StoreHarness>(harness: &H) {
    const CHECK: &str = "bad_input::large_values_are_rejected";
    let store = harness.fresh().await;
    let limit = store.limits().max_value_bytes;
    let big = Value::from(vec![b'x'; limit + 1]);
    let (a, b) = (key("bv/a"), key("bv/b"));
    let r = put(&store, &b, "1", CHECK).await;
    let lease = ok(
        store.grant_lease(Duration::from_secs(10)).await,
        CHECK,
        "grant_lease",
    );

    let results = [
        (store.put(&a, big.clone()).await, "put"),
        (
            store.put_with_lease(&a, big.clone(), lease.id).await,
            "put_with_lease",
        ),
        (
            store
                .txn(
                    Txn::new()
                        .then(Op::put(b.clone(), "2"))
                        .then(Op::put(a.clone(), big.clone())),
                )
                .await
                .map(|response| response.revision),
            "txn",
        ),
    ];
    for (result, what) in results {
        let e = err(result, CHECK, &format!("{what} of {} bytes", limit + 1));
        assert!(
            matches!(&e, StoreError::ValueTooLarge { key, size, limit: l }
                if *key == a && *size == limit + 1 && *l == limit),
            "{CHECK}: {what} of {} bytes failed with {e:?}, expected ValueTooLarge for bv/a",
            limit + 1
        );
    }
    assert_unchanged(&store, r, &["bv/b"], CHECK, "after too large values").await;
    let fact = get(&store, &b, CHECK)
        .await
        .expect("bv/b was checked above");
    assert_eq!(
        fact.value_str(),
        Some("1"),
        "{CHECK}: the rejected txn changed bv/b"
    );
    ok(store.revoke_lease(lease.id).await, CHECK, "revoke_lease");
}

/// A put or transaction with a lease that was never granted, or was revoked, fails with
/// `LeaseNotFound` and writes nothing; keep-alive and revoke of it fail the same way.
pub async fn unknown_leases_are_rejected<H: StoreHarness>(harness: &H) {
    const CHECK: &str = "bad_input::unknown_leases_are_rejected";
    let store = harness.fresh().await;
    let revoked = ok(
        store.grant_lease(Duration::from_secs(10)).await,
        CHECK,
        "grant_lease",
    )
    .id;
    ok(store.revoke_lease(revoked).await, CHECK, "revoke_lease");
    let (a, b) = (key("bl/a"), key("bl/b"));
    let r = put(&store, &b, "1", CHECK).await;
    for lease in [LeaseId(0x0bad_1ea5e), revoked] {
        let op = Op::Put {
            key: a.clone(),
            value: "1".into(),
            lease: Some(lease),
        };
        let txn = Txn::new().then(Op::put(b.clone(), "2")).then(op);
        let results = [
            (
                store.put_with_lease(&a, "1".into(), lease).await,
                "put_with_lease",
            ),
            (
                store.txn(txn).await.map(|response| response.revision),
                "txn put",
            ),
            (store.keep_alive(lease).await.map(|_| r), "keep_alive"),
            (store.revoke_lease(lease).await.map(|()| r), "revoke_lease"),
        ];
        for (result, what) in results {
            let e = err(result, CHECK, &format!("{what} with unknown lease {lease}"));
            assert!(
                matches!(e, StoreError::LeaseNotFound(id) if id == lease),
                "{CHECK}: {what} with unknown lease {lease} failed with {e:?}, expected LeaseNotFound"
            );
        }
        assert_unchanged(&store, r, &["bl/b"], CHECK, "after unknown leases").await;
    }
}

/// A lease with a zero TTL is refused with `InvalidTtl`.
pub async fn zero_ttl_is_rejected<H: StoreHarness>(harness: &H) {
    const CHECK: &str = "bad_input::zero_ttl_is_rejected";
    let store = harness.fresh().await;
    let e = err(
        store.grant_lease(Duration::ZERO).await,
        CHECK,
        "grant_lease(0)",
    );
    assert!(
        matches!(e, StoreError::InvalidTtl(ttl) if ttl == Duration::ZERO),
        "{CHECK}: grant_lease(0) failed with {e:?}, expected InvalidTtl(0)"
    );
}
