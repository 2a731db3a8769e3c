//! [`FirewallLoop`]: what a node's firewall should do next, as a pure state machine.

use ccattler_core::Fact;
use ccattler_core::schema::{self, NetworkReport, NodeRules};

/// What the node's firewall holds of the cluster's rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum InForce {
    /// Not known yet (the agent just started: a table of an earlier run may be there).
    Unknown,
    /// No table.
    Nothing,
    /// The rule set of this mod revision, guarding this many ports.
    Rules { revision: u64, guarded: usize },
}

/// What the store says the node should hold.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Wanted {
    Nothing,
    Rules { revision: u64, rules: NodeRules },
    Invalid { revision: u64, reason: String },
}

/// An action of [`FirewallLoop`], to perform and answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FirewallAction {
    /// Replace the node's table by `rules` (the fact of mod revision `revision`); answer with
    /// [`FirewallLoop::applied`].
    Apply {
        /// The rule set's mod revision.
        revision: u64,
        /// The rules.
        rules: NodeRules,
    },
    /// Remove the node's table, if there is one; answer with [`FirewallLoop::applied`].
    Remove,
    /// Write the node's [`NetworkReport`]; answer with [`FirewallLoop::reported`].
    Report(NetworkReport),
}

/// The firewall's loop: the node's rule set in (the fact at `network/node/{node}`, as read or
/// watched), actions out (apply, remove, report), results back.
///
/// # Guarantees
///
/// - One action at a time; a rule set newer than the one being applied is applied next, and
///   rule sets in between are skipped.
/// - What is in force changes only by a successful apply or removal: a refused rule set, a
///   rule set that does not decode or a store that cannot be reached leaves the previous one
///   in force. The loop never removes the table on its own, only when the node's rule set is
///   gone from the store. At start, the table an earlier run may have left is removed if the
///   store has no rule set for the node; that removal failing is no fault (no nftables, or no
///   right to change it, means no table of the node's either).
/// - The report says what is in force and why the newest rule set is not, and is written again
///   until the store takes it.
/// - A failed apply or report is retried after the next [`tick`](Self::tick), not at once.
#[derive(Clone, Debug)]
pub struct FirewallLoop {
    in_force: InForce,
    wanted: Option<Wanted>,
    /// The apply or removal in flight, with what it would put in force.
    applying: Option<InForce>,
    /// Why the newest rule set is not in force.
    error: Option<String>,
    /// The newest rule set's last attempt failed: wait for a tick.
    failed: bool,
    reporting: bool,
    report_failed: bool,
    reported: Option<NetworkReport>,
}

impl Default for FirewallLoop {
    fn default() -> Self {
        FirewallLoop::new()
    }
}

impl FirewallLoop {
    /// A loop that knows nothing yet of the node's table.
    pub fn new() -> Self {
        FirewallLoop {
            in_force: InForce::Unknown,
            wanted: None,
            applying: None,
            error: None,
            failed: false,
            reporting: false,
            report_failed: false,
            reported: None,
        }
    }

    /// The node's rule set as the store holds it now: its fact, or `None` when there is none.
    pub fn rules(&mut self, fact: Option<&Fact>) {
        let wanted = match fact {
            None => Wanted::Nothing,
            Some(fact) => match schema::decode::<NodeRules>(fact) {
                Ok(rules) => Wanted::Rules {
                    revision: fact.mod_revision.0,
                    rules,
                },
                Err(err) => Wanted::Invalid {
                    revision: fact.mod_revision.0,
                    reason: format!("{err}; the previous rules stay in force"),
                },
            },
        };
        if self.wanted.as_ref() != Some(&wanted) {
            self.failed = false;
            self.error = match &wanted {
                Wanted::Invalid { reason, .. } => Some(reason.clone()),
                _ => None,
            };
            self.wanted = Some(wanted);
        }
    }

    /// The result of [`FirewallAction::Apply`] or [`FirewallAction::Remove`].
    pub fn applied(&mut self, result: Result<(), String>) {
        let Some(target) = self.applying.take() else {
            return;
        };
        match result {
            Ok(()) => {
                self.in_force = target;
                self.error = None;
            }
            // The removal at start, of a table an earlier run may have left, is not a fault
            // when it fails: a host without nftables, or an agent without the right to change
            // it, holds no table of this node's either.
            Err(_) if target == InForce::Nothing && self.in_force == InForce::Unknown => {
                self.in_force = InForce::Nothing;
            }
            Err(reason) => {
                self.failed = true;
                self.error = Some(reason);
            }
        }
    }

    /// The result of writing `report` ([`FirewallAction::Report`]).
    pub fn reported(&mut self, report: NetworkReport, result: Result<(), String>) {
        self.reporting = false;
        match result {
            Ok(()) => self.reported = Some(report),
            Err(_) => self.report_failed = true,
        }
    }

    /// Time passed: what failed may be tried again.
    pub fn tick(&mut self) {
        self.failed = false;
        self.report_failed = false;
    }

    /// What the node's report says now.
    pub fn report(&self) -> NetworkReport {
        let (revision, guarded) = match self.in_force {
            InForce::Rules { revision, guarded } => (revision, guarded),
            InForce::Unknown | InForce::Nothing => (0, 0),
        };
        NetworkReport {
            revision,
            error: self.error.clone(),
            guarded,
        }
    }

    /// The next action, if any is due.
    pub fn next_action(&mut self) -> Option<FirewallAction> {
        if self.applying.is_some() || self.reporting {
            return None;
        }
        if !self.failed
            && let Some(action) = self.change_due()
        {
            return Some(action);
        }
        // Nothing is reported before the store has been read once.
        let report = self.report();
        if self.wanted.is_some() && !self.report_failed && self.reported.as_ref() != Some(&report) {
            self.reporting = true;
            return Some(FirewallAction::Report(report));
        }
        None
    }

    fn change_due(&mut self) -> Option<FirewallAction> {
        match self.wanted.as_ref()? {
            Wanted::Nothing if self.in_force != InForce::Nothing => {
                self.applying = Some(InForce::Nothing);
                Some(FirewallAction::Remove)
            }
            Wanted::Rules { revision, rules } if !matches!(self.in_force, InForce::Rules { revision: r, .. } if r == *revision) =>
            {
                self.applying = Some(InForce::Rules {
                    revision: *revision,
                    guarded: rules.guards.len(),
                });
                Some(FirewallAction::Apply {
                    revision: *revision,
                    rules: rules.clone(),
                })
            }
            _ => None,
        }
    }
}

#[cfg(test)]
#[path = "machine_tests.rs"]
mod tests;
