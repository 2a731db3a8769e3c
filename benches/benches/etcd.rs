//! EtcdStore side by side with raw etcd-client making the same calls, in one run against the
//! same etcd: put, get and a two-op transaction (same keys, same 100-byte values), and the time
//! from a commit to its delivery on an open watch. `put_raw` is a plain etcd put; EtcdStore's
//! put is idempotent, one compare-and-write transaction, which `put_raw_idempotent_txn` makes
//! by hand.
//!
//! `scripts/etcd-up && cargo bench -p ccattler-benches --features etcd --bench etcd`
//!
//! Without an answering etcd it prints that it was skipped. The endpoint comes from
//! `CCATTLER_ETCD_ENDPOINTS`, else `/tmp/ccattler-etcd/endpoint`.

use std::time::{Duration, Instant};

use ccattler_core::{Compare, FactStore, Key, Op, Revision, Txn, Value};
use ccattler_store::etcd::server::shared_endpoints;
use ccattler_store::etcd::{EtcdConfig, EtcdStore};
use criterion::{Criterion, criterion_group, criterion_main};
use etcd_client::{Client, Compare as RawCompare, CompareOp, PutOptions, Txn as RawTxn, TxnOp};
use futures_util::StreamExt;

const PREFIX: &str = "ccattler-bench/";

/// A 100-byte value that differs with `i`, so every put writes.
fn value(i: u64) -> Vec<u8> {
    let mut v = format!("{i:020}").into_bytes();
    v.resize(100, b'x');
    v
}

async fn setup(endpoints: Vec<String>) -> Option<(EtcdStore, Client)> {
    let config = EtcdConfig::new(endpoints.clone()).prefix(PREFIX);
    let store = match EtcdStore::connect(config).await {
        Ok(store) => store,
        Err(e) => {
            println!("SKIPPED etcd benches: etcd not reachable ({e}); run scripts/etcd-up");
            return None;
        }
    };
    match Client::connect(&endpoints, None).await {
        Ok(client) => Some((store, client)),
        Err(e) => {
            println!("SKIPPED etcd benches: raw client cannot connect ({e})");
            None
        }
    }
}

fn bench(c: &mut Criterion) {
    let Some(endpoints) = shared_endpoints() else {
        println!("SKIPPED etcd benches: no endpoint (run scripts/etcd-up)");
        return;
    };
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    let Some((store, client)) = rt.block_on(setup(endpoints)) else {
        return;
    };
    let key = Key::new("bench/k").expect("valid key");
    let other = Key::new("bench/other").expect("valid key");
    let raw_key = format!("{PREFIX}bench/k").into_bytes();
    let raw_other = format!("{PREFIX}bench/other").into_bytes();
    rt.block_on(store.put(&key, value(0).into())).expect("seed");

    let mut group = c.benchmark_group("etcd");
    group.sample_size(50);
    group.measurement_time(Duration::from_secs(8));
    let mut i = 0u64;

    group.bench_function("put_ccattler", |b| {
        b.to_async(&rt).iter(|| {
            i += 1;
            let v = Value::from(value(i));
            let store = &store;
            let key = &key;
            async move { store.put(key, v).await.expect("put") }
        });
    });
    group.bench_function("put_raw", |b| {
        b.to_async(&rt).iter(|| {
            i += 1;
            let mut kv = client.kv_client();
            let (k, v) = (raw_key.clone(), value(i));
            async move { kv.put(k, v, None).await.expect("put") }
        });
    });
    // The idempotent put made by hand with etcd-client: the same compare-and-write transaction
    // EtcdStore sends, to tell etcd's cost of idempotency from the store's own overhead.
    group.bench_function("put_raw_idempotent_txn", |b| {
        b.to_async(&rt).iter(|| {
            i += 1;
            let (k, v) = (raw_key.clone(), value(i));
            let txn = RawTxn::new()
                .when(vec![
                    RawCompare::value(k.clone(), CompareOp::Equal, v.clone()),
                    RawCompare::lease(k.clone(), CompareOp::Equal, 0),
                ])
                .and_then(vec![TxnOp::get(k.clone(), None)])
                .or_else(vec![TxnOp::put(
                    k,
                    v,
                    Some(PutOptions::new().with_lease(0)),
                )]);
            let mut kv = client.kv_client();
            async move { kv.txn(txn).await.expect("txn") }
        });
    });

    group.bench_function("get_ccattler", |b| {
        b.to_async(&rt)
            .iter(|| async { store.get(&key).await.expect("get") });
    });
    group.bench_function("get_raw", |b| {
        b.to_async(&rt).iter(|| {
            let mut kv = client.kv_client();
            let k = raw_key.clone();
            async move { kv.get(k, None).await.expect("get") }
        });
    });

    group.bench_function("txn_ccattler", |b| {
        b.to_async(&rt).iter(|| {
            i += 1;
            let txn = Txn::new()
                .when(Compare::exists(key.clone()))
                .then(Op::put(key.clone(), value(i)))
                .then(Op::put(other.clone(), value(i)));
            let store = &store;
            async move { store.txn(txn).await.expect("txn") }
        });
    });
    group.bench_function("txn_raw", |b| {
        b.to_async(&rt).iter(|| {
            i += 1;
            let txn = RawTxn::new()
                .when(vec![RawCompare::create_revision(
                    raw_key.clone(),
                    CompareOp::Greater,
                    0,
                )])
                .and_then(vec![
                    TxnOp::put(
                        raw_key.clone(),
                        value(i),
                        Some(PutOptions::new().with_lease(0)),
                    ),
                    TxnOp::put(
                        raw_other.clone(),
                        value(i),
                        Some(PutOptions::new().with_lease(0)),
                    ),
                ]);
            let mut kv = client.kv_client();
            async move { kv.txn(txn).await.expect("txn") }
        });
    });

    let watch = rt
        .block_on(store.watch("bench/", Revision::ZERO))
        .expect("watch");
    let watch = tokio::sync::Mutex::new(watch);
    group.bench_function("commit_to_watch_delivery", |b| {
        b.to_async(&rt).iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let store = &store;
            let key = &key;
            let watch = &watch;
            let start_i = i;
            i += iters;
            async move {
                let mut watch = watch.lock().await;
                for n in 0..iters {
                    let start = Instant::now();
                    let revision = store
                        .put(key, value(start_i + n + 1).into())
                        .await
                        .expect("put");
                    loop {
                        let event = watch.next().await.expect("open").expect("event");
                        if event.revision() == revision {
                            break;
                        }
                    }
                    total += start.elapsed();
                }
                total
            }
        });
    });
    group.finish();
    rt.block_on(async {
        let _ = store.delete(&key).await;
        let _ = store.delete(&other).await;
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
