//! Checks of leases: grant, put with lease, keep-alive, expiry, revoke, and moving keys between
//! leases.

use std::time::Duration;

use ccattler_core::{Fact, FactStore, Key, Lease, LeaseId, Op, Revision, StoreError, Txn};

use super::StoreHarness;
use super::support::{
    assert_delete_event, assert_no_event, assert_revision, err, get, get_some, key, next_events,
    ok, open_watch, put, revision,
};

/// The TTL the checks ask for.
pub const LEASE_TTL: Duration = Duration::from_secs(2);

async fn grant<S: FactStore>(store: &S, check: &str) -> Lease {
    let lease = ok(
        store.grant_lease(LEASE_TTL).await,
        check,
        "grant_lease(2 s)",
    );
    assert!(
        lease.ttl >= LEASE_TTL,
        "{check}: grant_lease(2 s) granted {:?}, less than asked for",
        lease.ttl
    );
    lease
}

async fn put_leased<S: FactStore>(
    store: &S,
    key: &Key,
    value: &str,
    lease: LeaseId,
    check: &str,
) -> Revision {
    let what = format!("put_with_lease({key}, {value:?}, {lease})");
    ok(
        store
            .put_with_lease(key, value.to_owned().into(), lease)
            .await,
        check,
        &what,
    )
}

/// Checks that `result` is `LeaseNotFound(lease)`.
fn assert_lease_not_found<T: std::fmt::Debug>(
    result: Result<T, StoreError>,
    lease: LeaseId,
    check: &str,
    what: &str,
) {
    let e = err(result, check, what);
    assert!(
        matches!(e, StoreError::LeaseNotFound(id) if id == lease),
        "{check}: {what} failed with {e:?}, expected LeaseNotFound({lease})"
    );
}

/// Checks that `events` are the deletes, at any revisions, of the keys that held `facts`.
fn assert_deletes(events: &[ccattler_core::WatchEvent], facts: &[Fact], check: &str, what: &str) {
    assert_eq!(events.len(), facts.len(), "{check}: {what}: event count");
    for fact in facts {
        let event = events
            .iter()
            .find(|e| e.key() == &fact.key)
            .unwrap_or_else(|| panic!("{check}: {what}: no event for {}: {events:#?}", fact.key));
        assert_delete_event(event, fact, event.revision(), check, what);
    }
}

/// A granted lease attaches to keys by plain put and by transaction, and keep-alive returns its
/// TTL.
pub async fn lease_grant_and_put<H: StoreHarness>(harness: &H) {
    const CHECK: &str = "leases::lease_grant_and_put";
    let store = harness.fresh().await;
    let lease = grant(&store, CHECK).await;
    let other = grant(&store, CHECK).await;
    assert_ne!(
        lease.id, other.id,
        "{CHECK}: two grants returned the same lease id"
    );

    let (a, b) = (key("lg/a"), key("lg/b"));
    let r = put_leased(&store, &a, "1", lease.id, CHECK).await;
    let fact = get_some(&store, &a, CHECK).await;
    assert_eq!(
        fact.lease,
        Some(lease.id),
        "{CHECK}: put_with_lease: fact's lease"
    );
    assert_eq!(
        fact.mod_revision, r,
        "{CHECK}: put_with_lease: returned revision"
    );

    let op = Op::Put {
        key: b.clone(),
        value: "1".into(),
        lease: Some(lease.id),
    };
    ok(
        store.txn(Txn::new().then(op)).await,
        CHECK,
        "txn put with lease",
    );
    let fact = get_some(&store, &b, CHECK).await;
    assert_eq!(
        fact.lease,
        Some(lease.id),
        "{CHECK}: txn put with lease: fact's lease"
    );

    let ttl = ok(store.keep_alive(lease.id).await, CHECK, "keep_alive");
    assert_eq!(
        ttl, lease.ttl,
        "{CHECK}: keep_alive returned {ttl:?}, the lease's TTL is {:?}",
        lease.ttl
    );
    ok(store.revoke_lease(lease.id).await, CHECK, "revoke_lease");
    ok(
        store.revoke_lease(other.id).await,
        CHECK,
        "revoke_lease(other)",
    );
}

/// A kept-alive lease outlives its first TTL; one without keep-alive expires after it, deleting
/// its key with a delete event.
pub async fn keep_alive_extends_life<H: StoreHarness>(harness: &H) {
    const CHECK: &str = "leases::keep_alive_extends_life";
    let store = harness.fresh().await;
    let kept = grant(&store, CHECK).await;
    let lapsed = grant(&store, CHECK).await;
    let (ka, kb) = (key("lk/kept"), key("lk/lapsed"));
    put_leased(&store, &ka, "1", kept.id, CHECK).await;
    put_leased(&store, &kb, "1", lapsed.id, CHECK).await;
    let kb_fact = get_some(&store, &kb, CHECK).await;
    let mut watch = open_watch(&store, "lk/", Revision::ZERO, CHECK).await;

    let step = kept.ttl.max(lapsed.ttl) * 3 / 5;
    harness.advance(step).await;
    let ttl = ok(
        store.keep_alive(kept.id).await,
        CHECK,
        "keep_alive at 0.6 TTL",
    );
    assert_eq!(ttl, kept.ttl, "{CHECK}: keep_alive returned {ttl:?}");
    harness.advance(step).await;

    let events = next_events(
        &mut watch,
        1,
        CHECK,
        "expiry of the lease without keep-alive",
    )
    .await;
    assert_deletes(&events, &[kb_fact], CHECK, "expiry at 1.2 TTL");
    assert_eq!(
        get(&store, &kb, CHECK).await,
        None,
        "{CHECK}: key of the expired lease survived"
    );
    let fact = get(&store, &ka, CHECK).await;
    assert!(
        fact.is_some(),
        "{CHECK}: key of a lease kept alive at 0.6 TTL was gone at 1.2 TTL"
    );
    assert_no_event(&mut watch, CHECK, "the kept-alive key must not be deleted").await;
    ok(
        store.revoke_lease(kept.id).await,
        CHECK,
        "revoke_lease(kept)",
    );
}

/// A lease left alone expires after its TTL: its keys are deleted with delete events, other keys
/// stay, and the lease can no longer be kept alive, revoked or put with.
pub async fn expiry_deletes_keys_with_events<H: StoreHarness>(harness: &H) {
    const CHECK: &str = "leases::expiry_deletes_keys_with_events";
    let store = harness.fresh().await;
    let lease = grant(&store, CHECK).await;
    let (x, y, plain) = (key("lx/x"), key("lx/y"), key("lx/plain"));
    put_leased(&store, &x, "1", lease.id, CHECK).await;
    put_leased(&store, &y, "1", lease.id, CHECK).await;
    put(&store, &plain, "1", CHECK).await;
    let facts = [
        get_some(&store, &x, CHECK).await,
        get_some(&store, &y, CHECK).await,
    ];
    let mut watch = open_watch(&store, "lx/", Revision::ZERO, CHECK).await;

    harness.advance(lease.ttl * 3 / 2).await;
    let events = next_events(&mut watch, 2, CHECK, "delete events of an expired lease").await;
    assert_deletes(&events, &facts, CHECK, "expiry");
    for k in [&x, &y] {
        assert_eq!(
            get(&store, k, CHECK).await,
            None,
            "{CHECK}: {k} survived its lease"
        );
    }
    assert!(
        get(&store, &plain, CHECK).await.is_some(),
        "{CHECK}: expiry deleted a key without lease"
    );
    assert_no_event(&mut watch, CHECK, "after the expiry's deletes").await;

    let now = revision(&store, CHECK).await;
    assert_lease_not_found(
        store.keep_alive(lease.id).await,
        lease.id,
        CHECK,
        "keep_alive(expired)",
    );
    assert_lease_not_found(
        store.revoke_lease(lease.id).await,
        lease.id,
        CHECK,
        "revoke_lease(expired)",
    );
    let late = key("lx/late");
    let result = store.put_with_lease(&late, "1".into(), lease.id).await;
    assert_lease_not_found(result, lease.id, CHECK, "put_with_lease(expired)");
    assert_eq!(
        get(&store, &late, CHECK).await,
        None,
        "{CHECK}: put with an expired lease wrote"
    );
    assert_revision(&store, now, CHECK, "after operations on an expired lease").await;
}

/// Revoking a lease deletes all its keys in one revision, with delete events, and nothing else.
pub async fn revoke_deletes_keys_in_one_revision<H: StoreHarness>(harness: &H) {
    const CHECK: &str = "leases::revoke_deletes_keys_in_one_revision";
    let store = harness.fresh().await;
    let lease = grant(&store, CHECK).await;
    let other = grant(&store, CHECK).await;
    let keys = [key("lr/x"), key("lr/y"), key("lr/z")];
    for k in &keys {
        put_leased(&store, k, "1", lease.id, CHECK).await;
    }
    let (kept, plain) = (key("lr/other"), key("lr/plain"));
    put_leased(&store, &kept, "1", other.id, CHECK).await;
    let r = put(&store, &plain, "1", CHECK).await;
    let mut facts = Vec::new();
    for k in &keys {
        facts.push(get_some(&store, k, CHECK).await);
    }
    let mut watch = open_watch(&store, "lr/", r.next(), CHECK).await;

    ok(store.revoke_lease(lease.id).await, CHECK, "revoke_lease");
    assert_revision(
        &store,
        r.next(),
        CHECK,
        "a revoke of three keys takes one revision",
    )
    .await;
    let events = next_events(&mut watch, 3, CHECK, "delete events of a revoke").await;
    for event in &events {
        assert_eq!(
            event.revision(),
            r.next(),
            "{CHECK}: revoke event at the wrong revision"
        );
    }
    assert_deletes(&events, &facts, CHECK, "revoke");
    for k in &keys {
        assert_eq!(
            get(&store, k, CHECK).await,
            None,
            "{CHECK}: {k} survived the revoke"
        );
    }
    for k in [&kept, &plain] {
        assert!(
            get(&store, k, CHECK).await.is_some(),
            "{CHECK}: revoke deleted {k}"
        );
    }
    assert_no_event(&mut watch, CHECK, "after the revoke's deletes").await;

    assert_lease_not_found(
        store.keep_alive(lease.id).await,
        lease.id,
        CHECK,
        "keep_alive(revoked)",
    );
    assert_lease_not_found(
        store.revoke_lease(lease.id).await,
        lease.id,
        CHECK,
        "revoke_lease(revoked)",
    );
    let result = store.put_with_lease(&keys[0], "1".into(), lease.id).await;
    assert_lease_not_found(result, lease.id, CHECK, "put_with_lease(revoked)");
    assert_revision(
        &store,
        r.next(),
        CHECK,
        "after operations on a revoked lease",
    )
    .await;
    ok(
        store.keep_alive(other.id).await,
        CHECK,
        "keep_alive(other lease)",
    );
    ok(
        store.revoke_lease(other.id).await,
        CHECK,
        "revoke_lease(other lease)",
    );
}

/// A put that changes only the key's lease writes (a put of the same value and lease does not),
/// and the key then follows its new lease.
pub async fn put_changes_lease_attachment<H: StoreHarness>(harness: &H) {
    const CHECK: &str = "leases::put_changes_lease_attachment";
    let store = harness.fresh().await;
    let first = grant(&store, CHECK).await;
    let second = grant(&store, CHECK).await;
    let (detached, moved) = (key("lm/detached"), key("lm/moved"));

    let r1 = put_leased(&store, &detached, "v", first.id, CHECK).await;
    let again = put_leased(&store, &detached, "v", first.id, CHECK).await;
    assert_eq!(again, r1, "{CHECK}: put of the same value and lease wrote");
    assert_revision(&store, r1, CHECK, "after a put of the same value and lease").await;

    let r2 = put(&store, &detached, "v", CHECK).await;
    assert_eq!(
        r2,
        r1.next(),
        "{CHECK}: put without lease of a leased key's value did not write"
    );
    let fact = get_some(&store, &detached, CHECK).await;
    assert_eq!(
        (fact.lease, fact.version),
        (None, 2),
        "{CHECK}: detached key: {fact:?}"
    );

    put_leased(&store, &moved, "v", first.id, CHECK).await;
    let r4 = put_leased(&store, &moved, "v", second.id, CHECK).await;
    assert_eq!(
        r4,
        r2.next().next(),
        "{CHECK}: moving a key to another lease did not write"
    );
    let fact = get_some(&store, &moved, CHECK).await;
    assert_eq!(fact.lease, Some(second.id), "{CHECK}: moved key's lease");

    ok(
        store.revoke_lease(first.id).await,
        CHECK,
        "revoke_lease(first)",
    );
    for k in [&detached, &moved] {
        assert!(
            get(&store, k, CHECK).await.is_some(),
            "{CHECK}: revoking the old lease deleted {k}"
        );
    }
    ok(
        store.revoke_lease(second.id).await,
        CHECK,
        "revoke_lease(second)",
    );
    assert_eq!(
        get(&store, &moved, CHECK).await,
        None,
        "{CHECK}: moved key survived its new lease"
    );
    assert!(
        get(&store, &detached, CHECK).await.is_some(),
        "{CHECK}: detached key deleted"
    );
}
