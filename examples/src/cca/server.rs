//! `cca server`: the HTTP API and the standard controllers over one store.
//!
//! # Expected flow
//!
//! 1. The store opens: an embedded `MemoryStore` (`--store memory`, the default; everything is
//!    lost at exit) or etcd (`--store etcd --etcd ENDPOINTS`, in builds with the `etcd`
//!    feature).
//! 2. An admin token is set up: read from `--token-file` when that file exists, else generated
//!    and written there (mode 0600), or printed on stdout when no file is given. Only its hash
//!    is stored. With etcd, a server that finds an admin token already stored and has no
//!    `--token-file` generates none.
//! 3. The standard controllers run; on etcd under leader election (`leader/cca-controllers`),
//!    so several servers can share one etcd and exactly one runs the controllers. Each server
//!    registers as a replica (`runner/replica/{id}`, under a lease; see [`super::replica`]) and,
//!    on etcd, logs every leadership change ([`super::leadership`]); `cca status` shows both.
//! 4. The API (see [`super::api`]) is served on `--listen` until Ctrl-C or SIGTERM, with
//!    `GET /metrics` (admin token) in Prometheus' text format: the runner's, the store's
//!    (every call through [`ccattler_store::Metered`]), the API's and the scheduler's metrics
//!    (the table: [`ccattler_core::telemetry`]).
//!    `listening on http://ADDR` is printed on stdout once it accepts connections.
//! 5. With `--dns ADDR`, it also answers DNS there (UDP and TCP) for the services' ready
//!    endpoints: `web.service.cca` (the domain is `--dns-domain`) as A, AAAA and SRV records,
//!    followed from the store ([`ccattler_runtime::dns::DnsServer`]); `answering DNS on ADDR` is
//!    printed on stdout once it does.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use ccattler_controllers::standard;
use ccattler_core::runner::{LeaderElection, TokioRunner};
use ccattler_core::{FactStore, Runner};
use ccattler_runtime::dns::{DnsConfig, DnsServer};
use tokio::net::TcpListener;
use tokio::signal::unix::{SignalKind, signal};

use super::CliError;
use super::api::auth::{self, Role, TokenRecord};
use super::api::{self, ApiConfig};

/// Which store `cca server` uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum StoreKind {
    /// An embedded in-memory store (lost at exit).
    #[default]
    Memory,
    /// etcd (builds with the `etcd` feature).
    Etcd,
}

/// Arguments of `cca server`.
#[derive(Debug, clap::Args)]
#[command(
    long_about = "Serve the HTTP API and run the standard controllers over one store. \
    Routes (bearer token on all but /api/enroll): GET /state?prefix=, QUERY /state \
    (POST /state/query), PUT|DELETE /state/{key}, APPLY /config (POST /config), WATCH /changes \
    (GET /changes, server-sent events), GET /api/status, GET /api/nodes, POST /api/tokens, \
    POST /api/enroll, GET /metrics (Prometheus text format, admin token). Errors are JSON: {\"error\": ...}."
)]
pub struct ServerArgs {
    /// Address to listen on (port 0 picks a free port; the address is printed).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7420")]
    pub listen: SocketAddr,
    /// The store.
    #[arg(long, value_enum, default_value_t = StoreKind::Memory)]
    pub store: StoreKind,
    /// etcd endpoints, comma-separated (with --store etcd).
    #[arg(
        long,
        value_name = "URLS",
        value_delimiter = ',',
        default_value = "http://127.0.0.1:2379"
    )]
    pub etcd: Vec<String>,
    /// Keep every key under this prefix in etcd (empty, or ending with `/`).
    #[arg(long, value_name = "PREFIX", default_value = "")]
    pub etcd_prefix: String,
    /// The admin token's file: read when it exists, else created with a new token.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// The largest request body accepted, in bytes; larger ones get 413.
    #[arg(long, value_name = "BYTES", default_value_t = 1 << 20)]
    pub max_body: usize,
    /// Enrollment attempts allowed per client address and minute; more get 429.
    #[arg(long, value_name = "N", default_value_t = 30)]
    pub enroll_per_minute: u32,
    /// This server's name among the replicas and in the leader election (one key segment);
    /// `{host name}:{port}` by default.
    #[arg(long, value_name = "NAME")]
    pub replica_id: Option<String>,
    /// Also answer DNS on this address (UDP and TCP) for the services' ready endpoints:
    /// `SVC.service.DOMAIN` as A, AAAA and SRV records (port 0 picks a free port).
    #[arg(long, value_name = "ADDR")]
    pub dns: Option<SocketAddr>,
    /// The domain DNS names sit under (with --dns).
    #[arg(long, value_name = "DOMAIN", default_value = "cca")]
    pub dns_domain: String,
    /// Seconds a resolver may cache a DNS answer (with --dns): short, so that clients leave an
    /// endpoint soon after it stops being ready.
    #[arg(long, value_name = "SECONDS", default_value_t = 5)]
    pub dns_ttl: u32,
}

impl ServerArgs {
    /// This server's replica id: `--replica-id`, else `{host name}:{port}` (with port 0,
    /// `{host name}:0-{process id}`, as the port is not known yet).
    pub fn replica_id(&self) -> String {
        match (&self.replica_id, self.listen.port()) {
            (Some(id), _) => id.clone(),
            (None, 0) => format!("{}-{}", super::replica::default_id(0), std::process::id()),
            (None, port) => super::replica::default_id(port),
        }
    }

    /// A failure to start, naming this server.
    fn cannot_start(&self, reason: impl Into<String>) -> CliError {
        CliError::ServerStart {
            listen: self.listen,
            reason: reason.into(),
        }
    }
}

/// Runs `cca server`; see the [module docs](self).
///
/// # Errors
///
/// [`CliError`] when the store, the token file or the listener cannot be set up.
pub fn run(args: &ServerArgs) -> Result<ExitCode, CliError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|err| args.cannot_start(format!("the async runtime: {err}")))?;
    if ccattler_core::schema::keys::replica(&args.replica_id()).is_err() {
        return Err(args.cannot_start(format!(
            "the replica id {:?} is not one key segment; give --replica-id without `/`",
            args.replica_id()
        )));
    }
    runtime.block_on(async {
        match args.store {
            StoreKind::Memory => {
                let store = ccattler_store::Metered::new(ccattler_store::MemoryStore::new());
                let runner = TokioRunner::new(store.clone());
                serve(args, store, runner, "memory").await
            }
            StoreKind::Etcd => etcd(args).await,
        }
    })
}

#[cfg(feature = "etcd")]
async fn etcd(args: &ServerArgs) -> Result<ExitCode, CliError> {
    use ccattler_core::runner::{LeaseElection, LeaseElectionConfig};
    let config =
        ccattler_store::EtcdConfig::new(args.etcd.clone()).prefix(args.etcd_prefix.clone());
    let store = ccattler_store::EtcdStore::connect(config)
        .await
        .map_err(|err| {
            args.cannot_start(format!(
                "cannot connect to etcd (--etcd {}): {err}",
                args.etcd.join(",")
            ))
        })?;
    let store = ccattler_store::Metered::new(store);
    let key = ccattler_core::Key::new(super::replica::LEADER_KEY)
        .map_err(|err| args.cannot_start(err.to_string()))?;
    let identity = args.replica_id();
    let election = LeaseElection::new(store.clone(), LeaseElectionConfig::new(key, identity));
    let runner = TokioRunner::new(store.clone()).with_election(election);
    serve(args, store, runner, "etcd").await
}

#[cfg(not(feature = "etcd"))]
async fn etcd(args: &ServerArgs) -> Result<ExitCode, CliError> {
    Err(args
        .cannot_start("this cca was built without etcd support; rebuild with `--features etcd`"))
}

async fn serve<S, E>(
    args: &ServerArgs,
    store: S,
    mut runner: TokioRunner<S, E>,
    kind: &str,
) -> Result<ExitCode, CliError>
where
    S: FactStore + Clone,
    E: LeaderElection,
{
    let mut interrupt = signal(SignalKind::interrupt())
        .map_err(|err| args.cannot_start(format!("listening for signals: {err}")))?;
    let mut terminate = signal(SignalKind::terminate())
        .map_err(|err| args.cannot_start(format!("listening for signals: {err}")))?;
    let metrics = super::metrics::install().map_err(|err| CliError::Start(err.to_string()))?;
    super::metrics::spawn_upkeep(metrics);
    admin_token(&store, args.token_file.as_deref())
        .await
        .map_err(|err| match err {
            CliError::Start(reason) => args.cannot_start(reason),
            other => other,
        })?;

    for controller in standard::all() {
        runner = runner.controller_arc(controller);
    }
    let (stop_runner, runner_stopped) = tokio::sync::oneshot::channel::<()>();
    let runner_task = tokio::spawn(async move {
        runner
            .run(async {
                let _ = runner_stopped.await;
            })
            .await
    });

    let listener = TcpListener::bind(args.listen)
        .await
        .map_err(|err| args.cannot_start(format!("cannot listen on {}: {err}", args.listen)))?;
    let addr = listener
        .local_addr()
        .map_err(|err| args.cannot_start(err.to_string()))?;
    let id = args.replica_id();
    println!("cca server: listening on http://{addr} (store: {kind}, replica: {id})");
    let _ = std::io::stdout().flush();
    let elected = kind == "etcd";
    let record = super::replica::ReplicaRecord::new(id.clone(), format!("http://{addr}"), elected);
    let (stop_replica, replica_stopped) = tokio::sync::oneshot::channel::<()>();
    let replica_task = tokio::spawn(super::replica::register(store.clone(), record, async {
        let _ = replica_stopped.await;
    }));
    let leader_task = elected.then(|| {
        let key = ccattler_core::Key::new(super::replica::LEADER_KEY);
        let (store, id) = (store.clone(), id.clone());
        tokio::spawn(async move {
            match key {
                Ok(key) => super::leadership::follow(store, key, id, std::future::pending()).await,
                Err(err) => tracing::error!("the leader key: {err}"),
            }
        })
    });

    let dns = match args.dns {
        Some(listen) => Some(dns(args, listen, store.clone()).await?),
        None => None,
    };

    let (stop_api, api_stopped) = tokio::sync::oneshot::channel::<()>();
    let config = ApiConfig {
        max_body: args.max_body,
        enroll_per_minute: args.enroll_per_minute,
    };
    let mut api_task = tokio::spawn(api::serve(store, config, listener, async {
        let _ = api_stopped.await;
    }));
    let outcome = tokio::select! {
        _ = interrupt.recv() => Ok(ExitCode::SUCCESS),
        _ = terminate.recv() => Ok(ExitCode::SUCCESS),
        served = &mut api_task => Err(CliError::Cluster(format!("the API stopped: {served:?}"))),
    };
    eprintln!("cca server: stopping");
    let _ = stop_api.send(());
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), &mut api_task).await;
    api_task.abort();
    let _ = stop_runner.send(());
    if let Ok(Err(err)) = runner_task.await {
        eprintln!("the controllers stopped with an error: {err}");
    }
    if let Some(task) = leader_task {
        task.abort();
    }
    let _ = stop_replica.send(());
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), replica_task).await;
    if let Some(dns) = dns {
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), dns.shutdown()).await;
    }
    outcome
}

/// Starts answering DNS on `listen`; prints where once it does.
async fn dns<S: FactStore + Clone + Send + Sync + 'static>(
    args: &ServerArgs,
    listen: SocketAddr,
    store: S,
) -> Result<DnsServer, CliError> {
    let mut config = DnsConfig::new(listen);
    config.domain = args.dns_domain.clone();
    config.ttl = args.dns_ttl;
    let server = DnsServer::start(store, config)
        .await
        .map_err(|err| args.cannot_start(format!("--dns: {err}")))?;
    // Not `println!`: a reader that closed stdout after the first line must not stop the server.
    let mut stdout = std::io::stdout();
    let _ = writeln!(
        stdout,
        "cca server: answering DNS on {} (udp, tcp) for SVC.service.{}",
        server.local_addr(),
        args.dns_domain
    );
    let _ = stdout.flush();
    Ok(server)
}

/// Sets up the admin token; see the [module docs](self).
async fn admin_token<S: FactStore>(store: &S, file: Option<&Path>) -> Result<(), CliError> {
    let store_error = |err: ccattler_core::StoreError| CliError::Start(format!("the store: {err}"));
    if let Some(path) = file
        && path.exists()
    {
        let token = std::fs::read_to_string(path).map_err(|source| CliError::Read {
            path: path.to_owned(),
            source,
        })?;
        let token = token.trim();
        if token.is_empty() {
            return Err(CliError::Start(format!("{} is empty", path.display())));
        }
        auth::store_token(store, token, Role::Admin, None)
            .await
            .map_err(store_error)?;
        return Ok(());
    }
    if file.is_none() {
        let existing = store.scan(auth::TOKENS).await.map_err(store_error)?;
        let has_admin = existing.facts.iter().any(|fact| {
            serde_json::from_slice::<TokenRecord>(&fact.value).is_ok_and(|r| r.role == Role::Admin)
        });
        if has_admin {
            eprintln!("cca server: an admin token exists already (give --token-file to add one)");
            return Ok(());
        }
    }
    let token = auth::generate_token();
    auth::store_token(store, &token, Role::Admin, None)
        .await
        .map_err(store_error)?;
    match file {
        Some(path) => write_secret(path, &token)?,
        None => println!("admin token: {token}"),
    }
    Ok(())
}

/// Writes `token` to a new file at `path`, readable by its owner only (mode 0600).
///
/// # Errors
///
/// [`CliError::Write`] when the file exists already or cannot be written.
pub fn write_secret(path: &Path, token: &str) -> Result<(), CliError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let write = || -> std::io::Result<()> {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)?;
        writeln!(file, "{token}")
    };
    write().map_err(|source| CliError::Write {
        path: path.to_owned(),
        source,
    })
}
