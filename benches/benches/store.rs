//! MemoryStore: put, get, scan of 10k keys, a 10-op transaction, watch fan-out to 100 watchers.
//!
//! `cargo bench -p ccattler-benches --bench store`

use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use ccattler_benches::now;
use ccattler_core::{Compare, FactStore, Key, Op, Revision, Txn, Value};
use ccattler_store::MemoryStore;
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use futures_core::Stream;

const KEYS: usize = 10_000;

fn keys(prefix: &str, n: usize) -> Vec<Key> {
    (0..n)
        .map(|i| Key::new(format!("{prefix}/{i:08}")).expect("valid key"))
        .collect()
}

fn filled(prefix: &str, n: usize) -> (MemoryStore, Vec<Key>) {
    let store = MemoryStore::new();
    let keys = keys(prefix, n);
    for key in &keys {
        now(store.put(key, Value::from(vec![b'x'; 100]))).expect("put");
    }
    (store, keys)
}

fn store_benches(c: &mut Criterion) {
    let mut group = c.benchmark_group("memory_store");
    group.throughput(Throughput::Elements(1));

    let (store, keys) = filled("bench", KEYS);
    let values = [Value::from(vec![b'a'; 100]), Value::from(vec![b'b'; 100])];
    let mut i = 0usize;
    group.bench_function("put", |b| {
        b.iter(|| {
            i = i.wrapping_add(1);
            let key = &keys[i % KEYS];
            now(store.put(key, values[(i / KEYS) % 2].clone())).expect("put")
        })
    });
    group.bench_function("get", |b| {
        b.iter(|| {
            i = i.wrapping_add(7919);
            now(store.get(&keys[i % KEYS])).expect("get")
        })
    });

    let (scan_store, _) = filled("scan", KEYS);
    now(scan_store.put(&Key::new("other/key").expect("key"), "x".into())).expect("put");
    group.throughput(Throughput::Elements(KEYS as u64));
    group.bench_function("scan_10k", |b| {
        b.iter(|| {
            let scan = now(scan_store.scan("scan/")).expect("scan");
            assert_eq!(scan.facts.len(), KEYS);
            scan
        })
    });

    group.throughput(Throughput::Elements(10));
    group.bench_function("txn_10_ops", |b| {
        b.iter(|| {
            i = i.wrapping_add(10);
            let mut txn = Txn::new();
            for k in 0..10 {
                let key = keys[(i + k) % KEYS].clone();
                txn = txn
                    .when(Compare::exists(key.clone()))
                    .then(Op::put(key, values[i % 2].clone()));
            }
            let response = now(store.txn(txn)).expect("txn");
            assert!(response.succeeded);
        })
    });
    group.finish();
}

fn watch_fanout(c: &mut Criterion) {
    let mut group = c.benchmark_group("memory_store_watch");
    let store = MemoryStore::new();
    let mut watchers: Vec<_> = (0..100)
        .map(|_| now(store.watch("fan/", Revision::ZERO)).expect("watch"))
        .collect();
    let key = Key::new("fan/out").expect("key");
    let mut cx = Context::from_waker(Waker::noop());
    let mut n = 0u64;
    group.bench_function("event_to_100_watchers", |b| {
        b.iter_batched(
            || {
                n += 1;
                Value::from(n.to_string())
            },
            |value| {
                let revision = now(store.put(&key, value)).expect("put");
                for watcher in &mut watchers {
                    match Pin::new(watcher).poll_next(&mut cx) {
                        Poll::Ready(Some(Ok(event))) => assert_eq!(event.revision(), revision),
                        other => panic!("watcher did not get the event: {other:?}"),
                    }
                }
            },
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

criterion_group!(benches, store_benches, watch_fanout);
criterion_main!(benches);
