//! A small, real controller for tests, examples and benchmarks of the runner.

use std::collections::BTreeMap;

use ccattler_core::{Change, Controller, FactView, Key, ReconcileContext, ReconcileError};

/// Prefix of the desired counts: `toy/desired/{group}` holds a decimal count.
pub const DESIRED: &str = "toy/desired/";
/// Prefix of the instances: `toy/instance/{group}/{id}` holds the group name.
pub const INSTANCES: &str = "toy/instance/";

/// Keeps as many instances of each group as its desired count says.
///
/// Reads `toy/desired/{group}` (a decimal count; a value that is not a number counts as 0) and
/// `toy/instance/{group}/{id}`; creates missing instances with ids from the context, and deletes
/// surplus ones, highest id first (a stable, documented order), including every instance of a
/// group that is no longer desired. Level-triggered and pure, like every controller should be.
#[derive(Debug, Clone, Default)]
pub struct ReplicaController;

impl ReplicaController {
    /// The key of a group's desired count.
    pub fn desired_key(group: &str) -> Key {
        Key::join(DESIRED, [group]).expect("toy group names are valid key segments")
    }
}

impl Controller for ReplicaController {
    fn name(&self) -> &str {
        "toy-replicas"
    }

    fn watches(&self) -> Vec<String> {
        vec![DESIRED.to_owned(), INSTANCES.to_owned()]
    }

    fn write_domain(&self) -> Vec<String> {
        vec![INSTANCES.to_owned()]
    }

    fn reconcile(
        &self,
        facts: &FactView,
        ctx: &mut ReconcileContext<'_>,
    ) -> Result<Vec<Change>, ReconcileError> {
        let mut want: BTreeMap<&str, usize> = BTreeMap::new();
        for fact in facts.scan(DESIRED) {
            let group = fact.key.strip_prefix(DESIRED).unwrap_or_default();
            let count = fact.value_str().and_then(|v| v.trim().parse().ok());
            want.insert(group, count.unwrap_or(0));
        }
        let mut have: BTreeMap<&str, Vec<&Key>> = BTreeMap::new();
        for fact in facts.scan(INSTANCES) {
            let rest = fact.key.strip_prefix(INSTANCES).unwrap_or_default();
            let group = rest.rsplit_once('/').map_or(rest, |(group, _)| group);
            have.entry(group).or_default().push(&fact.key);
        }
        let mut changes = Vec::new();
        for (group, &count) in &want {
            let present = have.get(group).map_or(0, Vec::len);
            for _ in present..count {
                let id = ctx.new_id();
                let key = Key::new(format!("{INSTANCES}{group}/{id}"))?;
                changes.push(Change::put(key, group.to_string()));
            }
        }
        for (group, keys) in &have {
            let keep = want.get(group).copied().unwrap_or(0);
            // Keys come sorted; surplus goes highest id first.
            for key in keys.iter().skip(keep).rev() {
                changes.push(Change::delete((*key).clone()));
            }
        }
        Ok(changes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ccattler_core::{Fact, Revision, SequentialIds};
    use std::time::SystemTime;

    fn fact(key: &str, value: &str) -> Fact {
        Fact::created(Key::new(key).unwrap(), value.to_owned().into(), Revision(1))
    }

    fn plan(facts: Vec<Fact>) -> Vec<Change> {
        let view = FactView::from_facts(Revision(1), facts);
        let mut ids = SequentialIds::new("i");
        let mut ctx = ReconcileContext::new(SystemTime::UNIX_EPOCH, &mut ids);
        ReplicaController.reconcile(&view, &mut ctx).unwrap()
    }

    #[test]
    fn creates_the_deficit_then_nothing() {
        let changes = plan(vec![fact("toy/desired/web", "2")]);
        let keys: Vec<_> = changes.iter().map(|c| c.key().as_str()).collect();
        assert_eq!(keys, ["toy/instance/web/i0", "toy/instance/web/i1"]);
        let again = plan(vec![
            fact("toy/desired/web", "2"),
            fact("toy/instance/web/i0", "web"),
            fact("toy/instance/web/i1", "web"),
        ]);
        assert!(again.is_empty());
    }

    #[test]
    fn deletes_surplus_highest_id_first_and_orphans() {
        let changes = plan(vec![
            fact("toy/desired/web", "1"),
            fact("toy/instance/web/a", "web"),
            fact("toy/instance/web/b", "web"),
            fact("toy/instance/web/c", "web"),
            fact("toy/instance/old/x", "old"),
        ]);
        let deleted: Vec<_> = changes.iter().map(|c| c.key().as_str()).collect();
        assert_eq!(
            deleted,
            [
                "toy/instance/old/x",
                "toy/instance/web/c",
                "toy/instance/web/b"
            ]
        );
    }
}
