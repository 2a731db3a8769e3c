//! [`Autoscaler`]: each scaled service's instance count, from what its instances use and what
//! the platform pushes.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

use ccattler_core::event::reasons;
use ccattler_core::schema::{
    self, DesiredState, EffectiveService, HorizontalScale, NodeTelemetry, PushedMetric, RecordKey,
    ScaleIntent, ScaleTarget, ServiceSpec,
};
use ccattler_core::{Change, Controller, Event, FactView, ReconcileContext, ReconcileError};

use super::autoscale::{self, Reading, SCALE_UP_PERIOD};
use super::cache::PlanCache;
use super::cluster::Cluster;
use super::shared::SharedCluster;

/// How often a recommendation that a window or the scale-up limit holds back is judged again.
const HELD_RECHECK: Duration = Duration::from_secs(5);

/// Writes `intent/autoscaler/{svc}` for every service with a `scale { horizontal { ... } }`
/// block that has a `target`: the count its metrics ask for, tempered, with the reason. The
/// intent resolver clamps it to `min..max` and puts it in force. A service with bounds and no
/// target is left to whoever else writes its intent (a platform's own autoscaler); the intent
/// of a service that is no longer declared is deleted.
///
/// # Metrics
///
/// - `cpu` and `memory`: each ready instance's use (from its node's `telemetry/node/{node}`) as
///   a percentage of what the service requests (`resources`); the target is that percentage
///   (`target cpu = 60` and `target cpu = 60%` alike). A service that requests none of the
///   resource has nothing to measure against: the reason says so and the count stays.
/// - Any other name is a metric the platform pushes, `metric/{metric}/{svc}` (a
///   [`PushedMetric`]): the service's total, and the target is per instance.
///
/// # The count
///
/// As Kubernetes' horizontal pod autoscaler documents it: each metric asks for
/// `ceil(current x reading / target)` instances, nothing when within a tenth of the target
/// (the tolerance); instances without a reading, or not ready, are counted so as to pull toward
/// no change; the highest ask wins, and while any metric has no reading the count does not go
/// down. A lower count must hold for the scale-down stabilization window (default 5 min: the
/// highest recommendation in the window is applied), a higher one for the scale-up window
/// (default 0); one step up at most doubles the count (or adds four), and the next waits 15 s.
/// The history the windows need is kept in the intent itself, so the controller stays a pure
/// function of the facts and the time.
///
/// Each change of count is recorded as a `Scaled` event of the service, with the reason.
///
/// # Cost
///
/// A pass plans only the services whose records changed (spec, effective record, instances,
/// their nodes' telemetry, pushed metrics, the intent itself) and those whose intent still
/// holds a recommendation back (a window or the scale-up limit, which time alone moves); a
/// service whose intent holds one settled recommendation is not touched by time, so leaving
/// it out changes nothing.
#[derive(Debug, Default)]
pub struct Autoscaler {
    plans: PlanCache,
    inputs: Mutex<Followed>,
}

/// What the autoscaler reads beyond the shared cluster, kept in step with the views it is
/// handed: every node's telemetry, decoded.
#[derive(Debug, Default)]
struct Followed {
    view: Option<FactView>,
    telemetry: BTreeMap<String, Arc<NodeTelemetry>>,
}

impl Followed {
    /// Moves to `view`: patches the telemetry and adds to `dirty` each service that a changed
    /// telemetry record, pushed metric or intent names. Returns whether it read `view` whole
    /// (the first pass).
    fn follow(&mut self, view: &FactView, dirty: &mut BTreeSet<String>) -> bool {
        let watched = [
            schema::TELEMETRY,
            schema::METRICS,
            schema::AUTOSCALER_INTENTS,
        ];
        let first = self.view.is_none();
        let changed: Vec<_> = match &self.view {
            Some(old) => view
                .changes_since(old)
                .filter(|(key, ..)| watched.iter().any(|p| key.as_str().starts_with(p)))
                .map(|(key, _, new)| (key.clone(), new.cloned()))
                .collect(),
            None => watched
                .iter()
                .flat_map(|prefix| view.scan(prefix))
                .map(|f| (f.key.clone(), Some(f.clone())))
                .collect(),
        };
        for (key, fact) in changed {
            match RecordKey::parse(&key) {
                Some(RecordKey::Telemetry(node)) => {
                    let record = fact.and_then(|f| schema::decode::<NodeTelemetry>(&f).ok());
                    let before = match record {
                        Some(record) => self.telemetry.insert(node.to_owned(), Arc::new(record)),
                        None => self.telemetry.remove(node),
                    };
                    let after = self.telemetry.get(node);
                    for usage in before.iter().chain(after).flat_map(|t| t.usage.values()) {
                        if !dirty.contains(&usage.service) {
                            dirty.insert(usage.service.clone());
                        }
                    }
                }
                Some(RecordKey::Metric { service, .. }) | Some(RecordKey::ScaleIntent(service)) => {
                    dirty.insert(service.to_owned());
                }
                _ => {}
            }
        }
        self.view = Some(view.clone());
        first
    }
}

impl Autoscaler {
    /// A new autoscaler (with an empty cache of the cluster it reads).
    pub fn new() -> Self {
        Self::default()
    }

    /// A new autoscaler whose cache of the cluster is `shared` with other controllers.
    pub fn sharing(shared: Arc<SharedCluster>) -> Self {
        Autoscaler {
            plans: PlanCache::sharing(shared),
            inputs: Mutex::default(),
        }
    }
}

impl Controller for Autoscaler {
    fn name(&self) -> &str {
        "autoscaler"
    }

    fn watches(&self) -> Vec<String> {
        vec![
            schema::DESIRED_SERVICES.into(),
            schema::EFFECTIVE_SERVICES.into(),
            schema::DESIRED_INSTANCES.into(),
            schema::PLACEMENTS.into(),
            schema::OBSERVED_INSTANCES.into(),
            schema::NODE_LEASES.into(),
            schema::TELEMETRY.into(),
            schema::METRICS.into(),
        ]
    }

    fn write_domain(&self) -> Vec<String> {
        vec![schema::AUTOSCALER_INTENTS.into()]
    }

    fn reconcile(
        &self,
        facts: &FactView,
        ctx: &mut ReconcileContext<'_>,
    ) -> Result<Vec<Change>, ReconcileError> {
        let (cluster, mut to_plan) = self.plans.begin(facts);
        let mut inputs = self.inputs.lock();
        let first = inputs.follow(facts, &mut to_plan);
        let now_ms = millis(ctx.now());
        let mut changes = Vec::new();
        let mut pending = BTreeSet::new();
        for name in &to_plan {
            let key = schema::keys::scale_intent(name)?;
            let held = facts.get(key.as_str());
            // Without a target there is nothing to measure: the intent is left to whoever
            // writes it (a platform's own autoscaler).
            let Some(spec) = cluster.services.get(name) else {
                // An intent outliving its service would apply to a service of the same name
                // later.
                if let Some(fact) = held {
                    changes.push(Change::delete(fact.key.clone()));
                }
                continue;
            };
            let scale = spec.scale.as_ref().filter(|s| !s.targets.is_empty());
            let (Some(scale), Some(effective)) = (scale, cluster.effective.get(name)) else {
                continue;
            };
            let held = held
                .and_then(|f| schema::decode::<ScaleIntent>(f).ok())
                .unwrap_or_default();
            let inputs = Inputs {
                facts,
                cluster: &cluster,
                telemetry: &inputs.telemetry,
                spec,
                effective,
            };
            let intent = plan(&inputs, scale, &held, now_ms);
            let before = current(effective, &held);
            if intent.instances != before {
                let message = format!(
                    "{} to {} instances: {}",
                    if intent.instances > before {
                        "up"
                    } else {
                        "down"
                    },
                    intent.instances,
                    intent.reason
                );
                ctx.record(Event::new(name, reasons::SCALED, message).of_service(name));
            }
            if !settled(&intent) {
                // Time alone moves it: planned on every pass until it settles.
                pending.insert(name.clone());
            }
            if intent.recommendations.last().map(|(_, n)| *n) != Some(intent.instances) {
                // A recommendation held back by a window or the limit: judged again when the
                // limit's period ends, and every few seconds while a window holds it.
                let period_end = intent
                    .scaled_up_at
                    .map_or(0, |at| at + SCALE_UP_PERIOD.as_millis() as u64);
                let wait = Duration::from_millis(period_end.saturating_sub(now_ms));
                ctx.requeue_after(if wait.is_zero() {
                    HELD_RECHECK
                } else {
                    wait.min(HELD_RECHECK)
                });
            }
            if intent != held {
                changes.push(Change::put(key, schema::encode(&intent)));
                pending.insert(name.clone());
            }
        }
        if first {
            // Intents of services no record names (none of the above planned them).
            for fact in facts.scan(schema::AUTOSCALER_INTENTS) {
                let declared = match RecordKey::parse(&fact.key) {
                    Some(RecordKey::ScaleIntent(name)) => {
                        to_plan.contains(name) || cluster.services.contains_key(name)
                    }
                    _ => false,
                };
                if !declared {
                    changes.push(Change::delete(fact.key.clone()));
                }
            }
        }
        self.plans.finish(pending);
        Ok(changes)
    }
}

/// Whether time alone leaves `intent` as it is: one recommendation in its windows, the count
/// it holds.
fn settled(intent: &ScaleIntent) -> bool {
    matches!(intent.recommendations.as_slice(), [(_, n)] if *n == intent.instances)
}

/// What one service's plan reads.
struct Inputs<'a> {
    facts: &'a FactView,
    cluster: &'a Cluster,
    telemetry: &'a BTreeMap<String, Arc<NodeTelemetry>>,
    spec: &'a ServiceSpec,
    effective: &'a EffectiveService,
}

/// The intent for one service now: what each target asks, the highest, tempered by the
/// windows and the limit, within the bounds.
fn plan(
    inputs: &Inputs<'_>,
    scale: &HorizontalScale,
    held: &ScaleIntent,
    now_ms: u64,
) -> ScaleIntent {
    let current = current(inputs.effective, held);
    let mut reason = String::new();
    let mut asks = Vec::new();
    for target in &scale.targets {
        let (ask, said) = ask(inputs, target, current);
        if !reason.is_empty() {
            reason.push_str("; ");
        }
        reason.push_str(&said);
        asks.push(ask);
    }
    let highest = asks.iter().flatten().copied().max();
    let raw = match highest {
        // A metric without a reading may hide a need: never down then.
        Some(ask) if asks.iter().any(Option::is_none) => ask.max(current),
        Some(ask) => ask,
        // Nothing measured: nothing new to say, the last recommendation stands.
        None if !held.recommendations.is_empty() => held.instances,
        None => current,
    };
    let (min, max) = (scale.min, scale.max.max(scale.min));
    let raw = raw.clamp(min, max);
    let mut recommendations = held.recommendations.clone();
    if recommendations.is_empty() {
        // The count in force counts as recommended until now: a new autoscaler waits out its
        // windows before it scales down, as if it had always recommended what runs.
        recommendations.push((now_ms, current));
    }
    if recommendations.last().map(|(_, n)| *n) != Some(raw) {
        recommendations.push((now_ms, raw));
    }
    let longest = scale
        .scale_up_stabilization
        .max(scale.scale_down_stabilization);
    let start = now_ms.saturating_sub(longest.as_millis() as u64);
    if let Some(first) = recommendations
        .iter()
        .rposition(|(since, _)| *since <= start)
    {
        recommendations.drain(..first);
    }
    let instances = autoscale::stabilized(
        current,
        &recommendations,
        now_ms,
        scale.scale_up_stabilization,
        scale.scale_down_stabilization,
        held.scaled_up_at,
    )
    .clamp(min, max);
    let _ = write!(reason, "; asks {raw}");
    if instances != raw {
        let _ = write!(
            reason,
            ", holding {instances} (stabilization window or scale-up limit)"
        );
    }
    ScaleIntent {
        instances,
        reason,
        recommendations,
        scaled_up_at: if instances > current {
            Some(now_ms)
        } else {
            held.scaled_up_at
        },
    }
}

/// The count the service has now, as far as the autoscaler is concerned: its own last
/// recommendation once it made one (the effective record lags it by the intent resolver's
/// pass, and judging by a count already replaced would undo it), else the count in force.
fn current(effective: &EffectiveService, held: &ScaleIntent) -> u32 {
    if held.recommendations.is_empty() {
        effective.instances
    } else {
        held.instances
    }
}

/// What one target asks for (`None`: no reading), and what it saw, for people.
fn ask(inputs: &Inputs<'_>, target: &ScaleTarget, current: u32) -> (Option<u32>, String) {
    let metric = target.metric.as_str();
    let requested = match metric {
        "cpu" => Some(inputs.spec.resources.cpu.millis()),
        "memory" => Some(inputs.spec.resources.memory.bytes()),
        _ => None,
    };
    let Some(requested) = requested else {
        let key = schema::keys::metric(metric, &inputs.spec.name).ok();
        let pushed = key
            .and_then(|key| inputs.facts.get(key.as_str()))
            .and_then(|f| schema::decode::<PushedMetric>(f).ok());
        return match pushed {
            Some(p) => (
                autoscale::per_service(current, p.value as f64, target.value as f64),
                format!("{metric} {} for {} an instance", p.value, target.value),
            ),
            None => (None, format!("{metric}: nothing pushed yet")),
        };
    };
    if requested == 0 {
        let why = format!(
            "{metric}: the service requests none to measure against (set resources {{ {metric} }})"
        );
        return (None, why);
    }
    let version = inputs.effective.version.as_str();
    let readings: Vec<Reading> = inputs
        .cluster
        .instances_of(&inputs.spec.name)
        .filter(|i| i.desired.version == version && i.desired.state == DesiredState::Running)
        .map(|i| {
            let usage = i
                .node
                .as_deref()
                .and_then(|node| inputs.telemetry.get(node))
                .and_then(|t| t.usage.get(&i.id));
            let used = usage.map(|u| match metric {
                "cpu" => u.cpu.millis(),
                _ => u.memory.bytes(),
            });
            Reading {
                ready: i.is_ready(),
                value: used.map(|u| u as f64 * 100.0 / requested as f64),
            }
        })
        .collect();
    let measured: Vec<f64> = readings
        .iter()
        .filter(|r| r.ready)
        .filter_map(|r| r.value)
        .collect();
    let asked = autoscale::per_instance(current, &readings, target.value as f64);
    let said = if measured.is_empty() {
        format!("{metric}: no reading yet")
    } else {
        let average = measured.iter().sum::<f64>() / measured.len() as f64;
        format!(
            "{metric} {average:.0}% of {}% over {} ready",
            target.value,
            measured.len()
        )
    };
    (asked, said)
}

fn millis(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
#[path = "autoscaler_tests.rs"]
mod tests;
