//! Runs every scenario file in `scenarios/` (see `ccattler_testkit::scenario` for the format) and
//! asserts the plans they snapshot with insta.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ccattler_core::{Change, Controller, FactView, Key, ReconcileContext, ReconcileError};

use ccattler_testkit::scenario::{self, World, run_str};
use ccattler_testkit::toy::ReplicaController;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios")
}

/// Runs one file in `world` and asserts its snapshots as
/// `scenarios__{file stem}@{nn}-{name}.snap`.
fn run(file: &str, world: World) {
    let path = dir().join(file);
    let outcome = scenario::run_file_with(&path, world).unwrap_or_else(|e| panic!("{e}"));
    let stem = file.trim_end_matches(".txt");
    for snapshot in outcome.snapshots {
        insta::with_settings!({
            description => format!("scenarios/{file}:{}: {}", snapshot.line, snapshot.source),
            omit_expression => true,
            snapshot_suffix => snapshot.name.clone(),
        }, {
            insta::assert_snapshot!(stem, snapshot.text);
        });
    }
}

/// The world a scenario runs in: the standard controllers unless the list names another.
macro_rules! world {
    () => {
        World::new()
    };
    ($world:expr) => {
        $world
    };
}

macro_rules! scenarios {
    ($($test:ident => $file:literal $(in $world:expr)?,)*) => {
        $(
            #[test]
            fn $test() {
                run($file, world!($($world)?));
            }
        )*

        /// A file nobody listed would never run.
        #[test]
        fn every_scenario_file_is_listed() {
            let listed = [$($file),*];
            let mut missing = Vec::new();
            for entry in std::fs::read_dir(dir()).expect("the scenarios directory") {
                let name = entry.expect("a directory entry").file_name();
                let name = name.to_string_lossy().into_owned();
                if name.ends_with(".txt") && !listed.contains(&name.as_str()) {
                    missing.push(name);
                }
            }
            assert!(missing.is_empty(), "add these to the scenarios! list: {missing:?}");
        }
    };
}

scenarios! {
    seed_000_placement_after_node_death => "000_seed_node_death.txt",
    seed_003_create_then_nothing => "003a_seed_create_then_nothing.txt",
    seed_003_controllers_rebuilt => "003b_seed_controllers_rebuilt.txt",
    seed_003_failed_on_failure => "003c_seed_failed_on_failure.txt",
    seed_003_failed_never => "003d_seed_failed_never.txt",
    seed_003_scale_down_order => "003e_seed_scale_down_order.txt",
    stop_order_groups => "003f_stop_order_groups.txt",
    seed_003_pending_and_pulling_count => "003g_seed_pending_and_pulling_count.txt",
    service_deletion => "010_service_deletion.txt",
    readiness_gated_endpoints => "011_readiness_gated_endpoints.txt",
    require_label_never_relaxed => "012_require_label_never_relaxed.txt",
    rolling_update => "013_rolling_update.txt",
    scale_by_redeclaration => "014_scale_by_redeclaration.txt",
    autoscaler_clamped => "015_autoscaler_clamped.txt",
    bad_deploy_keeps_old_ready => "016_bad_deploy_keeps_old_ready.txt",
    returning_node_reports_stale => "017_returning_node_reports_stale.txt",
    outdated_that_do_not_count_are_stopped => "018_outdated_that_do_not_count_are_stopped.txt",
    late_node_gets_its_share => "019_late_node_gets_its_share.txt",
    generic_facts_own_controller => "020_generic_facts_own_controller.txt" in toy_world(),
    stateful_identity_waits_for_its_old_placement => "021_stateful_identity_waits_for_its_old_placement.txt",
    static_port_once_per_node => "022_static_port_once_per_node.txt",
}

/// A world whose only controller is the toy replica controller.
fn toy_world() -> World {
    World::with_controllers(|| vec![Arc::new(ReplicaController) as Arc<dyn Controller>])
}

#[test]
fn errors_name_the_file_line_and_source() {
    let err = run_str("t.txt", "node n1 cpu=4\n\nservice web bogus=1\n").unwrap_err();
    assert_eq!(err.line, 3);
    let text = err.to_string();
    assert!(
        text.starts_with("t.txt:3: `service web bogus=1`: unknown service attribute `bogus`"),
        "{text}"
    );
    let err = run_str(
        "t.txt",
        "service web\nrun\nexpect instances web running=2\n",
    )
    .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("t.txt:3:") && text.contains("expected running=2 instances of web, found 1"),
        "{text}"
    );
}

#[test]
fn comments_do_not_eat_selectors() {
    let text = "node n1 cpu=1 # a node\nservice web cpu=1\nrun\nobserve web#0 pulling  # hold\n\
                expect observed web pulling=1\n";
    run_str("t.txt", text).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn a_plan_shows_the_ids_the_next_step_creates() {
    let text = "service web instances=2\nstep intent-resolver\nsnapshot plan instances\n\
                step instances\nexpect instance web-i1 running\n";
    let outcome = run_str("t.txt", text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(outcome.snapshots[0].name, "01-plan-instances");
    assert!(
        outcome.snapshots[0]
            .text
            .contains("put desired/instance/web-i1 ")
    );
}

/// Flips `flip/state` between two values on every pass: it never settles.
struct Flip;

impl Controller for Flip {
    fn name(&self) -> &str {
        "flip"
    }
    fn watches(&self) -> Vec<String> {
        vec!["flip/".into()]
    }
    fn write_domain(&self) -> Vec<String> {
        vec!["flip/".into()]
    }
    fn reconcile(
        &self,
        facts: &FactView,
        _ctx: &mut ReconcileContext<'_>,
    ) -> Result<Vec<Change>, ReconcileError> {
        let next = match facts.get("flip/state").and_then(|f| f.value_str()) {
            Some("a") => "b",
            _ => "a",
        };
        Ok(vec![Change::put(Key::new("flip/state")?, next)])
    }
}

#[test]
fn a_livelock_is_reported_not_looped() {
    let mut quiet = scenario::World::new();
    assert_eq!(
        quiet.run(),
        Ok(0),
        "nothing to do: the first round is the fixpoint"
    );
    let mut world = scenario::World::with_controllers(|| vec![Arc::new(Flip)]);
    let err = world.run().unwrap_err().to_string();
    assert!(
        err.starts_with(
            "no fixpoint after 100 rounds (a livelock); the last round changed 1 facts:"
        ) && err.contains("flip: put flip/state"),
        "{err}"
    );
}

/// Every kind of expectation fails, with a message saying what it found, when it does not hold:
/// the scenarios above prove something only if this is so.
#[test]
fn wrong_expectations_fail_with_what_was_found() {
    let base = "node n1 cpu=4 memory=8Gi\nnode n2 cpu=4 memory=8Gi\n\
                service web instances=3 cpu=1 port=80\nrun\n";
    let cases = [
        ("expect placements web n1=3", "found n1=2 n2=1"),
        ("expect placements web n1=2", "found n1=2 n2=1"),
        (
            "expect unsatisfied web 1",
            "expected 1 unsatisfied instances of web, found 0",
        ),
        (
            "expect instances web running=2",
            "expected running=2 instances of web, found 3",
        ),
        (
            "expect observed web pulling=1",
            "expected pulling=1 observed instances of web, found 0",
        ),
        (
            "expect instance web-i0 stopped",
            "desired stopped, found running",
        ),
        (
            "expect instance web#7 running",
            "selector web#7 names no instance",
        ),
        (
            "expect status web ready=2",
            "expected status of web ready=2",
        ),
        ("expect status web none", "expected no status of web"),
        (
            "expect endpoints web 2",
            "expected endpoints of web: 2 addresses",
        ),
        (
            "expect endpoints web none",
            "expected endpoints of web: none",
        ),
        (
            "expect effective web 4",
            "expected effective web 4, found 3",
        ),
        (
            "service web instances=4\nexpect no-changes",
            "intent-resolver: put effective/service/web",
        ),
        (
            "service web instances=4\nstep intent-resolver\nexpect no-changes instances",
            "instances: put desired/instance/web-i3",
        ),
        (
            "node n2 dead\nexpect placements web n1=3",
            "found n1=2 (on dead nodes: n2=1)",
        ),
        ("observe web-i9 failed", "no instance `web-i9`"),
        (
            "expect fact effective/service/web none",
            "expected fact effective/service/web none, found {\"instances\":3,",
        ),
        (
            "expect fact desired/service/nope a value",
            "expected fact desired/service/nope a value, found none",
        ),
        ("fact delete no/such", "no fact no/such to delete"),
        ("fact put /bad 1", "key \"/bad\" starts with `/`"),
        (
            "fact put a/b",
            "expected `fact put KEY VALUE` or `fact delete KEY`",
        ),
        (
            "step bogus",
            "no controller `bogus`; the controllers are autoscaler, rollout, intent-resolver, instances",
        ),
    ];
    for (tail, wanted) in cases {
        let text = format!("{base}{tail}\n");
        let err = match run_str("t.txt", &text) {
            Ok(_) => panic!("`{tail}` should fail"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains(wanted), "`{tail}`: {err}");
    }
}
