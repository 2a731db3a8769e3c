//! [`Load`]: what simulated instances use, as a test drives it.

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};

use ccattler_core::schema::{Cpu, Memory};
use ccattler_core::{InstanceState, InstanceStats};
use parking_lot::Mutex;

use super::table::Table;

/// What one service's instances use in a [`Load`] model.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Demand {
    /// The CPU the service's work takes in all, shared evenly by the instances of the service
    /// that run on every simulator that shares the model: more instances, less each, as behind
    /// a load balancer.
    pub cpu: Cpu,
    /// The memory each running instance uses.
    pub memory: Memory,
}

/// A load model shared by simulators ([`SimulatorRuntime::with_load`](super::SimulatorRuntime::with_load)):
/// each service's [`Demand`], which a test sets and changes as it goes. Cheap to clone; clones
/// share the model.
///
/// An instance of a service with a demand reports its share of the demand's CPU and the
/// demand's memory as its stats; an instance of a service without one reports no CPU and its
/// spec's memory limit, as the simulator does without a model.
#[derive(Clone, Debug, Default)]
pub struct Load {
    inner: Arc<Mutex<Model>>,
}

#[derive(Debug, Default)]
struct Model {
    demands: BTreeMap<String, Demand>,
    /// The tables of the simulators that share the model, to count running instances.
    tables: Vec<Weak<Mutex<Table>>>,
}

impl Load {
    /// A model with no demand: every instance idles.
    pub fn new() -> Self {
        Load::default()
    }

    /// Sets what `service` demands from now on.
    pub fn set(&self, service: &str, demand: Demand) {
        self.inner.lock().demands.insert(service.to_owned(), demand);
    }

    /// Removes `service`'s demand: its instances idle again.
    pub fn clear(&self, service: &str) {
        self.inner.lock().demands.remove(service);
    }

    /// Counts `table`'s instances among those sharing the demand.
    pub(super) fn attach(&self, table: &Arc<Mutex<Table>>) {
        let mut model = self.inner.lock();
        model.tables.retain(|t| t.strong_count() > 0);
        model.tables.push(Arc::downgrade(table));
    }

    /// What a running instance of `service` uses now, if the service has a demand. Call it
    /// without holding any simulator's table.
    pub(super) fn usage(&self, service: &str) -> Option<InstanceStats> {
        let model = self.inner.lock();
        let demand = *model.demands.get(service)?;
        let running: u64 = model
            .tables
            .iter()
            .filter_map(Weak::upgrade)
            .map(|table| {
                let table = table.lock();
                let of_service = table
                    .instances
                    .values()
                    .filter(|i| i.spec.service == service && i.state == InstanceState::Running);
                of_service.count() as u64
            })
            .sum();
        Some(InstanceStats {
            cpu: Cpu::from_millis(demand.cpu.millis() / running.max(1)),
            memory: demand.memory,
        })
    }
}
