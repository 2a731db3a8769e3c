//! The scheduler controller patches its tables from one view to the next. Over random sequences
//! of changes (nodes dying, returning, added, changed or forgotten, services scaled or resized,
//! instances removed or stopped), its output must equal that of a fresh controller reading the
//! view from scratch, and its placements and reasons those of the pure `schedule` function on the
//! same view.

use std::collections::{BTreeMap, BTreeSet};
use std::time::SystemTime;

use ccattler_controllers::scheduler::{
    Existing, Node, Rebalance, Request, ScheduleInput, schedule,
};
use ccattler_controllers::standard::SchedulerController;
use ccattler_core::schema::{
    self, Cpu, DesiredInstance, DesiredState, Memory, NodeStatus, Placement, Resources,
    ServiceSpec, Unschedulable, ZonePolicy,
};
use ccattler_core::{
    Change, Controller, Fact, FactView, Key, ReconcileContext, Revision, SequentialIds, Value,
};
use proptest::prelude::*;

const ZONES: [&str; 3] = ["z1", "z2", "z3"];
const SERVICES: usize = 3;

fn fact(key: Key, value: Value) -> Fact {
    Fact::created(key, value, Revision(1))
}

/// A node drawn at random: cores, GiB, zone, `disk=ssd`, tainted `dedicated`.
type NodeDraw = (u64, u64, usize, bool, bool);

fn node_draw() -> impl Strategy<Value = NodeDraw> {
    (
        1u64..=4,
        1u64..=4,
        0usize..4,
        any::<bool>(),
        prop::bool::weighted(0.2),
    )
}

fn put_node(view: &mut FactView, i: usize, (cpu, mem, zone, ssd, tainted): NodeDraw) {
    let name = format!("n{i:02}");
    let status = NodeStatus {
        name: name.clone(),
        cpu: Cpu::from_millis(cpu * 1000),
        memory: Memory::from_bytes(mem << 30),
        zone: ZONES.get(zone).map(|z| z.to_string()),
        labels: [(
            "disk".to_string(),
            if ssd { "ssd" } else { "hdd" }.to_string(),
        )]
        .into(),
        taints: if tainted {
            vec!["dedicated".into()]
        } else {
            vec![]
        },
        architecture: "amd64".into(),
        ..NodeStatus::default()
    };
    view.insert(fact(
        schema::keys::node(&name).expect("key"),
        schema::encode(&status),
    ));
}

fn set_lease(view: &mut FactView, i: usize, alive: bool) {
    let key = schema::keys::node_lease(&format!("n{i:02}")).expect("key");
    if alive {
        view.insert(fact(key, Value::from(b"held".to_vec())));
    } else {
        view.remove(key.as_str());
    }
}

fn placement(shape: usize) -> Placement {
    let ssd: BTreeMap<String, String> = [("disk".to_string(), "ssd".to_string())].into();
    match shape % 5 {
        0 => Placement::default(),
        1 => Placement {
            zone: Some(ZonePolicy::Spread),
            ..Placement::default()
        },
        2 => Placement {
            prefer: ssd,
            accept: vec!["dedicated".into()],
            ..Placement::default()
        },
        3 => Placement {
            require: ssd,
            ..Placement::default()
        },
        _ => Placement {
            zone: Some(ZonePolicy::Only("z2".into())),
            ..Placement::default()
        },
    }
}

fn put_service(view: &mut FactView, s: usize, shape: usize, cpu: u64, mib: u64) {
    let spec = ServiceSpec {
        name: format!("svc{s}"),
        image: "app:1".into(),
        resources: Resources {
            cpu: Cpu::from_millis(cpu * 250),
            memory: Memory::from_bytes(mib << 27),
        },
        placement: placement(shape),
        ..ServiceSpec::default()
    };
    view.insert(fact(
        schema::keys::service(&spec.name).expect("key"),
        schema::encode(&spec),
    ));
}

fn put_instance(view: &mut FactView, s: usize, k: usize, state: DesiredState) {
    let desired = DesiredInstance {
        service: format!("svc{s}"),
        version: "v1".into(),
        ordinal: None,
        state,
        replaces: None,
    };
    let key = schema::keys::instance(&format!("svc{s}-{k:03}")).expect("key");
    view.insert(fact(key, schema::encode(&desired)));
}

/// One change to the cluster, then whether the scheduler's changes are written.
#[derive(Clone, Debug)]
enum Step {
    Lease(usize, bool),
    Node(usize, NodeDraw),
    Forget(usize),
    Scale(usize, usize),
    Resize(usize, usize, u64, u64),
    Remove(usize, usize),
    Stop(usize, usize),
}

fn step() -> impl Strategy<Value = (Step, bool)> {
    let step = prop_oneof![
        3 => (0usize..14, any::<bool>()).prop_map(|(i, a)| Step::Lease(i, a)),
        2 => (0usize..14, node_draw()).prop_map(|(i, d)| Step::Node(i, d)),
        1 => (0usize..14).prop_map(Step::Forget),
        3 => (0..SERVICES, 0usize..8).prop_map(|(s, n)| Step::Scale(s, n)),
        1 => (0..SERVICES, 0usize..5, 0u64..4, 0u64..4).prop_map(|(s, p, c, m)| Step::Resize(s, p, c, m)),
        2 => (0..SERVICES, 0usize..8).prop_map(|(s, k)| Step::Remove(s, k)),
        1 => (0..SERVICES, 0usize..8).prop_map(|(s, k)| Step::Stop(s, k)),
    ];
    (step, prop::bool::weighted(0.8))
}

fn apply_step(view: &mut FactView, step: &Step) {
    match *step {
        Step::Lease(i, alive) => set_lease(view, i, alive),
        Step::Node(i, draw) => put_node(view, i, draw),
        Step::Forget(i) => {
            let key = schema::keys::node(&format!("n{i:02}")).expect("key");
            view.remove(key.as_str());
        }
        Step::Scale(s, n) => {
            for k in 0..8 {
                let key = schema::keys::instance(&format!("svc{s}-{k:03}")).expect("key");
                if k < n {
                    if view.get(key.as_str()).is_none() {
                        put_instance(view, s, k, DesiredState::Running);
                    }
                } else {
                    view.remove(key.as_str());
                }
            }
        }
        Step::Resize(s, shape, cpu, mib) => put_service(view, s, shape, cpu, mib),
        Step::Remove(s, k) => {
            view.remove(
                schema::keys::instance(&format!("svc{s}-{k:03}"))
                    .expect("key")
                    .as_str(),
            );
        }
        Step::Stop(s, k) => {
            let key = schema::keys::instance(&format!("svc{s}-{k:03}")).expect("key");
            if view.get(key.as_str()).is_some() {
                put_instance(view, s, k, DesiredState::Stopped);
            }
        }
    }
}

/// One pass at `at` seconds of reconcile time.
fn reconcile_at(controller: &dyn Controller, view: &FactView, at: u64) -> Vec<Change> {
    let mut ids = SequentialIds::new("t");
    let now = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(at);
    let mut ctx = ReconcileContext::new(now, &mut ids);
    controller.reconcile(view, &mut ctx).expect("reconcile")
}

/// Placements and unschedulable reasons the pure function gives for `view`'s unplaced instances.
type Plan = (BTreeMap<String, String>, BTreeMap<String, String>);

fn decoded<T: serde::de::DeserializeOwned>(view: &FactView, prefix: &str) -> Vec<(String, T)> {
    view.scan(prefix)
        .map(|f| {
            (
                f.key.as_str()[prefix.len()..].to_string(),
                schema::decode(f).expect("decodes"),
            )
        })
        .collect()
}

fn pure(view: &FactView) -> Plan {
    let services: BTreeMap<String, ServiceSpec> = decoded(view, schema::DESIRED_SERVICES)
        .into_iter()
        .collect();
    let statuses: Vec<(String, NodeStatus)> = decoded(view, schema::OBSERVED_NODES);
    let alive: BTreeSet<&str> = view
        .scan(schema::NODE_LEASES)
        .map(|f| &f.key.as_str()[schema::NODE_LEASES.len()..])
        .collect();
    let desired: Vec<(String, DesiredInstance)> = decoded(view, schema::DESIRED_INSTANCES);
    let mut placed: BTreeMap<String, String> = BTreeMap::new();
    for fact in view.scan(schema::PLACEMENTS) {
        let (node, id) = fact.key.as_str()[schema::PLACEMENTS.len()..]
            .split_once('/')
            .expect("placement key");
        placed
            .entry(id.to_string())
            .or_insert_with(|| node.to_string());
    }
    let nodes: Vec<Node<'_>> = statuses
        .iter()
        .map(|(name, s)| Node::from_status(s, alive.contains(name.as_str())))
        .collect();
    let fallback = Placement::default();
    let spec = |service: &str| {
        services
            .get(service)
            .map_or((Resources::default(), &fallback), |s| {
                (s.resources, &s.placement)
            })
    };
    let mut existing = Vec::new();
    let mut requests = Vec::new();
    for (id, d) in &desired {
        let (resources, placement) = spec(&d.service);
        match placed.get(id) {
            Some(node) => existing.push(Existing {
                instance: id,
                service: &d.service,
                node,
                resources,
                placement,
                ports: &[],
                needs: ccattler_controllers::scheduler::Ports::NONE,
                pinned: false,
            }),
            None if d.state == DesiredState::Running && services.contains_key(&d.service) => {
                requests.push(Request {
                    instance: id,
                    service: &d.service,
                    resources,
                    placement,
                    ports: ccattler_controllers::scheduler::Ports::NONE,
                    volumes: &[],
                })
            }
            None => {}
        }
    }
    let plan = schedule(&ScheduleInput {
        nodes: &nodes,
        existing: &existing,
        requests: &requests,
        rebalance: Rebalance::Off,
        reserved: None,
        storage: &[],
    });
    let placements = plan
        .placements
        .iter()
        .map(|(i, n)| (i.to_string(), n.to_string()))
        .collect();
    let unsatisfied = plan
        .unsatisfied
        .iter()
        .map(|(i, why)| (i.to_string(), why.to_string()))
        .collect();
    (placements, unsatisfied)
}

/// The new placements and unschedulable reasons among a pass's changes.
fn planned(view: &FactView, changes: &[Change]) -> Plan {
    let (mut placements, mut unsatisfied) = (BTreeMap::new(), BTreeMap::new());
    for change in changes {
        let Change::Put { key, value } = change else {
            continue;
        };
        if let Some(rest) = key.strip_prefix(schema::PLACEMENTS) {
            let (node, id) = rest.split_once('/').expect("placement key");
            let mirrored = view
                .scan(schema::PLACEMENTS)
                .any(|f| f.key.as_str().ends_with(&format!("/{id}")));
            if !mirrored {
                placements.insert(id.to_string(), node.to_string());
            }
        } else if let Some(id) = key.strip_prefix(schema::UNSCHEDULABLE) {
            let why: Unschedulable =
                schema::decode(&fact(key.clone(), value.clone())).expect("decodes");
            unsatisfied.insert(id.to_string(), why.reason);
        }
    }
    (placements, unsatisfied)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(120))]

    #[test]
    fn incremental_passes_equal_fresh_ones_and_the_pure_function(
        nodes in prop::collection::vec(node_draw(), 2..10),
        shapes in prop::collection::vec((0usize..5, 0u64..4, 0u64..4, 0usize..6), SERVICES),
        steps in prop::collection::vec(step(), 1..25),
    ) {
        let mut view = FactView::new();
        for (i, draw) in nodes.iter().enumerate() {
            put_node(&mut view, i, *draw);
            set_lease(&mut view, i, true);
        }
        for (s, &(shape, cpu, mib, n)) in shapes.iter().enumerate() {
            put_service(&mut view, s, shape, cpu, mib);
            apply_step(&mut view, &Step::Scale(s, n));
        }
        let incremental = SchedulerController::new();
        // 5 s between passes: each one also judges the spread of every service, as a fresh
        // read does, so the two agree on rebalancing records too.
        let first = reconcile_at(&incremental, &view, 0);
        let next = view.revision().next();
        view.apply(first, next);
        for (k, (step, written)) in steps.iter().enumerate() {
            apply_step(&mut view, step);
            let at = 5 * (k as u64 + 1);
            let ours = reconcile_at(&incremental, &view, at);
            let fresh = reconcile_at(&SchedulerController::new(), &view, at);
            prop_assert_eq!(&ours, &fresh, "step {}: {:?}", k, step);
            prop_assert_eq!(planned(&view, &ours), pure(&view), "step {}: {:?}", k, step);
            if *written {
                let next = view.revision().next();
                view.apply(ours, next);
            }
        }
    }
}
