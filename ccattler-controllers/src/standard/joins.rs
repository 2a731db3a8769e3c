//! [`Joins`]: when the scheduler last saw a node join, so that what cannot move once placed
//! (stateful identities, persistent data) waits until the nodes starting together have joined.

use std::time::{Duration, SystemTime};

use imbl::OrdSet;
use imbl::ordset::DiffItem;

/// How long no node must have joined (become alive) before the scheduler places a stateful
/// identity, or an instance whose persistent volume is attached nowhere yet.
///
/// Neither moves once placed (a persistent volume's data stays on the node it first goes to,
/// and a stateful identity is not moved to make room or to rebalance): placed while only the
/// first nodes of a starting cluster are up, they fill those nodes for good, and an instance
/// that needs one of them (a required label, a static host port) may never find room. Nodes
/// that start together join within about a second of each other.
pub const JOIN_QUIET: Duration = Duration::from_secs(2);

/// The live nodes the scheduler saw at its last pass, and when one last joined.
///
/// Kept by the controller, outside its cache of the view: it is a memory of time, not a
/// reading of the facts. The nodes alive at a controller's first pass count as joined long
/// ago (a controller that restarts in a running cluster delays nothing); the scheduler of a
/// starting cluster runs before its nodes join, and sees each of them come.
#[derive(Debug, Default)]
pub(super) struct Joins {
    /// The live nodes at the last pass; `None` before the first.
    alive: Option<OrdSet<String>>,
    last: Option<SystemTime>,
}

impl Joins {
    /// Notes the nodes `alive` at `now`, and returns how long remains until no node will have
    /// joined for [`JOIN_QUIET`] (`None`: that long has passed). Cost: the nodes that came or
    /// went since the last call (the sets share their unchanged parts).
    pub(super) fn settling(&mut self, alive: &OrdSet<String>, now: SystemTime) -> Option<Duration> {
        let joined = self.alive.as_ref().is_some_and(|before| {
            before
                .diff(alive)
                .any(|item| matches!(item, DiffItem::Add(_)))
        });
        self.alive = Some(alive.clone());
        if joined {
            self.last = Some(now);
        }
        let since = now.duration_since(self.last?).unwrap_or_default();
        JOIN_QUIET.checked_sub(since).filter(|left| !left.is_zero())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(names: &[&str]) -> OrdSet<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn a_join_starts_the_quiet_period_and_a_departure_does_not() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(100);
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut joins = Joins::default();
        assert_eq!(joins.settling(&nodes(&[]), at(0)), None, "no node yet");
        assert_eq!(joins.settling(&nodes(&["n1"]), at(0)), Some(JOIN_QUIET));
        assert_eq!(
            joins.settling(&nodes(&["n1", "n2"]), at(500)),
            Some(JOIN_QUIET),
            "n2 joined: the period starts over"
        );
        assert_eq!(
            joins.settling(&nodes(&["n2"]), at(1500)),
            Some(Duration::from_millis(1000)),
            "n1 left: no join"
        );
        assert_eq!(joins.settling(&nodes(&["n2"]), at(2500)), None);
        assert_eq!(
            joins.settling(&nodes(&["n1", "n2"]), at(9000)),
            Some(JOIN_QUIET),
            "n1 came back: a join"
        );
    }

    #[test]
    fn the_nodes_of_the_first_pass_joined_long_ago() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(100);
        let mut joins = Joins::default();
        assert_eq!(joins.settling(&nodes(&["n1", "n2"]), now), None);
        assert_eq!(
            joins.settling(&nodes(&["n1", "n2", "n3"]), now),
            Some(JOIN_QUIET)
        );
    }
}
