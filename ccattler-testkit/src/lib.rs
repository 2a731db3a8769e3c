//! # ccattler-testkit: checks every CCattler backend must pass
//!
//! ## Layout
//!
//! | module | what it holds |
//! |---|---|
//! | [`cluster`] | [`cluster::TestCluster`]: store, runner with the standard controllers and real node agents over simulated runtimes, in one process |
//! | [`faulty`] | [`faulty::FaultyStore`]: any store with partitions and lost races switched on by a test |
//! | [`toy`] | [`toy::ReplicaController`], a small real controller for runner tests, examples and benches |
//! | [`conformance`] | the [`FactStore`](ccattler_core::FactStore) conformance suite: a harness trait and one entry point |
//! | [`runtime_conformance`] | the [`Runtime`](ccattler_core::Runtime) conformance suite: a harness trait, one entry point, one check per guarantee |
//! | [`sim`] | [`sim::Simulation`]: the whole cluster from one seed on virtual time, real controller and agent loops, runner replicas, ten fault kinds, invariants after every step |
//! | [`harness`] | [`harness::Harness`]: snapshot tests of any controllers: facts in, one reconcile's plan or a run to a fixpoint out, as stable text |
//! | [`workload`] | [`workload::Workload`]: a cluster and its users' documents over time, drawn from a seed with every feature of the language, feasible by construction, shrinkable |
//! | [`scenario`] | deterministic scenario files: facts, events and expectations run through the standard controllers, or any others |

#![deny(missing_docs)]

pub mod cluster;
pub mod conformance;
pub mod faulty;
pub mod harness;
pub mod runtime_conformance;
pub mod scenario;
pub mod sim;
pub mod toy;
pub mod workload;
