//! How long a node agent takes to fail over when the server it talks to is killed.
//!
//! Starts three `cca server --store etcd` (the `cca` binary next to this one, built with the
//! `etcd` feature) on one etcd, and one node agent in this process (simulator runtime) given all
//! three. Then, run after run: `kill -9` of the server the agent uses, and the time until
//!
//! - `switched`: the agent's store client has moved off the killed server (its watch broke, or
//!   a request failed, and it went on to the next server);
//! - `request`: the agent's first successful store request through another server;
//! - `renewal`: its first lease renewal through another server (it renews every third of
//!   `--lease-ttl`, so this includes up to that long of waiting for the next renewal);
//!
//! and whether the node's lease lapsed (`lease/node/n1` gone or re-created). Each kill comes at
//! a random point of the renewal period, so `renewal` is about half the period plus the
//! failover itself. The killed server is restarted before the next run. Prints every run and
//! the medians.
//!
//! ```sh
//! cargo build --release -p ccattler-examples --features etcd --bin cca --bin failover_figures
//! target/release/failover_figures --etcd "$(scripts/etcd-up)" --runs 7
//! ```

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use ccattler_core::{
    Fact, FactStore, Key, Lease, LeaseId, Revision, Scan, StoreError, StoreLimits, Txn,
    TxnResponse, Value,
};
use ccattler_examples::cca::client::{ApiClient, ClientArgs};
use ccattler_examples::cca::spawned::{ServerCommand, ServerProcess};
use ccattler_runtime::agent::{AgentConfig, NodeAgent};
use ccattler_runtime::simulator::SimulatorRuntime;
use ccattler_store::http::HttpStore;
use clap::Parser;
use hyper::Method;
use rand::Rng as _;

/// Measure agent failover between three `cca server --store etcd`.
#[derive(Debug, Parser)]
struct Args {
    /// etcd's client URL (`scripts/etcd-up` prints the test etcd's).
    #[arg(long, default_value = "http://127.0.0.1:2379")]
    etcd: String,
    /// How many servers to kill, one after another.
    #[arg(long, default_value_t = 7)]
    runs: usize,
    /// The agent's lease TTL (it renews every third of it).
    #[arg(long, default_value = "3", value_name = "SECONDS")]
    lease_ttl: u64,
}

/// A successful store request of the agent: when, what, and the server preferred after it.
type Record = (Instant, &'static str, String);

/// The agent's store, recording each successful request.
#[derive(Clone)]
struct Timed {
    inner: HttpStore,
    log: Arc<Mutex<Vec<Record>>>,
}

impl Timed {
    fn note<T>(&self, op: &'static str, result: Result<T, StoreError>) -> Result<T, StoreError> {
        if result.is_ok() {
            let served = self.inner.preferred().to_owned();
            lock(&self.log).push((Instant::now(), op, served));
        }
        result
    }
}

impl FactStore for Timed {
    type Watch = <HttpStore as FactStore>::Watch;

    async fn get(&self, key: &Key) -> Result<Option<Fact>, StoreError> {
        self.note("get", self.inner.get(key).await)
    }
    async fn put(&self, key: &Key, value: Value) -> Result<Revision, StoreError> {
        self.note("put", self.inner.put(key, value).await)
    }
    async fn put_with_lease(
        &self,
        key: &Key,
        value: Value,
        lease: LeaseId,
    ) -> Result<Revision, StoreError> {
        self.note("put", self.inner.put_with_lease(key, value, lease).await)
    }
    async fn delete(&self, key: &Key) -> Result<Option<Fact>, StoreError> {
        self.note("delete", self.inner.delete(key).await)
    }
    async fn scan(&self, prefix: &str) -> Result<Scan, StoreError> {
        self.note("scan", self.inner.scan(prefix).await)
    }
    async fn watch(&self, prefix: &str, start: Revision) -> Result<Self::Watch, StoreError> {
        self.note("watch", self.inner.watch(prefix, start).await)
    }
    async fn txn(&self, txn: Txn) -> Result<TxnResponse, StoreError> {
        self.note("txn", self.inner.txn(txn).await)
    }
    async fn revision(&self) -> Result<Revision, StoreError> {
        self.note("revision", self.inner.revision().await)
    }
    async fn compact(&self, revision: Revision) -> Result<(), StoreError> {
        self.note("compact", self.inner.compact(revision).await)
    }
    async fn grant_lease(&self, ttl: Duration) -> Result<Lease, StoreError> {
        self.note("grant", self.inner.grant_lease(ttl).await)
    }
    async fn keep_alive(&self, lease: LeaseId) -> Result<Duration, StoreError> {
        self.note("renewal", self.inner.keep_alive(lease).await)
    }
    async fn revoke_lease(&self, lease: LeaseId) -> Result<(), StoreError> {
        self.note("revoke", self.inner.revoke_lease(lease).await)
    }
    fn limits(&self) -> StoreLimits {
        self.inner.limits()
    }
}

/// The command that starts one `cca server` on `listen`, on the run's etcd prefix.
fn server_command(
    args: &Args,
    prefix: &str,
    listen: &str,
    dir: &Path,
) -> Result<ServerCommand, String> {
    let command = ServerCommand::next_to_this_program(listen, &dir.join("admin-token"))
        .map_err(|err| err.to_string())?;
    Ok(command.args([
        "--store",
        "etcd",
        "--etcd",
        &args.etcd,
        "--etcd-prefix",
        prefix,
    ]))
}

fn start_server(command: &ServerCommand, args: &Args) -> Result<ServerProcess, String> {
    command
        .start()
        .map_err(|err| format!("{err}; is etcd at {}?", args.etcd))
}

fn free_listen() -> Result<String, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.to_string())
        .map_err(|err| format!("no free port: {err}"))
}

/// A node credential for `n1`, by enrollment through `url`.
async fn credential(url: &str, admin: &str) -> Result<String, String> {
    let admin_client = ApiClient::new(&ClientArgs {
        server: url.to_owned(),
        token: Some(admin.to_owned()),
    });
    let answer = admin_client
        .ok(Method::POST, "/api/tokens", r#"{"ttl": "10m"}"#)
        .await
        .map_err(|err| err.to_string())?;
    let enrollment = answer["token"].as_str().ok_or("no enrollment token")?;
    let anonymous = ApiClient::new(&ClientArgs {
        server: url.to_owned(),
        token: None,
    });
    let body = serde_json::json!({ "token": enrollment, "node": "n1" }).to_string();
    let answer = anonymous
        .ok(Method::POST, "/api/enroll", body)
        .await
        .map_err(|err| err.to_string())?;
    answer["token"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| "no credential".to_owned())
}

fn lock(log: &Mutex<Vec<Record>>) -> MutexGuard<'_, Vec<Record>> {
    log.lock().unwrap_or_else(PoisonError::into_inner)
}

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values.get(values.len() / 2).copied().unwrap_or_default()
}

async fn measure(args: &Args) -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|err| err.to_string())?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let prefix = format!("failover-figures-{nanos}/");
    let mut servers = Vec::new();
    for _ in 0..3 {
        let command = server_command(args, &prefix, &free_listen()?, dir.path())?;
        if !command.binary.exists() {
            return Err(format!(
                "{} is missing: cargo build --release -p ccattler-examples --features etcd --bin cca",
                command.binary.display()
            ));
        }
        servers.push(start_server(&command, args)?);
    }
    let urls: Vec<String> = servers.iter().map(|s| s.url.clone()).collect();
    let admin =
        std::fs::read_to_string(dir.path().join("admin-token")).map_err(|err| err.to_string())?;
    let token = credential(&urls[0], admin.trim()).await?;
    let observer = HttpStore::with_endpoints(urls.clone(), admin.trim());
    let log = Arc::new(Mutex::new(Vec::new()));
    let store = Timed {
        inner: HttpStore::with_endpoints(urls.clone(), token),
        log: Arc::clone(&log),
    };
    let ttl = Duration::from_secs(args.lease_ttl);
    let config = AgentConfig::new("n1", PathBuf::from(dir.path()).join("agent")).lease_ttl(ttl);
    let agent = NodeAgent::new(store.clone(), Arc::new(SimulatorRuntime::new()), config)
        .map_err(|err| err.to_string())?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let agent_task = tokio::spawn(agent.run(async {
        let _ = stopped.await;
    }));
    let lease_key = Key::new("lease/node/n1").map_err(|err| err.to_string())?;

    let (mut switched, mut requests, mut renewals, mut lapses) =
        (Vec::new(), Vec::new(), Vec::new(), 0);
    println!(
        "lease TTL {ttl:?} (renewal every {:?}); {} runs",
        ttl / 3,
        args.runs
    );
    let mut rng = <rand::rngs::SmallRng as rand::SeedableRng>::from_os_rng();
    for run in 1..=args.runs {
        // Settled: the lease key exists and the agent renewed through its preferred server.
        let deadline = Instant::now() + Duration::from_secs(30);
        let created = loop {
            let fact = observer.get(&lease_key).await.ok().flatten();
            let renewed = lock(&log)
                .iter()
                .rev()
                .any(|(at, op, _)| *op == "renewal" && at.elapsed() < ttl / 2);
            if let (Some(fact), true) = (fact, renewed) {
                break fact.create_revision;
            }
            if Instant::now() > deadline {
                return Err("the agent did not register within 30 s".to_owned());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        // Kill at a random point of the renewal period, not right after a renewal.
        let phase = rng.random_range(0..ttl.as_millis() / 3);
        tokio::time::sleep(Duration::from_millis(u64::try_from(phase).unwrap_or(0))).await;
        let victim_url = store.inner.preferred().to_owned();
        let victim = servers
            .iter()
            .position(|s| s.url == victim_url)
            .ok_or("no preferred server")?;
        let killed = Instant::now();
        servers[victim].kill();
        let mut switch = None;
        let (request, renewal) = loop {
            if switch.is_none() && store.inner.preferred() != victim_url {
                switch = Some(killed.elapsed());
            }
            let first = |only: Option<&str>| {
                lock(&log)
                    .iter()
                    .find(|(at, op, served)| {
                        *at > killed && *served != victim_url && only.is_none_or(|o| o == *op)
                    })
                    .map(|(at, _, _)| at.duration_since(killed))
            };
            if let (Some(request), Some(renewal)) = (first(None), first(Some("renewal"))) {
                break (request, renewal);
            }
            if killed.elapsed() > ttl * 3 {
                return Err(format!(
                    "run {run}: no renewal through another server within {:?}",
                    ttl * 3
                ));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        let kept = observer
            .get(&lease_key)
            .await
            .ok()
            .flatten()
            .is_some_and(|f| f.create_revision == created);
        lapses += usize::from(!kept);
        let switch = switch.unwrap_or(request);
        println!(
            "run {run}: killed {victim_url}; switched {switch:?}, request {request:?}, renewal {renewal:?}, lease {}",
            if kept { "kept" } else { "LAPSED" }
        );
        switched.push(switch);
        requests.push(request);
        renewals.push(renewal);
        let command = servers[victim].command.clone();
        servers[victim] = start_server(&command, args)?;
    }
    println!(
        "median of {} runs: switched {:?}, first request through another server {:?}, first renewal through another server {:?}; lease lapses: {lapses}",
        args.runs,
        median(switched),
        median(requests),
        median(renewals)
    );
    let _ = stop.send(());
    let _ = agent_task.await;
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("failover_figures: the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(measure(&args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("failover_figures: {err}");
            ExitCode::FAILURE
        }
    }
}
