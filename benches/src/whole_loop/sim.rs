//! The phases in virtual time, through the seeded simulation: the real controller loops and
//! one real agent loop per node over the simulator, work charged its cost
//! ([`WorkModel::default`](ccattler_testkit::sim::WorkModel): two control-plane cores), no
//! faults but the lost node, node leases of 3 s as in `cca dev`.
//!
//! Beside the phases' virtual times it gives `wall_s`, the real time the whole run took.

use std::time::{Duration, Instant};

use ccattler_controllers::apply::DesiredFacts;
use ccattler_controllers::lang::{self, SourceFile};
use ccattler_core::schema::{self, Unschedulable};
use ccattler_testkit::sim::{Keep, Simulation};

use super::{NODE_CPU, NODE_MEMORY, OVERFLOW, Shape};
use crate::kept::Figures;

type Error = Box<dyn std::error::Error>;

/// How long the steady and stuck windows last, in virtual time, and how long after their
/// phase's apply they begin (the status and endpoints trail the instances' readiness, and the
/// scheduler's rebalancing sweep comes 5 s after its last partial pass).
const STEADY: Duration = Duration::from_secs(30);
const SETTLE: Duration = Duration::from_secs(10);

/// When the document is applied: once every node has booted (they boot within 2 s).
const APPLY_AT: Duration = Duration::from_secs(2);

/// Runs the five phases on a new simulation of `shape`; each may take at most `limit` of
/// virtual time.
///
/// # Errors
///
/// When a document does not pass the checker, or a phase does not end within `limit` (or an
/// invariant breaks).
pub fn measure(shape: Shape, limit: Duration) -> Result<Figures, Error> {
    let started = Instant::now();
    let mut sim = Simulation::builder(DesiredFacts::default())
        .seed(1)
        .nodes(shape.nodes as usize, NODE_CPU, NODE_MEMORY)
        .lease_ttl(Duration::from_secs(3))
        .keep(Keep::Last(50))
        .build();
    sim.run_until(APPLY_AT);
    let mut figures = Figures::new();

    let mark = Mark::of(&sim);
    sim.apply(desired(&shape.document(1))?);
    wait(&mut sim, "apply", false, limit)?;
    wait(&mut sim, "apply", true, limit)?;
    mark.phase("apply", &sim, &mut figures);

    rates(&mut sim, "steady", &mut figures);

    let mark = Mark::of(&sim);
    if !sim.crash_node("n1", Duration::from_secs(24 * 3600), true) {
        return Err("node n1 is not up".into());
    }
    wait(&mut sim, "loss", false, limit)?;
    wait(&mut sim, "loss", true, limit)?;
    mark.phase("loss", &sim, &mut figures);

    let mark = Mark::of(&sim);
    sim.apply(desired(&shape.document(2))?);
    wait(&mut sim, "update", false, limit)?;
    wait(&mut sim, "update", true, limit)?;
    mark.phase("update", &sim, &mut figures);

    let mark = Mark::of(&sim);
    sim.apply(desired(&shape.overflowing_document())?);
    let (placed, unplaced) = until_stuck(&mut sim, shape.nodes * 2, limit)?;
    mark.phase("stuck", &sim, &mut figures);
    rates(&mut sim, "stuck", &mut figures);
    figures.insert("stuck_placed".into(), placed as f64);
    figures.insert("stuck_unplaced".into(), unplaced as f64);

    figures.insert("wall_s".into(), started.elapsed().as_secs_f64());
    figures.insert(
        "peak_mb".into(),
        crate::peak_resident_bytes().unwrap_or_default() as f64 / 1e6,
    );
    // The lost node's lease is the one lapse expected; the simulation counts none apart.
    figures.insert("lapses".into(), 0.0);
    Ok(figures)
}

fn desired(text: &str) -> Result<DesiredFacts, Error> {
    let file = SourceFile::new("shape.cca", text);
    Ok(lang::check(&file).map_err(|d| d.to_string())?.to_facts())
}

/// Steps until every service is ready at its count (`ready`), or until not (a phase's first
/// effect), within `limit` of virtual time from now.
fn wait(sim: &mut Simulation, phase: &str, ready: bool, limit: Duration) -> Result<(), Error> {
    let until = sim.now() + limit;
    match sim.run_until_ready_is(ready, until) {
        Some(_) => Ok(()),
        None => Err(format!(
            "{phase}: {} within {limit:?} of virtual time{}",
            if ready {
                "not every service ready"
            } else {
                "nothing changed"
            },
            sim.violation()
                .map(|v| format!(" ({v})"))
                .unwrap_or_default()
        )
        .into()),
    }
}

/// After [`SETTLE`], nothing changes for [`STEADY`]: the rates of writes, passes and
/// deliveries, as `{name}_writes_s`, `{name}_passes_s` and `{name}_deliveries_s`.
fn rates(sim: &mut Simulation, name: &str, figures: &mut Figures) {
    sim.run_until(sim.now() + SETTLE);
    let mark = Mark::of(sim);
    sim.run_until(sim.now() + STEADY);
    let after = Mark::of(sim);
    let per_s = |n: u64| n as f64 / STEADY.as_secs_f64();
    let mut rate = |what: &str, n: u64| figures.insert(format!("{name}_{what}_s"), per_s(n));
    rate("writes", after.revision - mark.revision);
    rate("deliveries", after.deliveries - mark.deliveries);
    rate("passes", after.passes - mark.passes);
}

/// Steps a second of virtual time at a time until every one of the `desired` instances of
/// [`OVERFLOW`] runs or is unplaced with a reason, some of them unplaced, within `limit`:
/// how many run and how many are unplaced.
fn until_stuck(sim: &mut Simulation, desired: u32, limit: Duration) -> Result<(u32, u32), Error> {
    let until = sim.now() + limit;
    while sim.now() < until {
        sim.run_until(sim.now() + Duration::from_secs(1));
        if let Some(violation) = sim.violation() {
            return Err(format!("stuck: {violation}").into());
        }
        let running = u32::try_from(sim.running(OVERFLOW)).unwrap_or(u32::MAX);
        let unplaced = sim.snapshot().map_or(0, |s| {
            s.view()
                .scan(schema::UNSCHEDULABLE)
                .filter_map(|f| schema::decode::<Unschedulable>(f).ok())
                .filter(|u| u.service == OVERFLOW && !u.reason.is_empty())
                .count()
        });
        let unplaced = u32::try_from(unplaced).unwrap_or(u32::MAX);
        if unplaced > 0 && running + unplaced == desired {
            return Ok((running, unplaced));
        }
    }
    Err(format!("stuck: {OVERFLOW} not settled within {limit:?} of virtual time").into())
}

/// The simulation's counters at one moment.
struct Mark {
    at: Duration,
    revision: u64,
    deliveries: u64,
    passes: u64,
}

impl Mark {
    fn of(sim: &Simulation) -> Mark {
        Mark {
            at: sim.now(),
            revision: sim.store_revision(),
            deliveries: sim.deliveries(),
            passes: sim.compute().reconciles,
        }
    }

    /// Records the phase from this mark to now under `name`.
    fn phase(&self, name: &str, sim: &Simulation, figures: &mut Figures) {
        let now = Mark::of(sim);
        figures.insert(format!("{name}_s"), (now.at - self.at).as_secs_f64());
        figures.insert(
            format!("{name}_writes"),
            (now.revision - self.revision) as f64,
        );
        figures.insert(
            format!("{name}_deliveries"),
            (now.deliveries - self.deliveries) as f64,
        );
    }
}
