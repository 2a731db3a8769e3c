//! Deterministic scenarios: plain-text files of facts, events and expectations that run the
//! standard controllers, or any set of controllers, without a cluster.
//!
//! A scenario reads like the seed's "INPUT / EXPECT" examples, one step after another:
//!
//! ```text
//! # five instances of 1 cpu on two 4-cpu nodes
//! node n1 cpu=4 memory=8Gi
//! node n2 cpu=4 memory=8Gi
//! service web instances=5 cpu=1 memory=256Mi
//! run
//! expect placements web n1=3 n2=2
//! ----
//! node n2 dead
//! run
//! expect placements web n1=4
//! expect unsatisfied web 1
//! ```
//!
//! # Grammar
//!
//! One command per line; `#` at the start of a line or after a space starts a comment; a line of
//! dashes (`----`) separates steps for the reader. `[...]` is optional, `A|B` a choice.
//!
//! | line | effect |
//! |---|---|
//! | `node N ATTR...` | declares node `N` (`observed/node/N` plus its lease) or changes the attributes named: `cpu=Q memory=Q label=K:V zone=Z arch=A taint=T` |
//! | `node N dead\|alive` | deletes / restores `lease/node/N`; the node's facts stay |
//! | `service S ATTR...` | declares `desired/service/S`, or changes only the attributes named: `instances=N cpu=Q memory=Q image=I restart=always\|on_failure\|never readiness=http:/P\|tcp\|none require=K:V prefer=K:V accept=T zone=spread\|any\|Z arch=A max_extra=N max_unavailable=N scale=MIN..MAX\|none port=P static_port=P env=K:V stateful`; a new service starts as one instance of `example/S:1` |
//! | `delete service S` | deletes the service's desired record |
//! | `fact put KEY VALUE` | puts any fact: `VALUE` is the rest of the line, as written (a ` #` still starts a comment) |
//! | `fact delete KEY` | deletes any fact; fails if there is none |
//! | `intent S N` | the autoscaler recommends `N` instances (`intent/autoscaler/S`) |
//! | `observe SEL STATE [ready\|unready] [healthy\|unhealthy]` | an agent reports the selected instances in `STATE` (pending, pulling, starting, running, exited, failed, stopped); the stand-in agents leave them so until they are asked to stop |
//! | `run` | rounds to a fixpoint: every controller of the world in order (by default [`standard::all`]), each committing, then the agents; fails after [`MAX_ROUNDS`] |
//! | `round [N]` | `N` rounds (default 1), fixpoint or not: to watch a rollout step by step |
//! | `step C` | one reconcile of controller `C` (by its name: by default intent-resolver, instances, scheduler, endpoints, status), committed |
//! | `agents` / `agents on\|off` | one agent pass now / agents in `run` and `round` or not (off holds instances pending) |
//! | `restart controllers` | new controller objects over the same facts |
//! | `snapshot plan C [as NAME]` | records `C`'s proposed changes on the current facts (not applied) |
//! | `snapshot facts PREFIX [as NAME]` | records the facts under `PREFIX` |
//! | `expect placements S [NODE=N...]` | placements of `S` on live nodes, exactly (unlisted: none) |
//! | `expect unsatisfied S N [TEXT]` | `N` unschedulable instances of `S`, each reason containing `TEXT` |
//! | `expect instances S KEY=N...` | desired instances: `running`, `stopped`, `current` / `outdated` (running, of the effective version or not), `total` |
//! | `expect observed S STATE=N...` | instances by reported state; `none` = nothing reported |
//! | `expect instance SEL running\|stopped\|gone` | the desired state of the selected instances |
//! | `expect status S FIELD=V...` / `expect status S none` | `status/service/S` fields: desired, present, running, ready, deleting |
//! | `expect endpoints S N` / `expect endpoints S none` | addresses in `endpoint/service/S` |
//! | `expect effective S N` | the instance count in force |
//! | `expect no-changes [C]` | every controller (or `C`) proposes nothing on the current facts |
//! | `expect fact KEY VALUE` / `expect fact KEY none` | `KEY` holds exactly `VALUE` (the rest of the line) / is absent |
//!
//! Selectors `SEL`: an instance id (`web-i3`), `web#0` (the first instance of web in creation
//! order), `web:running` (by reported state; `pending` includes unreported), `web@n1` (placed on
//! n1). Instance ids are `{service}-i{n}`: the instance controller's `{service}-{id}` with ids
//! `i0`, `i1`, ... from one [`SequentialIds`](ccattler_core::SequentialIds) per scenario.
//!
//! # Controllers
//!
//! [`run_file`] and [`run_str`] run the standard controllers ([`World::new`]); [`run_file_with`]
//! and [`run_str_with`] run a scenario in a world of your own, such as
//! [`World::with_controllers`] with any set of controllers. With controllers of your own, the
//! commands `fact`, `run`, `round`, `step`, `restart controllers`, `snapshot` and the
//! expectations `fact` and `no-changes` are the ones that apply; the others read and write the
//! standard schema.
//!
//! # Node agents
//!
//! See [`agents`](World::agents_pass): live nodes report their placed instances running (ready,
//! healthy, at `node:10000+k`) and stopped when asked to stop; a dead node's agent reports nothing.
//!
//! # Snapshots
//!
//! [`run_str`] collects `snapshot` texts in [`Outcome::snapshots`]; the test binary
//! `tests/scenarios.rs` asserts them with insta, one `.snap` file per snapshot.

mod agents;
mod attrs;
mod command;
mod exec;
mod expect;
mod query;
mod render;
mod world;

pub use world::{Applied, MAX_ROUNDS, World, WorldError};

use std::fmt;
use std::path::Path;

#[cfg(doc)]
use ccattler_controllers::standard;

/// A snapshot a scenario took.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// `{nn}-{name}`: its position among the file's snapshots and its name (`plan-{controller}`,
    /// `facts`, or the `as NAME` given).
    pub name: String,
    /// The line of the `snapshot` command.
    pub line: usize,
    /// The command as written, spaces collapsed.
    pub source: String,
    /// What was recorded, one change or fact per line.
    pub text: String,
}

/// A scenario that ran to its end.
#[derive(Debug)]
pub struct Outcome {
    /// The snapshots, in file order.
    pub snapshots: Vec<Snapshot>,
    /// The world as the last line left it.
    pub world: World,
}

/// Why a scenario failed: a line that does not parse, a command that cannot run, or an
/// expectation that does not hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScenarioError {
    /// The file's name.
    pub file: String,
    /// The 1-based line.
    pub line: usize,
    /// The line as written, spaces collapsed (empty when the file could not be read).
    pub source: String,
    /// What went wrong.
    pub message: String,
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: ", self.file, self.line)?;
        if !self.source.is_empty() {
            write!(f, "`{}`: ", self.source)?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for ScenarioError {}

/// Reads and runs a scenario file with the standard controllers.
///
/// # Errors
///
/// [`ScenarioError`] naming the file and line: unreadable file, a parse error, a failing command
/// or expectation.
pub fn run_file(path: &Path) -> Result<Outcome, ScenarioError> {
    run_file_with(path, World::new())
}

/// Reads and runs a scenario file in `world`: with its controllers, from its facts.
///
/// # Errors
///
/// As [`run_file`].
pub fn run_file_with(path: &Path, world: World) -> Result<Outcome, ScenarioError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ScenarioError {
        file: file.clone(),
        line: 0,
        source: String::new(),
        message: format!("cannot read the scenario: {e}"),
    })?;
    run_str_with(&file, &text, world)
}

/// Runs a scenario's text with the standard controllers; `file` names it in errors.
///
/// # Errors
///
/// As [`run_file`].
pub fn run_str(file: &str, text: &str) -> Result<Outcome, ScenarioError> {
    run_str_with(file, text, World::new())
}

/// Runs a scenario's text in `world`; `file` names it in errors.
///
/// # Errors
///
/// As [`run_file`].
pub fn run_str_with(file: &str, text: &str, world: World) -> Result<Outcome, ScenarioError> {
    let source_of = |line: usize| {
        text.lines()
            .nth(line.saturating_sub(1))
            .unwrap_or_default()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    let error = |line: usize, message: String| ScenarioError {
        file: file.to_owned(),
        line,
        source: source_of(line),
        message,
    };
    let lines = command::parse(text).map_err(|(line, message)| error(line, message))?;
    let mut exec = exec::Exec::new(world);
    for line in &lines {
        exec.execute(&line.command, line.number, &source_of(line.number))
            .map_err(|message| error(line.number, message))?;
    }
    Ok(Outcome {
        snapshots: exec.snapshots,
        world: exec.world,
    })
}
