//! [`Workload::generate`]: a cluster and its users' documents, drawn from one seed.

use std::time::Duration;

use ccattler_core::schema::{Cpu, Memory};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::{
    Change, CheckDraw, ProbeDraw, RuleDraw, ServiceDraw, Step, Update, Workload, ZoneDraw, feasible,
};
use crate::cluster::NodeSpec;

/// Pieces of names, so that drawn names look like what people write, dots, digits and the
/// word `init` among them.
const WORDS: &[&str] = &[
    "web",
    "api",
    "db",
    "shop",
    "init",
    "initial",
    "initdb",
    "cache",
    "queue",
    "jobs",
    "worker",
    "auth",
    "search",
    "v2",
    "edge",
    "metrics",
    "log",
    "cron",
    "payments",
    "pending",
    "team",
    "service",
    "volume",
    "update",
    "café",
    "数据",
    "x",
    "a1",
    "_internal",
];

/// How many times a draw that does not fit is shrunk before a service is dropped.
const SHRINKS: usize = 64;

impl Workload {
    /// The workload of `seed`: a cluster of 2 to 7 nodes (zones and labels drawn too), 1 to 6
    /// services using every feature of the language, and up to 8 changes during the first
    /// `window` of the run. Feasible by construction (see the [module docs](super)). The same
    /// seed gives the same workload.
    pub fn generate(seed: u64, window: Duration) -> Workload {
        let mut rng = SmallRng::seed_from_u64(seed ^ WORKLOAD_SALT);
        let nodes = draw_nodes(&mut rng);
        let mut draw = Draw {
            rng,
            nodes: &nodes,
            names: Vec::new(),
        };
        let count = draw.rng.random_range(1..=6);
        let services: Vec<ServiceDraw> = (0..count).map(|_| draw.service()).collect();
        let secrets: Vec<(String, String)> = services
            .iter()
            .flat_map(|s| s.secrets.iter().map(|(name, _)| name.clone()))
            .filter(|_| draw.rng.random_bool(0.8))
            .map(|name| (name, "s3cret-1".to_owned()))
            .collect();
        let mut workload = Workload {
            seed,
            nodes: nodes.clone(),
            services,
            network: Vec::new(),
            secrets,
            steps: Vec::new(),
        };
        workload.network = draw.network(&workload.services);
        workload.steps = draw.steps(&workload, window);
        fit(&mut workload);
        workload
    }
}

/// Keeps the workload's draws apart from the simulation's, which use the same seed.
const WORKLOAD_SALT: u64 = 0x0c0a_d0c5_0c0a_d0c5;

fn draw_nodes(rng: &mut SmallRng) -> Vec<NodeSpec> {
    let count = rng.random_range(2..=7);
    let zones = [0, 0, 2, 3][rng.random_range(0..4)];
    let cpu = [2_000, 4_000, 8_000, 16_000][rng.random_range(0..4)];
    let memory: u64 = [2, 4, 8, 32][rng.random_range(0..4)];
    (0..count)
        .map(|i| {
            let mut node = NodeSpec::new(
                format!("n{}", i + 1),
                Cpu::from_millis(cpu),
                Memory::from_bytes(memory << 30),
            );
            if zones > 0 {
                node = node.zone(["a", "b", "c"][i % zones]);
            }
            if i % 2 == 0 {
                node = node.label("disk", "ssd");
            }
            if i == 0 {
                node = node.label("tier", "edge");
            }
            // An address the network rules can name.
            node.address(format!("10.0.0.{}", i + 1))
        })
        .collect()
}

struct Draw<'a> {
    rng: SmallRng,
    nodes: &'a [NodeSpec],
    /// Names drawn so far (services, and ids they make: `/` becomes `.`), to keep them apart.
    names: Vec<String>,
}

impl Draw<'_> {
    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.rng.random_range(0..items.len())]
    }

    /// A service name: words joined by `- . _ :`, sometimes a path, sometimes long, never one
    /// drawn before (nor one whose instance ids would be another's: `a/b` and `a.b`).
    fn name(&mut self) -> String {
        loop {
            let parts = self.rng.random_range(1..=3);
            let mut name = String::new();
            for i in 0..parts {
                if i > 0 {
                    name.push(self.pick(&['-', '.', '_', ':', '/', '-']));
                }
                name.push_str(self.pick(WORDS));
            }
            if self.rng.random_bool(0.15) {
                name.push_str(&self.rng.random_range(0..1000).to_string());
            }
            if self.rng.random_bool(0.05) {
                name.push_str("-with-a-rather-long-name-that-people-write-sometimes");
            }
            let first_ok = name
                .chars()
                .next()
                .is_some_and(|c| c.is_alphabetic() || c == '_');
            let id = name.replace('/', ".");
            if first_ok && !self.names.contains(&id) {
                self.names.push(id);
                return name;
            }
        }
    }

    fn label_pair(&mut self) -> (String, String) {
        if self.rng.random_bool(0.7) {
            ("disk".into(), "ssd".into())
        } else {
            ("tier".into(), "edge".into())
        }
    }

    fn service(&mut self) -> ServiceDraw {
        let name = self.name();
        let instances: u32 = match self.rng.random_range(0..10) {
            0 => 1,
            1..=6 => self.rng.random_range(1..=8),
            7 | 8 => self.rng.random_range(8..=40),
            _ => self.rng.random_range(40..=300),
        };
        let stateful = self.rng.random_bool(0.15);
        let exposes = self.rng.random_bool(0.6);
        let expose = if exposes {
            vec![(
                self.pick(&[80, 443, 5432, 8080, 9000]),
                self.pick(&["http", "tcp"]),
            )]
        } else {
            Vec::new()
        };
        // Now and then a port the instances need by number: at most one per node.
        let static_ports = exposes && self.rng.random_bool(0.15);
        let mut probes = Vec::new();
        if self.rng.random_bool(0.6) {
            let check = match self.rng.random_range(0..3) {
                0 => CheckDraw::Http(self.pick(&["/", "/healthz", "/health/ready"]).to_owned()),
                1 => CheckDraw::Tcp,
                _ => CheckDraw::Exec(self.pick(&["true", "exit 0", "pg_isready"]).to_owned()),
            };
            probes.push(ProbeDraw {
                kind: "readiness",
                check,
                every_secs: self.rng.random_range(1..=5),
                failure_threshold: self
                    .rng
                    .random_bool(0.3)
                    .then(|| self.rng.random_range(1..=3)),
            });
        }
        if self.rng.random_bool(0.25) {
            probes.push(ProbeDraw {
                kind: "liveness",
                check: CheckDraw::Exec("true".into()),
                every_secs: self.rng.random_range(1..=5),
                failure_threshold: Some(3),
            });
        }
        if self.rng.random_bool(0.15) {
            probes.push(ProbeDraw {
                kind: "startup",
                check: CheckDraw::Tcp,
                every_secs: 1,
                failure_threshold: Some(5),
            });
        }
        let zoned = self.nodes.iter().any(|n| n.status.zone.is_some());
        let zone = match self.rng.random_range(0..6) {
            0 | 1 if zoned => Some(ZoneDraw::Spread),
            2 if zoned => self.nodes[0].status.zone.clone().map(ZoneDraw::In),
            _ => None,
        };
        let require = if self.rng.random_bool(0.15) {
            vec![self.label_pair()]
        } else {
            Vec::new()
        };
        let prefer = if self.rng.random_bool(0.2) {
            vec![self.label_pair()]
        } else {
            Vec::new()
        };
        // Never a rollout that cannot move (both 0), nor a stateful one without an unavailable
        // slot: the language refuses both.
        let update = self.rng.random_bool(0.4).then(|| {
            let unavailable = self.rng.random_range(u32::from(stateful)..=2);
            let extra = self.rng.random_range(u32::from(unavailable == 0)..=2);
            Update {
                max_unavailable: unavailable,
                max_extra: extra,
                progress_deadline_secs: self
                    .rng
                    .random_bool(0.5)
                    .then(|| self.rng.random_range(10..=60)),
            }
        });
        let scale = self
            .rng
            .random_bool(0.1)
            .then(|| (instances.saturating_sub(1).max(1), instances + 2));
        let init = (0..self.pick(&[0, 0, 0, 1, 2]))
            .map(|_| self.pick(&["true", "./migrate --all", "exit 0"]).to_owned())
            .collect();
        // A volume is attached to one instance at a time: only a stateful service (a volume of
        // its own for each identity) mounts one, whatever its count, and no two services share
        // one.
        let volumes = if stateful && self.rng.random_bool(0.6) {
            vec![format!("{name}-data")]
        } else {
            Vec::new()
        };
        let secrets = if self.rng.random_bool(0.2) {
            let name = self.pick(&["db-password", "api.key", "token"]).to_owned();
            let mount = self
                .rng
                .random_bool(0.5)
                .then(|| format!("/run/secrets/{name}"));
            vec![(name, mount)]
        } else {
            Vec::new()
        };
        let env = if self.rng.random_bool(0.3) {
            vec![("MODE".to_owned(), "production".to_owned())]
        } else {
            Vec::new()
        };
        ServiceDraw {
            name,
            instances,
            cpu_millis: self.pick(&[0, 10, 50, 100, 250, 500]),
            memory_mib: self.pick(&[0, 16, 64, 128, 256]),
            restart: self.pick(&[
                None,
                None,
                Some("always"),
                Some("on_failure"),
                Some("never"),
            ]),
            command: self
                .rng
                .random_bool(0.3)
                .then(|| "serve --port 8080".to_owned()),
            expose,
            static_ports,
            probes,
            zone,
            require,
            prefer,
            update,
            scale,
            stateful,
            init,
            volumes,
            secrets,
            env,
            file: self.rng.random_bool(0.2),
            version: 1,
            broken: false,
        }
    }

    /// A few `allow` and `deny` rules between the services (a service calling itself
    /// included), now and then; half of them name a port the called service exposes.
    fn network(&mut self, services: &[ServiceDraw]) -> Vec<RuleDraw> {
        if services.is_empty() || !self.rng.random_bool(0.4) {
            return Vec::new();
        }
        let count = self.rng.random_range(1..=5);
        (0..count)
            .map(|_| {
                let from = &services[self.rng.random_range(0..services.len())];
                let to = &services[self.rng.random_range(0..services.len())];
                let port = if to.expose.is_empty() || self.rng.random_bool(0.5) {
                    None
                } else {
                    Some(to.expose[self.rng.random_range(0..to.expose.len())].0)
                };
                RuleDraw {
                    allow: self.rng.random_bool(0.75),
                    from: from.name.clone(),
                    to: to.name.clone(),
                    port,
                }
            })
            .collect()
    }

    /// Up to 8 changes in the first `window`, a broken version always rolled forward within
    /// 20 s, a missing secret always set.
    fn steps(&mut self, workload: &Workload, window: Duration) -> Vec<Step> {
        let mut steps = Vec::new();
        let window_ms = window.as_millis().max(10_000) as u64;
        let mut names: Vec<String> = workload.services.iter().map(|s| s.name.clone()).collect();
        let count = self.rng.random_range(0..=8);
        for _ in 0..count {
            let at = Duration::from_millis(self.rng.random_range(2_000..window_ms));
            if names.is_empty() {
                break;
            }
            let service = names[self.rng.random_range(0..names.len())].clone();
            let change = match self.rng.random_range(0..10) {
                0..=2 => Change::Scale {
                    service,
                    instances: self.pick(&[0, 1, 2, 3, 5, 8, 13, 40]),
                },
                3..=5 => Change::Version {
                    service,
                    broken: false,
                },
                6 => {
                    // A build that runs but never serves: rolled forward once someone notices.
                    let fixed = at + Duration::from_millis(self.rng.random_range(5_000..20_000));
                    steps.push(Step {
                        at: fixed,
                        change: Change::Version {
                            service: service.clone(),
                            broken: false,
                        },
                    });
                    Change::Version {
                        service,
                        broken: true,
                    }
                }
                7 => {
                    names.retain(|n| *n != service);
                    Change::Delete { service }
                }
                8 => {
                    let added = self.service();
                    names.push(added.name.clone());
                    Change::Add(Box::new(added))
                }
                _ => match workload.services.iter().flat_map(|s| &s.secrets).next() {
                    Some((name, _)) => Change::Secret {
                        name: name.clone(),
                        value: format!("s3cret-{}", self.rng.random_range(2..100)),
                    },
                    None => continue,
                },
            };
            steps.push(Step { at, change });
        }
        // Every secret a service names is set, at the start or later.
        let named: Vec<String> = workload
            .services
            .iter()
            .chain(steps.iter().filter_map(|s| match &s.change {
                Change::Add(service) => Some(service.as_ref()),
                _ => None,
            }))
            .flat_map(|s| s.secrets.iter().map(|(name, _)| name.clone()))
            .collect();
        for name in named {
            let set = workload.secrets.iter().any(|(n, _)| *n == name)
                || steps
                    .iter()
                    .any(|s| matches!(&s.change, Change::Secret { name: n, .. } if *n == name));
            if !set {
                let at = Duration::from_millis(self.rng.random_range(1_000..window_ms));
                steps.push(Step {
                    at,
                    change: Change::Secret {
                        name,
                        value: "s3cret-late".into(),
                    },
                });
            }
        }
        // A broken version that is never fixed (its fix fell behind a deletion) is fine: the
        // deletion ends it. Only a service still declared at the end must be sound.
        steps.sort_by_key(|s| s.at);
        steps
    }
}

/// Shrinks the workload until every document fits the cluster at half its capacity: the
/// largest demand first (halving its instances, then its requests), dropping a service only
/// when nothing else is left to shrink.
fn fit(workload: &mut Workload) {
    for _ in 0..SHRINKS {
        let problems = feasible::of_workload(workload, feasible::HEADROOM);
        let Some(problem) = problems.first() else {
            return;
        };
        let name = problem.service.clone();
        let shrunk = shrink_service(&mut workload.services, &name)
            | workload
                .steps
                .iter_mut()
                .any(|step| match &mut step.change {
                    Change::Add(service) if service.name == name => shrink_one(service),
                    Change::Scale { service, instances } if *service == name && *instances > 1 => {
                        *instances /= 2;
                        true
                    }
                    _ => false,
                });
        if !shrunk {
            // Nothing left to shrink (a requirement no node meets at all): drop it.
            workload.services.retain(|s| s.name != name);
            workload.steps.retain(|s| !s.change.names(&name));
        }
    }
}

fn shrink_service(services: &mut [ServiceDraw], name: &str) -> bool {
    services
        .iter_mut()
        .find(|s| s.name == name)
        .is_some_and(shrink_one)
}

/// Halves a service's instances, else its requests; false when it is as small as it gets.
fn shrink_one(service: &mut ServiceDraw) -> bool {
    if service.instances > 1 {
        service.instances /= 2;
        if let Some((min, max)) = &mut service.scale {
            *min = (*min / 2).max(1);
            *max = (*max / 2).max(*min);
        }
        true
    } else if service.cpu_millis > 10 || service.memory_mib > 16 {
        service.cpu_millis /= 2;
        service.memory_mib /= 2;
        true
    } else {
        false
    }
}
