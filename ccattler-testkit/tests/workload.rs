//! Generated workloads: every document the language accepts, feasible on its cluster, the same
//! seed the same workload, and every feature drawn somewhere in a few hundred seeds.

use std::time::Duration;

use ccattler_testkit::workload::{Workload, feasibility};

const WINDOW: Duration = Duration::from_secs(50);

#[test]
fn every_generated_document_is_accepted_and_fits_its_cluster() {
    for seed in 0..300 {
        let workload = Workload::generate(seed, WINDOW);
        let documents = workload
            .compiled()
            .unwrap_or_else(|refused| panic!("{refused}"));
        for (at, desired) in &documents {
            let problems = feasibility(desired, &workload.nodes);
            assert!(
                problems.is_empty(),
                "seed {seed}, document at {at:?} does not fit: {problems:?}\n{workload}"
            );
        }
    }
}

#[test]
fn the_same_seed_gives_the_same_workload() {
    assert_eq!(Workload::generate(7, WINDOW), Workload::generate(7, WINDOW));
    assert_ne!(Workload::generate(7, WINDOW), Workload::generate(8, WINDOW));
}
