//! The FactStore conformance suite against MemoryStore, bare and under Namespaced, and the
//! isolation of namespaces sharing one store.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ccattler_core::{Compare, FactStore, ManualClock, Op, Revision, Txn};
use ccattler_store::{MemoryConfig, MemoryStore, Namespaced};
use ccattler_testkit::conformance::support::{
    assert_no_event, get, key, keys_of, next_events, ok, open_watch, put,
};
use ccattler_testkit::conformance::{StoreHarness, run_store_conformance};

/// A new MemoryStore per check, all on one manual clock.
#[derive(Debug, Default)]
struct MemoryHarness {
    clock: ManualClock,
    stores: Mutex<Vec<MemoryStore>>,
}

impl MemoryHarness {
    fn store(&self) -> MemoryStore {
        MemoryStore::with_config(MemoryConfig::default().clock(Arc::new(self.clock.clone())))
    }

    fn advance_and_reap(&self, d: Duration) {
        self.clock.advance(d);
        let stores = self.stores.lock().expect("harness lock poisoned").clone();
        for store in stores {
            store.expire_leases();
        }
    }
}

impl StoreHarness for MemoryHarness {
    type Store = MemoryStore;

    async fn fresh(&self) -> MemoryStore {
        let store = self.store();
        let mut stores = self.stores.lock().expect("harness lock poisoned");
        // Only the latest store is in use; earlier ones need no more reaping.
        stores.clear();
        stores.push(store.clone());
        store
    }

    async fn advance(&self, d: Duration) {
        self.advance_and_reap(d);
    }
}

/// A new namespace per check, all over one shared MemoryStore, as the suite would run against a
/// shared etcd.
#[derive(Debug)]
struct NamespacedHarness {
    memory: MemoryHarness,
    shared: MemoryStore,
    next: AtomicUsize,
}

impl NamespacedHarness {
    fn new() -> Self {
        let memory = MemoryHarness::default();
        let shared = memory.store();
        memory
            .stores
            .lock()
            .expect("harness lock poisoned")
            .push(shared.clone());
        NamespacedHarness {
            memory,
            shared,
            next: AtomicUsize::new(0),
        }
    }
}

impl StoreHarness for NamespacedHarness {
    type Store = Namespaced<MemoryStore>;

    async fn fresh(&self) -> Namespaced<MemoryStore> {
        let n = self.next.fetch_add(1, Ordering::SeqCst);
        Namespaced::new(self.shared.clone(), &format!("suite/ns-{n}/"))
            .expect("namespace prefix is valid")
    }

    async fn advance(&self, d: Duration) {
        self.memory.advance_and_reap(d);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store_conforms() {
    run_store_conformance(&MemoryHarness::default()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaced_memory_store_conforms() {
    run_store_conformance(&NamespacedHarness::new()).await;
}

#[tokio::test]
async fn namespaces_over_one_store_never_see_each_other() {
    const CHECK: &str = "namespaces_over_one_store_never_see_each_other";
    let shared = MemoryStore::new();
    let blue = Namespaced::new(shared.clone(), "blue/").expect("valid prefix");
    let green = Namespaced::new(shared.clone(), "green/").expect("valid prefix");
    let mut blue_watch = open_watch(&blue, "", Revision::ZERO, CHECK).await;
    let mut green_watch = open_watch(&green, "", Revision::ZERO, CHECK).await;

    let (a, b) = (key("desired/a"), key("desired/b"));
    put(&blue, &a, "blue-a", CHECK).await;
    put(&green, &a, "green-a", CHECK).await;
    put(&green, &b, "green-b", CHECK).await;
    put(&shared, &key("desired/a"), "outside", CHECK).await;

    let blue_scan = ok(blue.scan("").await, CHECK, "blue scan");
    let green_scan = ok(green.scan("").await, CHECK, "green scan");
    assert_eq!(
        keys_of(&blue_scan.facts),
        ["desired/a"],
        "{CHECK}: blue keys"
    );
    assert_eq!(
        blue_scan.facts[0].value_str(),
        Some("blue-a"),
        "{CHECK}: blue value"
    );
    assert_eq!(
        keys_of(&green_scan.facts),
        ["desired/a", "desired/b"],
        "{CHECK}: green keys"
    );
    assert_eq!(
        green_scan.facts[0].value_str(),
        Some("green-a"),
        "{CHECK}: green value"
    );

    // A delete and a transaction in one namespace do not reach the other.
    ok(green.delete(&a).await, CHECK, "green delete");
    let blue_a = get(&blue, &a, CHECK).await;
    assert_eq!(
        blue_a
            .and_then(|f| f.value_str().map(str::to_owned))
            .as_deref(),
        Some("blue-a"),
        "{CHECK}: green's delete reached blue"
    );
    let txn = Txn::new()
        .when(Compare::exists(b.clone()))
        .then(Op::put(b.clone(), "blue-b-then"))
        .otherwise(Op::put(b.clone(), "blue-b-else"));
    let response = ok(blue.txn(txn).await, CHECK, "blue txn");
    assert!(
        !response.succeeded,
        "{CHECK}: blue's compare saw green's key"
    );
    let green_b = get(&green, &b, CHECK).await;
    assert_eq!(
        green_b
            .and_then(|f| f.value_str().map(str::to_owned))
            .as_deref(),
        Some("green-b"),
        "{CHECK}: blue's txn reached green"
    );

    let blue_events = next_events(&mut blue_watch, 2, CHECK, "blue events").await;
    let blue_seen: Vec<(&str, Option<&str>)> = blue_events
        .iter()
        .map(|e| (e.key().as_str(), e.fact.value_str()))
        .collect();
    assert_eq!(
        blue_seen,
        [
            ("desired/a", Some("blue-a")),
            ("desired/b", Some("blue-b-else"))
        ],
        "{CHECK}: blue's watch"
    );
    let green_events = next_events(&mut green_watch, 3, CHECK, "green events").await;
    let green_seen: Vec<(&str, Option<&str>)> = green_events
        .iter()
        .map(|e| (e.key().as_str(), e.fact.value_str()))
        .collect();
    assert_eq!(
        green_seen,
        [
            ("desired/a", Some("green-a")),
            ("desired/b", Some("green-b")),
            ("desired/a", Some("")),
        ],
        "{CHECK}: green's watch"
    );
    assert_no_event(&mut blue_watch, CHECK, "blue after its own events").await;
    assert_no_event(&mut green_watch, CHECK, "green after its own events").await;
}
