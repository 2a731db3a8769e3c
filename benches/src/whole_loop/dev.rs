//! The phases in real time, through the cluster `cca dev --runtime sim` runs: an embedded
//! `MemoryStore`, the standard controllers on the tokio runner, one real node agent per node
//! over the simulator runtime, all in this process.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ccattler_controllers::lang::SourceFile;
use ccattler_core::{EventKind, FactStore, Revision, schema};
use ccattler_examples::cca::cluster::{DevCluster, DevConfig, RuntimeKind};
use ccattler_examples::cca::progress::{ClusterStatus, StatusFollower};
use ccattler_store::MemoryStore;
use futures_util::StreamExt;

use super::{NODE_CPU, NODE_MEMORY, OVERFLOW, Shape};
use crate::kept::Figures;

type Error = Box<dyn std::error::Error>;

/// How long the steady and stuck windows last at least, and how long after their phase's
/// apply they begin (the status and endpoints trail the instances' readiness, the scheduler's
/// rebalancing sweep comes 5 s after its last partial pass, and an agent writes its node's
/// telemetry at most every 10 s, so the use of instances that just started is written up to
/// 10 s later: a window opened sooner counts those writes, one per node, as the state's own).
const STEADY: Duration = Duration::from_secs(5);
const SETTLE: Duration = Duration::from_secs(12);
/// The longest the steady window waits for every controller and agent to list once: the
/// resync interval (30 s by default), and some slack for a list under way.
const ROUND: Duration = Duration::from_secs(40);

/// Runs the five phases on a new cluster of `shape`; each waits at most `timeout`.
///
/// # Errors
///
/// When the cluster cannot start, a store call fails, or a phase does not end within
/// `timeout`.
pub async fn measure(shape: Shape, timeout: Duration) -> Result<Figures, Error> {
    // Installed first, as `cca dev --api` and `cca server` do: every phase pays for metrics.
    let counters = counters()?;
    let mut cluster = DevCluster::start(DevConfig {
        runtime: RuntimeKind::Sim,
        nodes: shape.nodes,
        cpu: NODE_CPU,
        memory: NODE_MEMORY,
        ..DevConfig::default()
    })
    .await?;
    cluster
        .wait_for_nodes(cluster.registration_timeout())
        .await?;
    let store = cluster.store().clone();
    let leases = LeaseCounter::start(&store).await?;
    let mut meter = Meter {
        store: store.clone(),
        follower: StatusFollower::new(&store).await?,
        leases,
        figures: Figures::new(),
        timeout,
    };

    meter
        .phase("apply", async |m: &mut Meter| {
            m.apply(&shape.document(1)).await?;
            m.until(|s| s.is_converged()).await
        })
        .await?;
    // The steady window spans one round of the periodic lists (every controller's and
    // agent's resync), so its figures include that background work, and the phases after it
    // fall between two rounds at every size: a round costs in proportion to the facts, and
    // one that fell inside a phase at some sizes only would make that phase's growth timing.
    meter.rates("steady", &counters, Some(shape.nodes)).await?;
    let lost = node_holding_instances(&store, shape.nodes).await?;
    meter
        .phase("loss", async |m: &mut Meter| {
            cluster.crash_node(lost);
            let nodes = shape.nodes as usize;
            m.until(|s| s.nodes < nodes).await?;
            // The status controller's counts lag the lease: first they say what was lost.
            m.until(|s| !s.is_converged()).await?;
            m.until(|s| s.is_converged()).await
        })
        .await?;
    meter
        .phase("update", async |m: &mut Meter| {
            m.apply(&shape.document(2)).await?;
            m.until(|s| !s.is_converged()).await?;
            m.until(|s| s.is_converged()).await
        })
        .await?;

    meter
        .phase("stuck", async |m: &mut Meter| {
            m.apply(&shape.overflowing_document()).await?;
            m.until(is_stuck).await
        })
        .await?;
    let stuck = meter.follower.last();
    meter.rates("stuck", &counters, None).await?;
    if let Some(row) = stuck.services.iter().find(|s| s.name == OVERFLOW) {
        meter
            .figures
            .insert("stuck_placed".into(), row.placed.into());
        meter
            .figures
            .insert("stuck_unplaced".into(), row.unplaced.into());
    }

    let mut figures = meter.figures;
    let lapses = meter.leases.lapsed.load(Ordering::Relaxed);
    figures.insert("lapses".into(), lapses.saturating_sub(1) as f64);
    meter.leases.task.abort();
    cluster.shutdown().await;
    figures.insert(
        "peak_mb".into(),
        crate::peak_resident_bytes().unwrap_or_default() as f64 / 1e6,
    );
    Ok(figures)
}

/// Whether every service but [`OVERFLOW`] has converged, and of that one, what is placed runs
/// ready while the rest is unplaced with a reason.
fn is_stuck(status: &ClusterStatus) -> bool {
    status.services.iter().all(|s| {
        if s.name != OVERFLOW {
            return s.converged;
        }
        s.unplaced > 0
            && !s.reasons.is_empty()
            && s.placed + s.unplaced == s.desired
            && s.running == s.placed
            && s.ready == s.placed
    })
}

/// Counts node leases that expired, from a watch of their prefix.
struct LeaseCounter {
    lapsed: Arc<AtomicU64>,
    /// Events its watch read (to tell the measuring program's deliveries from the cluster's).
    read: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl LeaseCounter {
    async fn start(store: &MemoryStore) -> Result<Self, Error> {
        let mut watch = store.watch(schema::NODE_LEASES, Revision::ZERO).await?;
        let lapsed = Arc::new(AtomicU64::new(0));
        let read = Arc::new(AtomicU64::new(0));
        let (l, r) = (Arc::clone(&lapsed), Arc::clone(&read));
        let task = tokio::spawn(async move {
            while let Some(Ok(event)) = watch.next().await {
                r.fetch_add(1, Ordering::Relaxed);
                if event.kind == EventKind::Delete {
                    l.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        Ok(LeaseCounter { lapsed, read, task })
    }
}

/// The cluster's counters at one moment.
#[derive(Clone, Copy)]
struct Mark {
    at: Instant,
    /// CPU time of the process (the whole cluster runs in it), in seconds.
    cpu: f64,
    revision: u64,
    /// Deliveries to the cluster's own watches: the store's count less the measuring
    /// program's two watches.
    deliveries: u64,
}

/// The node the loss phase crashes: `n1`, unless it holds no instance (at 1,000 instances on
/// 10,000 nodes most nodes hold none, and losing one of those leaves nothing to replace: the
/// phase would wait for a change that never comes); then the first that holds one.
async fn node_holding_instances(store: &MemoryStore, nodes: u32) -> Result<u32, Error> {
    let placed = store.scan(schema::PLACEMENTS).await?;
    placed
        .facts
        .iter()
        .filter_map(|fact| match schema::RecordKey::parse(&fact.key)? {
            schema::RecordKey::Placement { node, .. } => node.strip_prefix('n')?.parse().ok(),
            _ => None,
        })
        .filter(|n| (1..=nodes).contains(n))
        .min()
        .ok_or_else(|| "loss: no node holds an instance".into())
}

struct Meter {
    store: MemoryStore,
    follower: StatusFollower<MemoryStore>,
    leases: LeaseCounter,
    figures: Figures,
    timeout: Duration,
}

impl Meter {
    async fn mark(&self) -> Result<Mark, Error> {
        let own = self.follower.changes_read() + self.leases.read.load(Ordering::Relaxed);
        Ok(Mark {
            at: Instant::now(),
            cpu: crate::cpu_seconds(std::process::id()).unwrap_or_default(),
            revision: self.store.revision().await?.0,
            deliveries: self.store.watch_deliveries().saturating_sub(own),
        })
    }

    /// Runs one phase and records its time, the CPU time it took, writes and deliveries under
    /// `name`.
    async fn phase(
        &mut self,
        name: &str,
        run: impl AsyncFnOnce(&mut Meter) -> Result<(), Error>,
    ) -> Result<(), Error> {
        let start = self.mark().await?;
        run(self).await.map_err(|err| format!("{name}: {err}"))?;
        let end = self.mark().await?;
        let f = &mut self.figures;
        f.insert(format!("{name}_s"), (end.at - start.at).as_secs_f64());
        f.insert(format!("{name}_cpu_s"), end.cpu - start.cpu);
        f.insert(
            format!("{name}_writes"),
            (end.revision - start.revision) as f64,
        );
        f.insert(
            format!("{name}_deliveries"),
            (end.deliveries - start.deliveries) as f64,
        );
        Ok(())
    }

    /// After [`SETTLE`], nothing changes for [`STEADY`] (with `round_of` the number of nodes,
    /// longer if need be: until every controller and every agent listed once, the round of
    /// periodic lists): the rates of writes, passes and deliveries and the CPU time per
    /// second, as `{name}_writes_s`, `{name}_passes_s`, `{name}_deliveries_s` and
    /// `{name}_cpu_per_s`.
    async fn rates(
        &mut self,
        name: &str,
        counters: &Counters,
        round_of: Option<u32>,
    ) -> Result<(), Error> {
        // Keep reading the status meanwhile, as `cca dev` does.
        self.follow_for(SETTLE).await;
        let passes = || counters("ccattler_reconciles_total").values().sum::<u64>();
        let lists = || {
            let agents = counters("ccattler_agent_lists_total").values().sum::<u64>();
            (counters("ccattler_lists_total"), agents)
        };
        let before = passes();
        let (listed, agents_listed) = lists();
        let start = self.mark().await?;
        self.follow_for(STEADY).await;
        if let Some(nodes) = round_of {
            let round_done = || {
                let (now, agents) = lists();
                let every_controller = listed
                    .iter()
                    .all(|(controller, n)| now.get(controller).is_some_and(|m| m > n));
                every_controller && agents >= agents_listed + u64::from(nodes)
            };
            let deadline = Instant::now() + ROUND;
            while !round_done() {
                if Instant::now() >= deadline {
                    return Err(format!(
                        "{name}: the periodic lists did not all come within {ROUND:?}"
                    )
                    .into());
                }
                self.follow_for(Duration::from_millis(200)).await;
            }
        }
        let end = self.mark().await?;
        let seconds = (end.at - start.at).as_secs_f64();
        let f = &mut self.figures;
        let per_s = |n: u64| n as f64 / seconds;
        f.insert(
            format!("{name}_writes_s"),
            per_s(end.revision - start.revision),
        );
        f.insert(
            format!("{name}_deliveries_s"),
            per_s(end.deliveries - start.deliveries),
        );
        f.insert(
            format!("{name}_passes_s"),
            per_s(passes().saturating_sub(before)),
        );
        f.insert(format!("{name}_cpu_per_s"), (end.cpu - start.cpu) / seconds);
        Ok(())
    }

    async fn follow_for(&mut self, period: Duration) {
        let _ = tokio::time::timeout(period, async {
            while self.follower.next().await.is_ok() {}
        })
        .await;
    }

    async fn apply(&self, text: &str) -> Result<(), Error> {
        let file = SourceFile::new("shape.cca", text);
        ccattler_controllers::apply::apply_file(&self.store, &file, Default::default()).await?;
        Ok(())
    }

    /// Follows the status until `done` says so, at most the meter's timeout.
    async fn until(&mut self, done: impl Fn(&ClusterStatus) -> bool) -> Result<(), Error> {
        let timeout = self.timeout;
        tokio::time::timeout(timeout, async {
            while !done(&self.follower.next().await?) {}
            Ok::<_, Error>(())
        })
        .await
        .map_err(|_| {
            let status = self.follower.last();
            format!(
                "not done within {timeout:?}; {} nodes, {}",
                status.nodes,
                status.table()
            )
        })?
    }
}

/// Reads a counter of the process's Prometheus recorder (installed on first use): each of its
/// series (labels as rendered) with its value.
type Counters = dyn Fn(&str) -> BTreeMap<String, u64>;

/// The [`Counters`] of this process: the runner's (`ccattler_reconciles_total`,
/// `ccattler_lists_total`, by controller) and the agents' (`ccattler_agent_lists_total`).
fn counters() -> Result<Box<Counters>, Error> {
    let recorder = ccattler_examples::cca::metrics::install()?;
    Ok(Box::new(move |name: &str| {
        recorder
            .render()
            .lines()
            .filter_map(|line| {
                let (series, value) = line.rsplit_once(' ')?;
                let labels = series.strip_prefix(name)?;
                let labels = (labels.is_empty() || labels.starts_with('{')).then_some(labels)?;
                Some((labels.to_owned(), value.parse::<f64>().ok()? as u64))
            })
            .collect()
    }))
}
