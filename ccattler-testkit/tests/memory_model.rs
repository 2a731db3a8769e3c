//! A model test of MemoryStore: random sequences of puts, deletes, transactions, compactions and
//! watches, applied to the store and to a plain reference model side by side.
//!
//! After every step the store's reads (get of every key, scans, the revision) and the step's
//! result must match the model; at the end every watch opened along the way must have delivered
//! exactly the model's events from its start revision, with previous values.

use std::collections::BTreeMap;

use ccattler_core::{
    CmpOp, Compare, CompareTarget, EventKind, Fact, FactStore, Key, Op, Revision, Txn, WatchEvent,
};
use ccattler_store::MemoryStore;
use ccattler_testkit::conformance::support::next_events;
use futures_util::{FutureExt, StreamExt};
use proptest::prelude::*;
use proptest::sample::subsequence;

const KEYS: [&str; 6] = ["a/1", "a/2", "a/3", "b/1", "b/2", "b/3"];
const VALUES: [&str; 3] = ["x", "y", "z"];
const PREFIXES: [&str; 4] = ["", "a/", "b/", "a/1"];
const CHECK: &str = "memory_model";

/// What a compare looks at; revisions and versions are offsets from the key's current ones, so
/// that `Equal` holds often enough to exercise both branches.
#[derive(Clone, Debug)]
enum Target {
    Value(usize),
    ModRevision(i64),
    CreateRevision(i64),
    Version(i64),
}

#[derive(Clone, Debug)]
struct ModelCompare {
    key: usize,
    op: CmpOp,
    target: Target,
}

#[derive(Clone, Debug)]
enum ModelOp {
    Put(usize, usize),
    Delete(usize),
}

#[derive(Clone, Debug)]
enum Step {
    Put(usize, usize),
    /// Put the value the key already holds (a create when it is missing).
    PutEqual(usize),
    Delete(usize),
    Txn {
        compares: Vec<ModelCompare>,
        then: Vec<ModelOp>,
        otherwise: Vec<ModelOp>,
    },
    /// Compact at a point between the last compaction and the current revision.
    Compact(u8),
    /// Watch a prefix from a point in the retained history, or from `Revision::ZERO`.
    Watch {
        prefix: usize,
        at: u8,
        zero: bool,
    },
}

fn branch() -> impl Strategy<Value = Vec<ModelOp>> {
    subsequence((0..KEYS.len()).collect::<Vec<_>>(), 0..=3)
        .prop_shuffle()
        .prop_flat_map(|keys| {
            keys.into_iter()
                .map(|k| {
                    prop_oneof![
                        (0..VALUES.len()).prop_map(move |v| ModelOp::Put(k, v)),
                        Just(ModelOp::Delete(k)),
                    ]
                })
                .collect::<Vec<_>>()
        })
}

fn compare() -> impl Strategy<Value = ModelCompare> {
    let op = prop_oneof![
        Just(CmpOp::Equal),
        Just(CmpOp::NotEqual),
        Just(CmpOp::Greater),
        Just(CmpOp::Less),
    ];
    let target = prop_oneof![
        (0..VALUES.len()).prop_map(Target::Value),
        (-1i64..=1).prop_map(Target::ModRevision),
        (-1i64..=1).prop_map(Target::CreateRevision),
        (-1i64..=1).prop_map(Target::Version),
    ];
    (0..KEYS.len(), op, target).prop_map(|(key, op, target)| ModelCompare { key, op, target })
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0..KEYS.len(), 0..VALUES.len()).prop_map(|(k, v)| Step::Put(k, v)),
        2 => (0..KEYS.len()).prop_map(Step::PutEqual),
        2 => (0..KEYS.len()).prop_map(Step::Delete),
        3 => (proptest::collection::vec(compare(), 0..=2), branch(), branch())
            .prop_map(|(compares, then, otherwise)| Step::Txn { compares, then, otherwise }),
        1 => any::<u8>().prop_map(Step::Compact),
        1 => (0..PREFIXES.len(), any::<u8>(), proptest::bool::weighted(0.2))
            .prop_map(|(prefix, at, zero)| Step::Watch { prefix, at, zero }),
    ]
}

/// A key as the model holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct ModelFact {
    value: String,
    create: u64,
    modified: u64,
    version: u64,
}

/// One change: the key after it (`None` for a delete) and before it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct ModelEvent {
    revision: u64,
    key: String,
    after: Option<ModelFact>,
    prev: Option<ModelFact>,
}

/// The reference: a sorted map, a revision counter and the full history of events.
#[derive(Debug)]
struct Model {
    kv: BTreeMap<String, ModelFact>,
    revision: u64,
    compacted: u64,
    history: Vec<ModelEvent>,
}

impl Model {
    /// Applies one branch at the next revision; returns whether it wrote.
    fn apply(&mut self, ops: &[(String, Option<String>)]) -> bool {
        let revision = self.revision + 1;
        let mut wrote = false;
        for (key, value) in ops {
            let prev = self.kv.get(key).cloned();
            let after = match value {
                Some(value) => {
                    let fact = ModelFact {
                        value: value.clone(),
                        create: prev.as_ref().map_or(revision, |p| p.create),
                        modified: revision,
                        version: prev.as_ref().map_or(1, |p| p.version + 1),
                    };
                    self.kv.insert(key.clone(), fact.clone());
                    Some(fact)
                }
                None if prev.is_some() => {
                    self.kv.remove(key);
                    None
                }
                None => continue,
            };
            wrote = true;
            self.history.push(ModelEvent {
                revision,
                key: key.clone(),
                after,
                prev,
            });
        }
        if wrote {
            self.revision = revision;
        }
        wrote
    }

    /// The core compare for `c`, and whether it holds in the model.
    fn compare(&self, c: &ModelCompare) -> (Compare, bool) {
        let key = KEYS[c.key];
        let fact = self.kv.get(key);
        let offset = |stored: u64, delta: i64| stored.saturating_add_signed(delta);
        let (target, holds) = match c.target {
            Target::Value(v) => (
                CompareTarget::Value(VALUES[v].into()),
                fact.is_some_and(|f| c.op.holds(f.value.as_str(), VALUES[v])),
            ),
            Target::ModRevision(d) => {
                let stored = fact.map_or(0, |f| f.modified);
                let given = offset(stored, d);
                (
                    CompareTarget::ModRevision(Revision(given)),
                    c.op.holds(&stored, &given),
                )
            }
            Target::CreateRevision(d) => {
                let stored = fact.map_or(0, |f| f.create);
                let given = offset(stored, d);
                (
                    CompareTarget::CreateRevision(Revision(given)),
                    c.op.holds(&stored, &given),
                )
            }
            Target::Version(d) => {
                let stored = fact.map_or(0, |f| f.version);
                let given = offset(stored, d);
                (CompareTarget::Version(given), c.op.holds(&stored, &given))
            }
        };
        (Compare::new(key_of(key), c.op, target), holds)
    }
}

fn key_of(path: &str) -> Key {
    Key::new(path).expect("model keys are valid")
}

fn model_fact(fact: &Fact) -> ModelFact {
    assert_eq!(
        fact.lease, None,
        "{CHECK}: a fact without lease reports {:?}",
        fact.lease
    );
    ModelFact {
        value: fact.value_str().expect("model values are UTF-8").to_owned(),
        create: fact.create_revision.0,
        modified: fact.mod_revision.0,
        version: fact.version,
    }
}

fn model_event(event: &WatchEvent) -> ModelEvent {
    let after = match event.kind {
        EventKind::Put => Some(model_fact(&event.fact)),
        EventKind::Delete => {
            assert!(
                event.fact.value.is_empty() && event.fact.version == 0,
                "{CHECK}: delete event with a value or version: {event:?}"
            );
            None
        }
    };
    ModelEvent {
        revision: event.revision().0,
        key: event.key().as_str().to_owned(),
        after,
        prev: event.prev.as_ref().map(model_fact),
    }
}

/// Events in revision order, those of one revision sorted by key (the order of events within one
/// transaction is not part of the contract).
fn normalised(mut events: Vec<ModelEvent>) -> Vec<ModelEvent> {
    events.sort_by(|a, b| (a.revision, &a.key).cmp(&(b.revision, &b.key)));
    events
}

/// A watch opened during the run, and what it delivered so far.
struct OpenWatch {
    prefix: &'static str,
    start: u64,
    stream: <MemoryStore as FactStore>::Watch,
    received: Vec<ModelEvent>,
}

impl OpenWatch {
    /// Takes every event that is ready now, without waiting.
    fn drain(&mut self) {
        while let Some(item) = self.stream.next().now_or_never() {
            match item {
                Some(Ok(event)) => self.received.push(model_event(&event)),
                Some(Err(e)) => panic!(
                    "{CHECK}: watch({:?}, {}) failed while keeping up: {e:?}",
                    self.prefix, self.start
                ),
                None => panic!("{CHECK}: watch({:?}, {}) ended", self.prefix, self.start),
            }
        }
    }
}

/// Checks every read of the store against the model.
async fn check_reads(store: &MemoryStore, model: &Model, step: &Step) {
    let revision = store.revision().await.expect("revision").0;
    assert_eq!(revision, model.revision, "{CHECK}: revision after {step:?}");
    for path in KEYS {
        let got = store.get(&key_of(path)).await.expect("get");
        assert_eq!(
            got.as_ref().map(model_fact),
            model.kv.get(path).cloned(),
            "{CHECK}: get({path}) after {step:?}"
        );
    }
    for prefix in PREFIXES {
        let scan = store.scan(prefix).await.expect("scan");
        assert_eq!(
            scan.revision.0, model.revision,
            "{CHECK}: scan({prefix:?}) revision"
        );
        let got: Vec<(String, ModelFact)> = scan
            .facts
            .iter()
            .map(|f| (f.key.as_str().to_owned(), model_fact(f)))
            .collect();
        let expected: Vec<(String, ModelFact)> = model
            .kv
            .iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .map(|(k, f)| (k.clone(), f.clone()))
            .collect();
        assert_eq!(got, expected, "{CHECK}: scan({prefix:?}) after {step:?}");
    }
}

fn ops_of(ops: &[ModelOp]) -> (Vec<Op>, Vec<(String, Option<String>)>) {
    ops.iter()
        .map(|op| match *op {
            ModelOp::Put(k, v) => (
                Op::put(key_of(KEYS[k]), VALUES[v]),
                (KEYS[k].to_owned(), Some(VALUES[v].to_owned())),
            ),
            ModelOp::Delete(k) => (Op::delete(key_of(KEYS[k])), (KEYS[k].to_owned(), None)),
        })
        .unzip()
}

async fn run_step(
    store: &MemoryStore,
    model: &mut Model,
    watches: &mut Vec<OpenWatch>,
    step: &Step,
) {
    match step {
        Step::Put(k, v) => put(store, model, KEYS[*k], VALUES[*v]).await,
        Step::PutEqual(k) => {
            let value = model
                .kv
                .get(KEYS[*k])
                .map_or(VALUES[0].to_owned(), |f| f.value.clone());
            put(store, model, KEYS[*k], &value).await;
        }
        Step::Delete(k) => {
            let prev = store.delete(&key_of(KEYS[*k])).await.expect("delete");
            let expected = model.kv.get(KEYS[*k]).cloned();
            assert_eq!(
                prev.as_ref().map(model_fact),
                expected,
                "{CHECK}: delete's prev"
            );
            model.apply(&[(KEYS[*k].to_owned(), None)]);
        }
        Step::Txn {
            compares,
            then,
            otherwise,
        } => {
            let (compares, holds): (Vec<Compare>, Vec<bool>) =
                compares.iter().map(|c| model.compare(c)).unzip();
            let succeeded = holds.iter().all(|h| *h);
            let (then_ops, then_model) = ops_of(then);
            let (else_ops, else_model) = ops_of(otherwise);
            let txn = Txn {
                compares,
                then: then_ops,
                otherwise: else_ops,
            };
            let response = store.txn(txn).await.expect("txn");
            model.apply(if succeeded { &then_model } else { &else_model });
            assert_eq!(response.succeeded, succeeded, "{CHECK}: txn succeeded flag");
            assert_eq!(
                response.revision.0, model.revision,
                "{CHECK}: txn response revision"
            );
        }
        Step::Compact(at) => {
            let target =
                model.compacted + (model.revision - model.compacted) * u64::from(*at) / 255;
            if target > model.compacted {
                store.compact(Revision(target)).await.expect("compact");
                model.compacted = target;
            }
        }
        Step::Watch { prefix, at, zero } => {
            let prefix = PREFIXES[*prefix];
            let lowest = model.compacted.max(1);
            let highest = model.revision + 1;
            let (requested, start) = if *zero {
                (Revision::ZERO, highest)
            } else {
                let start = lowest + (highest - lowest) * u64::from(*at) / 255;
                (Revision(start), start)
            };
            let stream = store.watch(prefix, requested).await.unwrap_or_else(|e| {
                panic!("{CHECK}: watch({prefix:?}, {requested}) in retained history: {e:?}")
            });
            watches.push(OpenWatch {
                prefix,
                start,
                stream,
                received: Vec::new(),
            });
        }
    }
}

async fn put(store: &MemoryStore, model: &mut Model, path: &str, value: &str) {
    let revision = store
        .put(&key_of(path), value.to_owned().into())
        .await
        .expect("put");
    match model.kv.get(path) {
        Some(fact) if fact.value == value => {}
        _ => {
            model.apply(&[(path.to_owned(), Some(value.to_owned()))]);
        }
    }
    let expected = model.kv[path].modified;
    assert_eq!(
        revision.0, expected,
        "{CHECK}: put({path}, {value}) returned revision"
    );
}

async fn run_case(steps: Vec<Step>) {
    let store = MemoryStore::new();
    let start = store.revision().await.expect("revision").0;
    let mut model = Model {
        kv: BTreeMap::new(),
        revision: start,
        compacted: 0,
        history: Vec::new(),
    };
    let mut watches = Vec::new();
    for step in &steps {
        run_step(&store, &mut model, &mut watches, step).await;
        check_reads(&store, &model, step).await;
        for watch in &mut watches {
            watch.drain();
        }
    }

    // A sentinel write under every watched prefix: the next event each watch delivers after the
    // model's events must be it, so no watch delivered anything extra.
    const SENTINELS: [&str; 2] = ["a/1z", "b/1z"];
    let sentinel = Txn::new()
        .then(Op::put(key_of(SENTINELS[0]), "end"))
        .then(Op::put(key_of(SENTINELS[1]), "end"));
    let end = store.txn(sentinel).await.expect("sentinel txn").revision;
    for watch in &mut watches {
        let expected: Vec<ModelEvent> = model
            .history
            .iter()
            .filter(|e| e.revision >= watch.start && e.key.starts_with(watch.prefix))
            .cloned()
            .collect();
        let missing = expected.len().saturating_sub(watch.received.len());
        let what = format!("watch({:?}, {})", watch.prefix, watch.start);
        let sentinels = SENTINELS
            .iter()
            .filter(|k| k.starts_with(watch.prefix))
            .count();
        let rest = next_events(&mut watch.stream, missing + sentinels, CHECK, &what).await;
        let mut received = std::mem::take(&mut watch.received);
        received.extend(rest.iter().map(model_event));
        let tail = received.split_off(received.len() - sentinels);
        assert_eq!(
            normalised(received),
            normalised(expected),
            "{CHECK}: {what} delivered different events than the model"
        );
        for event in tail {
            assert_eq!(
                Revision(event.revision),
                end,
                "{CHECK}: {what}: expected the sentinel after the model's events, got {event:?}"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, max_shrink_iters: 2000, ..ProptestConfig::default() })]

    #[test]
    fn memory_store_matches_the_model(steps in proptest::collection::vec(step(), 1..40)) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("tokio runtime");
        runtime.block_on(run_case(steps));
    }
}
