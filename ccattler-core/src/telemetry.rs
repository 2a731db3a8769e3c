//! Every metric CCattler records, in one table.
//!
//! Each component records through the `metrics` facade, so an application installs whatever
//! exporter it likes; `cca server` and `cca agent` serve them on `GET /metrics` in Prometheus'
//! text format (with `metrics-exporter-prometheus`; every histogram has the buckets 0.5 ms to
//! 10 s). Names follow Prometheus' rules: a `ccattler_` prefix, `_total` on counters,
//! `_seconds` on durations (base units), no unit or `_total` on gauges, and only labels with a
//! small, fixed set of values (never an instance id, a key or a free-text reason).
//!
//! | name | type | labels | recorded by | what it measures |
//! |---|---|---|---|---|
//! | `ccattler_reconciles_total` | counter | `controller` | the runner (`runner::TokioRunner`) | reconciles run, failed or not |
//! | `ccattler_reconcile_duration_seconds` | histogram | `controller` | the runner | time one reconcile took |
//! | `ccattler_changes_committed_total` | counter | `controller` | the runner | changes in commits that landed (the commit marker not counted) |
//! | `ccattler_lists_total` | counter | `controller` | the runner | full lists of the controller's prefixes: the first, each periodic resync, and relists after a failure, a compaction or repeated conflicts |
//! | `ccattler_commit_conflicts_total` | counter | `controller` | the runner | commits refused because a guarded key moved (then retried) |
//! | `ccattler_controller_failures_total` | counter | `controller` | the runner | failures that restart the loop: errors, panics, rejected plans, store errors |
//! | `ccattler_queue_depth` | gauge | `controller` | the runner | watch events that arrived since the last reconcile began, set as each begins |
//! | `ccattler_leader` | gauge | none | the runner | 1 while this replica leads and runs its controllers, 0 otherwise |
//! | `ccattler_store_operations_total` | counter | `operation`, `outcome` | `ccattler_store::Metered` (feature `metrics`) around any store | store calls by method (`get`, `put`, `put_with_lease`, `delete`, `scan`, `watch`, `txn`, `revision`, `compact`, `grant_lease`, `keep_alive`, `revoke_lease`) and `outcome` (`ok`, `error`; a transaction whose compares failed is `ok`) |
//! | `ccattler_store_operation_duration_seconds` | histogram | `operation` | `Metered` | time one store call took (a `watch`: until its stream was returned) |
//! | `ccattler_store_watches` | gauge | none | `Metered` | watch streams open now |
//! | `ccattler_api_requests_total` | counter | `route`, `method`, `status` | `cca server`'s API | requests by matched route (`/state/{*key}`, `unmatched` for none), method and status code |
//! | `ccattler_api_request_duration_seconds` | histogram | `route`, `method` | `cca server`'s API | time until the response's head (for `/changes`: until the event stream began) |
//! | `ccattler_scheduler_placed_instances` | gauge | none | `cca server`, at each scrape | placements in the store (`placement/`) |
//! | `ccattler_scheduler_unplaced_instances` | gauge | `reason` | `cca server`, at each scrape | instances the scheduler could not place (`status/unschedulable/`), by the first (most common) rejection of its reason: `no_nodes`, `not_alive`, `architecture`, `zone`, `label`, `taint`, `cpu`, `memory`, `other` |
//! | `ccattler_agent_instances` | gauge | `state` | the node agent (`NodeAgent` in `ccattler-runtime`) | placed instances by observed state: `pending`, `pulling`, `starting`, `running`, `exited`, `failed`, `stopped` |
//! | `ccattler_agent_ready_instances` | gauge | none | the node agent | placed instances running and ready |
//! | `ccattler_agent_connected` | gauge | none | the node agent | 1 while registered and watching its placements, 0 while the store is unreachable |
//! | `ccattler_agent_probes_total` | counter | `probe`, `result` | the node agent | probe checks by kind (`startup`, `liveness`, `readiness`) and `result` (`pass`, `fail`) |
//! | `ccattler_agent_pass_duration_seconds` | histogram | none | the node agent | one pass: from its observation of the runtime until the runtime is idle again (its starts, stops and probes done, the observation to report made) |
//! | `ccattler_agent_lists_total` | counter | none | the node agent | full lists of the node's placements: after registering, and each periodic resync |
//! | `ccattler_agent_store_errors_total` | counter | `operation` | the node agent | store calls that failed: `register`, `list`, `watch`, `fetch_specs`, `fetch_secrets`, `renew_lease`, `report` |
//!
//! # Why the scheduler's gauges are computed at scrape time
//!
//! Controllers are pure: the scheduler returns changes and records nothing. Its result is in the
//! store anyway, so `cca server` counts `placement/` and `status/unschedulable/` when
//! `/metrics` is scraped. The gauges are exact at that moment, and every replica of a
//! highly-available control plane reports the same numbers, leader or not.
