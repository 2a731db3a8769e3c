//! The autoscaler's incremental pass against a fresh autoscaler's on the same view and time.

use std::time::{Duration, SystemTime};

use ccattler_core::schema::{
    Assignment, Cpu, DesiredInstance, InstanceObservation, InstanceUsage, Memory, ObservedState,
    Resources,
};
use ccattler_core::{Fact, Key, Revision, SequentialIds, Value};

use super::*;

/// Three services of two instances each on two nodes; `a` and `b` scale on CPU, `c` on a
/// pushed metric; every scale-down window is 60 s.
fn cluster() -> FactView {
    let mut view = FactView::new();
    let mut put = |key: Key, value: Value| view.insert(Fact::created(key, value, Revision(1)));
    for node in ["n1", "n2"] {
        put(schema::keys::node_lease(node).expect("key"), node.into());
    }
    let mut telemetry: BTreeMap<&str, NodeTelemetry> = BTreeMap::new();
    for (name, metric) in [("a", "cpu"), ("b", "cpu"), ("c", "queue.depth")] {
        let spec = ServiceSpec {
            name: name.into(),
            image: "app:1".into(),
            instances: 2,
            resources: Resources {
                cpu: Cpu::from_millis(100),
                memory: Memory::from_bytes(64 << 20),
            },
            scale: Some(HorizontalScale {
                min: 1,
                max: 10,
                targets: vec![ScaleTarget {
                    metric: metric.into(),
                    value: 60,
                    percent: false,
                }],
                scale_up_stabilization: Duration::ZERO,
                scale_down_stabilization: Duration::from_secs(60),
            }),
            ..ServiceSpec::default()
        };
        let version = spec.version();
        put(
            schema::keys::service(name).expect("key"),
            schema::encode(&spec),
        );
        let effective = EffectiveService {
            instances: 2,
            version: version.clone(),
            paused: false,
        };
        put(
            schema::keys::effective(name).expect("key"),
            schema::encode(&effective),
        );
        for (k, node) in ["n1", "n2"].into_iter().enumerate() {
            let id = format!("{name}-{k}");
            let desired = DesiredInstance {
                service: name.into(),
                version: version.clone(),
                ordinal: None,
                state: DesiredState::Running,
                replaces: None,
            };
            put(
                schema::keys::instance(&id).expect("key"),
                schema::encode(&desired),
            );
            let assignment = Assignment {
                instance: id.clone(),
                service: name.into(),
                node: node.into(),
                version: version.clone(),
                state: DesiredState::Running,
                ports: Vec::new(),
                volumes: Vec::new(),
            };
            put(
                schema::keys::placement(node, &id).expect("key"),
                schema::encode(&assignment),
            );
            let observed = InstanceObservation {
                node: node.into(),
                service: name.into(),
                state: ObservedState::Running,
                ready: true,
                ..InstanceObservation::default()
            };
            put(
                schema::keys::observed_instance(node, &id).expect("key"),
                schema::encode(&observed),
            );
            let usage = InstanceUsage {
                service: name.into(),
                cpu: Cpu::from_millis(60),
                memory: Memory::from_bytes(32 << 20),
                disk: Memory::ZERO,
            };
            telemetry.entry(node).or_default().usage.insert(id, usage);
        }
    }
    for (node, record) in telemetry {
        put(
            schema::keys::telemetry(node).expect("key"),
            schema::encode(&record),
        );
    }
    view
}

/// `view` with `a`'s instance on `n1` using `millis` of CPU.
fn a_uses(view: &FactView, millis: u64) -> Change {
    let key = schema::keys::telemetry("n1").expect("key");
    let mut record: NodeTelemetry = view
        .get(key.as_str())
        .and_then(|f| schema::decode(f).ok())
        .expect("telemetry of n1");
    if let Some(usage) = record.usage.get_mut("a-0") {
        usage.cpu = Cpu::from_millis(millis);
    }
    Change::put(key, schema::encode(&record))
}

fn pass(autoscaler: &Autoscaler, view: &FactView, at: Duration) -> Vec<Change> {
    let mut ids = SequentialIds::new("t");
    let mut ctx = ReconcileContext::new(SystemTime::UNIX_EPOCH + at, &mut ids);
    let mut changes = autoscaler.reconcile(view, &mut ctx).expect("reconcile");
    changes.sort_by(|x, y| x.key().cmp(y.key()));
    changes
}

/// After every change, and as time passes with none, the pass that plans only what changed
/// proposes what an autoscaler reading the whole view for the first time proposes; and the
/// counts go where the metrics send them.
#[test]
fn planning_only_what_changed_proposes_what_a_fresh_read_does() {
    let mut view = cluster();
    let incremental = Autoscaler::new();
    let start = Duration::from_secs(1_000_000);
    let pushed = |value: u64| {
        let key = schema::keys::metric("queue.depth", "c").expect("key");
        Change::put(key, schema::encode(&PushedMetric { value }))
    };
    let steps: Vec<(u64, Vec<Change>)> = vec![
        (0, vec![]),
        (1, vec![]),
        (2, vec![a_uses(&view, 300)]),
        (20, vec![]),
        (21, vec![pushed(300)]),
        (40, vec![a_uses(&view, 10)]),
        (50, vec![]),
        (70, vec![pushed(0)]),
        (100, vec![]),
        (105, vec![]),
        (140, vec![]),
        (
            141,
            vec![Change::delete(schema::keys::service("b").expect("key"))],
        ),
        (200, vec![]),
    ];
    let mut intents = Vec::new();
    for (second, mutation) in steps {
        let at = start + Duration::from_secs(second);
        if !mutation.is_empty() {
            let next = view.revision().next();
            view.apply(mutation, next);
        }
        let changes = pass(&incremental, &view, at);
        let fresh = pass(&Autoscaler::new(), &view, at);
        assert_eq!(changes, fresh, "at {second} s");
        let next = view.revision().next();
        view.apply(changes, next);
        let count = |name: &str| {
            let key = schema::keys::scale_intent(name).expect("key");
            view.get(key.as_str())
                .and_then(|f| schema::decode::<ScaleIntent>(f).ok())
                .map(|i| i.instances)
        };
        intents.push((second, count("a"), count("b"), count("c")));
    }
    let at = |second: u64| intents.iter().find(|(s, ..)| *s == second).copied();
    assert_eq!(at(1), Some((1, Some(2), Some(2), Some(2))), "{intents:?}");
    // a-0 at 500 %, a-1 at 100 % of the target: asks 6, and one step may add four.
    assert_eq!(at(2).and_then(|s| s.1), Some(6), "{intents:?}");
    assert_eq!(at(21).and_then(|s| s.3), Some(5), "300 for 60 an instance");
    // Down only once the 60 s window is over: a-0 idled at 40 s, c's metric fell at 70 s.
    assert_eq!(at(70).and_then(|s| s.1), Some(6), "{intents:?}");
    assert!(at(100).and_then(|s| s.1) < Some(6), "{intents:?}");
    assert_eq!(at(105).and_then(|s| s.3), Some(5), "{intents:?}");
    assert_eq!(at(140).and_then(|s| s.3), Some(1), "{intents:?}");
    assert_eq!(at(141).map(|s| s.2), Some(None), "b's intent goes with b");
}
