//! The simulation's faults: eight kinds that strike any cluster, a ninth (leader loss) for runner
//! replicas and a tenth (load surge) for autoscaled services, each with a rate and a documented
//! model, drawn into a [`Schedule`] from the seed before the run starts (so a schedule can be
//! shrunk and replayed).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use rand::Rng;
use rand::rngs::SmallRng;

/// One kind of fault and what it does to the simulated cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultKind {
    /// A node's machine stops: its agent and instances are gone, its watches closed, its lease
    /// left to expire. After 0.5 to 30 s it returns, either empty (a fresh runtime and no agent
    /// cache: a reimaged machine) or with its instances still running and its cache kept (the
    /// agent crashed, or the machine was cut off).
    NodeCrash,
    /// For 1 to 10 s, every message between the store and one agent or controller (requests,
    /// responses, watch events) is held back 0.2 to 3 s more; order is kept.
    NetworkDelay,
    /// A running instance dies (exit code 137) on a live node.
    ProcessCrash,
    /// For 1 to 5 s, a node's runtime keeps answering with what it saw when the fault began, so
    /// the agent reports an older state than the current one.
    StaleObservation,
    /// A controller loop is restarted at any point, between its reconcile and its commit
    /// included: it starts over with a new loop, and whatever it had in flight is lost (a commit
    /// already sent may still land).
    ControllerRestart,
    /// For 1 to 10 s, watches deliver about a third of their events twice.
    DuplicateEvents,
    /// For 1 to 10 s, one actor loses about a fifth of its watch events; after each lost event
    /// its watch breaks (so it lists again) half the time, else the loss is silent and only the
    /// periodic resync heals it.
    LostMessages,
    /// For 1 to 10 s, every store request takes 50 to 500 ms more and one in ten fails with a
    /// transient error before it reaches the store.
    SlowStorage,
    /// With runner replicas: the leading replica freezes for 2 to 30 s (a long pause), while
    /// what it sent before goes on; another replica may take over, and the frozen one wakes
    /// believing it still leads: its controllers act on what they held for a moment (2 to
    /// 10 ms) before its election notices that its lease could have expired. Strikes nothing
    /// with a single runner.
    LeaderLoss,
    /// For 10 to 60 s, one service whose `scale` block has a target (the target picks which)
    /// is under load: its CPU demand is what its `max` instances request at one and a half
    /// times its `cpu` target (so the autoscaler asks for all of them), each instance's memory
    /// one and a half times its `memory` target, and each pushed metric is pushed at one and a
    /// half times its target for `max` instances. When it ends, the demand goes and the pushed
    /// metrics fall to zero. Strikes nothing when no service scales on a metric.
    LoadSurge,
}

impl FaultKind {
    /// Every kind, in the order reports list them.
    pub const ALL: [FaultKind; 10] = [
        FaultKind::NodeCrash,
        FaultKind::NetworkDelay,
        FaultKind::ProcessCrash,
        FaultKind::StaleObservation,
        FaultKind::ControllerRestart,
        FaultKind::DuplicateEvents,
        FaultKind::LostMessages,
        FaultKind::SlowStorage,
        FaultKind::LeaderLoss,
        FaultKind::LoadSurge,
    ];

    /// The kind's name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::NodeCrash => "node-crash",
            FaultKind::NetworkDelay => "network-delay",
            FaultKind::ProcessCrash => "process-crash",
            FaultKind::StaleObservation => "stale-observation",
            FaultKind::ControllerRestart => "controller-restart",
            FaultKind::DuplicateEvents => "duplicate-events",
            FaultKind::LostMessages => "lost-messages",
            FaultKind::SlowStorage => "slow-storage",
            FaultKind::LeaderLoss => "leader-loss",
            FaultKind::LoadSurge => "load-surge",
        }
    }

    /// The rate a kind has unless told otherwise: how likely it fires in one second.
    pub fn default_rate(self) -> f64 {
        match self {
            FaultKind::NodeCrash => 0.02,
            FaultKind::ProcessCrash => 0.1,
            FaultKind::ControllerRestart => 0.05,
            FaultKind::LoadSurge => 0.02,
            _ => 0.03,
        }
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A fault kind or rate that cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FaultSpecError {
    /// No kind has this name.
    #[error("unknown fault kind `{0}`; the kinds are {kinds}", kinds = kind_names())]
    UnknownKind(String),
    /// The rate is not a number from 0 to 1.
    #[error("the rate of {kind} must be a number from 0 to 1 (a chance per second), not `{rate}`")]
    BadRate {
        /// The kind.
        kind: FaultKind,
        /// The rate as written.
        rate: String,
    },
}

fn kind_names() -> String {
    FaultKind::ALL
        .iter()
        .map(|k| k.name())
        .collect::<Vec<_>>()
        .join(", ")
}

impl FromStr for FaultKind {
    type Err = FaultSpecError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        FaultKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| FaultSpecError::UnknownKind(s.to_owned()))
    }
}

/// Which faults fire, and how often: a chance per second of virtual time for each kind.
#[derive(Clone, Debug, PartialEq)]
pub struct FaultRates {
    rates: Vec<(FaultKind, f64)>,
}

impl Default for FaultRates {
    /// Every kind at its default rate.
    fn default() -> Self {
        FaultRates {
            rates: FaultKind::ALL
                .into_iter()
                .map(|k| (k, k.default_rate()))
                .collect(),
        }
    }
}

impl FaultRates {
    /// No faults at all.
    pub fn none() -> Self {
        FaultRates { rates: Vec::new() }
    }

    /// Sets the rate of one kind (a chance per second, clamped to 0..=1).
    #[must_use]
    pub fn with(mut self, kind: FaultKind, rate: f64) -> Self {
        self.rates.retain(|(k, _)| *k != kind);
        self.rates.push((kind, rate.clamp(0.0, 1.0)));
        self.rates.sort_by_key(|(k, _)| *k);
        self
    }

    /// Reads a list like `node-crash,process-crash=0.2`: the kinds named, each at its default
    /// rate unless one is given.
    ///
    /// # Errors
    ///
    /// [`FaultSpecError`] naming the kind or rate that is wrong, and what is accepted.
    pub fn parse(list: &str) -> Result<Self, FaultSpecError> {
        let mut rates = FaultRates::none();
        for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (name, rate) = match item.split_once('=') {
                Some((name, rate)) => (name.trim(), Some(rate.trim())),
                None => (item, None),
            };
            let kind: FaultKind = name.parse()?;
            let rate = match rate {
                None => kind.default_rate(),
                Some(text) => match text.parse::<f64>() {
                    Ok(rate) if (0.0..=1.0).contains(&rate) => rate,
                    _ => {
                        return Err(FaultSpecError::BadRate {
                            kind,
                            rate: text.to_owned(),
                        });
                    }
                },
            };
            rates = rates.with(kind, rate);
        }
        Ok(rates)
    }

    /// The kinds and their rates, in kind order.
    pub fn iter(&self) -> impl Iterator<Item = (FaultKind, f64)> + '_ {
        self.rates.iter().copied()
    }

    /// Draws a schedule for `duration` of virtual time: for each whole second and each kind,
    /// the fault fires with the kind's rate, at a random point of that second, with its target
    /// and length drawn too.
    pub fn schedule(&self, rng: &mut SmallRng, duration: Duration) -> Schedule {
        let mut faults = Vec::new();
        for second in 0..duration.as_secs() {
            for (kind, rate) in self.iter() {
                if rate > 0.0 && rng.random_bool(rate) {
                    let at = Duration::from_secs(second)
                        + Duration::from_millis(rng.random_range(0..1000));
                    faults.push(Fault::draw(kind, at, rng));
                }
            }
        }
        faults.sort_by_key(|f| f.at);
        Schedule { faults }
    }
}

/// One fault to inject.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault {
    /// When it begins.
    pub at: Duration,
    /// What it is.
    pub kind: FaultKind,
    /// Which node, controller, actor or instance it strikes: an index taken modulo the number
    /// of candidates when it fires.
    pub target: u32,
    /// How long it lasts (a window, or a node's time away).
    pub length: Duration,
    /// For a node crash: whether the node returns empty.
    pub wipe: bool,
}

impl Fault {
    fn draw(kind: FaultKind, at: Duration, rng: &mut SmallRng) -> Self {
        let ms =
            |lo: u64, hi: u64, rng: &mut SmallRng| Duration::from_millis(rng.random_range(lo..=hi));
        let length = match kind {
            FaultKind::NodeCrash => ms(500, 30_000, rng),
            FaultKind::LeaderLoss => ms(2_000, 30_000, rng),
            FaultKind::LoadSurge => ms(10_000, 60_000, rng),
            FaultKind::StaleObservation => ms(1_000, 5_000, rng),
            FaultKind::ProcessCrash | FaultKind::ControllerRestart => Duration::ZERO,
            _ => ms(1_000, 10_000, rng),
        };
        Fault {
            at,
            kind,
            target: rng.random(),
            length,
            wipe: rng.random_bool(0.5),
        }
    }

    /// When its effects end: a window's end, or a crashed node's return.
    pub fn end(&self) -> Duration {
        self.at + self.length
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at {:?} (target {}", self.kind, self.at, self.target)?;
        if !self.length.is_zero() {
            write!(f, ", {:?}", self.length)?;
        }
        if self.kind == FaultKind::NodeCrash {
            f.write_str(if self.wipe {
                ", returns empty"
            } else {
                ", returns running"
            })?;
        }
        f.write_str(")")
    }
}

/// The faults of one run, in time order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Schedule {
    /// The faults.
    pub faults: Vec<Fault>,
}

impl Schedule {
    /// When the last fault's effects end (zero without faults).
    pub fn quiet_after(&self) -> Duration {
        self.faults.iter().map(Fault::end).max().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn lists_parse_with_defaults_and_bad_input_names_what_is_accepted() {
        let rates = FaultRates::parse("node-crash, process-crash=0.5").expect("valid");
        let got: Vec<_> = rates.iter().collect();
        assert_eq!(
            got,
            [(FaultKind::NodeCrash, 0.02), (FaultKind::ProcessCrash, 0.5)]
        );
        let err = FaultRates::parse("node-crash,earthquake").expect_err("unknown");
        assert!(err.to_string().contains("earthquake"));
        assert!(err.to_string().contains("slow-storage"), "{err}");
        let err = FaultRates::parse("process-crash=1.5").expect_err("out of range");
        assert!(err.to_string().contains("from 0 to 1"), "{err}");
        assert!(FaultRates::parse("process-crash=x").is_err());
    }

    #[test]
    fn a_schedule_is_the_same_for_the_same_seed() {
        let rates = FaultRates::default();
        let draw =
            |seed| rates.schedule(&mut SmallRng::seed_from_u64(seed), Duration::from_secs(60));
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
        assert!(draw(7).faults.windows(2).all(|w| w[0].at <= w[1].at));
    }
}
