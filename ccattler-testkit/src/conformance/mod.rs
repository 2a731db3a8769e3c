//! The [`FactStore`] conformance suite: every guarantee the trait documents, checked against one
//! backend.
//!
//! # Expected flow
//!
//! A backend's integration test implements [`StoreHarness`] (how to get a fresh, empty store and
//! how to let time pass for lease expiry) and awaits [`run_store_conformance`] inside a tokio
//! runtime:
//!
//! ```ignore
//! #[tokio::test]
//! async fn memory_store_conforms() {
//!     run_store_conformance(&MemoryHarness::default()).await;
//! }
//! ```
//!
//! Each check is also a public async fn of its topic module ([`revisions`], [`watch`], [`txn`],
//! [`leases`], [`bad_input`], [`concurrency`]), so a backend can run one check alone while
//! debugging it.
//!
//! # Guarantees
//!
//! Every check fails (panics) if the feature it covers is broken, with a message naming the check
//! and what differed; [`run_store_conformance`] prints the name of each check to stderr before it
//! runs it, so the last name printed is the failing one. Watch reads time out (after
//! [`support::EVENT_TIMEOUT`]) instead of hanging when an event never comes.
//!
//! # Assumptions
//!
//! - Checks compare revisions only with revisions they read before (etcd starts at 1, MemoryStore
//!   at 0), but they do assume that nothing else writes to the store while they run: every write
//!   to a shared etcd raises the one global revision, so another test writing to the same cluster
//!   concurrently makes revision checks fail.
//! - The runtime runs on real time (not tokio's paused clock): timeouts must be able to fire.
//!   Either flavour of runtime works; [`concurrency`] checks spawn tasks.
//!
//! # Caveats
//!
//! [`watch::compaction_bounds_watches`] compacts the store. On a shared etcd that compacts the
//! whole cluster's history, not only the namespace [`StoreHarness::fresh`] returned.

use std::future::Future;
use std::time::Duration;

use ccattler_core::FactStore;

pub mod bad_input;
pub mod concurrency;
pub mod leases;
pub mod revisions;
pub mod support;
pub mod txn;
pub mod watch;

/// How the suite gets stores and lets time pass; implemented by each backend's test.
pub trait StoreHarness: Send + Sync {
    /// The store under test.
    type Store: FactStore + Clone;

    /// A fresh, empty store (or an isolated, empty namespace of a shared one). Called once per
    /// check.
    fn fresh(&self) -> impl Future<Output = Self::Store> + Send;

    /// Lets at least `d` pass for lease expiry, and lets the store act on it: advances a manual
    /// clock and reaps expired leases for MemoryStore; sleeps for etcd.
    ///
    /// Checks that need a lease to stay alive across two calls of `advance(0.6 * ttl)` with a
    /// keep-alive between them, so any extra time this adds must stay well under `0.4 * ttl`
    /// (the suite grants two-second leases).
    fn advance(&self, d: Duration) -> impl Future<Output = ()> + Send;
}

/// Runs each named check against `$harness`, printing its name first.
macro_rules! run_checks {
    ($harness:expr, $($check:path),+ $(,)?) => {
        $(
            eprintln!("store conformance: {}", stringify!($check));
            $check($harness).await;
        )+
    };
}

/// Runs every check of the suite against `harness`, one after another.
///
/// # Errors
///
/// Panics on the first check that fails, with a message naming it and what differed.
pub async fn run_store_conformance<H: StoreHarness>(harness: &H) {
    run_checks!(
        harness,
        revisions::fresh_store_is_empty,
        revisions::writes_raise_revision_by_one,
        revisions::key_metadata_tracks_writes,
        revisions::put_of_equal_value_writes_nothing,
        revisions::delete_returns_previous_fact,
        revisions::scan_is_sorted_by_plain_prefix,
        revisions::scan_revision_joins_watch,
        watch::watch_replays_history_then_follows_live,
        watch::watch_from_middle_of_history,
        watch::watch_filters_by_plain_prefix,
        watch::watch_zero_starts_at_next_write,
        watch::compaction_bounds_watches,
        watch::live_watch_survives_compaction,
        watch::slow_watcher_never_skips,
        txn::txn_compares_value,
        txn::txn_compares_revisions_and_version,
        txn::txn_exists_and_absent,
        txn::txn_needs_every_compare,
        txn::txn_branch_commits_at_one_revision,
        txn::txn_put_always_writes,
        txn::txn_without_effect_keeps_revision,
        leases::lease_grant_and_put,
        leases::keep_alive_extends_life,
        leases::expiry_deletes_keys_with_events,
        leases::revoke_deletes_keys_in_one_revision,
        leases::put_changes_lease_attachment,
        bad_input::invalid_keys_are_unrepresentable,
        bad_input::invalid_prefixes_are_rejected,
        bad_input::too_many_ops_are_rejected,
        bad_input::duplicate_keys_are_rejected,
        bad_input::large_values_are_rejected,
        bad_input::unknown_leases_are_rejected,
        bad_input::zero_ttl_is_rejected,
        concurrency::concurrent_writes_get_unique_revisions,
        concurrency::concurrent_compare_and_swap_is_atomic,
    );
}
