//! Step tests of [`AgentLoop`] on virtual time: a `MemoryStore` on a manual clock and a
//! `SimulatorRuntime`, every action performed at once, no processes, no sleeping. One test per
//! guarantee the agent documents.

use std::sync::Arc;
use std::time::Duration;

use ccattler_core::schema::{
    self, Assignment, DesiredState, Health, InstanceObservation, ObservedState, Probe, ProbeCheck,
    RestartPolicy, ServiceSpec,
};
use ccattler_core::{FactStore, InstanceState, ManualClock, Runtime, StoreError};
use ccattler_store::{MemoryConfig, MemoryStore, MemoryWatch};
use futures_util::{FutureExt, StreamExt};

use super::perform;
use super::{Action, AgentConfig, AgentLoop, Desired};
use crate::simulator::SimulatorRuntime;

const NODE: &str = "n1";
const TTL: Duration = Duration::from_secs(3);
/// The cache directory of a loop that keeps no files.
const NO_DIR: &str = "/nonexistent/agent";

/// One agent loop over a store and a simulator, driven by hand.
pub(super) struct Step {
    pub(super) machine: AgentLoop,
    pub(super) store: MemoryStore,
    pub(super) clock: ManualClock,
    pub(super) sim: SimulatorRuntime,
    watch: Option<MemoryWatch>,
    /// While true every store action fails as if the network were cut.
    store_down: bool,
    /// Every action the loop asked for, stamped with virtual time.
    pub(super) log: Vec<(Duration, String)>,
    /// Instances whose start stays in flight until [`release`](Self::release): performed (the
    /// simulator shows them starting) but not answered.
    held: std::collections::BTreeMap<String, Option<perform::Outcome>>,
    /// The lease a [`Action::KeepLease`] keeps: renewed every `every`, next at `due`.
    kept: Option<Kept>,
    /// The agent's cache directory (its volumes' data under `volumes/`).
    cache_dir: std::path::PathBuf,
}

/// A standing order to keep a lease alive, as the driver's keeper performs it.
struct Kept {
    lease: ccattler_core::LeaseId,
    every: Duration,
    due: Duration,
}

impl Step {
    pub(super) fn new() -> Self {
        Step::fresh(SimulatorRuntime::new(), std::path::Path::new(NO_DIR))
    }

    /// A loop whose cache directory is `dir`, on a fresh store.
    pub(super) fn in_dir(dir: &std::path::Path) -> Self {
        Step::fresh(SimulatorRuntime::new(), dir)
    }

    /// A loop over `sim`, on a fresh store.
    pub(super) fn with_runtime(sim: SimulatorRuntime) -> Self {
        Step::fresh(sim, std::path::Path::new(NO_DIR))
    }

    /// A loop over `sim` with cache directory `dir`, on a fresh store.
    fn fresh(sim: SimulatorRuntime, dir: &std::path::Path) -> Self {
        let clock = ManualClock::new();
        let store =
            MemoryStore::with_config(MemoryConfig::default().clock(Arc::new(clock.clone())));
        Step::over(store, clock, sim, Desired::default(), dir.into())
    }

    fn over(
        store: MemoryStore,
        clock: ManualClock,
        sim: SimulatorRuntime,
        cache: Desired,
        cache_dir: std::path::PathBuf,
    ) -> Self {
        let config = AgentConfig::new(NODE, &cache_dir)
            .lease_ttl(TTL)
            .sync_interval(Duration::from_millis(100))
            .secret_refresh_interval(Duration::from_millis(500))
            .stop_grace(Duration::from_millis(10));
        let mut machine = AgentLoop::new(config, cache);
        machine.tick(clock.now_duration());
        Step {
            machine,
            store,
            clock,
            sim,
            watch: None,
            store_down: false,
            log: Vec::new(),
            held: std::collections::BTreeMap::new(),
            kept: None,
            cache_dir,
        }
    }

    /// A new loop (an agent restart) over the same store, runtime and cache.
    fn restart(self) -> Self {
        let cache = self.machine.desired().clone();
        Step::over(self.store, self.clock, self.sim, cache, self.cache_dir)
    }

    /// Performs actions until the loop waits.
    pub(super) fn settle(&mut self) {
        for _ in 0..10_000 {
            let now = self.clock.now_duration();
            self.machine.tick(now);
            self.drain_watch();
            self.renew_when_due(now);
            let Some(action) = self.machine.next_action() else {
                return;
            };
            self.log.push((now, action.to_string()));
            self.perform(action);
        }
        panic!("the loop never waits: {:?}", self.tail());
    }

    fn perform(&mut self, action: Action) {
        match action {
            Action::Watch { prefix, from } => {
                if self.store_down {
                    return self.machine.watch_failed(StoreError::unavailable("cut"));
                }
                match self
                    .store
                    .watch(&prefix, from)
                    .now_or_never()
                    .expect("ready")
                {
                    Ok(watch) => self.watch = Some(watch),
                    Err(err) => self.machine.watch_failed(err),
                }
            }
            Action::Disconnected { .. } => {
                self.watch = None;
                self.kept = None;
            }
            Action::KeepLease { lease, every } => {
                let due = self.clock.now_duration() + every;
                self.kept = Some(Kept { lease, every, due });
            }
            Action::SaveCache { .. } | Action::RuntimeFailed { .. } => {}
            Action::MeasureVolumes { dir } => {
                self.machine.volumes_measured(super::measure_volumes(&dir));
            }
            Action::EnsureRunning { spec } if self.held.contains_key(&spec.id) => {
                self.sim.faults().slow_start(spec.id.clone());
                let id = spec.id.clone();
                let outcome = perform::runtime_action(&self.sim, Action::EnsureRunning { spec })
                    .now_or_never()
                    .expect("the simulator is ready at once");
                self.held.insert(id, outcome);
            }
            action if action.lane() != super::Lane::Runtime => {
                if self.store_down {
                    return self.fail_store(action);
                }
                perform::store_action(&self.store, NODE, TTL, action)
                    .now_or_never()
                    .expect("the memory store is ready at once")
                    .expect("a store action")
                    .feed(&mut self.machine);
            }
            action => perform::runtime_action(&self.sim, action)
                .now_or_never()
                .expect("the simulator is ready at once")
                .expect("a runtime action")
                .feed(&mut self.machine),
        }
    }

    /// The keeper's renewal, when due: logged as `renew lease L`, answered by the store (or
    /// failing while it is cut), a failure reported to the loop and ending the keeper.
    fn renew_when_due(&mut self, now: Duration) {
        let Some(kept) = self.kept.as_mut().filter(|k| now >= k.due) else {
            return;
        };
        kept.due = now + kept.every;
        let lease = kept.lease;
        self.log.push((now, format!("renew lease {lease}")));
        let outcome = if self.store_down {
            perform::Outcome::Renewed {
                lease,
                result: Err(StoreError::unavailable("cut")),
            }
        } else {
            perform::renew(&self.store, lease)
                .now_or_never()
                .expect("the memory store is ready at once")
        };
        if outcome.error().is_some() {
            self.kept = None;
        }
        outcome.feed(&mut self.machine);
    }

    /// From now on, the start of `id` stays in flight until [`release`](Self::release).
    fn hold_start(&mut self, id: &str) {
        self.held.insert(id.to_owned(), None);
    }

    /// The held start of `id` returns: the instance runs, and the loop hears of it.
    fn release(&mut self, id: &str) {
        self.sim.faults().release(id);
        if let Some(Some(outcome)) = self.held.remove(id) {
            outcome.feed(&mut self.machine);
        }
        self.settle();
    }

    /// Feeds the failure of whichever store action `action` was.
    fn fail_store(&mut self, action: Action) {
        perform::store_failure(&action, StoreError::unavailable("cut"))
            .expect("a store action")
            .feed(&mut self.machine);
    }

    fn drain_watch(&mut self) {
        if self.store_down && self.watch.take().is_some() {
            self.machine.watch_failed(StoreError::unavailable("cut"));
            return;
        }
        while let Some(watch) = self.watch.as_mut() {
            match watch.next().now_or_never() {
                Some(Some(Ok(event))) => self.machine.event(event),
                Some(Some(Err(err))) => {
                    self.watch = None;
                    self.machine.watch_failed(err);
                }
                Some(None) => {
                    self.watch = None;
                    self.machine.watch_failed(StoreError::unavailable("ended"));
                }
                None => return,
            }
        }
    }

    /// Moves virtual time forward by `by` in steps of 10 ms, settling after each.
    pub(super) fn advance(&mut self, by: Duration) {
        let end = self.clock.now_duration() + by;
        while self.clock.now_duration() < end {
            self.clock.advance(Duration::from_millis(10));
            self.store.expire_leases();
            self.settle();
        }
    }

    /// Advances 10 ms at a time until `done` holds (at most 10 s of virtual time).
    pub(super) fn advance_until(&mut self, what: &str, done: impl Fn(&Step) -> bool) {
        for _ in 0..1_000 {
            if done(self) {
                return;
            }
            self.advance(Duration::from_millis(10));
        }
        panic!(
            "{what}: not within 10 s; the last actions: {:?}",
            self.tail()
        );
    }

    fn tail(&self) -> &[(Duration, String)] {
        &self.log[self.log.len().saturating_sub(20)..]
    }

    pub(super) fn put<T: serde::Serialize>(&self, key: ccattler_core::Key, record: &T) {
        self.store
            .put(&key, schema::encode(record))
            .now_or_never()
            .expect("ready")
            .expect("put");
    }

    /// Declares `spec` and places instance `id` of it on the node.
    pub(super) fn place(&self, id: &str, spec: &ServiceSpec, state: DesiredState) {
        self.put(schema::keys::service(&spec.name).expect("key"), spec);
        let assignment = Assignment {
            instance: id.to_owned(),
            service: spec.name.clone(),
            node: NODE.to_owned(),
            version: spec.version(),
            state,
            ports: Vec::new(),
            volumes: Vec::new(),
        };
        self.put(schema::keys::placement(NODE, id).expect("key"), &assignment);
    }

    pub(super) fn unplace(&self, id: &str) {
        self.store
            .delete(&schema::keys::placement(NODE, id).expect("key"))
            .now_or_never()
            .expect("ready")
            .expect("delete");
    }

    pub(super) fn observation(&self, id: &str) -> Option<InstanceObservation> {
        let key = schema::keys::observed_instance(NODE, id).expect("key");
        let fact = self
            .store
            .get(&key)
            .now_or_never()
            .expect("ready")
            .expect("get")?;
        Some(schema::decode(&fact).expect("an observation"))
    }

    pub(super) fn state(&self, id: &str) -> Option<InstanceState> {
        let seen = self
            .sim
            .observe()
            .now_or_never()
            .expect("ready")
            .expect("observe");
        seen.into_iter().find(|o| o.id == id).map(|o| o.state)
    }

    pub(super) fn count(&self, what: &str) -> usize {
        self.log.iter().filter(|(_, a)| a.starts_with(what)).count()
    }
}

trait ClockExt {
    fn now_duration(&self) -> Duration;
}

impl ClockExt for ManualClock {
    fn now_duration(&self) -> Duration {
        ccattler_core::Clock::now(self)
    }
}

pub(super) fn service(name: &str, command: &[&str]) -> ServiceSpec {
    ServiceSpec {
        name: name.into(),
        image: format!("example/{name}:1"),
        command: command.iter().map(|s| (*s).to_owned()).collect(),
        instances: 1,
        ..ServiceSpec::default()
    }
}

pub(super) fn running(step: &Step, id: &str) -> bool {
    step.observation(id)
        .is_some_and(|o| o.state == ObservedState::Running)
}

#[test]
fn registers_starts_what_is_placed_and_reports_it_under_its_lease() {
    let mut step = Step::new();
    step.settle();
    assert!(step.machine.is_connected());
    step.place("web-1", &service("web", &[]), DesiredState::Running);
    step.advance(Duration::from_millis(50));
    assert_eq!(step.state("web-1"), Some(InstanceState::Running));
    let seen = step.observation("web-1").expect("reported");
    assert_eq!(seen.state, ObservedState::Running);
    assert!(seen.ready, "no readiness probe: ready once running");
    assert_eq!(seen.lease, step.machine.lease().map(|l| l.0));

    step.place("web-1", &service("web", &[]), DesiredState::Stopped);
    step.advance(Duration::from_millis(50));
    assert_eq!(step.state("web-1"), Some(InstanceState::Stopped));
    step.unplace("web-1");
    step.advance(Duration::from_millis(250));
    assert_eq!(step.state("web-1"), None, "removed once unplaced");
    assert!(
        step.observation("web-1").is_none(),
        "its observation deleted"
    );
}

#[test]
fn workloads_outlive_the_control_plane_and_the_agent_rejoins_within_a_third_of_the_ttl() {
    let mut step = Step::new();
    step.place("web-1", &service("web", &[]), DesiredState::Running);
    step.advance(Duration::from_millis(100));
    assert!(running(&step, "web-1"));

    step.store_down = true;
    step.advance(Duration::from_secs(60));
    assert_eq!(step.state("web-1"), Some(InstanceState::Running));
    assert_eq!(
        step.count("ensure_stopped"),
        0,
        "nothing stopped for an outage"
    );
    assert!(step.machine.stats().disconnects >= 2, "it kept trying");

    step.store_down = false;
    let back = step.clock.now_duration();
    step.advance(TTL / 3 + Duration::from_millis(100));
    assert!(step.machine.is_connected(), "rejoined");
    let rejoined = step
        .log
        .iter()
        .rev()
        .find(|(_, a)| a.starts_with("register"))
        .map(|(at, _)| *at)
        .expect("registered again");
    assert!(
        rejoined - back <= TTL / 3,
        "rejoined {:?} after the store returned",
        rejoined - back
    );
    assert!(running(&step, "web-1"));
}

#[test]
fn a_restarted_agent_adopts_what_runs_and_restarts_nothing() {
    let mut step = Step::new();
    step.place("web-1", &service("web", &[]), DesiredState::Running);
    step.advance(Duration::from_millis(100));
    let lease = step.machine.lease();

    // The store is down when the agent comes back: it works from its cache alone.
    step.store_down = true;
    let mut step = step.restart();
    step.store_down = true;
    step.advance(Duration::from_millis(500));
    assert_eq!(step.count("ensure_running"), 0);
    assert_eq!(step.count("ensure_stopped"), 0);

    step.store_down = false;
    step.advance(Duration::from_millis(500));
    assert_eq!(step.machine.lease(), lease, "the cached lease was resumed");
    assert_eq!(
        step.count("ensure_running"),
        0,
        "adopted, not started again"
    );
    let seen = step.observation("web-1").expect("reported");
    assert_eq!((seen.state, seen.restarts), (ObservedState::Running, 0));
}

#[test]
fn a_restarted_agent_rewrites_only_the_observations_the_store_holds_wrong() {
    let mut step = Step::new();
    step.place("a", &service("a", &[]), DesiredState::Running);
    step.place("b", &service("b", &[]), DesiredState::Running);
    step.advance(Duration::from_millis(100));
    let key = |id| schema::keys::observed_instance(NODE, id).expect("key");
    let revision = |step: &Step, id| {
        let fact = step.store.get(&key(id)).now_or_never().expect("ready");
        fact.expect("get").expect("reported").mod_revision
    };
    // Something else wrote garbage over b's observation meanwhile.
    step.store
        .put(&key("b"), ccattler_core::Value::from_static(b"not json"))
        .now_or_never()
        .expect("ready")
        .expect("put");
    let (a_before, b_garbled) = (revision(&step, "a"), revision(&step, "b"));
    let seen_before = step.observation("a");

    let mut step = step.restart();
    step.advance(Duration::from_millis(500));
    assert_eq!(step.observation("a"), seen_before);
    assert_eq!(
        revision(&step, "a"),
        a_before,
        "a's observation held already"
    );
    assert!(revision(&step, "b") > b_garbled, "b's is written again");
    assert_eq!(
        step.observation("b").expect("reported").state,
        ObservedState::Running
    );
}

#[test]
fn orphans_are_stopped_only_after_a_successful_list() {
    let mut step = Step::new();
    step.sim
        .ensure_running(&ccattler_core::InstanceSpec::new("stray", "x:1"))
        .now_or_never()
        .expect("ready")
        .expect("start");
    step.store_down = true;
    step.advance(Duration::from_secs(5));
    assert_eq!(
        step.state("stray"),
        Some(InstanceState::Running),
        "not before a list"
    );
    step.store_down = false;
    step.advance(Duration::from_secs(2));
    assert_eq!(step.state("stray"), None, "stopped, then removed");
}

#[test]
fn ended_instances_restart_as_their_policy_says() {
    let mut step = Step::new();
    let mut always = service("always", &[]);
    always.restart = RestartPolicy::Always;
    let mut on_failure = service("onfail", &[]);
    on_failure.restart = RestartPolicy::OnFailure;
    let mut never = service("never", &[]);
    never.restart = RestartPolicy::Never;
    step.place("a", &always, DesiredState::Running);
    step.place("f", &on_failure, DesiredState::Running);
    step.place("g", &on_failure, DesiredState::Running);
    step.place("n", &never, DesiredState::Running);
    step.advance(Duration::from_millis(100));
    let faults = step.sim.faults();
    faults.crash("a", 0);
    faults.crash("f", 1);
    faults.crash("g", 0);
    faults.crash("n", 1);
    step.advance(Duration::from_millis(200));
    assert_eq!(
        step.state("a"),
        Some(InstanceState::Running),
        "always: even after exit 0"
    );
    assert_eq!(
        step.state("f"),
        Some(InstanceState::Running),
        "on_failure: after exit 1"
    );
    assert_eq!(step.state("g"), Some(InstanceState::Exited { code: 0 }));
    assert_eq!(step.state("n"), Some(InstanceState::Exited { code: 1 }));
    assert_eq!(step.observation("f").expect("reported").restarts, 1);
    assert_eq!(
        step.observation("n").expect("reported").state,
        ObservedState::Failed
    );
}

#[test]
fn init_steps_run_in_order_before_the_main_process_and_a_failing_one_backs_off_in_place() {
    let mut step = Step::new();
    let mut spec = service("prepared", &[]);
    spec.init = vec![
        schema::InitStep::new("exit 0"),
        schema::InitStep::new("exit 0"),
    ];
    step.place("p", &spec, DesiredState::Running);
    step.advance(Duration::from_secs(1));
    let starts: Vec<&str> = step
        .log
        .iter()
        .filter_map(|(_, a)| a.strip_prefix("ensure_running "))
        .collect();
    assert_eq!(starts, ["p.init0", "p.init1", "p"]);
    let seen = step.observation("p").expect("reported");
    assert_eq!((seen.state, seen.init_done), (ObservedState::Running, 2));

    // A failing step: the instance is starting, not failed (a failed one is replaced), with the
    // step's reason and output, and the step is tried again on the restart schedule (0.1 s,
    // 0.5 s, 1 s, 2 s, 5 s, 30 s), never the main process.
    let mut broken = service("broken", &[]);
    broken.init = vec![schema::InitStep::new("exit 7")];
    step.place("b", &broken, DesiredState::Running);
    step.advance(Duration::from_secs(1));
    let seen = step.observation("b").expect("reported");
    assert_eq!(seen.state, ObservedState::Starting, "{seen:?}");
    assert_eq!((seen.init_done, seen.init_steps), (0, 1));
    assert!(seen.init_failures >= 1, "{seen:?}");
    let reason = seen.reason.as_deref().unwrap_or_default();
    assert!(
        reason.starts_with("init step 1 of 1 exited with 7; next attempt in"),
        "{seen:?}"
    );
    assert_eq!(seen.init_output.as_deref(), Some("exit 7: exit status 7"));
    step.advance(Duration::from_secs(60));
    let attempts = step
        .log
        .iter()
        .filter(|(_, a)| *a == "ensure_running b.init0")
        .count();
    assert!((5..=8).contains(&attempts), "{attempts} attempts in 61 s");
    let seen = step.observation("b").expect("reported");
    assert_eq!(seen.state, ObservedState::Starting);
    assert_eq!(seen.init_failures as usize, attempts, "{seen:?}");
    assert_eq!(step.state("b"), None, "the main process never started");

    // Under restart `never`, after its retries the instance gives up and is failed.
    let mut once = service("once", &[]);
    once.restart = schema::RestartPolicy::Never;
    once.init = vec![schema::InitStep {
        retry: 1,
        ..schema::InitStep::new("exit 3")
    }];
    step.place("o", &once, DesiredState::Running);
    step.advance(Duration::from_secs(10));
    let seen = step.observation("o").expect("reported");
    assert_eq!(
        (seen.state, seen.init_failures),
        (ObservedState::Failed, 2),
        "{seen:?}"
    );
    assert!(
        seen.reason
            .as_deref()
            .is_some_and(|r| r.ends_with("restart never: not tried again")),
        "{seen:?}"
    );
}

/// An agent that restarts finds a main process running: its init steps passed before, and it
/// reports them so, without running them again.
#[test]
fn an_adopted_instance_reports_its_init_done() {
    let mut step = Step::new();
    let mut spec = service("prepared", &[]);
    spec.init = vec![schema::InitStep::new("exit 0")];
    step.place("p", &spec, DesiredState::Running);
    step.advance(Duration::from_secs(1));
    let mut step = step.restart();
    step.advance(Duration::from_secs(2));
    let seen = step.observation("p").expect("reported");
    assert_eq!((seen.state, seen.init_done), (ObservedState::Running, 1));
    let steps = step
        .log
        .iter()
        .filter(|(_, a)| *a == "ensure_running p.init0")
        .count();
    assert_eq!(steps, 0, "the restarted agent did not run the step again");
}

/// Service names may hold `.init` (`shop.initial`, `team/initdb`, whose ids have `.` for
/// `/`): such an instance is owned by itself, never taken for an init step of another
/// instance and stopped as an orphan. Init steps of a dotted name are still known as steps.
#[test]
fn instances_whose_names_hold_init_are_not_taken_for_init_steps() {
    let mut step = Step::new();
    let plain = service("shop", &[]);
    let dotted = service("shop.initial", &[]);
    let mut slashed = service("team/initdb", &[]);
    slashed.init = vec![schema::InitStep::new("true")];
    step.place("shop-1", &plain, DesiredState::Running);
    step.place("shop.initial-1", &dotted, DesiredState::Running);
    step.place("team.initdb-1", &slashed, DesiredState::Running);
    step.advance(Duration::from_secs(3));
    for id in ["shop-1", "shop.initial-1", "team.initdb-1"] {
        assert!(running(&step, id), "{id} runs: {:?}", step.observation(id));
        let starts = step
            .log
            .iter()
            .filter(|(_, a)| *a == format!("ensure_running {id}"));
        assert_eq!(starts.count(), 1, "{id} started once");
    }
    assert_eq!(
        step.count("ensure_stopped"),
        0,
        "nothing stopped: {:?}",
        step.tail()
    );
    assert_eq!(
        step.observation("team.initdb-1").map(|o| o.init_done),
        Some(1)
    );

    // An instance nobody placed is an orphan whatever its name, and so is a step of one.
    step.unplace("shop.initial-1");
    step.advance(Duration::from_secs(1));
    assert_eq!(
        step.state("shop.initial-1"),
        None,
        "the orphan was stopped and removed"
    );
    assert!(running(&step, "shop-1"));
}

/// The simulator runs init steps as programs that end: `true` (or a command it does not know)
/// ends with 0, so the main process starts after them.
#[test]
fn init_steps_end_on_the_simulator() {
    let mut step = Step::new();
    let mut spec = service("migrated", &[]);
    spec.init = vec![
        schema::InitStep::new("true"),
        schema::InitStep::new("./migrate --all"),
    ];
    step.place("m-1", &spec, DesiredState::Running);
    step.advance(Duration::from_secs(1));
    let seen = step.observation("m-1").expect("reported");
    assert_eq!((seen.state, seen.init_done), (ObservedState::Running, 2));
}

#[test]
fn a_failed_liveness_probe_is_reported_unhealthy_then_restarts_the_instance() {
    let mut step = Step::new();
    let mut sick = service("sick", &[]);
    let mut liveness = Probe::new(ProbeCheck::Exec {
        command: "exit 3".into(),
    });
    liveness.every = Duration::from_millis(100);
    liveness.failure_threshold = 2;
    sick.liveness = Some(liveness);
    step.place("s", &sick, DesiredState::Running);
    step.advance(Duration::from_millis(50));
    assert_eq!(
        step.observation("s").expect("reported").health,
        Health::Unknown,
        "one failure does not decide"
    );
    // Two failures in a row decide; the pass after the unhealthy report restarts it.
    let mut unhealthy_seen = false;
    for _ in 0..50 {
        step.advance(Duration::from_millis(10));
        unhealthy_seen |= step
            .observation("s")
            .is_some_and(|o| o.health == Health::Unhealthy);
        if step.count("ensure_stopped s") > 0 {
            break;
        }
    }
    assert!(unhealthy_seen, "reported unhealthy before the restart");
    assert_eq!(step.count("ensure_stopped s"), 1);
    step.advance(Duration::from_millis(200));
    assert_eq!(
        step.observation("s").expect("reported").restarts,
        1,
        "restarted per policy"
    );
}

#[test]
fn readiness_waits_for_the_startup_probe_and_follows_the_thresholds() {
    let mut step = Step::new();
    let mut web = service("web", &[]);
    let mut readiness = Probe::new(ProbeCheck::Tcp);
    readiness.every = Duration::from_millis(100);
    readiness.success_threshold = 2;
    readiness.failure_threshold = 1;
    web.readiness = Some(readiness);
    let mut startup = Probe::new(ProbeCheck::Tcp);
    startup.every = Duration::from_millis(100);
    web.startup = Some(startup);
    step.sim.faults().fail_probes("example/web:1");
    step.place("w", &web, DesiredState::Running);
    step.advance(Duration::from_millis(500));
    assert_eq!(
        step.count("probe readiness"),
        0,
        "gated by the failing startup probe"
    );
    assert!(!step.observation("w").expect("reported").ready);

    step.sim.faults().clear();
    step.advance_until("the startup probe passed", |s| {
        s.count("probe readiness") == 1
    });
    assert!(step.count("probe startup") >= 1);
    assert!(
        !step.observation("w").expect("reported").ready,
        "one success is not two"
    );
    step.advance_until("a second readiness check", |s| {
        s.count("probe readiness") == 2
    });
    assert!(step.observation("w").expect("reported").ready);

    step.sim.faults().fail_probes("w");
    step.advance(Duration::from_millis(150));
    let seen = step.observation("w").expect("reported");
    assert!(!seen.ready, "one failure takes it out");
    assert!(seen.reason.is_some_and(|r| r.starts_with("readiness:")));
}

#[test]
fn an_outdated_instance_restarts_with_its_own_version() {
    let mut step = Step::new();
    let v1 = service("web", &[]);
    step.place("old", &v1, DesiredState::Running);
    step.advance(Duration::from_millis(100));
    let mut v2 = v1.clone();
    v2.image = "example/web:2".into();
    step.place("new", &v2, DesiredState::Running);
    step.advance(Duration::from_millis(100));
    assert_eq!(
        step.sim.spec("new").expect("started").image,
        "example/web:2"
    );

    step.sim.faults().crash("old", 1);
    step.advance(Duration::from_millis(200));
    assert_eq!(step.state("old"), Some(InstanceState::Running), "restarted");
    assert_eq!(
        step.sim.spec("old").expect("started").image,
        "example/web:1",
        "with the spec of its own version"
    );
}

#[test]
fn a_version_the_store_no_longer_holds_is_reported_failed_not_started_with_another() {
    let mut step = Step::new();
    let v1 = service("web", &[]);
    let mut v2 = v1.clone();
    v2.image = "example/web:2".into();
    // The spec moved to v2 before this node ever saw v1.
    step.place("old", &v1, DesiredState::Running);
    step.put(schema::keys::service("web").expect("key"), &v2);
    step.advance(Duration::from_millis(200));
    assert_eq!(step.state("old"), None);
    let seen = step.observation("old").expect("reported");
    assert_eq!(seen.state, ObservedState::Failed);
    assert!(
        seen.reason
            .is_some_and(|r| r.contains("no longer in the store"))
    );
}

#[test]
fn a_version_rolled_back_to_starts_with_its_kept_spec() {
    let mut step = Step::new();
    let v1 = service("web", &[]);
    let mut v2 = v1.clone();
    v2.image = "example/web:2".into();
    // v2 is applied, v1 is put back in force: only the kept spec has v1.
    step.place("back", &v1, DesiredState::Running);
    step.put(schema::keys::service("web").expect("key"), &v2);
    step.put(
        schema::keys::spec_version("web", &v1.version()).expect("key"),
        &v1,
    );
    step.advance(Duration::from_millis(200));
    assert!(running(&step, "back"), "{:?}", step.tail());
    assert_eq!(
        step.sim.spec("back").expect("started").image,
        "example/web:1",
        "with the spec of its own version"
    );
}

#[test]
fn a_start_that_fails_is_reported_and_retried_on_the_backoff_schedule() {
    let mut step = Step::new();
    step.sim.faults().missing_image("example/ghost:1");
    step.place("g", &service("ghost", &[]), DesiredState::Running);
    step.advance(Duration::from_secs(2));
    let seen = step.observation("g").expect("reported");
    assert_eq!(seen.state, ObservedState::Failed);
    assert!(seen.reason.is_some_and(|r| r.contains("example/ghost:1")));
    // 100 ms, 500 ms, 1 s: attempts at about 0, 0.1, 0.6 and 1.6 s.
    assert_eq!(step.count("ensure_running g"), 4);
    step.sim.faults().clear();
    step.advance(Duration::from_secs(3));
    assert!(running(&step, "g"), "recovered once the image exists");
}

#[test]
fn an_instance_whose_spec_is_not_fetched_yet_is_reported_pending_never_failed() {
    let mut step = Step::new();
    let mut reports = step
        .store
        .watch(schema::OBSERVED_INSTANCES, ccattler_core::Revision::ZERO)
        .now_or_never()
        .expect("ready")
        .expect("watch");
    step.place("w", &service("web", &[]), DesiredState::Running);
    // The spec's fetch is held back while the loop passes and reports (its store and runtime
    // lanes run concurrently in the driver).
    let mut held = None;
    for _ in 0..100 {
        step.clock.advance(Duration::from_millis(10));
        step.machine.tick(step.clock.now_duration());
        step.drain_watch();
        match step.machine.next_action() {
            Some(action @ Action::FetchSpecs { .. }) => held = Some(action),
            Some(action) => step.perform(action),
            None => {}
        }
    }
    step.perform(held.expect("the spec was asked for"));
    step.advance(Duration::from_millis(300));
    assert!(running(&step, "w"));
    let mut states = Vec::new();
    while let Some(Some(Ok(event))) = reports.next().now_or_never() {
        let seen: InstanceObservation = schema::decode(&event.fact).expect("an observation");
        states.push((seen.state, seen.reason));
    }
    // A failed report would make the instance controller replace an instance that is fine.
    assert!(
        states
            .iter()
            .all(|(state, _)| *state != ObservedState::Failed),
        "{states:?}"
    );
    assert!(
        states
            .iter()
            .any(|(state, reason)| *state == ObservedState::Pending
                && reason
                    .as_deref()
                    .is_some_and(|r| r.contains("waiting for the spec"))),
        "the first report says what it waits for: {states:?}"
    );
}

/// Placements of several services that arrive together are judged after one fetch of all
/// their specs, not one fetch (and one pass) a service.
#[test]
fn placements_of_several_services_fetch_their_specs_in_one_action() {
    let mut step = Step::new();
    step.advance(Duration::from_millis(100));
    for name in ["web", "api", "worker"] {
        step.place(
            &format!("{name}-1"),
            &service(name, &[]),
            DesiredState::Running,
        );
    }
    step.advance_until("all three run", |step| {
        ["web-1", "api-1", "worker-1"]
            .iter()
            .all(|id| running(step, id))
    });
    // Each service's desired spec and the kept spec of its version: six keys in one action.
    assert_eq!(step.count("fetch 6 specs"), 1, "{:?}", step.tail());
    assert_eq!(step.count("fetch "), 1, "no other fetch: {:?}", step.tail());
}

/// Runtime actions that finish while another is in flight share their observation and report,
/// each reported within 100 ms of its end; once nothing is in flight, a finished one is
/// reported at once.
#[test]
fn a_burst_of_finished_actions_shares_one_observation_and_one_report() {
    let mut step = Step::new();
    step.hold_start("slow-1");
    step.place("slow-1", &service("slow", &[]), DesiredState::Running);
    step.advance(Duration::from_millis(50));
    let web = service("web", &[]);
    let ids: Vec<String> = (0..20).map(|i| format!("web-{i:02}")).collect();
    for id in &ids {
        step.hold_start(id);
        step.place(id, &web, DesiredState::Running);
    }
    step.advance(Duration::from_millis(20));
    let from = step.log.len();
    // Twenty starts end 10 ms apart, while another start stays in flight.
    let mut last_done = Duration::ZERO;
    for id in &ids {
        last_done = step.clock.now_duration();
        step.release(id);
        step.advance(Duration::from_millis(10));
    }
    step.advance(Duration::from_millis(100));

    let during = &step.log[from..];
    let reports: Vec<_> = during
        .iter()
        .filter(|(_, a)| a.starts_with("report") && a.contains("+web-"))
        .collect();
    assert!(
        (2..=4).contains(&reports.len()),
        "a report every 100 ms at most, not one per start: {reports:?}"
    );
    assert!(ids.iter().all(|id| running(&step, id)));
    let last_report = reports.last().map_or(Duration::ZERO, |(at, _)| *at);
    assert!(
        last_report >= last_done && last_report - last_done <= Duration::from_millis(100),
        "the last start reported within 100 ms of its end: {during:?}"
    );
    step.release("slow-1");
    assert!(
        running(&step, "slow-1"),
        "once nothing is in flight, reported at once"
    );
}

/// A start that takes longer than the lease TTL (an image pull) holds back only its own
/// instance: meanwhile the lease is renewed, another instance is started, a crashed one is
/// restarted and a third is stopped, and the slow one is reported starting, observed every
/// second.
#[test]
fn a_slow_start_holds_back_only_its_own_instance() {
    let mut step = Step::new();
    let fast = service("fast", &[]);
    step.place("f1", &fast, DesiredState::Running);
    step.place("f2", &fast, DesiredState::Running);
    step.advance(Duration::from_millis(300));
    assert!(running(&step, "f1") && running(&step, "f2"));

    step.hold_start("s");
    step.place("s", &service("slow", &[]), DesiredState::Running);
    step.advance(Duration::from_millis(300));
    assert!(step.log.iter().any(|(_, a)| a == "ensure_running s"));
    let held_from = step.log.len();
    step.place("f3", &fast, DesiredState::Running);
    step.sim.faults().crash("f1", 137);
    step.place("f2", &fast, DesiredState::Stopped);
    step.advance(TTL * 2);

    let during = &step.log[held_from..];
    let did = |what: &str| during.iter().filter(|(_, a)| a == what).count();
    assert!(
        did("renew lease 1") >= 5,
        "renewed every third of the TTL: {during:?}"
    );
    assert_eq!(step.count("register"), 1, "the lease never lapsed");
    assert_eq!(
        did("ensure_running f3"),
        1,
        "another instance started meanwhile"
    );
    assert_eq!(
        did("ensure_running f1"),
        1,
        "a crashed one restarted meanwhile"
    );
    assert_eq!(
        did("ensure_stopped f2 (asked)"),
        1,
        "a third stopped meanwhile"
    );
    assert!(running(&step, "f1") && running(&step, "f3"));
    assert!(
        did("observe") >= 6,
        "observed at least every second: {}",
        did("observe")
    );
    let seen = step
        .observation("s")
        .expect("reported while its start is in flight");
    assert_eq!(seen.state, ObservedState::Starting);

    step.release("s");
    step.advance(Duration::from_millis(300));
    assert!(running(&step, "s"));
}

/// A stateful identity created again on the node it ran on: the controllers delete its
/// placement and place the id anew, and the agent may see both in one batch, with the
/// previous incarnation still ended in the runtime. The new one starts over (init steps again,
/// whatever the restart policy), and its reports are written anew even where they read as the
/// old ones did, so the controllers, which ignore reports older than the record, hear of it.
#[test]
fn an_id_placed_anew_starts_over_and_is_reported_anew() {
    let mut step = Step::new();
    let mut db = service("db", &[]);
    db.restart = RestartPolicy::Never;
    db.init = vec![schema::InitStep::new("true")];
    step.place("db-0", &db, DesiredState::Running);
    step.advance(Duration::from_secs(1));
    assert!(running(&step, "db-0"));
    step.sim.faults().crash("db-0", 1);
    step.advance(Duration::from_millis(200));
    step.place("db-0", &db, DesiredState::Stopped);
    step.advance(Duration::from_millis(200));
    let ended = step.observation("db-0").expect("reported");
    assert_eq!(
        (ended.state, ended.stop_asked),
        (ObservedState::Failed, true)
    );

    // Deleted and placed anew, asked to stop at once: the report reads as before, and is
    // written anew.
    step.unplace("db-0");
    step.place("db-0", &db, DesiredState::Stopped);
    let key = schema::keys::observed_instance(NODE, "db-0").expect("key");
    let placed = schema::keys::placement(NODE, "db-0").expect("key");
    let revision = |step: &Step, key: &ccattler_core::Key| {
        step.store
            .get(key)
            .now_or_never()
            .expect("ready")
            .expect("get")
            .map(|f| (f.create_revision, f.mod_revision))
    };
    let (created, _) = revision(&step, &placed).expect("placed");
    step.advance(Duration::from_millis(200));
    let (_, reported) = revision(&step, &key).expect("reported");
    assert!(reported > created, "reported after the placement anew");

    // Deleted and placed anew to run: the ended one is removed, the new one runs its init
    // step and starts, under restart never.
    step.unplace("db-0");
    step.place("db-0", &db, DesiredState::Running);
    step.advance(Duration::from_secs(1));
    let removed = step.log.iter().filter(|(_, a)| a == "remove db-0").count();
    assert_eq!(removed, 1, "the earlier one removed: {:?}", step.tail());
    let seen = step.observation("db-0").expect("reported");
    assert_eq!(
        (seen.state, seen.init_done, seen.restarts),
        (ObservedState::Running, 1, 0),
        "{:?}",
        step.tail()
    );
    assert_eq!(step.state("db-0"), Some(InstanceState::Running));
}

/// A stateful identity placed anew while its earlier incarnation's init step had failed (a
/// version whose step exits 3, replaced by one whose steps pass): the ended step the runtime
/// still holds is the earlier incarnation's, removed before the new one runs its steps, and
/// never reported as a failure of the new one (a rollout would count it against the new
/// version and roll back a good one).
#[test]
fn an_id_placed_anew_does_not_take_its_earlier_incarnations_failed_init_step() {
    let mut step = Step::new();
    let mut broken = service("db", &[]);
    broken.image = "example/db:2-broken".into();
    broken.init = vec![
        schema::InitStep::new("true"),
        schema::InitStep::new("exit 3"),
    ];
    step.place("db-0", &broken, DesiredState::Running);
    // Up to the step's second attempt, which the runtime holds ended once it has run.
    while step.count("ensure_running db-0.init1") < 2 {
        step.advance(Duration::from_millis(10));
        assert!(
            step.clock.now_duration() < Duration::from_secs(5),
            "{:?}",
            step.tail()
        );
    }
    let failing = step.observation("db-0").expect("reported");
    assert!(failing.init_failures >= 1, "{:?}", step.tail());

    // The rollout deletes the identity and creates it again at a version whose steps pass.
    let mut fixed = service("db", &[]);
    fixed.image = "example/db:3".into();
    fixed.init = vec![schema::InitStep::new("true"), schema::InitStep::new("true")];
    step.unplace("db-0");
    step.place("db-0", &fixed, DesiredState::Running);
    let mut worst = 0;
    for _ in 0..20 {
        step.advance(Duration::from_millis(100));
        if let Some(seen) = step.observation("db-0")
            && seen.image == fixed.image
        {
            worst = worst.max(seen.init_failures);
        }
    }
    assert_eq!(
        worst,
        0,
        "a failure of the new incarnation reported: {:?}",
        step.tail()
    );
    let seen = step.observation("db-0").expect("reported");
    assert_eq!(
        (seen.state, seen.init_done, seen.image.as_str()),
        (ObservedState::Running, 2, fixed.image.as_str()),
        "{:?}",
        step.tail()
    );
}

/// A crashed instance restarted, then asked to stop before the agent observed it again (a
/// stateful identity about to be placed elsewhere): what the agent last observed (the ended
/// incarnation) does not pass for the stop. The restarted process is stopped, and only then
/// reported stopped.
#[test]
fn a_stop_asked_right_after_a_restart_stops_the_restarted_process() {
    let mut step = Step::new();
    let mut db = service("db", &[]);
    db.restart = RestartPolicy::Always;
    step.place("db-0", &db, DesiredState::Running);
    step.advance(Duration::from_millis(300));
    assert!(running(&step, "db-0"));
    step.sim.faults().crash("db-0", 137);
    // By hand: the stop is placed right after the restart is performed, before anything else.
    let mut asked = false;
    for _ in 0..100 {
        step.clock.advance(Duration::from_millis(10));
        let now = step.clock.now_duration();
        step.machine.tick(now);
        step.drain_watch();
        while let Some(action) = step.machine.next_action() {
            let restart = action.to_string() == "ensure_running db-0";
            step.log.push((now, action.to_string()));
            step.perform(action);
            if restart && !asked {
                step.place("db-0", &db, DesiredState::Stopped);
                asked = true;
            }
            step.machine.tick(now);
            step.drain_watch();
            // Never reported done with while its process runs: the controllers would place
            // the identity elsewhere.
            let seen = step.observation("db-0").expect("reported");
            if seen.stop_asked && step.state("db-0") == Some(InstanceState::Running) {
                assert!(
                    seen.state.is_active(),
                    "{seen:?} while it runs: {:?}",
                    step.tail()
                );
            }
        }
        if asked {
            break;
        }
    }
    assert!(asked, "restarted: {:?}", step.tail());
    step.advance(Duration::from_millis(300));
    assert_eq!(
        step.state("db-0"),
        Some(InstanceState::Stopped),
        "{:?}",
        step.tail()
    );
    assert_eq!(
        step.observation("db-0").map(|o| o.state),
        Some(ObservedState::Stopped)
    );
}

#[test]
fn an_observation_that_lags_never_passes_for_a_stop() {
    let mut step = Step::new();
    let db = service("db", &[]);
    // The runtime answers with what it saw before db-0 started.
    step.sim.faults().stale_observation();
    step.place("db-0", &db, DesiredState::Running);
    step.advance(Duration::from_millis(300));
    assert!(step.count("ensure_running db-0") > 0, "{:?}", step.tail());
    step.place("db-0", &db, DesiredState::Stopped);
    step.advance(Duration::from_millis(300));
    // The runtime shows nothing of it; the agent stops it all the same, and only then says
    // it stopped.
    assert_eq!(step.count("ensure_stopped db-0"), 1, "{:?}", step.tail());
    assert_eq!(
        step.observation("db-0").map(|o| o.state),
        Some(ObservedState::Stopped)
    );
    step.sim.faults().fresh_observation();
    assert_eq!(step.state("db-0"), Some(InstanceState::Stopped));
}

/// A report looks only at the instances whose observation may have changed since the last one:
/// once a node has settled, none; after one crashes, that one (reported at once); after a list,
/// every one.
#[test]
fn a_report_looks_only_at_the_instances_marked_since_the_last() {
    let mut step = Step::new();
    let mut web = service("web", &[]);
    web.restart = RestartPolicy::Never;
    let ids: Vec<String> = (0..20).map(|i| format!("web-{i:02}")).collect();
    for id in &ids {
        step.place(id, &web, DesiredState::Running);
    }
    step.advance(Duration::from_millis(300));
    assert!(ids.iter().all(|id| running(&step, id)));
    let marked = |step: &Step| step.machine.report_scope.ids().cloned();
    assert_eq!(
        marked(&step),
        Some(Default::default()),
        "settled: nothing to look at"
    );

    assert!(step.sim.faults().crash("web-07", 3));
    step.advance(Duration::from_millis(150));
    let seen = step.observation("web-07").expect("reported");
    assert_eq!(seen.state, ObservedState::Failed);
    assert_eq!(seen.exit_code, Some(3));
    assert!(
        ids.iter()
            .filter(|id| *id != "web-07")
            .all(|id| running(&step, id))
    );
    assert_eq!(marked(&step), Some(Default::default()));

    // An observation the store holds wrong (written behind the agent's back) is put right by
    // the next list, which looks at every instance.
    let key = schema::keys::observed_instance(NODE, "web-11").expect("key");
    let mut wrong = step.observation("web-11").expect("reported");
    wrong.state = ObservedState::Pending;
    step.store
        .put(&key, schema::encode(&wrong))
        .now_or_never()
        .expect("ready")
        .expect("put");
    // The list comes every 30 s (the default resync interval).
    step.advance(Duration::from_secs(31));
    assert!(running(&step, "web-11"), "{:?}", step.observation("web-11"));
}

/// A pass after placement events decides for the instances the events named; a periodic pass
/// (and specs, secrets, a list) for every one. An instance a pass had to leave (its lane busy)
/// stays for the next.
#[test]
fn a_pass_after_placement_events_decides_for_the_placed_instances() {
    let mut step = Step::new();
    let web = service("web", &[]);
    let ids: Vec<String> = (0..20).map(|i| format!("web-{i:02}")).collect();
    for id in &ids {
        step.place(id, &web, DesiredState::Running);
    }
    step.advance(Duration::from_millis(300));
    assert!(ids.iter().all(|id| running(&step, id)));
    let scope = |step: &Step| step.machine.pass_scope.ids().cloned();
    let only = |ids: &[&str]| Some(ids.iter().map(|id| id.to_string()).collect());
    assert_eq!(scope(&step), only(&[]), "settled: nothing to decide");

    step.hold_start("web-20");
    step.place("web-20", &web, DesiredState::Running);
    step.drain_watch();
    assert_eq!(scope(&step), only(&["web-20"]));
    step.settle();
    assert_eq!(step.count("ensure_running web-20"), 1, "{:?}", step.tail());

    // Its start is in flight: a pass for another placement observes and decides for that one
    // alone, not for the node's twenty-two; web-20 is looked at again once its start returns.
    let decided = step.machine.stats().decided;
    step.place("web-21", &web, DesiredState::Running);
    step.drain_watch();
    step.settle();
    assert_eq!(step.count("observe 1 ids"), 2, "{:?}", step.tail());
    assert_eq!(scope(&step), only(&[]));
    assert_eq!(step.machine.stats().decided - decided, 1);
    step.release("web-20");
    step.advance(Duration::from_millis(300));
    assert!(running(&step, "web-20") && running(&step, "web-21"));
    assert_eq!(scope(&step), only(&[]));

    // A sync interval later, the periodic pass has observed every instance, and decided for
    // none of the twenty-two, all settled (running as placed, nothing pending).
    let periodic = |step: &mut Step| {
        let every = |step: &Step| step.log.iter().filter(|(_, a)| a == "observe").count();
        let (decided, full) = (step.machine.stats().decided, every(step));
        step.advance(Duration::from_millis(100));
        (step.machine.stats().decided - decided, every(step) - full)
    };
    assert_eq!(periodic(&mut step), (0, 1));

    // One crashes: the periodic pass decides for it (and the pass after its restart does).
    step.sim.faults().crash("web-03", 1);
    let (decided, _) = periodic(&mut step);
    assert!(
        (1..=2).contains(&decided),
        "{decided} decided: {:?}",
        step.tail()
    );
    step.advance_until("web-03 runs again", |s| running(s, "web-03"));

    // One crashes and fails to start again: it waits for its retry, which time alone brings,
    // so every periodic pass decides for it (alone) until it runs.
    step.sim.faults().fail_next_start("web-07", "no room");
    step.sim.faults().crash("web-07", 1);
    periodic(&mut step);
    assert!(
        step.machine.unsettled.contains("web-07"),
        "{:?}",
        step.tail()
    );
    assert_eq!(periodic(&mut step), (1, 1), "{:?}", step.tail());
    step.advance_until("web-07 runs again", |s| running(s, "web-07"));
    step.advance(Duration::from_millis(100));
    assert!(step.machine.unsettled.is_empty());
    assert_eq!(periodic(&mut step), (0, 1));
}

#[test]
fn what_no_placement_needs_is_forgotten_within_a_sweep_interval_of_the_events() {
    let mut step = Step::new();
    let (web, db) = (service("web", &[]), service("db", &[]));
    step.place("web-0", &web, DesiredState::Running);
    step.place("db-0", &db, DesiredState::Running);
    step.advance_until("both run", |s| running(s, "web-0") && running(s, "db-0"));
    let held = |step: &Step| step.machine.desired.spec("db", &db.version()).is_some();
    assert!(held(&step));

    // Events right after a sweep: the instance stops at once, its spec waits for the next
    // sweep, which comes within `SWEEP_EVERY`.
    step.machine.sweep_at = step.clock.now_duration() + super::machine::SWEEP_EVERY;
    step.unplace("db-0");
    step.advance(Duration::from_millis(300));
    assert!(
        !running(&step, "db-0"),
        "stopped at once: {:?}",
        step.tail()
    );
    assert!(held(&step), "the sweep waits");
    step.advance(super::machine::SWEEP_EVERY);
    assert!(!held(&step), "forgotten by the sweep");
    assert!(running(&step, "web-0"));
}

/// A sweep walks every placement, so it waits for events numbering half of them (each event
/// then bears a constant share of its cost), or for the next list.
#[test]
fn a_sweep_after_events_waits_for_events_of_half_the_placements() {
    let mut step = Step::new();
    let (web, db) = (service("web", &[]), service("db", &[]));
    let webs: Vec<String> = (0..8).map(|i| format!("web-{i}")).collect();
    for id in &webs {
        step.place(id, &web, DesiredState::Running);
    }
    step.place("db-0", &db, DesiredState::Running);
    step.advance_until("all run", |s| webs.iter().all(|id| running(s, id)));
    let held = |step: &Step| step.machine.desired.spec("db", &db.version()).is_some();

    step.unplace("db-0");
    step.advance(super::machine::SWEEP_EVERY * 3);
    assert!(!running(&step, "db-0"), "stopped at once");
    assert!(
        held(&step),
        "one event for eight placements: the sweep waits"
    );
    for id in &webs[..3] {
        step.unplace(id);
    }
    step.advance(super::machine::SWEEP_EVERY);
    assert!(!held(&step), "four events for five placements: swept");
    assert!(running(&step, "web-7"));
}

/// Agents started together list again at spread moments, never later than the interval, and
/// the same node at the same moment draws the same wait (a replayed simulation lists alike).
#[test]
fn agents_started_together_spread_their_resyncs() {
    let every = AgentConfig::new(NODE, NO_DIR).resync_interval;
    let delay = |node: &str| {
        let config = AgentConfig::new(node, NO_DIR);
        AgentLoop::new(config, Desired::default()).resync_delay()
    };
    let delays: std::collections::BTreeSet<Duration> =
        (0..50).map(|i| delay(&format!("node-{i:04}"))).collect();
    assert!(delays.len() > 40, "{delays:?}");
    assert!(
        delays.iter().all(|d| *d <= every && *d >= every * 9 / 10),
        "{delays:?}"
    );
    let spread = delays
        .last()
        .zip(delays.first())
        .map(|(max, min)| *max - *min);
    assert!(spread > Some(every / 20), "{spread:?}");
    assert_eq!(delay("node-0007"), delay("node-0007"));
}
