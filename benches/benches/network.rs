//! Network policy at the size of the target: 1,000 services of 10 instances (10,000 endpoints)
//! on 1,000 nodes, every service guarded and called by two others. Measured: every node's rule
//! set derived from the indexed facts (`rules`), the network controller's pass after one
//! instance of a caller moved to another node (patching its index, deriving, diffing with the
//! rule sets held), and the rendering of one node's table for `nft -f`.
//!
//! `cargo bench -p ccattler-benches --bench network`

use ccattler_benches::policy::{self, TARGET};
use ccattler_controllers::standard::{NetworkController, NetworkInputs};
use ccattler_core::{
    Change, Controller, Fact, FactView, ReconcileContext, Revision, SequentialIds,
};
use ccattler_runtime::firewall::render;
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};

fn view() -> FactView {
    let mut view = FactView::new();
    for fact in policy::facts(TARGET) {
        view.insert(fact);
    }
    view
}

fn pass(controller: &NetworkController, view: &FactView) -> Vec<Change> {
    let mut ids = SequentialIds::new("bench");
    let mut ctx = ReconcileContext::new(std::time::SystemTime::UNIX_EPOCH, &mut ids);
    controller.reconcile(view, &mut ctx).expect("a pass")
}

/// Applies `changes` to `view` as a commit at `revision` would.
fn commit(view: &mut FactView, changes: Vec<Change>, revision: u64) {
    for change in changes {
        match change {
            Change::Put { key, value } => {
                view.insert(Fact::created(key, value, Revision(revision)));
            }
            Change::Delete { key } => {
                view.remove(key.as_str());
            }
        }
    }
}

fn network(c: &mut Criterion) {
    let view = view();
    let mut inputs = NetworkInputs::default();
    for fact in view.scan("") {
        inputs.apply(&fact.key, Some(fact));
    }
    c.bench_function("network rules, 1,000 services x 10 endpoints", |b| {
        b.iter(|| inputs.rules())
    });

    // The controller after its first pass, committed: one caller instance moves.
    let controller = NetworkController::new();
    let mut held = view.clone();
    let first = pass(&controller, &held);
    commit(&mut held, first, 2);
    pass(&controller, &held);
    let mut flip = false;
    c.bench_function("network controller pass, one caller moved", |b| {
        b.iter_batched(
            || {
                flip = !flip;
                let mut moved = held.clone();
                let (old, _) = policy::placement(1, 0, &policy::node(1), 20_000);
                moved.remove(old.as_str());
                let to = if flip { 7 } else { 1 };
                let (key, value) = policy::placement(1, 0, &policy::node(to), 20_999);
                moved.insert(Fact::created(key, value, Revision(3)));
                moved
            },
            |moved| pass(&controller, &moved),
            BatchSize::SmallInput,
        )
    });

    let rules = inputs.rules();
    let one = rules.values().next().expect("a node with rules");
    c.bench_function("render one node's table", |b| {
        b.iter(|| render::render("ccattler_node-00000", one))
    });
}

criterion_group!(benches, network);
criterion_main!(benches);
