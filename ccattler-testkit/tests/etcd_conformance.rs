//! EtcdStore against real etcd: the FactStore conformance suite (bare, with its own prefix per
//! check, and under Namespaced), isolation of namespaces sharing one etcd, bad input, a watch
//! that outlives an etcd restart, and etcdctl reading what the store wrote.
//!
//! The suite compacts the whole history, so each run of it gets a private etcd process. The
//! other tests use the shared etcd of `scripts/etcd-up`. Without etcd these tests fail when
//! `CI=true` and say they were skipped otherwise (see `ccattler_store::etcd::server`).

use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ccattler_core::{FactStore, Key, Op, Revision, StoreError, Txn, Value};
use ccattler_store::Namespaced;
use ccattler_store::etcd::server::{
    EtcdCluster, shared_endpoints, shared_store_or_skip, skip_or_fail,
};
use ccattler_store::etcd::{EtcdConfig, EtcdStore};
use ccattler_testkit::conformance::support::{key, next_events, ok, open_watch, put};
use ccattler_testkit::conformance::{StoreHarness, run_store_conformance};

/// A prefix no earlier run used.
fn run_prefix(test: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("ccattler-test/{test}-{}-{nanos}/", std::process::id())
}

/// A private one-member etcd and a store on it, or the project rule applied.
async fn private_etcd(test: &str) -> Option<(EtcdCluster, EtcdStore)> {
    let cluster = match EtcdCluster::start(1).await {
        Ok(cluster) => cluster,
        Err(why) => {
            skip_or_fail(test, why);
            return None;
        }
    };
    let store = EtcdStore::connect(cluster.config())
        .await
        .unwrap_or_else(|e| panic!("{test}: connect to the private etcd: {e}"));
    Some((cluster, store))
}

/// Each check in a namespace of its own, by the store's own prefix option.
struct PrefixHarness {
    base: EtcdStore,
    next: AtomicUsize,
}

impl StoreHarness for PrefixHarness {
    type Store = EtcdStore;

    async fn fresh(&self) -> EtcdStore {
        let n = self.next.fetch_add(1, Ordering::SeqCst);
        self.base
            .namespace(&format!("suite/ns-{n}/"))
            .expect("valid namespace")
    }

    async fn advance(&self, d: Duration) {
        tokio::time::sleep(d).await;
    }
}

/// Each check in a namespace of its own, by `Namespaced<EtcdStore>`.
struct NamespacedHarness {
    base: EtcdStore,
    next: AtomicUsize,
}

impl StoreHarness for NamespacedHarness {
    type Store = Namespaced<EtcdStore>;

    async fn fresh(&self) -> Namespaced<EtcdStore> {
        let n = self.next.fetch_add(1, Ordering::SeqCst);
        Namespaced::new(self.base.clone(), &format!("suite/ns-{n}/")).expect("valid namespace")
    }

    async fn advance(&self, d: Duration) {
        tokio::time::sleep(d).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_store_conforms() {
    let Some((_etcd, base)) = private_etcd("etcd_store_conforms").await else {
        return;
    };
    let base = base.namespace("clusters/a/").expect("valid prefix");
    let harness = PrefixHarness {
        base,
        next: AtomicUsize::new(0),
    };
    run_store_conformance(&harness).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaced_etcd_store_conforms() {
    let Some((_etcd, base)) = private_etcd("namespaced_etcd_store_conforms").await else {
        return;
    };
    let harness = NamespacedHarness {
        base,
        next: AtomicUsize::new(0),
    };
    run_store_conformance(&harness).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clusters_on_one_etcd_never_see_each_other() {
    const CHECK: &str = "two_clusters_on_one_etcd_never_see_each_other";
    let root = run_prefix("isolation");
    let Some(blue) = shared_store_or_skip(CHECK, |c| c.prefix(format!("{root}blue/"))).await else {
        return;
    };
    // The other cluster uses the wrapper instead of the prefix option: both must isolate.
    let Some(plain) = shared_store_or_skip(CHECK, |c| c).await else {
        return;
    };
    let green = Namespaced::new(plain.clone(), &format!("{root}green/")).expect("valid prefix");
    let mut blue_watch = open_watch(&blue, "", Revision::ZERO, CHECK).await;
    let mut green_watch = open_watch(&green, "", Revision::ZERO, CHECK).await;

    let a = key("desired/a");
    put(&blue, &a, "blue", CHECK).await;
    put(&green, &a, "green", CHECK).await;
    put(&green, &key("desired/b"), "green-b", CHECK).await;

    let blue_scan = ok(blue.scan("").await, CHECK, "blue scan");
    let green_scan = ok(green.scan("").await, CHECK, "green scan");
    let values = |facts: &[ccattler_core::Fact]| -> Vec<(String, String)> {
        (facts.iter())
            .map(|f| (f.key.to_string(), f.value_str().unwrap_or("").to_owned()))
            .collect()
    };
    assert_eq!(
        values(&blue_scan.facts),
        [("desired/a".into(), "blue".into())]
    );
    assert_eq!(
        values(&green_scan.facts),
        [
            ("desired/a".into(), "green".into()),
            ("desired/b".into(), "green-b".into())
        ]
    );
    ok(green.delete(&a).await, CHECK, "green delete");
    let still = ok(blue.get(&a).await, CHECK, "blue get").expect("blue's key survives");
    assert_eq!(still.value_str(), Some("blue"));

    let blue_events = next_events(&mut blue_watch, 1, CHECK, "blue events").await;
    assert_eq!(blue_events[0].fact.value_str(), Some("blue"));
    let green_events = next_events(&mut green_watch, 3, CHECK, "green events").await;
    assert!(
        green_events
            .iter()
            .all(|e| e.fact.key.as_str().starts_with("desired/"))
    );
    ccattler_testkit::conformance::support::assert_no_event(&mut blue_watch, CHECK, "blue").await;
    for fact in ok(plain.scan(&root).await, CHECK, "cleanup scan").facts {
        ok(plain.delete(&fact.key).await, CHECK, "cleanup");
    }
}

#[tokio::test]
async fn unreachable_etcd_at_start_is_a_clear_retryable_error() {
    let config = EtcdConfig::new(["http://127.0.0.1:9", "http://127.0.0.1:10"])
        .connect_timeout(Duration::from_millis(500));
    let e = EtcdStore::connect(config)
        .await
        .expect_err("nothing listens there");
    assert!(e.is_retryable(), "{e:?}");
    let message = e.to_string();
    assert!(
        message.contains("http://127.0.0.1:9, http://127.0.0.1:10"),
        "{message}"
    );
}

/// A store that believes the server takes more than it does: etcd's own rejections must come
/// back as the same typed errors, with nothing written.
#[tokio::test]
async fn etcds_own_limits_map_to_typed_errors_and_write_nothing() {
    const CHECK: &str = "etcds_own_limits_map_to_typed_errors_and_write_nothing";
    let root = run_prefix("limits");
    let Some(store) = shared_store_or_skip(CHECK, |c| {
        c.prefix(root.clone())
            .max_request_bytes(64 * 1024 * 1024)
            .max_txn_ops(1000)
    })
    .await
    else {
        return;
    };
    let big = Value::from(vec![b'x'; 2 * 1024 * 1024]);
    let e = store
        .put(&key("big"), big.clone())
        .await
        .expect_err("over 1.5 MiB");
    assert!(
        matches!(&e, StoreError::ValueTooLarge { key, size, .. } if key.as_str() == "big" && *size == big.len()),
        "{e:?}"
    );
    let txn = Txn::new()
        .then(Op::put(key("small"), "1"))
        .then(Op::put(key("big"), big));
    let e = store.txn(txn).await.expect_err("over 1.5 MiB");
    assert!(matches!(e, StoreError::ValueTooLarge { .. }), "{e:?}");

    let many: Vec<Op> = (0..200)
        .map(|i| Op::put(key(&format!("op/{i}")), "1"))
        .collect();
    let e = store
        .txn(Txn {
            compares: vec![],
            then: many,
            otherwise: vec![],
        })
        .await
        .expect_err("over etcd's 128 operations");
    assert!(
        matches!(
            e,
            StoreError::TooManyOps {
                count: 200,
                limit: 128,
                ..
            }
        ),
        "{e:?}"
    );
    let scan = ok(store.scan("").await, CHECK, "scan");
    assert!(
        scan.facts.is_empty(),
        "something was half-written: {:?}",
        scan.facts
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_resumes_after_etcd_restarts_and_loses_nothing() {
    const CHECK: &str = "a_watch_resumes_after_etcd_restarts_and_loses_nothing";
    let Some((mut etcd, _)) = private_etcd(CHECK).await else {
        return;
    };
    let config = etcd
        .config()
        .request_timeout(Duration::from_secs(2))
        .retries(1);
    let store = EtcdStore::connect(config).await.expect("connect");
    let k = key("w/k");
    let mut watch = open_watch(&store, "w/", Revision::ZERO, CHECK).await;
    put(&store, &k, "before", CHECK).await;
    let first = next_events(&mut watch, 1, CHECK, "before the restart").await;
    assert_eq!(first[0].fact.value_str(), Some("before"));

    etcd.kill(0);
    let e = store
        .put(&k, "while down".into())
        .await
        .expect_err("etcd is down");
    assert!(
        e.is_retryable(),
        "a write to a dead etcd is retryable: {e:?}"
    );
    etcd.restart(0).await.expect("etcd restarts on its data");

    put(&store, &k, "after-1", CHECK).await;
    put(&store, &k, "after-2", CHECK).await;
    let events = next_events(&mut watch, 2, CHECK, "after the restart").await;
    let values: Vec<_> = events.iter().map(|e| e.fact.value_str()).collect();
    assert_eq!(
        values,
        [Some("after-1"), Some("after-2")],
        "no loss, no repeat"
    );
    assert_eq!(
        events[0].prev.as_ref().and_then(|p| p.value_str()),
        Some("before")
    );
    ccattler_testkit::conformance::support::assert_no_event(&mut watch, CHECK, "end").await;
}

/// A person reads the facts with etcdctl: JSON values under the store's prefix.
#[tokio::test]
async fn etcdctl_prints_our_facts_as_readable_json() {
    const CHECK: &str = "etcdctl_prints_our_facts_as_readable_json";
    let root = run_prefix("etcdctl");
    let Some(store) = shared_store_or_skip(CHECK, |c| c.prefix(root.clone())).await else {
        return;
    };
    let facts = [
        (
            "desired/service/web",
            r#"{"image":"nginx:1.27","replicas":3}"#,
        ),
        (
            "observed/node/n1/state",
            r#"{"ready":true,"cpu_millis":4000}"#,
        ),
    ];
    for (k, v) in facts {
        put(&store, &key(k), v, CHECK).await;
    }
    let endpoints = shared_endpoints().unwrap_or_default().join(",");
    let output = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .args(["--endpoints", &endpoints, "get", "--prefix", &root])
        .output();
    let output = match output {
        Ok(output) => output,
        Err(e) => {
            skip_or_fail(CHECK, format!("cannot run etcdctl: {e}"));
            return;
        }
    };
    let text = String::from_utf8_lossy(&output.stdout);
    println!("$ etcdctl get --prefix {root}\n{text}");
    assert!(
        output.status.success(),
        "etcdctl failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let lines: Vec<&str> = text.lines().collect();
    let expected: Vec<String> = facts
        .iter()
        .flat_map(|(k, v)| [store.etcd_key(&key(k)), (*v).to_owned()])
        .collect();
    assert_eq!(
        lines, expected,
        "etcdctl shows each key, then its JSON value"
    );
    for (k, _) in facts {
        ok(
            store.delete(&Key::new(k).expect("valid")).await,
            CHECK,
            "cleanup",
        );
    }
}
