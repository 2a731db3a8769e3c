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
/// earlier pass had to leave (their lane busy, or changed since the observation); the periodic
/// pass adds those an earlier pass left unsettled (see [`settle`](super::settle)); every other
/// cause of a pass (specs, secrets, a list) decides for every instance.
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

#[cfg(test)]
mod tests {
    use super::*;

    fn marked(ids: &[&str]) -> Scope {
        let mut scope = Scope::none();
        ids.iter().for_each(|id| scope.mark(id));
        scope
    }

    fn set(ids: &[&str]) -> BTreeSet<String> {
        ids.iter().map(|id| id.to_string()).collect()
    }

    #[test]
    fn what_an_observation_did_not_cover_stays_marked() {
        let mut scope = marked(&["a", "b", "c"]);
        let taken = scope.take_covered(Some(&set(&["a", "c", "z"])));
        assert_eq!(taken.ids(), Some(&set(&["a", "c"])));
        assert_eq!(scope.ids(), Some(&set(&["b"])));
        assert!(!scope.is_empty());
        let rest = scope.take_covered(None);
        assert_eq!(rest.ids(), Some(&set(&["b"])));
        assert!(scope.is_empty());

        let mut every = Scope::default();
        assert_eq!(
            every.take_covered(Some(&set(&["a"]))).ids(),
            Some(&set(&[]))
        );
        assert_eq!(every.ids(), None, "every instance is taken only whole");
        assert_eq!(every.take_covered(None).ids(), None);
        assert!(every.is_empty());
    }
}
