//! [`shrink`]: a failing run reduced to what it needs, workload and faults both.

use super::faults::Schedule;
use crate::workload::Workload;

/// Shrinks a failing run: while `fails` still holds, takes out one fault at a time, then makes
/// the workload one step smaller ([`Workload::smaller`]: a step, a service, half the instances,
/// a feature, a node), keeping each reduction that still fails, pass after pass, until none
/// does. What is left is a run every fault and every part of whose workload is needed.
///
/// `fails` runs the simulation (same seed, the given workload and schedule) and says whether
/// it fails the way being chased; it is called once per candidate, so a shrink costs as many
/// runs as reductions are tried (hundreds for a large workload).
///
/// ```no_run
/// use std::time::Duration;
/// use ccattler_testkit::sim::{FaultRates, shrink};
/// use ccattler_testkit::workload::Workload;
///
/// let workload = Workload::generate(42, Duration::from_secs(60));
/// let run = |w: &Workload, s: &ccattler_testkit::sim::Schedule| {
///     w.builder().is_ok_and(|b| !b.schedule(s.clone()).run().passed())
/// };
/// let schedule = workload.builder().unwrap().faults(FaultRates::default()).planned_schedule();
/// let (small, faults) = shrink(workload, schedule, run);
/// println!("{small}\n{faults:?}");
/// ```
pub fn shrink(
    mut workload: Workload,
    mut schedule: Schedule,
    fails: impl Fn(&Workload, &Schedule) -> bool,
) -> (Workload, Schedule) {
    loop {
        let fewer_faults = (0..schedule.faults.len()).find_map(|i| {
            let mut fewer = schedule.clone();
            fewer.faults.remove(i);
            fails(&workload, &fewer).then_some(fewer)
        });
        if let Some(fewer) = fewer_faults {
            schedule = fewer;
            continue;
        }
        let smaller = workload
            .smaller()
            .into_iter()
            .find(|smaller| fails(smaller, &schedule));
        match smaller {
            Some(smaller) => workload = smaller,
            None => return (workload, schedule),
        }
    }
}
