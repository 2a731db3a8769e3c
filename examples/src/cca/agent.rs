//! `cca agent`: one node's agent, talking to `cca server` over HTTP.
//!
//! # Expected flow
//!
//! 1. The node's credential is found: `--token` when given; else the credential saved in
//!    `{state-dir}/credential` by an earlier start; else `--enroll TOKEN` exchanges a one-time
//!    enrollment token (from `cca token create`) for a credential at `POST /api/enroll`, and
//!    saves it there (mode 0600), so a restarted agent needs no new token.
//!    Enrollment goes to the first server that answers.
//! 2. The credential is checked with one request: a refused credential stops the agent with
//!    exit 1; an unreachable server does not (the agent keeps running what its cache says and
//!    connects when the server comes).
//!
//! `--server` takes several servers of one cluster (`--store etcd` servers on one etcd),
//! repeated or comma-separated, and a host name that resolves to several addresses stands for
//! each of them (resolved once, at start). The agent sticks to one server and fails over to the
//! next at once when it fails (see `ccattler_store::http` for the policy): its lease, its
//! credential and its watch are the shared store's, so they carry over.
//! 3. The standard `NodeAgent` runs over an [`HttpStore`]: it registers the node under a lease
//!    (`--lease-ttl`), follows its placements, runs them on the runtime (`--runtime process`
//!    under `{state-dir}/runtime`, `containerd`, or `sim`) and reports what runs.
//! 4. Meanwhile the agent serves its node's state (`GET /node`) and its metrics (`GET /metrics`)
//!    on `--local-addr` (see [`super::local`]), whether or not the server is reachable.
//! 5. Beside it, a `FirewallKeeper` applies the node's network rules (`network/node/{node}`,
//!    from the cluster's `network` policy) as one nftables table and reports them in
//!    `observed/network/{node}` (`--firewall off`: not at all).
//! 6. Ctrl-C or SIGTERM stops the agent. Workloads and their network rules stay: a restarted
//!    agent (same `--state-dir`) adopts them again, and an agent that stays away past its lease
//!    has its instances replaced elsewhere by the controllers.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use ccattler_core::schema::{Cpu, Memory};
use ccattler_core::{FactStore, Runtime, StoreError};
use ccattler_runtime::agent::{AgentConfig, NodeAgent};
use ccattler_runtime::firewall::{FirewallKeeper, Nftables};
use ccattler_runtime::process::{ProcessConfig, ProcessRuntime};
use ccattler_runtime::simulator::SimulatorRuntime;
use ccattler_store::http::{HttpStore, resolve_endpoints};
use hyper::Method;
use tokio::signal::unix::{SignalKind, signal};

use super::client::{ApiClient, ClientArgs, DEFAULT_SERVER, SERVER_ENV};
use super::flags::{
    parse_cpu, parse_label, parse_memory, parse_port_range, parse_time, parse_zone,
};
use super::server::write_secret;
use super::{CliError, EXIT_FAILURE};

/// The runtime `cca agent` runs instances on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum AgentRuntime {
    /// Each instance's command as a real process (no root needed; the image is ignored).
    #[default]
    Process,
    /// containerd (builds with the `containerd` feature; see --containerd-socket).
    Containerd,
    /// Nothing runs; instances are simulated in memory.
    Sim,
}

/// How `cca agent --runtime containerd` networks its containers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum AgentNetwork {
    /// A network namespace per container through the CNI plugins (bridge, host-local, portmap,
    /// loopback): the container listens on its declared ports, mapped from its host ports.
    #[default]
    Cni,
    /// Containers with ports share the node's network and listen on their host ports.
    Host,
}

/// How `cca agent` enforces its node's network rules.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum AgentFirewall {
    /// One nftables table of the node's own, replaced atomically with `nft -f`.
    #[default]
    Nft,
    /// Nothing is enforced (and nothing is reported in `observed/network/`).
    Off,
}

/// Arguments of `cca agent`.
#[derive(Debug, clap::Args)]
#[command(
    long_about = "Run one node's agent against `cca server`: register the node under a \
    lease, run the instances placed on it and report what runs. Authenticate with --token \
    (a node credential), or enroll once with --enroll (a one-time token from \
    `cca token create`); the credential is kept in --state-dir for later starts. Ctrl-C stops \
    the agent and leaves the workloads running for the next start to adopt."
)]
pub struct AgentArgs {
    /// The API servers' base URLs, in order of preference: repeat the flag or separate them
    /// with commas; a host name resolving to several addresses stands for each.
    #[arg(
        long,
        value_name = "URL",
        env = SERVER_ENV,
        default_value = DEFAULT_SERVER,
        value_delimiter = ','
    )]
    pub server: Vec<String>,
    /// This node's credential (not an admin token: `CCATTLER_TOKEN`, which the client
    /// commands read, is ignored here).
    #[arg(
        long,
        value_name = "TOKEN",
        env = "CCATTLER_NODE_TOKEN",
        hide_env_values = true
    )]
    pub token: Option<String>,
    /// A one-time enrollment token, exchanged at first start for a credential saved in
    /// --state-dir.
    #[arg(long, value_name = "TOKEN", conflicts_with = "token")]
    pub enroll: Option<String>,
    /// The node's name (one key segment).
    #[arg(long, value_name = "NAME")]
    pub node: String,
    /// Where the agent keeps its credential, its cache of desired state and its instances'
    /// directories (logs, files); `./cca-agent-{node}` by default.
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// The runtime instances run on.
    #[arg(long, value_enum, default_value_t = AgentRuntime::Process)]
    pub runtime: AgentRuntime,
    /// containerd's socket (with --runtime containerd).
    #[arg(
        long,
        value_name = "PATH",
        default_value = "/run/containerd/containerd.sock"
    )]
    pub containerd_socket: PathBuf,
    /// The containerd namespace instances live in (with --runtime containerd).
    #[arg(long, value_name = "NAME", default_value = "ccattler")]
    pub containerd_namespace: String,
    /// When images are pulled from their registry (with --runtime containerd): if-not-present,
    /// always (ask the registry at every container creation), or never (imported images only).
    #[arg(long, value_enum, value_name = "POLICY", default_value_t = AgentPullPolicy::IfNotPresent)]
    pub pull_policy: AgentPullPolicy,
    /// Registry credentials (with --runtime containerd): JSON like docker's config.json,
    /// `{"auths": {"HOST[:PORT]": {"auth": "BASE64(user:password)"}}}`, or `"username"` and
    /// `"password"` in place of `"auth"`. Read again at every pull.
    #[arg(long, value_name = "FILE")]
    pub registry_credentials: Option<PathBuf>,
    /// A registry spoken to over plain HTTP instead of HTTPS (with --runtime containerd), as image
    /// references name it; repeatable. Only for registries on a trusted network.
    #[arg(long = "insecure-registry", value_name = "HOST[:PORT]")]
    pub insecure_registries: Vec<String>,
    /// Allocatable CPU (`2`, `500m`); this machine's cores by default.
    #[arg(long, value_name = "CPU", value_parser = parse_cpu)]
    pub cpu: Option<Cpu>,
    /// Allocatable memory (`2Gi`); this machine's memory by default.
    #[arg(long, value_name = "MEMORY", value_parser = parse_memory)]
    pub memory: Option<Memory>,
    /// Storage offered to volumes (`100Gi`); their data is kept under the state directory. By
    /// default the space free on that directory's filesystem when the agent starts. A volume's
    /// size is reserved of it; no quota is set on a volume's directory.
    #[arg(long, value_name = "SIZE", value_parser = parse_memory)]
    pub storage: Option<Memory>,
    /// The node's zone.
    #[arg(long, value_name = "ZONE", value_parser = parse_zone)]
    pub zone: Option<String>,
    /// The node's labels (`--labels disk=ssd,tier=web`).
    #[arg(long, value_name = "K=V", value_delimiter = ',', value_parser = parse_label)]
    pub labels: Vec<(String, String)>,
    /// Taints: only services that `accept` them are placed here (`--taints gpu,spot`).
    #[arg(long, value_name = "TAINT", value_delimiter = ',')]
    pub taints: Vec<String>,
    /// The address other hosts reach this node's instances at. Default: the local address of
    /// this host's route to the first server that has one (loopback only when the server is on
    /// loopback).
    #[arg(long, value_name = "ADDR")]
    pub address: Option<String>,
    /// The host ports the scheduler gives to this node's instances for their declared ports
    /// (`expose`); nothing else on the host should listen in this range.
    #[arg(long, value_name = "FIRST-LAST", default_value = "20000-29999", value_parser = parse_port_range)]
    pub ports: ccattler_core::schema::PortRange,
    /// How long the node stays alive without reaching the server; past it, its instances are
    /// replaced elsewhere.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_time)]
    pub lease_ttl: Duration,
    /// How long an instance gets between SIGTERM and SIGKILL when it is stopped.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_time)]
    pub stop_grace: Duration,
    /// How often the secrets this node's instances use are fetched again: a changed secret
    /// reaches them within about this long (a mounted file is rewritten in place, an
    /// environment variable restarts the instance).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_time)]
    pub secret_refresh: Duration,
    /// Where the agent serves its node's state (`GET /node`, JSON) and its metrics (`GET
    /// /metrics`), also while the server is unreachable; 127.0.0.1:7421 by default (no token:
    /// keep it on loopback).
    #[arg(long, value_name = "ADDR")]
    pub local_addr: Option<std::net::SocketAddr>,
    /// How the node's network rules (from the cluster's `network` policy) are enforced: `nft`
    /// applies them as one nftables table of the node's own (`inet ccattler_{node}`; needs
    /// nftables and root or CAP_NET_ADMIN), `off` enforces nothing.
    #[arg(long, value_enum, value_name = "HOW", default_value_t = AgentFirewall::Nft)]
    pub firewall: AgentFirewall,
    /// How containers are networked (with --runtime containerd): `cni`, a network namespace per
    /// container through the CNI plugins in /usr/lib/cni or /opt/cni/bin (Debian:
    /// containernetworking-plugins; needs root and iptables), or `host`, the node's network.
    #[arg(long, value_enum, value_name = "HOW", default_value_t = AgentNetwork::Cni)]
    pub network: AgentNetwork,
    /// The bridge containers are plugged into (with --network cni).
    #[arg(long, value_name = "NAME", default_value = "cca0")]
    pub cni_bridge: String,
    /// The containers' addresses on this node (with --network cni).
    #[arg(long, value_name = "CIDR", default_value = "10.88.0.0/16")]
    pub cni_subnet: String,
}

impl AgentArgs {
    /// A failure to start, naming this agent's node.
    fn cannot_start(&self, reason: impl Into<String>) -> CliError {
        CliError::AgentStart {
            node: self.node.clone(),
            reason: reason.into(),
        }
    }

    fn state_dir(&self) -> PathBuf {
        self.state_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from(format!("cca-agent-{}", self.node)))
    }

    /// The agent's configuration.
    pub fn config(&self) -> AgentConfig {
        let mut config = AgentConfig::new(self.node.clone(), self.state_dir().join("agent"))
            .lease_ttl(self.lease_ttl)
            .stop_grace(self.stop_grace)
            .secret_refresh_interval(self.secret_refresh);
        if let Some(cpu) = self.cpu {
            config.cpu = cpu;
        }
        if let Some(memory) = self.memory {
            config.memory = memory;
        }
        if let Some(storage) = self.storage {
            config.storage = storage;
        }
        if let Some(zone) = &self.zone {
            config = config.zone(zone.clone());
        }
        for (key, value) in &self.labels {
            config = config.label(key.clone(), value.clone());
        }
        config.taints.clone_from(&self.taints);
        if let Some(address) = &self.address {
            config.address.clone_from(address);
        }
        config.ports = self.ports;
        config
    }
}

/// Runs `cca agent`; see the [module docs](self).
///
/// # Errors
///
/// [`CliError`] when the state directory, the credential or the runtime cannot be set up.
pub fn run(args: &AgentArgs) -> Result<ExitCode, CliError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|err| args.cannot_start(format!("the async runtime: {err}")))?;
    runtime.block_on(async {
        let dir = args.state_dir();
        std::fs::create_dir_all(&dir).map_err(|source| CliError::Write {
            path: dir.clone(),
            source,
        })?;
        let servers = resolve_endpoints(&args.server).await;
        if servers.is_empty() {
            return Err(args.cannot_start("no server: give --server URL (one or more)"));
        }
        let token = credential(args, &dir, &servers).await?;
        let store = HttpStore::with_endpoints(servers.clone(), token);
        match store.revision().await {
            Err(StoreError::Denied(message)) => {
                eprintln!("cca agent: the server refused this node's credential: {message}");
                return Ok(ExitCode::from(EXIT_FAILURE));
            }
            Err(err) => eprintln!(
                "cca agent: {} not reachable yet ({err}); running from the cache meanwhile",
                servers.join(", ")
            ),
            Ok(_) => {}
        }
        let config = advertised(args, &store).await;
        match args.runtime {
            AgentRuntime::Process => {
                let root = dir.join("runtime");
                // Instances are reported at the address the node advertises.
                let process = ProcessConfig::default().host(config.address.clone());
                let runtime = ProcessRuntime::with_config(&root, process).map_err(|err| {
                    args.cannot_start(format!("the process runtime in {}: {err}", root.display()))
                })?;
                serve(args, config, store, Arc::new(runtime)).await
            }
            AgentRuntime::Sim => {
                let runtime = SimulatorRuntime::on_host(config.address.clone());
                serve(args, config, store, Arc::new(runtime)).await
            }
            AgentRuntime::Containerd => containerd(args, config, store).await,
        }
    })
}

/// `--pull-policy`: when the containerd runtime pulls images.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum AgentPullPolicy {
    /// Pull an image that is not in containerd's store.
    IfNotPresent,
    /// Ask the registry at every container creation.
    Always,
    /// Never pull; run imported images only.
    Never,
}

#[cfg(feature = "containerd")]
async fn containerd(
    args: &AgentArgs,
    agent: AgentConfig,
    store: HttpStore,
) -> Result<ExitCode, CliError> {
    use ccattler_runtime::cni::CniConfig;
    use ccattler_runtime::containerd::{
        ContainerNetwork, ContainerdConfig, ContainerdRuntime, PullPolicy, RegistryCredentials,
    };
    let network = match args.network {
        AgentNetwork::Cni => ContainerNetwork::Cni(
            CniConfig::default()
                .state_dir(args.state_dir().join("cni"))
                .bridge(args.cni_bridge.clone())
                .subnet(args.cni_subnet.clone()),
        ),
        AgentNetwork::Host => ContainerNetwork::Host,
    };
    let mut config = ContainerdConfig::default()
        .state_dir(args.state_dir().join("containerd"))
        .network(network)
        .host(agent.address.clone())
        .pull_policy(match args.pull_policy {
            AgentPullPolicy::IfNotPresent => PullPolicy::IfNotPresent,
            AgentPullPolicy::Always => PullPolicy::Always,
            AgentPullPolicy::Never => PullPolicy::Never,
        });
    if let Some(file) = &args.registry_credentials {
        // Checked now, so that a bad file stops the start rather than every pull.
        RegistryCredentials::load(file).map_err(|err| args.cannot_start(err.to_string()))?;
        config = config.registry_credentials(file);
    }
    for registry in &args.insecure_registries {
        config = config.insecure_registry(registry);
    }
    let runtime =
        ContainerdRuntime::connect(&args.containerd_socket, &args.containerd_namespace, config)
            .await
            .map_err(|err| {
                args.cannot_start(format!(
                    "containerd at {}: {err}",
                    args.containerd_socket.display()
                ))
            })?;
    serve(args, agent, store, Arc::new(runtime)).await
}

#[cfg(not(feature = "containerd"))]
async fn containerd(
    args: &AgentArgs,
    _agent: AgentConfig,
    _store: HttpStore,
) -> Result<ExitCode, CliError> {
    Err(args.cannot_start(
        "this cca was built without containerd support; rebuild with `--features containerd`",
    ))
}

/// The agent's configuration from its flags. Without `--address`, the node advertises the local
/// address of its route to the first server (loopback only when that server is on loopback).
async fn advertised(args: &AgentArgs, store: &HttpStore) -> AgentConfig {
    let mut config = args.config();
    if args.address.is_none()
        && let Some(source) = super::route::route_source(store.endpoints()).await
    {
        config.address = source.to_string();
    }
    config
}

async fn serve<R: Runtime>(
    args: &AgentArgs,
    config: AgentConfig,
    store: HttpStore,
    runtime: Arc<R>,
) -> Result<ExitCode, CliError> {
    let mut interrupt = signal(SignalKind::interrupt())
        .map_err(|err| args.cannot_start(format!("listening for signals: {err}")))?;
    let mut terminate = signal(SignalKind::terminate())
        .map_err(|err| args.cannot_start(format!("listening for signals: {err}")))?;
    let address = config.address.clone();
    let servers = store.endpoints().join(", ");
    let firewall_store = store.clone();
    let agent =
        NodeAgent::new(store, runtime, config).map_err(|err| args.cannot_start(err.to_string()))?;
    let runtime_name = clap::ValueEnum::to_possible_value(&args.runtime).map_or_else(
        || format!("{:?}", args.runtime),
        |v| v.get_name().to_owned(),
    );
    println!(
        "cca agent: node {} at {address} following {servers} (runtime: {runtime_name})",
        args.node
    );
    let _ = std::io::Write::flush(&mut std::io::stdout());
    let snapshots = super::local::start(args.local_addr).await?;
    let firewall = match args.firewall {
        AgentFirewall::Nft => Some(tokio::spawn(
            FirewallKeeper::new(firewall_store, &args.node, Nftables::new(&args.node))
                .map_err(|err| args.cannot_start(err.to_string()))?
                .run(std::future::pending()),
        )),
        AgentFirewall::Off => None,
    };
    let stopped = agent
        .run_publishing(
            async {
                tokio::select! {
                    _ = interrupt.recv() => {}
                    _ = terminate.recv() => {}
                }
            },
            snapshots,
        )
        .await;
    // The table stays in force: the rules go with the workloads they guard.
    if let Some(firewall) = firewall {
        firewall.abort();
    }
    stopped.map_err(|err| CliError::Cluster(format!("the agent stopped: {err}")))?;
    eprintln!("cca agent: stopped; the workloads and their network rules stay");
    Ok(ExitCode::SUCCESS)
}

/// The node's credential; see the [module docs](self).
async fn credential(args: &AgentArgs, dir: &Path, servers: &[String]) -> Result<String, CliError> {
    if let Some(token) = &args.token {
        return Ok(token.clone());
    }
    let saved = dir.join("credential");
    if saved.exists() {
        let token = std::fs::read_to_string(&saved).map_err(|source| CliError::Read {
            path: saved.clone(),
            source,
        })?;
        return Ok(token.trim().to_owned());
    }
    let Some(enrollment) = &args.enroll else {
        return Err(args.cannot_start(format!(
            "no credential: give --token, or --enroll with a one-time token from \
             `cca token create` (no credential is saved in {})",
            dir.display()
        )));
    };
    let token = enroll(servers, enrollment, &args.node, None).await?.token;
    write_secret(&saved, &token)?;
    eprintln!(
        "cca agent: enrolled node {}; credential saved in {}",
        args.node,
        saved.display()
    );
    Ok(token)
}

/// A node credential got by [`enroll`].
#[derive(Debug)]
pub struct Enrolled {
    /// The node's credential.
    pub token: String,
    /// How many times a server answered "retry in N s" before it enrolled the node.
    pub refusals: u32,
}

/// Trades the one-time `enrollment` token for a credential of node `node` at the first of
/// `servers` that answers (enrollment tokens live in the shared store: any server redeems
/// them), connecting from the local address `source` when given (else the system's choice).
/// A server that answers "retry in N s" (too many enrollments at once) is asked again after
/// that long and up to a second more (so that agents started together do not come back
/// together), for as long as it says so: a refusal to retry is no reason to exit.
///
/// # Errors
///
/// [`CliError::Api`] when a server refuses the token (unknown, expired, already used) or
/// answers without a credential; [`CliError::AgentStart`] when no server answers.
pub async fn enroll(
    servers: &[String],
    enrollment: &str,
    node: &str,
    source: Option<std::net::IpAddr>,
) -> Result<Enrolled, CliError> {
    let body = serde_json::json!({ "token": enrollment, "node": node }).to_string();
    let mut unreachable = Vec::new();
    let mut refusals = 0;
    for server in servers {
        let mut client = ApiClient::new(&ClientArgs {
            server: server.clone(),
            token: None,
        });
        if let Some(source) = source {
            client = client.from_address(source);
        }
        loop {
            match client.json(Method::POST, "/api/enroll", body.clone()).await {
                Ok(Err(failure)) if failure.retry_after().is_some() => {
                    refusals += 1;
                    let wait = failure.retry_after().unwrap_or_default() + spread_out();
                    eprintln!(
                        "cca agent: enrolling {node}: {}; asking again in {:.1} s",
                        failure.message(),
                        wait.as_secs_f64()
                    );
                    tokio::time::sleep(wait).await;
                }
                Ok(answer) => {
                    let answer = answer.map_err(|failure| {
                        CliError::Api(format!("enrolling: {}", failure.message()))
                    })?;
                    let token = answer
                        .get("token")
                        .and_then(serde_json::Value::as_str)
                        .ok_or_else(|| {
                            CliError::Api("enrolling: the answer has no token".to_owned())
                        })?;
                    return Ok(Enrolled {
                        token: token.to_owned(),
                        refusals,
                    });
                }
                Err(err) => {
                    unreachable.push(err.to_string());
                    break;
                }
            }
        }
    }
    Err(CliError::AgentStart {
        node: node.to_owned(),
        reason: format!(
            "cannot enroll: no server answered ({}); start a server or check --server",
            unreachable.join("; ")
        ),
    })
}

/// A random wait of up to a second.
fn spread_out() -> Duration {
    use rand::{Rng as _, SeedableRng as _};
    let mut rng = rand::rngs::SmallRng::from_os_rng();
    Duration::from_millis(rng.random_range(0..1_000))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_parse_into_an_agent_config() {
        use clap::Parser;
        let cli = super::super::Cli::try_parse_from([
            "cca",
            "agent",
            "--node",
            "n7",
            "--token",
            "t",
            "--cpu",
            "500m",
            "--memory",
            "1Gi",
            "--zone",
            "b",
            "--labels",
            "disk=ssd",
            "--taints",
            "gpu",
            "--lease-ttl",
            "3s",
        ])
        .expect("valid flags");
        let super::super::Command::Agent(args) = cli.command else {
            panic!("agent");
        };
        let config = args.config();
        assert_eq!(config.node, "n7");
        assert_eq!(config.cpu, Cpu::from_millis(500));
        assert_eq!(config.zone.as_deref(), Some("b"));
        assert_eq!(config.labels.get("disk").map(String::as_str), Some("ssd"));
        assert_eq!(config.taints, ["gpu"]);
        assert_eq!(config.lease_ttl, Duration::from_secs(3));
        assert!(config.cache_dir.ends_with("cca-agent-n7/agent"));
    }

    #[test]
    fn servers_are_repeated_or_comma_separated() {
        use clap::Parser;
        let cli = super::super::Cli::try_parse_from([
            "cca",
            "agent",
            "--node",
            "n1",
            "--server",
            "http://a:7420,http://b:7420",
            "--server",
            "http://c:7420",
        ])
        .expect("valid flags");
        let super::super::Command::Agent(args) = cli.command else {
            panic!("agent");
        };
        assert_eq!(
            args.server,
            ["http://a:7420", "http://b:7420", "http://c:7420"]
        );
    }

    #[test]
    fn token_and_enroll_exclude_each_other() {
        use clap::Parser;
        let both = [
            "cca", "agent", "--node", "n", "--token", "a", "--enroll", "b",
        ];
        assert!(super::super::Cli::try_parse_from(both).is_err());
    }
}
