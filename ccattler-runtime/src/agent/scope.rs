//! [`Scope`]: the placed instances a report or a pass must look at again.

use std::collections::{BTreeMap, BTreeSet};

/// The instances to look at again: every one, or those marked since the scope was last taken.
///
/// The agent keeps two. The report's: whatever an observation is derived from marks its
/// instance when it changes (its placement, its runtime sample, its track, its spec; every
/// instance on a list or when specs arrive), so a report of a node with a hundred instances
/// where a few changed derives those few. The pass's: a pass that follows placement events
/// decides for the instances those events named, those whose runtime sample changed (an init
/// step's marks the instance it belongs to), those whose files must be renewed, and those an
/// earlier pass had to leave (their lane busy, or changed since the observation); every other
/// cause of a pass (the periodic one, specs, secrets, a list) decides for every instance.
#[derive(Debug)]
pub(super) struct Scope {
    all: bool,
    ids: BTreeSet<String>,
}

impl Default for Scope {
    /// Every instance: what a new loop looks at first.
    fn default() -> Self {
        Scope {
            all: true,
            ids: BTreeSet::new(),
        }
    }
}

impl Scope {
    /// No instance.
    pub(super) fn none() -> Self {
        Scope {
            all: false,
            ids: BTreeSet::new(),
        }
    }

    /// Every instance.
    pub(super) fn mark_all(&mut self) {
        *self = Scope::default();
    }

    /// Instance `id`.
    pub(super) fn mark(&mut self, id: &str) {
        if !self.all && !self.ids.contains(id) {
            self.ids.insert(id.to_owned());
        }
    }

    /// The instances marked, `None` for every one.
    pub(super) fn ids(&self) -> Option<&BTreeSet<String>> {
        (!self.all).then_some(&self.ids)
    }

    /// The entries of `map` this scope covers: all of them, or those of the marked ids.
    pub(super) fn entries<'a, V>(
        &'a self,
        map: &'a BTreeMap<String, V>,
    ) -> Box<dyn Iterator<Item = (&'a String, &'a V)> + 'a> {
        match self.ids() {
            None => Box::new(map.iter()),
            Some(ids) => Box::new(ids.iter().filter_map(|id| map.get_key_value(id))),
        }
    }

    /// Takes the scope, leaving none marked.
    pub(super) fn take(&mut self) -> Scope {
        std::mem::replace(self, Scope::none())
    }

    /// Takes the marked ids `covers` holds (every one when `covers` is `None`), leaving the
    /// others marked. A scope of every instance is taken only whole: with `covers`, nothing
    /// is taken.
    pub(super) fn take_covered(&mut self, covers: Option<&BTreeSet<String>>) -> Scope {
        let Some(covers) = covers else {
            return self.take();
        };
        if self.all {
            return Scope::none();
        }
        let (ids, rest) = std::mem::take(&mut self.ids)
            .into_iter()
            .partition(|id| covers.contains(id));
        self.ids = rest;
        Scope { all: false, ids }
    }

    /// Whether no instance is marked.
    pub(super) fn is_empty(&self) -> bool {
        !self.all && self.ids.is_empty()
    }
}
