//! The standard controllers at scale: 1,000 and 10,000 nodes, ten running instances per node
//! (services of 100: 10,000 and 100,000 instances). One node dies; measured: the instance
//! controller's pass that replaces its ten instances, and the scheduler controller's pass that
//! places the replacements (also beside 1,000 persistent volumes attached to nodes, at 1,000
//! nodes: `_beside_volumes`). Every service scales on `cpu = 60` and every node reports its
//! telemetry; one node's use moves (within the tolerance); measured: the autoscaler's pass.
//! One instance reports a restart; measured: the rollout controller's pass (every rollout is
//! complete, so it only reads the service again), and the init controller's (every service has
//! an init step, every instance is through it). Each is measured on both cluster sizes,
//! named by the node count.
//!
//! `cargo bench -p ccattler-benches --bench controllers`
//!
//! Each controller keeps its decoded view of the cluster (and the scheduler its node tables)
//! between passes and patches it with the facts that changed, so a pass costs time for what
//! changed, not for the whole cluster: both sizes should measure about the same.

use std::time::{Duration, SystemTime};

use std::collections::BTreeMap;

use ccattler_controllers::standard::{
    Autoscaler, InitController, InstanceController, RolloutController, SchedulerController,
};
use ccattler_core::schema::{
    self, Assignment, Cpu, DesiredInstance, DesiredState, EffectiveService, HorizontalScale,
    InitStep, InstanceObservation, InstanceUsage, Memory, NodeStatus, NodeTelemetry, ObservedState,
    Resources, ScaleTarget, ServiceSpec, VolumeAttachment, VolumeSpec,
};
use ccattler_core::{
    Change, Controller, Fact, FactView, Key, ReconcileContext, Revision, SequentialIds, Value,
};
use criterion::{BatchSize, BenchmarkId, Criterion, criterion_group, criterion_main};

/// The cluster sizes measured, in nodes.
const SIZES: [usize; 2] = [1_000, 10_000];
/// Running instances per node.
const PER_NODE: usize = 10;
const PER_SERVICE: usize = 100;
/// Persistent volumes attached to nodes, in the variant that has them.
const VOLUMES: usize = 1_000;
/// CPU each instance uses, in millicores: 60 % of its 100m request, the services' target.
const USED_MILLIS: u64 = 60;

fn fact(key: Key, value: Value) -> Fact {
    Fact::created(key, value, Revision(1))
}

fn node_name(i: usize) -> String {
    format!("node-{i:05}")
}

/// Every fact of a converged cluster of `nodes` nodes.
fn cluster(nodes: usize) -> FactView {
    let mut view = FactView::new();
    let mut telemetry: BTreeMap<String, NodeTelemetry> = BTreeMap::new();
    for i in 0..nodes {
        let name = node_name(i);
        let status = NodeStatus {
            name: name.clone(),
            cpu: Cpu::from_millis(16_000),
            memory: Memory::from_bytes(64 << 30),
            zone: Some(format!("zone-{}", i % 3)),
            architecture: "amd64".into(),
            ..NodeStatus::default()
        };
        view.insert(fact(
            schema::keys::node(&name).expect("key"),
            schema::encode(&status),
        ));
        view.insert(fact(
            schema::keys::node_lease(&name).expect("key"),
            name.clone().into(),
        ));
    }
    for s in 0..nodes * PER_NODE / PER_SERVICE {
        let spec = ServiceSpec {
            name: format!("svc-{s:04}"),
            image: "app:1".into(),
            instances: PER_SERVICE as u32,
            resources: Resources {
                cpu: Cpu::from_millis(100),
                memory: Memory::from_bytes(128 << 20),
            },
            scale: Some(HorizontalScale {
                min: 10,
                max: 1_000,
                targets: vec![ScaleTarget {
                    metric: "cpu".into(),
                    value: 60,
                    percent: true,
                }],
                scale_up_stabilization: Duration::ZERO,
                scale_down_stabilization: Duration::from_secs(300),
            }),
            init: vec![InitStep::new("./migrate --all")],
            ..ServiceSpec::default()
        };
        let version = spec.version();
        view.insert(fact(
            schema::keys::service(&spec.name).expect("key"),
            schema::encode(&spec),
        ));
        let effective = EffectiveService {
            instances: spec.instances,
            version: version.clone(),
            paused: false,
        };
        view.insert(fact(
            schema::keys::effective(&spec.name).expect("key"),
            schema::encode(&effective),
        ));
        for k in 0..PER_SERVICE {
            let id = format!("{}-{k:03}", spec.name);
            let node = node_name((s * PER_SERVICE + k) % nodes);
            let desired = DesiredInstance {
                service: spec.name.clone(),
                version: version.clone(),
                ordinal: None,
                state: DesiredState::Running,
                replaces: None,
            };
            view.insert(fact(
                schema::keys::instance(&id).expect("key"),
                schema::encode(&desired),
            ));
            let assignment = Assignment {
                instance: id.clone(),
                service: spec.name.clone(),
                node: node.clone(),
                version: version.clone(),
                state: DesiredState::Running,
                ports: Vec::new(),
                volumes: Vec::new(),
            };
            view.insert(fact(
                schema::keys::placement(&node, &id).expect("key"),
                schema::encode(&assignment),
            ));
            let observed = InstanceObservation {
                node: node.clone(),
                service: spec.name.clone(),
                state: ObservedState::Running,
                ready: true,
                ..InstanceObservation::default()
            };
            view.insert(fact(
                schema::keys::observed_instance(&node, &id).expect("key"),
                schema::encode(&observed),
            ));
            let usage = InstanceUsage {
                service: spec.name.clone(),
                cpu: Cpu::from_millis(USED_MILLIS),
                memory: Memory::from_bytes(64 << 20),
                disk: Memory::ZERO,
            };
            let record = telemetry.entry(node).or_default();
            record.cpu = Cpu::from_millis(record.cpu.millis() + USED_MILLIS);
            record.instances += 1;
            record.usage.insert(id, usage);
        }
    }
    for (node, record) in &telemetry {
        view.insert(fact(
            schema::keys::telemetry(node).expect("key"),
            schema::encode(record),
        ));
    }
    view
}

/// `base` after the use of every instance on node `moved` went up by a twentieth: within the
/// autoscaler's tolerance, so no count changes, but every service on the node is measured again.
fn use_moved(base: &FactView, moved: usize) -> FactView {
    let mut view = base.clone();
    let key = schema::keys::telemetry(&node_name(moved)).expect("key");
    let mut record: NodeTelemetry = view
        .get(key.as_str())
        .and_then(|f| schema::decode(f).ok())
        .expect("every node reports its telemetry");
    for usage in record.usage.values_mut() {
        usage.cpu = Cpu::from_millis(usage.cpu.millis() + USED_MILLIS / 20);
    }
    let next = view.revision().next();
    view.apply(vec![Change::put(key, schema::encode(&record))], next);
    view
}

/// `base` after node `dead` lost its lease.
/// `base` with `count` persistent volumes declared, each attached to a node (the data of a
/// stateful identity no instance runs with now): what a pass of the scheduler reads besides.
fn with_volumes(base: &FactView, count: usize) -> FactView {
    let mut view = base.clone();
    let nodes = view.scan(schema::OBSERVED_NODES).count();
    for v in 0..count {
        let name = format!("vol-{v:04}");
        let spec = VolumeSpec {
            name: name.clone(),
            size: Memory::from_bytes(1 << 30),
            persistent: true,
        };
        view.insert(fact(
            schema::keys::volume(&name).expect("key"),
            schema::encode(&spec),
        ));
        let attachment = VolumeAttachment {
            volume: name.clone(),
            node: node_name(v % nodes),
            instance: None,
            size: spec.size,
            persistent: true,
        };
        view.insert(fact(
            schema::keys::volume_attachment(&name).expect("key"),
            schema::encode(&attachment),
        ));
    }
    view
}

fn node_died(base: &FactView, dead: usize) -> FactView {
    let mut view = base.clone();
    let lease = schema::keys::node_lease(&node_name(dead)).expect("key");
    view.remove(lease.as_str());
    view
}

/// `base` after the first instance node `node` reports was restarted once.
fn restarted(base: &FactView, node: usize) -> FactView {
    let mut view = base.clone();
    let prefix = schema::keys::node_observations(&node_name(node)).expect("prefix");
    let fact = view
        .scan(&prefix)
        .next()
        .expect("the node runs instances")
        .clone();
    let mut observed: InstanceObservation = schema::decode(&fact).expect("an observation");
    observed.restarts += 1;
    let next = view.revision().next();
    view.apply(vec![Change::put(fact.key, schema::encode(&observed))], next);
    view
}

fn reconcile(controller: &dyn Controller, view: &FactView) -> Vec<Change> {
    let mut ids = SequentialIds::new("r");
    let mut ctx = ReconcileContext::new(SystemTime::UNIX_EPOCH, &mut ids);
    controller.reconcile(view, &mut ctx).expect("reconcile")
}

fn one_dead_node(c: &mut Criterion) {
    let mut group = c.benchmark_group("controllers");
    group.sample_size(30);
    for (nodes, volumes) in [(1_000, 0), (10_000, 0), (1_000, VOLUMES)] {
        let base = with_volumes(&cluster(nodes), volumes);
        let instances = InstanceController::new();
        let scheduler = SchedulerController::new();
        // Warm both caches on the converged cluster (the first pass reads every fact).
        assert!(
            reconcile(&instances, &base).is_empty(),
            "the cluster is converged"
        );
        assert!(
            reconcile(&scheduler, &base).is_empty(),
            "everything is placed"
        );
        let mut dead = 0usize;
        let with = if volumes > 0 { "_beside_volumes" } else { "" };
        let id = BenchmarkId::new(format!("instances_replace_one_dead_node{with}"), nodes);
        group.bench_function(id, |b| {
            b.iter_batched(
                || {
                    dead = (dead + 7) % nodes;
                    node_died(&base, dead)
                },
                |view| {
                    let changes = reconcile(&instances, &view);
                    assert_eq!(
                        changes.len(),
                        PER_NODE,
                        "one replacement per instance of the dead node"
                    );
                    changes
                },
                BatchSize::LargeInput,
            )
        });
        let id = BenchmarkId::new(
            format!("scheduler_place_one_dead_nodes_replacements{with}"),
            nodes,
        );
        group.bench_function(id, |b| {
            b.iter_batched(
                || {
                    dead = (dead + 7) % nodes;
                    let mut view = node_died(&base, dead);
                    let replacements = reconcile(&instances, &view);
                    let next = view.revision().next();
                    view.apply(replacements, next);
                    view
                },
                |view| {
                    let changes = reconcile(&scheduler, &view);
                    let placed = changes
                        .iter()
                        .filter(|c| c.key().as_str().starts_with(schema::PLACEMENTS))
                        .count();
                    // Each placement is written with its `status/placed/{id}` guard.
                    assert_eq!(placed, PER_NODE, "each replacement placed");
                    assert_eq!(changes.len(), 2 * PER_NODE, "each placement guarded");
                    changes
                },
                BatchSize::LargeInput,
            )
        });
    }
    group.finish();
}

fn one_node_use_moved(c: &mut Criterion) {
    let mut group = c.benchmark_group("controllers");
    group.sample_size(30);
    for nodes in SIZES {
        let mut base = cluster(nodes);
        let autoscaler = Autoscaler::new();
        // The first pass reads every fact and writes each service's first intent.
        let first = reconcile(&autoscaler, &base);
        assert_eq!(
            first.len(),
            nodes * PER_NODE / PER_SERVICE,
            "one intent a service"
        );
        let next = base.revision().next();
        base.apply(first, next);
        assert!(reconcile(&autoscaler, &base).is_empty(), "the intents hold");
        let mut moved = 0usize;
        let id = BenchmarkId::new("autoscaler_one_node_use_moved", nodes);
        group.bench_function(id, |b| {
            b.iter_batched(
                || {
                    moved = (moved + 7) % nodes;
                    use_moved(&base, moved)
                },
                |view| {
                    let changes = reconcile(&autoscaler, &view);
                    assert!(changes.is_empty(), "within the tolerance: {changes:?}");
                    changes
                },
                BatchSize::LargeInput,
            )
        });
    }
    group.finish();
}

/// Measures `controller`'s pass on each cluster size after one instance restarted, once its
/// first passes on the cluster (`settle`) left it nothing to do: the pass must propose nothing.
fn pass_after_restart<C: Controller>(
    c: &mut Criterion,
    name: &str,
    make: impl Fn() -> C,
    settle: impl Fn(&C, &mut FactView, usize),
) {
    let mut group = c.benchmark_group("controllers");
    group.sample_size(30);
    for nodes in SIZES {
        let mut base = cluster(nodes);
        let controller = make();
        settle(&controller, &mut base, nodes);
        assert!(reconcile(&controller, &base).is_empty(), "{name}: settled");
        let mut node = 0usize;
        group.bench_function(BenchmarkId::new(name, nodes), |b| {
            b.iter_batched(
                || {
                    node = (node + 7) % nodes;
                    restarted(&base, node)
                },
                |view| {
                    let changes = reconcile(&controller, &view);
                    assert!(changes.is_empty(), "{name}: {changes:?}");
                    changes
                },
                BatchSize::LargeInput,
            )
        });
    }
    group.finish();
}

/// Reconciles `controller` on `view` and commits what it proposes.
fn commit(controller: &dyn Controller, view: &mut FactView) -> usize {
    let changes = reconcile(controller, view);
    let count = changes.len();
    let next = view.revision().next();
    view.apply(changes, next);
    count
}

fn one_instance_restarted(c: &mut Criterion) {
    // The first passes keep each service's spec and record its rollout, then complete it.
    pass_after_restart(
        c,
        "rollout_one_instance_restarted",
        RolloutController::new,
        |rollout, view, _| {
            for _ in 0..3 {
                commit(rollout, view);
            }
        },
    );
}

fn init_one_instance_restarted(c: &mut Criterion) {
    // The first pass writes each service's init record.
    pass_after_restart(
        c,
        "init_one_instance_restarted",
        InitController::new,
        |init, view, nodes| {
            let written = commit(init, view);
            assert_eq!(
                written,
                nodes * PER_NODE / PER_SERVICE,
                "one record a service"
            );
        },
    );
}

criterion_group!(
    benches,
    one_dead_node,
    one_node_use_moved,
    one_instance_restarted,
    init_one_instance_restarted
);
criterion_main!(benches);
