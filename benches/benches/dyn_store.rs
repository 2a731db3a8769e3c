//! Static dispatch (`MemoryStore`) against dynamic dispatch (`Arc<dyn DynFactStore>` over a
//! `MemoryStore`) for get, put, a one-put transaction and a scan of 100 keys: what choosing the
//! store at run time costs per call.
//!
//! `cargo bench -p ccattler-benches --bench dyn_store`
//!
//! Each operation is one benchmark id with two parameters, `static` and `dyn`, run one after
//! the other over the same store of 10k keys, so that only the dispatch differs.

use std::hint::black_box;
use std::sync::Arc;

use ccattler_benches::now;
use ccattler_core::{DynFactStore, FactStore, Key, Op, Txn, Value};
use ccattler_store::MemoryStore;
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Criterion, criterion_group, criterion_main};

const KEYS: usize = 10_000;
/// Keys under each scanned prefix.
const SCANNED: usize = 100;

fn keys() -> Vec<Key> {
    (0..KEYS)
        .map(|i| Key::new(format!("bench/{i:08}")).expect("valid key"))
        .collect()
}

fn filled(keys: &[Key]) -> MemoryStore {
    let store = MemoryStore::new();
    for key in keys {
        now(store.put(key, Value::from(vec![b'x'; 100]))).expect("put");
    }
    store
}

/// One operation on `store` at step `i`: what each benchmark iteration does.
type Step<S> = fn(&S, &Fixture, usize);

/// An operation's name and its step on each form of the store.
type Pair = (&'static str, Step<MemoryStore>, Step<Arc<dyn DynFactStore>>);

/// The keys, values and scan prefixes every step draws from.
struct Fixture {
    keys: Vec<Key>,
    values: [Value; 2],
    prefixes: Vec<String>,
}

fn get<S: FactStore>(store: &S, f: &Fixture, i: usize) {
    let key = &f.keys[i.wrapping_mul(7919) % KEYS];
    black_box(now(store.get(key)).expect("get"));
}

fn put<S: FactStore>(store: &S, f: &Fixture, i: usize) {
    let value = f.values[(i / KEYS) % 2].clone();
    black_box(now(store.put(&f.keys[i % KEYS], value)).expect("put"));
}

fn txn_put<S: FactStore>(store: &S, f: &Fixture, i: usize) {
    let op = Op::put(f.keys[i % KEYS].clone(), f.values[(i / KEYS) % 2].clone());
    black_box(now(store.txn(Txn::new().then(op))).expect("txn"));
}

fn scan_100<S: FactStore>(store: &S, f: &Fixture, i: usize) {
    let scan = now(store.scan(&f.prefixes[i % f.prefixes.len()])).expect("scan");
    assert_eq!(scan.facts.len(), SCANNED);
    black_box(scan);
}

/// Benchmarks `step` on `store` as `op`/`dispatch`, counting steps on from `i`.
///
/// The static and dyn runs of one operation share `i`, so the dyn run's puts never repeat the
/// static run's (a put of the stored value writes nothing, and would be cheaper).
fn bench<S: FactStore>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    op: &str,
    dispatch: &str,
    store: &S,
    fixture: &Fixture,
    step: Step<S>,
    i: &mut usize,
) {
    group.bench_function(BenchmarkId::new(op, dispatch), |b| {
        b.iter(|| {
            *i = i.wrapping_add(1);
            step(store, fixture, *i);
        })
    });
}

fn dispatch(c: &mut Criterion) {
    let keys = keys();
    let concrete = filled(&keys);
    // The same store behind both: only the dispatch differs.
    let boxed: Arc<dyn DynFactStore> = Arc::new(concrete.clone());
    let fixture = Fixture {
        keys,
        values: [Value::from(vec![b'a'; 100]), Value::from(vec![b'b'; 100])],
        // `bench/0000pp` names the 100 keys `bench/0000pp00` to `bench/0000pp99`.
        prefixes: (0..KEYS / SCANNED)
            .map(|p| format!("bench/{p:06}"))
            .collect(),
    };
    let mut group = c.benchmark_group("dyn_store");
    let ops: [Pair; 4] = [
        ("get", get, get),
        ("put", put, put),
        ("txn_put", txn_put, txn_put),
        ("scan_100", scan_100, scan_100),
    ];
    for (op, on_static, on_dyn) in ops {
        let mut i = 0;
        bench(
            &mut group, op, "static", &concrete, &fixture, on_static, &mut i,
        );
        bench(&mut group, op, "dyn", &boxed, &fixture, on_dyn, &mut i);
    }
    group.finish();
}

criterion_group!(benches, dispatch);
criterion_main!(benches);
