//! [`World`]: the facts of a scenario, committed like a store would, and the controllers that
//! reconcile them on a fixed virtual clock.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use ccattler_controllers::standard;
use ccattler_core::runner::check_changes;
use ccattler_core::schema::RecordKey;
use ccattler_core::{Change, Controller, Fact, FactView, Revision, SequentialIds};

use crate::harness::reconcile::reconcile;

/// What builds a world's controllers (again on each restart).
type MakeControllers = Arc<dyn Fn() -> Vec<Arc<dyn Controller>> + Send + Sync>;

/// Rounds [`World::run`] tries before it calls the controllers a livelock.
pub const MAX_ROUNDS: usize = 100;

/// Why a world operation failed: a controller error, a change outside its write domain, an
/// unknown controller, or no fixpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorldError(pub String);

impl fmt::Display for WorldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for WorldError {}

/// One committed change and who wrote it (a controller's name, or `agent/{node}`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    /// The writer.
    pub by: String,
    /// The change, after dropping no-ops.
    pub change: Change,
}

/// The facts of a scenario and the controllers that reconcile them.
///
/// # Guarantees
///
/// - [`commit`](World::commit) behaves like a store transaction through the runner: puts of the
///   value a key already holds and deletes of absent keys are dropped; if anything is left, the
///   revision rises by one and every written fact gets it as mod revision (create revision and
///   version as etcd sets them).
/// - Each controller reconciles on a view holding only the prefixes it watches and writes (as the
///   runner lists them), at the fixed time
///   [`World::NOW`], with ids from one [`SequentialIds`] (`i0`, `i1`, ...) shared by the whole
///   scenario, so plans are the same on every run. A change outside the controller's write domain,
///   or two changes to one key, is an error, as in the runner.
/// - The stand-in node agents (see the [module docs](super)) run after the controllers in each
///   round while they are on.
pub struct World {
    facts: FactView,
    revision: Revision,
    ids: SequentialIds,
    make: MakeControllers,
    controllers: Vec<Arc<dyn Controller>>,
    pub(crate) agents_on: bool,
    /// Instances whose observation was set by hand: the agent stand-in leaves them as they are
    /// while they should run.
    pub(crate) held: BTreeSet<String>,
    /// The next port of each node's agent.
    pub(crate) ports: BTreeMap<String, u32>,
    /// The address each started instance got.
    pub(crate) addresses: BTreeMap<String, String>,
}

impl fmt::Debug for World {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("World")
            .field("revision", &self.revision)
            .field("facts", &self.facts.len())
            .field("controllers", &self.controller_names())
            .field("agents_on", &self.agents_on)
            .finish_non_exhaustive()
    }
}

impl Default for World {
    fn default() -> Self {
        World::new()
    }
}

impl World {
    /// The time of every reconcile: 2023-11-14T22:13:20Z.
    pub const NOW: Duration = Duration::from_secs(1_700_000_000);

    /// An empty world with every standard controller ([`standard::all`]) and agents on.
    pub fn new() -> Self {
        World::with_controllers(standard::all)
    }

    /// An empty world whose controllers `make` builds (again on each
    /// [`restart_controllers`](World::restart_controllers)), agents on: any set of controllers,
    /// standard or your own, in the order a round runs them.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use ccattler_core::Controller;
    /// use ccattler_testkit::scenario::{World, run_str_with};
    /// use ccattler_testkit::toy::ReplicaController;
    ///
    /// let toy = || vec![Arc::new(ReplicaController) as Arc<dyn Controller>];
    /// let world = World::with_controllers(toy);
    /// let text = "fact put toy/desired/web 1\nrun\nexpect fact toy/instance/web/i0 web\n";
    /// run_str_with("toy.txt", text, world)?;
    /// # Ok::<(), ccattler_testkit::scenario::ScenarioError>(())
    /// ```
    pub fn with_controllers(
        make: impl Fn() -> Vec<Arc<dyn Controller>> + Send + Sync + 'static,
    ) -> Self {
        let controllers = make();
        World {
            facts: FactView::new(),
            revision: Revision::ZERO,
            ids: SequentialIds::new("i"),
            make: Arc::new(make),
            controllers,
            agents_on: true,
            held: BTreeSet::new(),
            ports: BTreeMap::new(),
            addresses: BTreeMap::new(),
        }
    }

    /// The current revision.
    pub fn revision(&self) -> Revision {
        self.revision
    }

    /// The fact of a standard record (`None` also when its ids do not make a valid key).
    pub fn record(&self, record: RecordKey<'_>) -> Option<&Fact> {
        self.get(record.key().ok()?.as_str())
    }

    /// The fact at `key`.
    pub fn get(&self, key: &str) -> Option<&Fact> {
        self.facts.get(key)
    }

    /// The facts under `prefix`, in key order.
    pub fn scan<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = &'a Fact> + 'a {
        self.facts.scan(prefix)
    }

    /// Every fact, as a view at the current revision.
    pub fn view(&self) -> FactView {
        self.facts.clone()
    }

    /// The names of the controllers, in the order a round runs them.
    pub fn controller_names(&self) -> Vec<&str> {
        self.controllers.iter().map(|c| c.name()).collect()
    }

    /// Replaces the controllers by new objects (the same kinds, in the same order) over the same
    /// facts. Ids keep counting, as a real runner's random ids would not repeat.
    pub fn restart_controllers(&mut self) {
        self.controllers = (self.make)();
    }

    /// Commits `changes` as one transaction and returns those that were not no-ops.
    ///
    /// # Errors
    ///
    /// Two changes to the same key.
    pub fn commit(&mut self, changes: Vec<Change>) -> Result<Vec<Change>, WorldError> {
        // Any writer (a controller, a stand-in agent, a scenario line): the whole key space.
        check_changes(&[String::new()], &changes).map_err(WorldError)?;
        let effective: Vec<Change> = changes
            .into_iter()
            .filter(|c| !self.facts.is_noop(c))
            .collect();
        if effective.is_empty() {
            return Ok(effective);
        }
        self.revision = self.revision.next();
        self.facts.apply(effective.clone(), self.revision);
        Ok(effective)
    }

    /// The changes a controller proposes on the current facts, without no-ops and without
    /// applying them. Ids are drawn from a copy of the id source, so a following
    /// [`step`](World::step) creates the same ids this plan shows.
    ///
    /// # Errors
    ///
    /// An unknown controller, a reconcile error, or a change outside the write domain.
    pub fn plan(&self, controller: &str) -> Result<Vec<Change>, WorldError> {
        let controller = self.controller(controller)?;
        let mut ids = self.ids.clone();
        self.reconcile(controller.as_ref(), &mut ids)
    }

    /// One reconcile of one controller, committed. Returns the effective changes.
    ///
    /// # Errors
    ///
    /// As [`plan`](World::plan).
    pub fn step(&mut self, controller: &str) -> Result<Vec<Change>, WorldError> {
        let controller = self.controller(controller)?;
        let mut ids = self.ids.clone();
        let changes = self.reconcile(controller.as_ref(), &mut ids)?;
        self.ids = ids;
        self.commit(changes)
    }

    /// One round: every controller in order, each committing before the next reads, then every
    /// live node's agent when agents are on. Returns what changed.
    ///
    /// # Errors
    ///
    /// As [`step`](World::step).
    pub fn round(&mut self) -> Result<Vec<Applied>, WorldError> {
        let mut applied = Vec::new();
        let names: Vec<String> = self
            .controller_names()
            .into_iter()
            .map(String::from)
            .collect();
        for name in names {
            for change in self.step(&name)? {
                applied.push(Applied {
                    by: name.clone(),
                    change,
                });
            }
        }
        if self.agents_on {
            applied.extend(self.agents_pass()?);
        }
        Ok(applied)
    }

    /// Rounds until one changes nothing (a fixpoint). Returns how many rounds changed something.
    ///
    /// # Errors
    ///
    /// As [`step`](World::step), or no fixpoint after [`MAX_ROUNDS`] rounds: a livelock, and the
    /// message lists what the last round changed.
    pub fn run(&mut self) -> Result<usize, WorldError> {
        let mut last = Vec::new();
        for round in 0..MAX_ROUNDS {
            let applied = self.round()?;
            if applied.is_empty() {
                return Ok(round);
            }
            last = applied;
        }
        let shown: Vec<String> = last
            .iter()
            .take(20)
            .map(|a| format!("  {}: {}", a.by, super::render::change(&a.change)))
            .collect();
        Err(WorldError(format!(
            "no fixpoint after {MAX_ROUNDS} rounds (a livelock); the last round changed {} facts:\n{}",
            last.len(),
            shown.join("\n")
        )))
    }

    fn controller(&self, name: &str) -> Result<Arc<dyn Controller>, WorldError> {
        self.controllers
            .iter()
            .find(|c| c.name() == name)
            .cloned()
            .ok_or_else(|| {
                WorldError(format!(
                    "no controller `{name}`; the controllers are {}",
                    self.controller_names().join(", ")
                ))
            })
    }

    fn reconcile(
        &self,
        controller: &dyn Controller,
        ids: &mut SequentialIds,
    ) -> Result<Vec<Change>, WorldError> {
        // The harness's reconcile: the runner's view, its check of the changes, no no-ops.
        let now = SystemTime::UNIX_EPOCH + Self::NOW;
        reconcile(controller, &self.facts, now, ids).map_err(|e| WorldError(e.to_string()))
    }
}
