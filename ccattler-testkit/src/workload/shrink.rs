//! [`Workload::smaller`]: the workloads one step smaller than a given one, for shrinking a
//! failing run to what it needs.

use super::{Change, ServiceDraw, Workload, feasible};

impl Workload {
    /// Every workload one step smaller than this one, most drastic first: without one step,
    /// without one service (and the steps about it), with one service at half its instances,
    /// with one feature of one service taken out, with one node less (never below one). A
    /// shrinker tries them in order and keeps the first that still fails, until none does
    /// (see [`sim::shrink`](crate::sim::shrink)). None of them could fail for a reason of its
    /// own, whatever the bug was: none leaves a broken version in place at the end (a fix
    /// taken out without its broken version), and each fits its cluster as a generated
    /// workload does (every document placed at half the nodes' capacity, see the [module
    /// docs](super)), so one node less never leaves instances that no node can take.
    pub fn smaller(&self) -> Vec<Workload> {
        let mut out = self.candidates();
        out.retain(|w| w.ends_sound() && feasible::of_workload(w, feasible::HEADROOM).is_empty());
        out
    }

    /// Whether every service declared at the end runs a version that can become ready.
    fn ends_sound(&self) -> bool {
        self.states()
            .last()
            .is_none_or(|(_, services)| services.iter().all(|s| !s.broken))
    }

    fn candidates(&self) -> Vec<Workload> {
        let mut out = Vec::new();
        for i in 0..self.steps.len() {
            let mut w = self.clone();
            w.steps.remove(i);
            out.push(w);
        }
        for service in &self.services {
            if self.services.len() > 1 {
                let mut w = self.clone();
                w.services.retain(|s| s.name != service.name);
                w.steps.retain(|s| !s.change.names(&service.name));
                out.push(w);
            }
        }
        for i in 0..self.services.len() {
            if self.services[i].instances > 1 {
                let mut w = self.clone();
                w.services[i].instances /= 2;
                out.push(w);
            }
            for simpler in features_off(&self.services[i]) {
                let mut w = self.clone();
                w.services[i] = simpler;
                out.push(w);
            }
        }
        if self.nodes.len() > 1 {
            let mut w = self.clone();
            w.nodes.pop();
            out.push(w);
        }
        // Steps that add a service shrink like the services themselves.
        for (i, step) in self.steps.iter().enumerate() {
            if let Change::Add(service) = &step.change {
                for simpler in features_off(service) {
                    let mut w = self.clone();
                    w.steps[i].change = Change::Add(Box::new(simpler));
                    out.push(w);
                }
            }
        }
        out
    }
}

/// `service` with one of its features taken out, one variant per feature it has.
fn features_off(service: &ServiceDraw) -> Vec<ServiceDraw> {
    let mut out = Vec::new();
    let mut with = |change: &dyn Fn(&mut ServiceDraw)| {
        let mut s = service.clone();
        change(&mut s);
        if s != *service {
            out.push(s);
        }
    };
    with(&|s| s.stateful = false);
    with(&|s| s.init.clear());
    with(&|s| s.probes.clear());
    with(&|s| s.zone = None);
    with(&|s| s.require.clear());
    with(&|s| s.prefer.clear());
    with(&|s| s.update = None);
    with(&|s| s.scale = None);
    with(&|s| s.volumes.clear());
    with(&|s| s.secrets.clear());
    with(&|s| s.env.clear());
    with(&|s| s.file = false);
    with(&|s| s.static_ports = false);
    with(&|s| s.expose.clear());
    with(&|s| s.restart = None);
    with(&|s| s.command = None);
    out
}
