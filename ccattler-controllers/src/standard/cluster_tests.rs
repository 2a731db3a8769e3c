//! Tests of the cluster reading and of the cache that patches it.

use super::*;
use crate::standard::ClusterCache;
use ccattler_core::schema::{Resources, keys};

fn fact(key: Key, value: ccattler_core::Value, rev: u64) -> Fact {
    Fact::created(key, value, Revision(rev))
}

fn world() -> FactView {
    let mut view = FactView::new();
    let spec = ServiceSpec {
        name: "web".into(),
        resources: Resources {
            cpu: Cpu::from_millis(500),
            memory: Memory::from_bytes(1 << 20),
        },
        ..ServiceSpec::default()
    };
    view.insert(fact(
        keys::service("web").unwrap(),
        schema::encode(&spec),
        1,
    ));
    for (i, node) in ["n1", "n2"].into_iter().enumerate() {
        view.insert(fact(
            keys::node_lease(node).unwrap(),
            node.as_bytes().to_vec().into(),
            2,
        ));
        let id = format!("web-{i}");
        let desired = DesiredInstance {
            service: "web".into(),
            version: "v".into(),
            ordinal: None,
            state: DesiredState::Running,
            replaces: None,
        };
        view.insert(fact(
            keys::instance(&id).unwrap(),
            schema::encode(&desired),
            3,
        ));
        let a = Assignment {
            instance: id.clone(),
            service: "web".into(),
            node: node.into(),
            version: "v".into(),
            state: DesiredState::Running,
            ports: Vec::new(),
            volumes: Vec::new(),
        };
        view.insert(fact(
            keys::placement(node, &id).unwrap(),
            schema::encode(&a),
            4,
        ));
    }
    view
}

#[test]
fn joins_and_indexes() {
    let cluster = Cluster::read(&world());
    assert_eq!(cluster.instances_of("web").count(), 2);
    let i = &cluster.instances["web-1"];
    assert_eq!((i.node.as_deref(), i.node_alive), (Some("n2"), true));
    assert_eq!(cluster.usage["n1"].cpu, Cpu::from_millis(500));
}

#[test]
fn the_cache_agrees_with_a_fresh_read_after_changes() {
    let cache = ClusterCache::new();
    let mut view = world();
    cache.read(&view);
    view.remove(keys::node_lease("n2").unwrap().as_str());
    view.remove(keys::placement("n1", "web-0").unwrap().as_str());
    view.insert(fact(
        keys::service("web").unwrap(),
        schema::encode(&ServiceSpec {
            name: "web".into(),
            ..ServiceSpec::default()
        }),
        9,
    ));
    let patched = cache.read(&view);
    let fresh = Cluster::read(&view);
    assert_eq!(patched.instances, fresh.instances);
    assert_eq!(patched.usage, fresh.usage);
    assert!(!patched.instances["web-1"].node_alive);
    assert!(patched.instances["web-0"].node.is_none());
    assert!(patched.usage.is_empty(), "web now reserves nothing");
}

/// An instance placed twice (a writer's bug): the first placement by key counts, whichever
/// was written first, and removing it leaves the other, in the cache as in a fresh read.
#[test]
fn of_two_placements_of_one_instance_the_first_by_key_counts() {
    let cache = ClusterCache::new();
    let mut view = world();
    cache.read(&view);
    let placed = view
        .get(keys::placement("n2", "web-1").unwrap().as_str())
        .cloned()
        .unwrap();
    view.insert(fact(
        keys::placement("n1", "web-1").unwrap(),
        placed.value,
        5,
    ));
    for cluster in [cache.read(&view), Cluster::read(&view)] {
        assert_eq!(cluster.instances["web-1"].node.as_deref(), Some("n1"));
    }
    view.remove(keys::placement("n1", "web-1").unwrap().as_str());
    for cluster in [cache.read(&view), Cluster::read(&view)] {
        assert_eq!(cluster.instances["web-1"].node.as_deref(), Some("n2"));
    }
}

fn running_report(node: &str) -> ccattler_core::Value {
    schema::encode(&InstanceObservation {
        node: node.into(),
        service: "web".into(),
        state: ObservedState::Running,
        ready: true,
        address: Some(format!("{node}:1")),
        ..InstanceObservation::default()
    })
}

/// The lease fact of a node as a keep-alive re-put leaves it: created at `created`, last written
/// at `written`.
fn renewed_lease(node: &str, created: u64, written: u64) -> Fact {
    Fact {
        mod_revision: Revision(written),
        version: 2,
        ..fact(
            keys::node_lease(node).unwrap(),
            node.as_bytes().to_vec().into(),
            created,
        )
    }
}

/// Both the fresh read and the cache patched from `before`.
fn both(before: &FactView, after: &FactView) -> [Cluster; 2] {
    let cache = ClusterCache::new();
    cache.read(before);
    [Cluster::read(after), cache.read(after)]
}

#[test]
fn a_report_from_before_the_nodes_registration_is_stale() {
    // n2 (lease created at 2) reports web-1 running at 5: fresh.
    let mut view = world();
    let observed = keys::observed_instance("n2", "web-1").unwrap();
    view.insert(fact(observed.clone(), running_report("n2"), 5));
    let running = view.clone();
    let cluster = Cluster::read(&running);
    let i = &cluster.instances["web-1"];
    assert!(i.fresh && i.is_running() && i.is_ready() && i.report().is_some());
    assert!(!i.is_stale());
    assert!(
        !cluster.instances["web-0"].is_stale(),
        "n1 reported nothing"
    );
    assert_eq!(cluster.registered["n2"], Revision(2));

    // n2 crashes (its lease goes at 6) and registers again (a new lease fact at 7): the report
    // written at 5 is stale, the instance of unknown state.
    let mut dead = running.clone();
    dead.remove(keys::node_lease("n2").unwrap().as_str());
    let mut back = dead.clone();
    back.insert(fact(
        keys::node_lease("n2").unwrap(),
        "n2".as_bytes().to_vec().into(),
        7,
    ));
    for cluster in both(&running, &back)
        .iter()
        .chain(both(&dead, &back).iter())
    {
        let i = &cluster.instances["web-1"];
        assert_eq!(cluster.registered["n2"], Revision(7));
        assert!(i.node_alive && !i.fresh && i.is_stale(), "{i:?}");
        assert!(i.observed.is_some(), "the report is kept, just not trusted");
        assert!(i.report().is_none() && !i.is_running() && !i.is_ready());
        assert_eq!(i.standing(RestartPolicy::Always), Standing::Active);
        assert!(!i.is_gone());
        assert!(!cluster.instances["web-0"].fresh, "n1 reported nothing");
        assert!(
            !cluster.instances["web-0"].is_stale(),
            "nothing reported is not stale"
        );
    }

    // The agent writes the report again at 8, unchanged: fresh again.
    let mut rewritten = back.clone();
    rewritten.insert(Fact {
        mod_revision: Revision(8),
        version: 2,
        ..fact(observed.clone(), running_report("n2"), 5)
    });
    for cluster in both(&back, &rewritten) {
        let i = &cluster.instances["web-1"];
        assert!(
            i.fresh && i.is_running() && i.is_ready() && !i.is_stale(),
            "{i:?}"
        );
    }

    // While the node holds no lease nothing it reported is fresh.
    for cluster in both(&running, &dead) {
        let i = &cluster.instances["web-1"];
        assert!(!i.node_alive && !i.fresh && !i.is_running());
        assert!(!i.is_stale(), "lost, not stale");
        assert_eq!(i.standing(RestartPolicy::Always), Standing::Lost);
        assert!(!cluster.registered.contains_key("n2"));
    }
}

#[test]
fn a_keep_alive_of_the_same_lease_keeps_reports_fresh() {
    let mut view = world();
    view.insert(fact(
        keys::observed_instance("n2", "web-1").unwrap(),
        running_report("n2"),
        5,
    ));
    let mut renewed = view.clone();
    renewed.insert(renewed_lease("n2", 2, 9));
    for cluster in both(&view, &renewed) {
        assert_eq!(cluster.registered["n2"], Revision(2));
        assert!(cluster.instances["web-1"].fresh);
    }
}

#[test]
fn an_ended_report_counts_for_forgetting_even_when_stale() {
    let mut view = world();
    let stopped = DesiredInstance {
        service: "web".into(),
        version: "v".into(),
        ordinal: None,
        state: DesiredState::Stopped,
        replaces: None,
    };
    view.insert(fact(
        keys::instance("web-1").unwrap(),
        schema::encode(&stopped),
        5,
    ));
    view.insert(fact(
        keys::observed_instance("n2", "web-1").unwrap(),
        schema::encode(&InstanceObservation {
            state: ObservedState::Stopped,
            ..InstanceObservation::default()
        }),
        6,
    ));
    view.insert(fact(
        keys::node_lease("n2").unwrap(),
        "n2".as_bytes().to_vec().into(),
        7,
    ));
    let i = &Cluster::read(&view).instances["web-1"];
    assert!(!i.fresh && i.is_gone());
}

mod model {
    use super::*;
    use proptest::prelude::*;

    /// One random change to a small world of 2 services, 2 nodes and 4 instances.
    #[derive(Debug, Clone)]
    enum Step {
        Service(usize, Option<u64>),
        Lease(usize, bool),
        /// A keep-alive re-put of the lease, if the node holds one: same create revision.
        Renew(usize),
        /// The instance's service, whether it is asked to run, and which of two versions.
        Instance(usize, Option<(usize, bool, bool)>),
        Place(usize, Option<usize>),
        /// A placement of the instance on the node, the others kept: a writer's bug that leaves
        /// an instance two placements, of which the first by key counts.
        AlsoPlace(usize, usize),
        /// The instance's placement on the node removed, the others kept.
        Unplace(usize, usize),
        /// A report: running and ready, running not ready, failed after a restart, exited.
        Observe(usize, usize, Option<u8>),
        /// The service's effective count (a record a shared cluster leaves to each reader).
        Effective(usize, Option<u32>),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            (0..2usize, proptest::option::of(0..4u64)).prop_map(|(s, c)| Step::Service(s, c)),
            (0..2usize, any::<bool>()).prop_map(|(n, a)| Step::Lease(n, a)),
            (0..2usize).prop_map(Step::Renew),
            (
                0..4usize,
                proptest::option::of((0..2usize, any::<bool>(), any::<bool>()))
            )
                .prop_map(|(i, d)| Step::Instance(i, d)),
            (0..4usize, proptest::option::of(0..2usize)).prop_map(|(i, n)| Step::Place(i, n)),
            (0..4usize, 0..2usize).prop_map(|(i, n)| Step::AlsoPlace(i, n)),
            (0..4usize, 0..2usize).prop_map(|(i, n)| Step::Unplace(i, n)),
            (0..2usize, 0..4usize, proptest::option::of(0..4u8))
                .prop_map(|(n, i, o)| Step::Observe(n, i, o)),
            (0..2usize, proptest::option::of(0..3u32)).prop_map(|(s, c)| Step::Effective(s, c)),
        ]
    }

    const NODES: [&str; 2] = ["n1", "n2"];
    const SERVICES: [&str; 2] = ["a", "b"];

    fn apply(view: &mut FactView, step: &Step, rev: u64) {
        let mut set = |key: Key, value: Option<ccattler_core::Value>| match value {
            Some(v) => view.insert(fact(key, v, rev)),
            None => {
                view.remove(key.as_str());
            }
        };
        match step {
            Step::Service(s, cpu) => set(
                keys::service(SERVICES[*s]).unwrap(),
                cpu.map(|c| {
                    schema::encode(&ServiceSpec {
                        name: SERVICES[*s].into(),
                        resources: Resources {
                            cpu: Cpu::from_millis(c * 100),
                            memory: Memory::from_bytes(c),
                        },
                        ..ServiceSpec::default()
                    })
                }),
            ),
            Step::Lease(n, alive) => set(
                keys::node_lease(NODES[*n]).unwrap(),
                alive.then(|| ccattler_core::Value::from_static(b"x")),
            ),
            Step::Renew(n) => {
                let key = keys::node_lease(NODES[*n]).unwrap();
                if let Some(held) = view.get(key.as_str()).cloned() {
                    view.insert(Fact {
                        mod_revision: Revision(rev),
                        version: held.version + 1,
                        ..held
                    });
                }
            }
            Step::Instance(i, desired) => set(
                keys::instance(&format!("i{i}")).unwrap(),
                desired.map(|(s, running, newer)| {
                    schema::encode(&DesiredInstance {
                        service: SERVICES[s].into(),
                        version: if newer { "w" } else { "v" }.into(),
                        ordinal: None,
                        state: if running {
                            DesiredState::Running
                        } else {
                            DesiredState::Stopped
                        },
                        replaces: None,
                    })
                }),
            ),
            Step::Place(i, node) => {
                let id = format!("i{i}");
                for n in NODES {
                    view.remove(keys::placement(n, &id).unwrap().as_str());
                }
                if let Some(n) = node {
                    place(view, &id, *n, rev);
                }
            }
            Step::AlsoPlace(i, n) => place(view, &format!("i{i}"), *n, rev),
            Step::Unplace(i, n) => {
                view.remove(
                    keys::placement(NODES[*n], &format!("i{i}"))
                        .unwrap()
                        .as_str(),
                );
            }
            Step::Effective(s, count) => set(
                keys::effective(SERVICES[*s]).unwrap(),
                count.map(|instances| {
                    schema::encode(&EffectiveService {
                        instances,
                        version: "v".into(),
                        paused: false,
                    })
                }),
            ),
            Step::Observe(n, i, running) => set(
                keys::observed_instance(NODES[*n], &format!("i{i}")).unwrap(),
                running.map(|r| {
                    schema::encode(&InstanceObservation {
                        state: match r {
                            0 | 1 => ObservedState::Running,
                            2 => ObservedState::Failed,
                            _ => ObservedState::Exited,
                        },
                        ready: r == 0,
                        restarts: u32::from(r == 2),
                        ..InstanceObservation::default()
                    })
                }),
            ),
        }
    }

    fn place(view: &mut FactView, id: &str, n: usize, rev: u64) {
        let a = Assignment {
            instance: id.to_owned(),
            service: "a".into(),
            node: NODES[n].into(),
            version: String::new(),
            state: DesiredState::Running,
            ports: Vec::new(),
            volumes: Vec::new(),
        };
        view.insert(fact(
            keys::placement(NODES[n], id).unwrap(),
            schema::encode(&a),
            rev,
        ));
    }

    /// Whether `patched` reads as `fresh` does.
    fn same(patched: &Cluster, fresh: &Cluster) -> Result<(), TestCaseError> {
        prop_assert_eq!(&patched.instances, &fresh.instances);
        prop_assert_eq!(&patched.usage, &fresh.usage);
        prop_assert_eq!(&patched.services, &fresh.services);
        prop_assert_eq!(&patched.effective, &fresh.effective);
        prop_assert_eq!(&patched.alive, &fresh.alive);
        prop_assert_eq!(&patched.registered, &fresh.registered);
        let ids = |c: &Cluster| c.unplaced().map(|i| i.id.clone()).collect::<Vec<_>>();
        prop_assert_eq!(ids(patched), ids(fresh));
        let orphans = |c: &Cluster| c.orphan_placements().cloned().collect::<Vec<_>>();
        prop_assert_eq!(orphans(patched), orphans(fresh));
        for id in 0..4 {
            let id = format!("i{id}");
            prop_assert_eq!(patched.placement(&id), fresh.placement(&id));
        }
        for n in NODES {
            let on = |c: &Cluster| c.instances_on(n).map(|i| i.id.clone()).collect::<Vec<_>>();
            prop_assert_eq!(on(patched), on(fresh));
        }
        for s in SERVICES {
            let of = |c: &Cluster| c.instances_of(s).map(|i| i.id.clone()).collect::<Vec<_>>();
            prop_assert_eq!(of(patched), of(fresh));
        }
        Ok(())
    }

    /// What a controller planning service `s` reads of it.
    fn service_records(c: &Cluster, s: &str) -> String {
        let instances: Vec<_> = c.instances_of(s).collect();
        format!(
            "{:?} {:?} {instances:?}",
            c.services.get(s),
            c.effective.get(s)
        )
    }

    /// `view` without its effective records: what the endpoint controller watches.
    fn without_effective(view: &FactView) -> FactView {
        let kept = view
            .iter()
            .filter(|f| !f.key.as_str().starts_with(schema::EFFECTIVE_SERVICES));
        FactView::from_facts(view.revision(), kept.cloned())
    }

    proptest! {
        #[test]
        fn the_cache_always_agrees_with_a_fresh_read(steps in proptest::collection::vec(step(), 1..40)) {
            let cache = ClusterCache::new();
            let mut view = FactView::new();
            for (n, step) in steps.iter().enumerate() {
                apply(&mut view, step, n as u64 + 1);
                same(&cache.read(&view), &Cluster::read(&view))?;
            }
        }

        /// Three caches share one cluster, each reading its own view, some behind the others,
        /// one without the effective records: each gets its view's cluster, and every service
        /// whose records changed since its own previous read.
        #[test]
        fn caches_sharing_a_cluster_each_read_their_own_view(
            steps in proptest::collection::vec((step(), 0..3usize, 0..3usize), 1..40),
        ) {
            let shared = Arc::new(crate::standard::SharedCluster::new());
            let caches: Vec<_> = (0..3).map(|_| ClusterCache::sharing(Arc::clone(&shared))).collect();
            let mut last: Vec<Option<Cluster>> = vec![None, None, None];
            let mut history = vec![FactView::new()];
            for (n, (step, reader, lag)) in steps.iter().enumerate() {
                let mut view = history[n].clone();
                apply(&mut view, step, n as u64 + 1);
                history.push(view);
                let mut view = history[history.len() - 1 - lag.min(&n)].clone();
                if *reader == 2 {
                    view = without_effective(&view);
                }
                let (patched, touched) = caches[*reader].read_changes(&view);
                let fresh = Cluster::read(&view);
                same(&patched, &fresh)?;
                if let Some(before) = &last[*reader] {
                    for s in SERVICES {
                        if service_records(before, s) != service_records(&fresh, s) {
                            prop_assert!(touched.contains(s), "{} changed, not touched", s);
                        }
                    }
                }
                last[*reader] = Some(fresh);
            }
        }
    }
}

#[test]
fn most_nodes_look_dead_only_when_fewer_than_half_hold_their_lease() {
    // Two nodes with an instance each, both alive.
    let mut view = world();
    let read = |view: &FactView| ClusterCache::new().read(view);
    assert!(!read(&view).most_nodes_dead());
    // One of two dead: half still hold their lease, so instances are replaced.
    view.remove(keys::node_lease("n2").unwrap().as_str());
    assert!(!read(&view).most_nodes_dead());
    // Both dead: the control plane is the likelier one cut off.
    view.remove(keys::node_lease("n1").unwrap().as_str());
    assert!(read(&view).most_nodes_dead());
    // A node that holds a lease but runs nothing counts too: one of three alive is too few.
    view.insert(fact(
        keys::node_lease("n3").unwrap(),
        b"n3".to_vec().into(),
        9,
    ));
    assert!(read(&view).most_nodes_dead());
    // No node known at all: nothing looks dead.
    assert!(!read(&FactView::new()).most_nodes_dead());
}

#[test]
fn a_write_to_a_services_status_or_endpoints_touches_it() {
    // Found by the simulation (seed 125, three replicas): a late commit of a restarted status
    // loop overwrote the status with a stale count, and the new loop never planned the service
    // again, since nothing it read had changed.
    let mut view = world();
    let cache = crate::standard::PlanCache::new();
    let _ = cache.begin(&view);
    cache.finish(Default::default());
    view.insert(fact(
        keys::service_status("web").unwrap(),
        b"{\"desired\":9}".to_vec().into(),
        20,
    ));
    let (_, to_plan) = cache.begin(&view);
    assert!(to_plan.contains("web"), "{to_plan:?}");
    cache.finish(Default::default());
    view.insert(fact(
        keys::endpoints("api").unwrap(),
        b"{\"addresses\":[]}".to_vec().into(),
        21,
    ));
    let (_, to_plan) = cache.begin(&view);
    assert!(to_plan.contains("api"), "{to_plan:?}");
}
