//! Checks of transactions: every compare target and operator, both branches, atomic commit at one
//! revision, and puts that always write.

use ccattler_core::{CmpOp, Compare, CompareTarget, FactStore, Key, Op, Revision, Txn, Value};

use super::StoreHarness;
use super::support::{
    assert_delete_event, assert_no_event, assert_put_event, assert_revision, get, get_some, key,
    next_events, ok, open_watch, put, revision,
};

const OPS: [CmpOp; 4] = [CmpOp::Equal, CmpOp::NotEqual, CmpOp::Greater, CmpOp::Less];

/// Runs `compares` with a `then` branch writing "then" and an `otherwise` branch writing "else" to
/// a flag key, checks that exactly the reported branch ran at one new revision, and returns
/// whether the compares held.
async fn probe<S: FactStore>(store: &S, compares: Vec<Compare>, check: &str, what: &str) -> bool {
    let flag = key("txn-flag/probe");
    let before = revision(store, check).await;
    let txn = Txn {
        compares,
        then: vec![Op::put(flag.clone(), "then")],
        otherwise: vec![Op::put(flag.clone(), "else")],
    };
    let response = ok(store.txn(txn).await, check, what);
    assert_eq!(
        response.revision,
        before.next(),
        "{check}: {what}: txn moved the revision from {before} to {}",
        response.revision
    );
    let fact = get_some(store, &flag, check).await;
    let expected = if response.succeeded { "then" } else { "else" };
    assert_eq!(
        fact.value_str(),
        Some(expected),
        "{check}: {what}: txn reported succeeded = {} but the other branch ran",
        response.succeeded
    );
    response.succeeded
}

/// Probes one compare and checks the branch taken against `expected`.
async fn expect_compare<S: FactStore>(store: &S, compare: Compare, expected: bool, check: &str) {
    let what = format!(
        "compare {:?} {:?} {:?}",
        compare.key, compare.op, compare.target
    );
    let held = probe(store, vec![compare], check, &what).await;
    assert_eq!(
        held, expected,
        "{check}: {what} held = {held}, expected {expected}"
    );
}

/// Value compares order bytes like etcd, with every operator; any compare on the value of a
/// missing key is false.
pub async fn txn_compares_value<H: StoreHarness>(harness: &H) {
    const CHECK: &str = "txn::txn_compares_value";
    let store = harness.fresh().await;
    let (a, missing) = (key("tv/a"), key("tv/missing"));
    put(&store, &a, "m", CHECK).await;
    let stored = Value::from("m");
    for given in ["a", "m", "mm", "z"] {
        for op in OPS {
            let given = Value::from(given);
            let expected = op.holds(&stored, &given);
            let compare = Compare::new(a.clone(), op, CompareTarget::Value(given));
            expect_compare(&store, compare, expected, CHECK).await;
        }
    }
    for op in OPS {
        let compare = Compare::new(missing.clone(), op, CompareTarget::Value(Value::from("m")));
        expect_compare(&store, compare, false, CHECK).await;
    }
    expect_compare(&store, Compare::value_equals(a.clone(), "m"), true, CHECK).await;
}

/// Compares on mod revision, create revision and version, with every operator; a missing key
/// compares as 0.
pub async fn txn_compares_revisions_and_version<H: StoreHarness>(harness: &H) {
    const CHECK: &str = "txn::txn_compares_revisions_and_version";
    let store = harness.fresh().await;
    let (a, missing) = (key("tr/a"), key("tr/missing"));
    let created = put(&store, &a, "1", CHECK).await;
    put(&store, &key("tr/other"), "1", CHECK).await;
    let modified = put(&store, &a, "2", CHECK).await;
    let fact = get_some(&store, &a, CHECK).await;
    assert_eq!(
        (fact.create_revision, fact.mod_revision, fact.version),
        (created, modified, 2),
        "{CHECK}: setup facts"
    );

    let around = |r: Revision| [Revision(r.0 - 1), r, r.next()];
    for op in OPS {
        for given in around(modified) {
            let compare = Compare::new(a.clone(), op, CompareTarget::ModRevision(given));
            expect_compare(&store, compare, op.holds(&modified, &given), CHECK).await;
        }
        for given in around(created) {
            let compare = Compare::new(a.clone(), op, CompareTarget::CreateRevision(given));
            expect_compare(&store, compare, op.holds(&created, &given), CHECK).await;
        }
        for given in [1, 2, 3] {
            let compare = Compare::new(a.clone(), op, CompareTarget::Version(given));
            expect_compare(&store, compare, op.holds(&2, &given), CHECK).await;
        }
        for given in [Revision::ZERO, Revision(1)] {
            let zero = Revision::ZERO;
            let compare = Compare::new(missing.clone(), op, CompareTarget::ModRevision(given));
            expect_compare(&store, compare, op.holds(&zero, &given), CHECK).await;
            let compare = Compare::new(missing.clone(), op, CompareTarget::CreateRevision(given));
            expect_compare(&store, compare, op.holds(&zero, &given), CHECK).await;
            let compare = Compare::new(missing.clone(), op, CompareTarget::Version(given.0));
            expect_compare(&store, compare, op.holds(&0, &given.0), CHECK).await;
        }
    }
    expect_compare(
        &store,
        Compare::mod_revision(a.clone(), modified),
        true,
        CHECK,
    )
    .await;
    expect_compare(
        &store,
        Compare::mod_revision(missing, Revision::ZERO),
        true,
        CHECK,
    )
    .await;
}

/// `Compare::exists` and `Compare::absent` follow the key's life.
pub async fn txn_exists_and_absent<H: StoreHarness>(harness: &H) {
    const CHECK: &str = "txn::txn_exists_and_absent";
    let store = harness.fresh().await;
    let (a, missing) = (key("te/a"), key("te/missing"));
    put(&store, &a, "1", CHECK).await;
    expect_compare(&store, Compare::exists(a.clone()), true, CHECK).await;
    expect_compare(&store, Compare::absent(a.clone()), false, CHECK).await;
    expect_compare(&store, Compare::exists(missing.clone()), false, CHECK).await;
    expect_compare(&store, Compare::absent(missing), true, CHECK).await;
    ok(store.delete(&a).await, CHECK, "delete(te/a)");
    expect_compare(&store, Compare::exists(a.clone()), false, CHECK).await;
    expect_compare(&store, Compare::absent(a), true, CHECK).await;
}

/// `then` runs only when every compare holds; no compares at all counts as holding.
pub async fn txn_needs_every_compare<H: StoreHarness>(harness: &H) {
    const CHECK: &str = "txn::txn_needs_every_compare";
    let store = harness.fresh().await;
    let a = key("tn/a");
    put(&store, &a, "1", CHECK).await;
    let yes = || Compare::exists(a.clone());
    let no = || Compare::value_equals(a.clone(), "2");
    let cases = [
        (vec![], true, "no compares"),
        (vec![yes(), yes()], true, "two holding compares"),
        (vec![yes(), no()], false, "holding then failing compare"),
        (vec![no(), yes()], false, "failing then holding compare"),
    ];
    for (compares, expected, what) in cases {
        let held = probe(&store, compares, CHECK, what).await;
        assert_eq!(
            held, expected,
            "{CHECK}: {what}: succeeded = {held}, expected {expected}"
        );
    }
}

/// Checks the events of one transaction: all at `revision`, one per changed key, with the facts
/// stored after it and the ones `before` it.
fn assert_txn_events(
    events: &[ccattler_core::WatchEvent],
    revision: Revision,
    before: &[(
        Key,
        Option<ccattler_core::Fact>,
        Option<ccattler_core::Fact>,
    )],
    check: &str,
) {
    for event in events {
        assert_eq!(
            event.revision(),
            revision,
            "{check}: an event of the txn is at {}, expected {revision}",
            event.revision()
        );
    }
    let mut keys: Vec<&str> = events.iter().map(|e| e.key().as_str()).collect();
    keys.sort_unstable();
    let mut expected: Vec<&str> = before.iter().map(|(k, _, _)| k.as_str()).collect();
    expected.sort_unstable();
    assert_eq!(keys, expected, "{check}: keys of the txn's events");
    for (k, prev, after) in before {
        let event = events
            .iter()
            .find(|e| e.key() == k)
            .expect("key checked above");
        let what = format!("txn event for {k}");
        match (prev, after) {
            (_, Some(after)) => assert_put_event(event, after, prev.as_ref(), check, &what),
            (Some(prev), None) => assert_delete_event(event, prev, revision, check, &what),
            (None, None) => unreachable!("only changed keys are listed"),
        }
    }
}

/// The chosen branch commits at exactly one new revision, its events share it and the other
/// branch does nothing; a failed compare applies `otherwise`.
pub async fn txn_branch_commits_at_one_revision<H: StoreHarness>(harness: &H) {
    const CHECK: &str = "txn::txn_branch_commits_at_one_revision";
    let store = harness.fresh().await;
    let (new, keep, gone, missing, other) = (
        key("tb/new"),
        key("tb/keep"),
        key("tb/gone"),
        key("tb/missing"),
        key("tb/other"),
    );
    put(&store, &keep, "1", CHECK).await;
    let r0 = put(&store, &gone, "1", CHECK).await;
    let keep_before = get_some(&store, &keep, CHECK).await;
    let gone_before = get_some(&store, &gone, CHECK).await;
    let mut watch = open_watch(&store, "tb/", r0.next(), CHECK).await;

    let txn = Txn::new()
        .when(Compare::exists(keep.clone()))
        .then(Op::put(new.clone(), "n"))
        .then(Op::put(keep.clone(), "2"))
        .then(Op::delete(gone.clone()))
        .then(Op::delete(missing.clone()))
        .otherwise(Op::put(other.clone(), "x"));
    let response = ok(store.txn(txn).await, CHECK, "txn taking then");
    assert!(
        response.succeeded,
        "{CHECK}: a holding compare took otherwise"
    );
    let r1 = r0.next();
    assert_eq!(response.revision, r1, "{CHECK}: txn response revision");
    assert_revision(&store, r1, CHECK, "after a four-op txn").await;
    assert_eq!(
        get(&store, &other, CHECK).await,
        None,
        "{CHECK}: otherwise ran with then"
    );
    assert_eq!(
        get(&store, &gone, CHECK).await,
        None,
        "{CHECK}: then's delete not applied"
    );
    let new_after = get_some(&store, &new, CHECK).await;
    let keep_after = get_some(&store, &keep, CHECK).await;
    let events = next_events(&mut watch, 3, CHECK, "events of the then branch").await;
    let changes = [
        (new.clone(), None, Some(new_after)),
        (keep.clone(), Some(keep_before), Some(keep_after.clone())),
        (gone.clone(), Some(gone_before), None),
    ];
    assert_txn_events(&events, r1, &changes, CHECK);
    assert_no_event(&mut watch, CHECK, "after the then branch's events").await;

    let txn = Txn::new()
        .when(Compare::absent(keep.clone()))
        .then(Op::put(missing.clone(), "then"))
        .otherwise(Op::put(other.clone(), "x"))
        .otherwise(Op::delete(keep.clone()));
    let response = ok(store.txn(txn).await, CHECK, "txn taking otherwise");
    assert!(!response.succeeded, "{CHECK}: a failing compare took then");
    let r2 = r1.next();
    assert_eq!(
        response.revision, r2,
        "{CHECK}: otherwise txn response revision"
    );
    assert_eq!(
        get(&store, &missing, CHECK).await,
        None,
        "{CHECK}: then ran with otherwise"
    );
    let other_after = get_some(&store, &other, CHECK).await;
    let events = next_events(&mut watch, 2, CHECK, "events of the otherwise branch").await;
    let changes = [
        (other.clone(), None, Some(other_after)),
        (keep.clone(), Some(keep_after), None),
    ];
    assert_txn_events(&events, r2, &changes, CHECK);
    assert_no_event(&mut watch, CHECK, "after the otherwise branch's events").await;
}

/// A put inside a transaction writes even when the value is unchanged.
pub async fn txn_put_always_writes<H: StoreHarness>(harness: &H) {
    const CHECK: &str = "txn::txn_put_always_writes";
    let store = harness.fresh().await;
    let a = key("tp/a");
    let r1 = put(&store, &a, "same", CHECK).await;
    let before = get_some(&store, &a, CHECK).await;
    let mut watch = open_watch(&store, "tp/", r1.next(), CHECK).await;
    let response = ok(
        store.txn(Txn::new().then(Op::put(a.clone(), "same"))).await,
        CHECK,
        "txn putting an equal value",
    );
    assert_eq!(
        response.revision,
        r1.next(),
        "{CHECK}: txn put of an equal value did not write"
    );
    let after = get_some(&store, &a, CHECK).await;
    assert_eq!(
        (after.create_revision, after.mod_revision, after.version),
        (r1, r1.next(), 2),
        "{CHECK}: txn put of an equal value: (create, mod, version) differ: {after:?}"
    );
    let events = next_events(&mut watch, 1, CHECK, "event of a txn put of an equal value").await;
    assert_put_event(
        &events[0],
        &after,
        Some(&before),
        CHECK,
        "txn put of an equal value",
    );
}

/// A transaction whose branch changes nothing (no operations, or only deletes of missing keys)
/// leaves the revision as it is and emits no event.
pub async fn txn_without_effect_keeps_revision<H: StoreHarness>(harness: &H) {
    const CHECK: &str = "txn::txn_without_effect_keeps_revision";
    let store = harness.fresh().await;
    let a = key("tw/a");
    let r = put(&store, &a, "1", CHECK).await;
    let mut watch = open_watch(&store, "tw/", r.next(), CHECK).await;
    let cases = [
        (Txn::new(), true, "empty txn"),
        (
            Txn::new()
                .when(Compare::absent(a.clone()))
                .then(Op::delete(a.clone())),
            false,
            "failing compare with no otherwise",
        ),
        (
            Txn::new().then(Op::delete(key("tw/missing"))),
            true,
            "delete of a missing key",
        ),
    ];
    for (txn, succeeded, what) in cases {
        let response = ok(store.txn(txn).await, CHECK, what);
        assert_eq!(response.succeeded, succeeded, "{CHECK}: {what}: succeeded");
        assert_eq!(response.revision, r, "{CHECK}: {what}: response revision");
        assert_revision(&store, r, CHECK, what).await;
    }
    assert!(
        get(&store, &a, CHECK).await.is_some(),
        "{CHECK}: a txn deleted tw/a"
    );
    assert_no_event(&mut watch, CHECK, "after transactions without effect").await;
}
