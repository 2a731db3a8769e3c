//! A load surge ([`FaultKind::LoadSurge`](super::FaultKind::LoadSurge)): one autoscaled
//! service's instances are made busy, through the simulators' load model and the metrics a
//! platform pushes, and idle again when it ends.

use ccattler_core::FactStore;
use ccattler_core::schema::{
    self, Cpu, HorizontalScale, Memory, PushedMetric, RecordKey, ServiceSpec,
};
use ccattler_runtime::simulator::Demand;

use super::faults::Fault;
use super::world::{Event, World, ready};

/// How far over its targets a surge drives a service: half as much again.
const OVER: (u64, u64) = (3, 2);

impl World {
    /// A surge begins: the service the fault's target picks among those that scale on a
    /// metric gets a demand over its targets until the fault ends. `None` when no service
    /// scales on a metric.
    pub(crate) fn surge(&mut self, fault: &Fault) -> Option<String> {
        let scan = ready(self.store.scan(schema::DESIRED_SERVICES)).ok()?;
        let mut scaled: Vec<(ServiceSpec, HorizontalScale)> = scan
            .facts
            .iter()
            .filter(|f| matches!(RecordKey::parse(&f.key), Some(RecordKey::Service(_))))
            .filter_map(|f| schema::decode::<ServiceSpec>(f).ok())
            .filter_map(|spec| {
                let scale = spec.scale.clone().filter(|s| !s.targets.is_empty())?;
                Some((spec, scale))
            })
            .collect();
        if scaled.is_empty() {
            return None;
        }
        let (spec, scale) = scaled.swap_remove(fault.target as usize % scaled.len());
        let mut demand = Demand::default();
        for target in &scale.targets {
            match target.metric.as_str() {
                // A percentage of what every instance up to `max` requests, in all.
                "cpu" => {
                    let all = spec.resources.cpu.millis() * u64::from(scale.max);
                    demand.cpu = Cpu::from_millis(over(all * target.value / 100));
                }
                // A percentage of what one instance requests, each.
                "memory" => {
                    let each = spec.resources.memory.bytes();
                    demand.memory = Memory::from_bytes(over(each / 100 * target.value));
                }
                // A total, the target per instance.
                metric => {
                    let all = target.value.saturating_mul(u64::from(scale.max));
                    self.push_metric(metric, &spec.name, over(all));
                }
            }
        }
        self.load.set(&spec.name, demand);
        self.agenda
            .push(fault.end(), Event::SurgeEnds(spec.name.clone()));
        Some(spec.name)
    }

    /// A surge ends: `service` idles, and the metrics it was scaled on are pushed at zero.
    pub(crate) fn surge_ends(&mut self, service: &str) {
        self.load.clear(service);
        let key = schema::keys::service(service).ok();
        let spec = key
            .and_then(|key| ready(self.store.get(&key)).ok().flatten())
            .and_then(|fact| schema::decode::<ServiceSpec>(&fact).ok());
        for target in spec
            .iter()
            .flat_map(|s| s.scale.iter())
            .flat_map(|s| &s.targets)
        {
            if !matches!(target.metric.as_str(), "cpu" | "memory") {
                self.push_metric(&target.metric, service, 0);
            }
        }
        self.trace.line(
            self.now,
            "chaos",
            format!("the load surge on {service} ends"),
        );
    }

    fn push_metric(&mut self, metric: &str, service: &str, value: u64) {
        if let Ok(key) = schema::keys::metric(metric, service) {
            self.put(&key, schema::encode(&PushedMetric { value }));
        }
    }
}

/// Half as much again as `at_target`.
fn over(at_target: u64) -> u64 {
    at_target.saturating_mul(OVER.0) / OVER.1
}
