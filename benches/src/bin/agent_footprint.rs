//! Prints the resident memory of an idle node agent running 100 instances (real `sleep`
//! processes through the ProcessRuntime), and how long placing them took to be reported running.
//!
//! `cargo run --release -p ccattler-benches --bin agent_footprint [-- INSTANCES]`
//!
//! The store (an in-process MemoryStore) and the agent share this process, so the figure is an
//! upper bound for the agent alone; the workloads are separate processes and not counted.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ccattler_benches::resident_bytes;
use ccattler_core::FactStore;
use ccattler_core::schema::{self, Assignment, DesiredState, ObservedState, ServiceSpec};
use ccattler_runtime::agent::{AgentConfig, NodeAgent};
use ccattler_runtime::process::ProcessRuntime;
use ccattler_store::MemoryStore;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let count: usize = std::env::args()
        .nth(1)
        .map(|n| n.parse())
        .transpose()?
        .unwrap_or(100);
    let dir = std::env::temp_dir().join(format!("ccattler-agent-footprint-{}", std::process::id()));
    let store = MemoryStore::new();
    let runtime = Arc::new(ProcessRuntime::new(dir.join("runtime"))?);
    let config = AgentConfig::new("n1", dir.join("agent"));
    let agent = NodeAgent::new(store.clone(), runtime.clone(), config)?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(agent.run(async {
        let _ = stopped.await;
    }));

    let spec = ServiceSpec {
        name: "sleeper".into(),
        image: "none".into(),
        command: vec!["sleep".into(), "100000".into()],
        instances: count as u32,
        ..ServiceSpec::default()
    };
    store
        .put(&schema::keys::service(&spec.name)?, schema::encode(&spec))
        .await?;
    let started = Instant::now();
    for i in 0..count {
        let id = format!("sleeper-{i}");
        let assignment = Assignment {
            instance: id.clone(),
            service: spec.name.clone(),
            node: "n1".into(),
            version: spec.version(),
            state: DesiredState::Running,
            ports: Vec::new(),
            volumes: Vec::new(),
        };
        store
            .put(
                &schema::keys::placement("n1", &id)?,
                schema::encode(&assignment),
            )
            .await?;
    }
    loop {
        let observed = store.scan(schema::OBSERVED_INSTANCES).await?;
        let running = observed
            .facts
            .iter()
            .filter_map(|f| schema::decode::<schema::InstanceObservation>(f).ok())
            .filter(|o| o.state == ObservedState::Running)
            .count();
        if running == count {
            break;
        }
        if started.elapsed() > Duration::from_secs(60) {
            return Err(format!("only {running} of {count} running after 60 s").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let converged = started.elapsed();
    // Idle for a while: probes none, reports unchanged, keep-alives only.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let rss = resident_bytes().unwrap_or(0);
    println!(
        "{count} instances placed -> all reported running in {converged:?}; idle agent (with the \
         in-process store) resident: {:.1} MB",
        rss as f64 / 1e6
    );

    // Leave nothing behind: stop every instance, then the agent.
    for i in 0..count {
        let _ = ccattler_core::Runtime::ensure_stopped(
            runtime.as_ref(),
            &format!("sleeper-{i}"),
            Duration::ZERO,
        )
        .await;
    }
    let _ = stop.send(());
    task.await??;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
