//! The inputs of [`AgentLoop`]: each action's result, and the placement watch's events.

use std::collections::{BTreeMap, BTreeSet};

use ccattler_core::schema::{self, Assignment, RecordKey, ServiceSpec};
use ccattler_core::{
    EventKind, Fact, InstanceState, LeaseId, Revision, RuntimeError, StoreError, WatchEvent,
};

use super::action::{Action, Listing, Sample};
use super::machine::{AgentLoop, Link, RuntimeOp, StoreOp};
use super::plan::Renew;
use super::spec::{owner, secret_in_env};
use super::work::Observe;

impl AgentLoop {
    /// The result of [`Action::Register`]: the lease the node now holds.
    pub fn registered(&mut self, result: Result<LeaseId, StoreError>) {
        if self.store_done(|op| *op == StoreOp::Register).is_none()
            || self.link != Link::Registering
        {
            return;
        }
        match result {
            Ok(lease) => {
                self.stats.registrations += 1;
                self.desired.lease = Some(lease.0);
                // What the store holds under another lease went with it: written anew.
                self.telemetry_written = None;
                self.save_cache();
                self.link = Link::Listing { lease };
                // Kept alive from now on, on a schedule of its own: no pass, report or fetch
                // of this loop can hold a renewal back.
                self.outbox.push_back(Action::KeepLease {
                    lease,
                    every: self.config.lease_ttl / 3,
                });
                self.store_busy = Some(StoreOp::List);
                let list = self.list_action();
                self.outbox.push_back(list);
            }
            Err(err) => self.disconnect(format!("registering failed: {err}")),
        }
    }

    /// The result of [`Action::List`]. Replaces the cached placements by the store's, learns
    /// what the store holds of this node's observations, and asks to watch from just after.
    pub fn listed(&mut self, result: Result<Listing, StoreError>) {
        if self.store_done(|op| *op == StoreOp::List).is_none() {
            return;
        }
        let Link::Listing { lease } = self.link else {
            return;
        };
        let listing = match result {
            Ok(listing) => listing,
            Err(err) => return self.disconnect(format!("listing placements failed: {err}")),
        };
        self.failures = 0;
        self.synced = true;
        self.report_scope.mark_all();
        self.pass_scope.mark_all();
        self.work.forget_all_waiting();
        let placed: Vec<(Assignment, Revision)> = listing
            .placements
            .facts
            .iter()
            .filter_map(|fact| {
                let assignment = schema::decode::<Assignment>(fact).ok()?;
                Some((assignment, fact.create_revision))
            })
            .collect();
        let node = self.config.node.as_str();
        let mut reported_at = BTreeMap::new();
        self.reported = listing
            .observations
            .facts
            .into_iter()
            .filter_map(|fact| match RecordKey::parse(&fact.key) {
                Some(RecordKey::ObservedInstance { node: n, instance }) if n == node => {
                    reported_at.insert(instance.to_owned(), fact.mod_revision);
                    Some((instance.to_owned(), schema::decode(&fact).ok()))
                }
                _ => None,
            })
            .collect();
        self.desired.placements = BTreeMap::new();
        for (assignment, created) in placed {
            // A report written before its placement existed is an earlier incarnation's.
            let older = reported_at
                .get(&assignment.instance)
                .is_some_and(|at| *at < created);
            self.note_placed(&assignment.instance, created, older);
            self.desired
                .placements
                .insert(assignment.instance.clone(), assignment);
        }
        self.outbox.push_back(Action::Watch {
            prefix: self.placements_prefix(),
            from: listing.placements.revision.next(),
        });
        self.link = Link::Live {
            lease,
            resync_at: self.now.saturating_add(self.resync_delay()),
        };
        self.unavailable.clear();
        let placed: Vec<Assignment> = self.desired.placements.values().cloned().collect();
        for assignment in &placed {
            self.want(assignment);
        }
        self.placements_changed();
    }

    /// A placement watch event arrived. Call it for every event available before asking for the
    /// next action.
    pub fn event(&mut self, event: WatchEvent) {
        if !self.is_connected() {
            return; // the next list supersedes it
        }
        match event.kind {
            EventKind::Put => {
                let Ok(assignment) = schema::decode::<Assignment>(&event.fact) else {
                    return; // not an assignment: the scheduler's to fix, nothing to run
                };
                // What was queued for it was decided on the placement before: the next pass
                // decides again (an action in flight finishes).
                self.work.forget_waiting(&assignment.instance);
                self.note_placed(&assignment.instance, event.fact.create_revision, false);
                self.want(&assignment);
                self.desired
                    .placements
                    .insert(assignment.instance.clone(), assignment);
            }
            EventKind::Delete => {
                if let Some(RecordKey::Placement { node, instance }) =
                    RecordKey::parse(&event.fact.key)
                    && node == self.config.node
                {
                    self.work.forget_waiting(instance);
                    self.report_scope.mark(instance);
                    self.pass_scope.mark(instance);
                    self.desired.placements.remove(instance);
                    // What the sweep would do for this id, now: a placement created again
                    // later in the same batch must find it gone, as it would one by one.
                    self.tracks.remove(instance);
                    if !self.holds(instance) {
                        self.placed_at.remove(instance);
                    }
                }
            }
        }
        // The sweep over every placement waits (see `SWEEP_EVERY`), not once per event (with a
        // hundred placements a node, a burst of events swept a hundred times). The pass and
        // the report are asked for at once.
        self.unswept_events = self.unswept_events.saturating_add(1);
        self.placements_noted();
    }

    /// The placement watch could not start, failed or ended: the agent registers again.
    pub fn watch_failed(&mut self, error: StoreError) {
        if self.is_connected() {
            self.disconnect(format!("the placement watch failed: {error}"));
        }
    }

    /// The result of [`Action::FetchSpecs`]: one fact per key asked for, `None` when missing.
    ///
    /// A version the placements want that no fetched spec has is remembered as unavailable:
    /// its instances wait, reported `pending` with the reason.
    pub fn fetched_specs(&mut self, result: Result<Vec<Option<Fact>>, StoreError>) {
        let Some(StoreOp::FetchSpecs(services)) =
            self.store_done(|op| matches!(op, StoreOp::FetchSpecs(_)))
        else {
            return;
        };
        if !self.is_connected() {
            return; // disconnected meanwhile: the next list asks again
        }
        let facts = match result {
            Ok(facts) => facts,
            Err(err) => {
                let services: BTreeSet<&str> = services.iter().map(String::as_str).collect();
                let services = services.into_iter().collect::<Vec<_>>().join(", ");
                return self.disconnect(format!("fetching the specs of {services} failed: {err}"));
            }
        };
        // The versions the placements want of each service fetched, in one look at them all.
        let mut wanted: BTreeMap<String, BTreeSet<String>> = services
            .iter()
            .map(|service| (service.clone(), BTreeSet::new()))
            .collect();
        for assignment in self.desired.placements.values() {
            if let Some(versions) = wanted.get_mut(&assignment.service) {
                versions.insert(assignment.version.clone());
            }
        }
        for (service, fact) in services.into_iter().zip(facts) {
            let versions = wanted.get(&service).cloned().unwrap_or_default();
            self.learn_spec(service, fact, &versions);
        }
        for (service, versions) in wanted {
            for version in versions {
                if self.desired.spec(&service, &version).is_none() {
                    self.unavailable.insert((service.clone(), version));
                }
            }
        }
        self.save_cache();
        self.report_scope.mark_all();
        self.want_full_pass();
        self.report_wanted = true;
    }

    /// Keeps the fetched spec of `service` if its version is one the placements want.
    fn learn_spec(&mut self, service: String, fact: Option<Fact>, wanted: &BTreeSet<String>) {
        let Some(spec) = fact.and_then(|f| schema::decode::<ServiceSpec>(&f).ok()) else {
            return;
        };
        let version = spec.version();
        if wanted.contains(&version) && self.desired.spec(&service, &version).is_none() {
            self.secret_fetches
                .extend(spec.secrets.iter().map(|s| s.name.clone()));
            self.desired
                .specs
                .entry(service)
                .or_default()
                .insert(version, std::sync::Arc::new(spec));
        }
    }

    /// The result of [`Action::FetchSecrets`]: one fact per key asked for, `None` when missing.
    ///
    /// A missing secret is remembered: instances that need it wait, reported `pending` with
    /// the reason, and start once a later fetch finds it. A value that changed is renewed in
    /// the running instances that use it (files rewritten in place, or a restart when it is in
    /// their environment); a deleted one is left to them as it was.
    pub fn fetched_secrets(&mut self, result: Result<Vec<Option<Fact>>, StoreError>) {
        let Some(StoreOp::FetchSecrets(names)) =
            self.store_done(|op| matches!(op, StoreOp::FetchSecrets(_)))
        else {
            return;
        };
        if !self.is_connected() {
            return;
        }
        match result {
            Ok(facts) => {
                let mut changed = BTreeSet::new();
                for (name, fact) in names.into_iter().zip(facts) {
                    match fact {
                        Some(fact) => {
                            self.missing_secrets.remove(&name);
                            let value = fact.value.to_vec();
                            let old = self.desired.secrets.insert(name.clone(), value.clone());
                            if old.is_some_and(|old| old != value) {
                                changed.insert(name);
                            }
                        }
                        None => {
                            self.missing_secrets.insert(name.clone());
                            self.desired.secrets.remove(&name);
                        }
                    }
                }
                self.renew_for(&changed);
                self.save_cache();
                self.want_full_pass();
            }
            Err(err) => self.disconnect(format!("fetching secrets failed: {err}")),
        }
    }

    /// Marks the instances that use a `changed` secret for renewal in the next pass.
    fn renew_for(&mut self, changed: &BTreeSet<String>) {
        if changed.is_empty() {
            return;
        }
        for id in self.desired.placements.keys() {
            let Some(spec) = self.desired.spec_of(id) else {
                continue;
            };
            let used: Vec<&str> = spec
                .secrets
                .iter()
                .map(|s| s.name.as_str())
                .filter(|name| changed.contains(*name))
                .collect();
            if used.is_empty() {
                continue;
            }
            let renew = if used.iter().any(|name| secret_in_env(spec, name)) {
                Renew::Restart
            } else {
                Renew::Files
            };
            let track = self.tracks.entry(id.clone()).or_default();
            track.renew = track.renew.max(Some(renew));
        }
    }

    /// The result of one renewal of `lease`, the lease an [`Action::KeepLease`] keeps alive. A
    /// lease that expired, or a store that cannot be reached, means registering again (resuming
    /// the lease if it still lives); a result for a lease the node no longer holds is ignored.
    pub fn renewed(&mut self, lease: LeaseId, result: Result<(), StoreError>) {
        if self.lease() != Some(lease) {
            return;
        }
        if let Err(err) = result {
            self.disconnect(format!("renewing the node's lease failed: {err}"));
        }
    }

    /// The result of [`Action::Report`].
    pub fn reported(&mut self, result: Result<(), StoreError>) {
        let Some(StoreOp::Report(applied)) = self.store_done(|op| matches!(op, StoreOp::Report(_)))
        else {
            return;
        };
        if !self.is_connected() {
            return; // the next list reads what the store holds
        }
        match result {
            Ok(()) => {
                self.stats.reports += 1;
                for (id, observation) in applied {
                    match observation {
                        Some(observation) => self.reported.insert(id, Some(observation)),
                        None => self.reported.remove(&id),
                    };
                }
            }
            Err(err) => self.disconnect(format!("reporting failed: {err}")),
        }
    }

    /// The result of [`Action::Observe`]: every instance the runtime knows of, or those of the
    /// ids the action named (what the runtime does not show of them is gone; every other
    /// instance is held as it was). An observation to decide a pass plans it, for the instances
    /// it covered (the others wait for the next); one to report (after actions, or every second
    /// while a start is in flight, for a pull's progress) only updates what the next report
    /// says.
    pub fn observed(&mut self, result: Result<Vec<Sample>, RuntimeError>) {
        let Some((seen, covers)) = self.work.observed(result.is_err()) else {
            return;
        };
        match result {
            Ok(samples) => {
                self.runtime_seen = true;
                // A changed sample changes the report, and the next pass decides for its
                // instance (an init step's: for the instance it belongs to).
                // An instance acted on after this observation was asked for keeps what the
                // agent knows of it: the observation may not show the action.
                let (report, pass, desired, work) = (
                    &mut self.report_scope,
                    &mut self.pass_scope,
                    &self.desired,
                    &self.work,
                );
                let acted_on = |id: &str| work.changed_since(id, seen);
                merge_samples(
                    &mut self.observed,
                    samples,
                    covers.as_ref(),
                    acted_on,
                    |id| {
                        report.mark(id);
                        pass.mark(owner(id, desired).unwrap_or(id));
                    },
                );
                if seen.purpose == Observe::Decide {
                    self.plan_pass(seen, covers.as_ref());
                }
                self.report_wanted = true;
            }
            Err(err) => self.outbox.push_back(Action::RuntimeFailed {
                reason: format!("observing failed: {err}"),
            }),
        }
        self.work.forget_marks();
    }

    /// The result of [`Action::EnsureRunning`], [`Action::EnsureStopped`],
    /// [`Action::UpdateFiles`] or [`Action::Remove`] of runtime id `id` (the action's id: an
    /// init step's own).
    pub fn done(&mut self, id: &str, result: Result<(), RuntimeError>) {
        let Some(op) = self.work.finish(id) else {
            return;
        };
        self.report_scope.mark(op.instance());
        let now = self.now;
        let delays = &self.config.retry_delays;
        match (op, result) {
            (RuntimeOp::Start(id), Ok(())) => {
                // The runtime took the start: what the last observation held of an ended
                // incarnation no longer holds. Until the next one tells more, it is starting,
                // so that a stop asked meanwhile is carried out, not taken as done.
                if let Some(sample) = self.observed.get_mut(&id)
                    && sample.instance.state.has_ended()
                {
                    sample.instance.state = InstanceState::Starting;
                }
                let spec = self.desired.spec_of(&id).cloned();
                let track = self.tracks.entry(id).or_default();
                track.started_now(now, spec.as_ref());
            }
            (RuntimeOp::StartInit(id, step), Err(err)) => {
                let spec = self.desired.spec_of(&id).cloned();
                let track = self.tracks.entry(id.clone()).or_default();
                match spec {
                    Some(spec) => {
                        let how = format!("could not start: {err}");
                        track.init_failed(now, &spec, step, &how, delays);
                    }
                    None => track.fail(now, err.to_string(), delays),
                }
                self.outbox.push_back(Action::RuntimeFailed {
                    reason: format!("starting init step {} of {id} failed: {err}", step + 1),
                });
            }
            (RuntimeOp::Start(id), Err(err)) => {
                let reason = err.to_string();
                self.tracks
                    .entry(id.clone())
                    .or_default()
                    .fail(now, reason.clone(), delays);
                self.outbox.push_back(Action::RuntimeFailed {
                    reason: format!("starting {id} failed: {reason}"),
                });
            }
            (RuntimeOp::UpdateFiles(id), Err(err)) => {
                // Restart instead when the runtime cannot; retry in the next pass otherwise.
                let unsupported = matches!(err, RuntimeError::Unsupported { .. });
                let renew = if unsupported {
                    Renew::Restart
                } else {
                    Renew::Files
                };
                self.tracks.entry(id.clone()).or_default().renew = Some(renew);
                self.pass_scope.mark(&id);
                self.pass_wanted = true;
                if !unsupported {
                    self.outbox.push_back(Action::RuntimeFailed {
                        reason: format!("rewriting the files of {id} failed: {err}"),
                    });
                }
            }
            (RuntimeOp::Stop(id), Ok(())) => {
                if let Some(track) = self.tracks.get_mut(&id) {
                    track.stopped = true;
                }
            }
            (RuntimeOp::Stop(id) | RuntimeOp::Remove(id), Err(err)) => {
                self.outbox.push_back(Action::RuntimeFailed {
                    reason: format!("stopping or removing {id} failed: {err}"),
                });
            }
            _ => {}
        }
        let due = self.batch_due();
        self.report_observe.get_or_insert(due);
    }

    /// The result of [`Action::ReadOutput`] of init step `id`: kept (at most 1 KiB, whole
    /// lines) as the output of its instance's init failure. A runtime that cannot tell says so
    /// in its place.
    pub fn read_output(&mut self, id: &str, result: Result<String, RuntimeError>) {
        let Some(op) = self.work.finish(id) else {
            return;
        };
        let owner = op.instance().to_owned();
        self.report_scope.mark(&owner);
        self.report_wanted = true;
        let output = match result {
            Ok(text) => output_tail(&text),
            Err(err) => format!("(its output could not be read: {err})"),
        };
        if let Some(failure) = self
            .tracks
            .get_mut(&owner)
            .and_then(|t| t.init_failure.as_mut())
        {
            failure.output = Some(output);
        }
    }

    /// The result of [`Action::Probe`] of instance `id`.
    pub fn probed(&mut self, id: &str, result: Result<(), String>) {
        let Some(op) = self.work.finish(id) else {
            return;
        };
        self.report_scope.mark(op.instance());
        if let RuntimeOp::Probe(id, kind) = op
            && let Some(state) = self
                .tracks
                .get_mut(&id)
                .and_then(|t| t.probes[kind as usize].as_mut())
        {
            state.record(self.now, result);
            self.report_wanted = true;
        }
    }
}

/// The end of `text`: its last whole lines within [`OUTPUT_LIMIT`] bytes, trimmed.
fn output_tail(text: &str) -> String {
    let text = text.trim_end();
    let mut start = text.len().saturating_sub(OUTPUT_LIMIT);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    let tail = &text[start..];
    let tail = match tail.find('\n') {
        Some(line) if start > 0 => &tail[line + 1..],
        _ => tail,
    };
    tail.to_owned()
}

/// Most bytes of an init step's output an observation carries.
const OUTPUT_LIMIT: usize = 1024;

/// Makes `observed` hold exactly `samples` for the ids `covers` names (every id when `None`),
/// changing it in place, but for the ids `acted_on` names, whose held sample stays (the agent
/// acted on them after the samples were taken); and calls `mark` with every id whose instance
/// the samples show otherwise, came or went (a change of its resource use alone is kept, for
/// telemetry, but marks nothing: running instances use a little more or less at every
/// observation). Costs what `covers` names, or every instance when `None`.
fn merge_samples(
    observed: &mut BTreeMap<String, Sample>,
    samples: Vec<Sample>,
    covers: Option<&BTreeSet<String>>,
    acted_on: impl Fn(&str) -> bool,
    mut mark: impl FnMut(&str),
) {
    let Some(covers) = covers else {
        return merge_every(observed, samples, acted_on, mark);
    };
    // Should a runtime list an id twice, the last listed wins; ids not covered are ignored.
    let mut incoming: BTreeMap<String, Sample> = samples
        .into_iter()
        .filter(|s| covers.contains(&s.instance.id))
        .map(|s| (s.instance.id.clone(), s))
        .collect();
    for id in covers {
        let sample = incoming.remove(id);
        match (observed.get_mut(id), sample) {
            (Some(_), _) if acted_on(id) => {}
            (Some(held), Some(sample)) => {
                if *held != sample {
                    // Its use alone changing decides and reports nothing (kept for telemetry).
                    if held.instance != sample.instance {
                        mark(id);
                    }
                    *held = sample;
                }
            }
            (Some(_), None) => {
                observed.remove(id);
                mark(id);
            }
            (None, Some(sample)) => {
                mark(id);
                observed.insert(id.clone(), sample);
            }
            (None, None) => {}
        }
    }
}

/// [`merge_samples`] of every id. An observation of a node's every instance is taken many
/// times a minute, and most ids are the same each time, so their keys are kept rather than
/// built again.
fn merge_every(
    observed: &mut BTreeMap<String, Sample>,
    mut samples: Vec<Sample>,
    acted_on: impl Fn(&str) -> bool,
    mut mark: impl FnMut(&str),
) {
    // Runtimes usually list in id order already: then this sort only checks it.
    samples.sort_by(|a, b| a.instance.id.cmp(&b.instance.id));
    // Should a runtime list an id twice, the last listed wins.
    samples.dedup_by(|later, earlier| {
        let same = later.instance.id == earlier.instance.id;
        if same {
            std::mem::swap(later, earlier);
        }
        same
    });
    let mut incoming = samples.into_iter().peekable();
    let mut new = Vec::new();
    observed.retain(|id, held| {
        while let Some(sample) = incoming.next_if(|s| s.instance.id < *id) {
            new.push(sample);
        }
        match incoming.next_if(|s| s.instance.id == *id) {
            _ if acted_on(id) => true,
            Some(sample) => {
                if *held != sample {
                    // Its use alone changing decides and reports nothing (kept for telemetry).
                    if held.instance != sample.instance {
                        mark(id);
                    }
                    *held = sample;
                }
                true
            }
            None => {
                mark(id);
                false
            }
        }
    });
    for sample in new.into_iter().chain(incoming) {
        mark(&sample.instance.id);
        observed.insert(sample.instance.id.clone(), sample);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ccattler_core::{InstanceState, ObservedInstance};
    use proptest::prelude::*;

    fn sample(id: u8, restarts: u32) -> Sample {
        let mut instance = ObservedInstance::new(format!("web-{id}"), InstanceState::Running);
        instance.restarts = restarts;
        Sample {
            instance,
            stats: None,
        }
    }

    #[test]
    fn a_change_of_use_alone_is_kept_but_marks_nothing() {
        let using = |cpu: u64, restarts: u32| Sample {
            stats: Some(ccattler_core::InstanceStats {
                cpu: ccattler_core::schema::Cpu::from_millis(cpu),
                memory: ccattler_core::schema::Memory::from_bytes(1 << 20),
            }),
            ..sample(1, restarts)
        };
        let mut observed = BTreeMap::from([("web-1".to_owned(), using(100, 0))]);
        for covers in [None, Some(&BTreeSet::from(["web-1".to_owned()]))] {
            let merge = |observed: &mut BTreeMap<String, Sample>, sample| {
                let mut marked = Vec::new();
                merge_samples(
                    observed,
                    vec![sample],
                    covers,
                    |_| false,
                    |id| marked.push(id.to_owned()),
                );
                marked
            };
            let marked = merge(&mut observed, using(250, 0));
            assert_eq!(
                observed["web-1"],
                using(250, 0),
                "the use is kept, for telemetry"
            );
            assert!(marked.is_empty(), "nothing to decide or report: {marked:?}");
            let marked = merge(&mut observed, using(100, 1));
            assert_eq!(marked, ["web-1"], "a restart is seen");
            observed.insert("web-1".to_owned(), using(100, 0));
        }
    }

    proptest! {
        /// Merged in place, successive observations leave what collecting each afresh would.
        #[test]
        fn merging_equals_collecting(
            lists in prop::collection::vec(prop::collection::vec((0u8..12, 0u32..3), 0..16), 1..6)
        ) {
            let mut observed = BTreeMap::new();
            for list in lists {
                let samples: Vec<Sample> = list.iter().map(|&(id, r)| sample(id, r)).collect();
                let fresh: BTreeMap<String, Sample> = samples
                    .iter()
                    .cloned()
                    .map(|s| (s.instance.id.clone(), s))
                    .collect();
                merge_samples(&mut observed, samples, None, |_| false, |_| {});
                prop_assert_eq!(&observed, &fresh);
            }
        }

        /// Merging the samples of some ids equals merging every id's, where the ids not
        /// covered are held as they were; ids acted on stay in both; both mark the same ids.
        #[test]
        fn merging_some_equals_merging_every_where_covered(
            held in prop::collection::vec((0u8..12, 0u32..3), 0..12),
            list in prop::collection::vec((0u8..12, 0u32..3), 0..16),
            covered in prop::collection::btree_set(0u8..12, 0..12),
            acted in prop::collection::btree_set(0u8..12, 0..3),
        ) {
            let held: BTreeMap<String, Sample> = held
                .iter()
                .map(|&(id, r)| (sample(id, r).instance.id.clone(), sample(id, r)))
                .collect();
            let covers: BTreeSet<String> = covered.iter().map(|&id| sample(id, 0).instance.id).collect();
            let acted: BTreeSet<String> = acted.iter().map(|&id| sample(id, 0).instance.id).collect();
            let samples: Vec<Sample> = list.iter().map(|&(id, r)| sample(id, r)).collect();
            // Every id's observation: what the runtime shows of the covered ids, what was
            // held of the others.
            let mut every_samples: Vec<Sample> = samples
                .iter()
                .filter(|s| covers.contains(&s.instance.id))
                .cloned()
                .collect();
            every_samples.extend(
                held.values().filter(|s| !covers.contains(&s.instance.id)).cloned(),
            );
            let (mut some, mut every) = (held.clone(), held);
            let (mut marked_some, mut marked_every) = (BTreeSet::new(), BTreeSet::new());
            let acted_on = |id: &str| acted.contains(id);
            merge_samples(&mut some, samples, Some(&covers), acted_on, |id| {
                marked_some.insert(id.to_owned());
            });
            merge_samples(&mut every, every_samples, None, acted_on, |id| {
                marked_every.insert(id.to_owned());
            });
            prop_assert_eq!(&some, &every);
            prop_assert_eq!(marked_some, marked_every);
        }
    }
}
