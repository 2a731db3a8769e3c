//! Test support: where the shared test etcd is, how to start private etcd processes (one member
//! or a cluster) on loopback, and the project rule for tests that cannot find etcd.
//!
//! # The rule
//!
//! A test that needs etcd and cannot get it calls [`skip_or_fail`]: with `CI=true` that panics
//! (the test fails loudly); run by hand, it prints that the test was skipped, and the test
//! returns. It never passes silently.
//!
//! # Where etcd is
//!
//! `scripts/etcd-up` starts one member and writes its endpoint to [`ENDPOINT_FILE`];
//! [`ENDPOINTS_ENV`] (comma-separated URLs) overrides the file. Tests that compact the history
//! or kill members start their own with [`EtcdCluster::start`] instead: it runs `etcd` (from
//! `PATH`, or [`BINARY_ENV`]) on free loopback ports with data under `/tmp/ccattler-etcd/`, and
//! kills every process it started when dropped, also when the test panics.

use std::ffi::OsString;
use std::fmt;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::{EtcdConfig, EtcdStore};

/// Environment variable with the shared etcd's endpoints, comma-separated.
pub const ENDPOINTS_ENV: &str = "CCATTLER_ETCD_ENDPOINTS";

/// File where `scripts/etcd-up` writes the shared etcd's endpoint.
pub const ENDPOINT_FILE: &str = "/tmp/ccattler-etcd/endpoint";

/// Environment variable naming the `etcd` binary to start (default: `etcd` on `PATH`).
pub const BINARY_ENV: &str = "CCATTLER_ETCD_BIN";

/// Directory the started processes keep their data, logs and pid files in.
const BASE_DIR: &str = "/tmp/ccattler-etcd";

/// The endpoints of the shared test etcd: [`ENDPOINTS_ENV`], else [`ENDPOINT_FILE`].
pub fn shared_endpoints() -> Option<Vec<String>> {
    let raw = std::env::var(ENDPOINTS_ENV)
        .ok()
        .or_else(|| std::fs::read_to_string(ENDPOINT_FILE).ok())?;
    let endpoints: Vec<String> = raw
        .split([',', '\n'])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    (!endpoints.is_empty()).then_some(endpoints)
}

/// Whether the tests run in CI (`CI=true`), where missing etcd is a failure.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Applies the project rule for `test`, which cannot get etcd because of `why`: panics when
/// `CI=true`, otherwise prints that the test was skipped.
///
/// # Panics
///
/// When `CI=true`.
pub fn skip_or_fail(test: &str, why: impl fmt::Display) {
    if in_ci() {
        panic!(
            "{test} needs etcd and CI=true, but {why}; run scripts/etcd-up (it installs and starts etcd)"
        );
    }
    eprintln!("SKIPPED {test}: {why} (run scripts/etcd-up; with CI=true this is a failure)");
}

/// Connects to the shared test etcd with `config_fn` applied, or applies [`skip_or_fail`] and
/// returns `None`.
pub async fn shared_store_or_skip(
    test: &str,
    config_fn: impl FnOnce(EtcdConfig) -> EtcdConfig,
) -> Option<EtcdStore> {
    let Some(endpoints) = shared_endpoints() else {
        skip_or_fail(
            test,
            format!("no etcd endpoint: neither {ENDPOINTS_ENV} nor {ENDPOINT_FILE} is set"),
        );
        return None;
    };
    let config = config_fn(EtcdConfig::new(endpoints).connect_timeout(Duration::from_secs(3)));
    match EtcdStore::connect(config).await {
        Ok(store) => Some(store),
        Err(e) => {
            skip_or_fail(test, format!("etcd is not reachable: {e}"));
            None
        }
    }
}

/// The `etcd` binary to start, if there is one.
pub fn etcd_binary() -> Option<PathBuf> {
    if let Ok(path) = std::env::var(BINARY_ENV) {
        return Some(PathBuf::from(path));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("etcd"))
        .find(|candidate| candidate.is_file())
}

/// A free loopback port (free when asked; the OS may hand it out again, rarely).
fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// One started member, and how to start it again.
#[derive(Debug)]
struct Member {
    name: String,
    client_url: String,
    args: Vec<OsString>,
    child: Option<Child>,
}

/// Private etcd processes on loopback, killed (and their data removed) on drop.
#[derive(Debug)]
pub struct EtcdCluster {
    binary: PathBuf,
    dir: PathBuf,
    members: Vec<Member>,
}

/// Distinguishes the clusters one test process starts.
static STARTED: AtomicUsize = AtomicUsize::new(0);

impl EtcdCluster {
    /// Starts `size` members forming one cluster and waits (up to 30 s) until every member
    /// answers.
    ///
    /// # Errors
    ///
    /// A message saying why: no `etcd` binary, a process that would not start, or a cluster that
    /// did not become healthy (its members' log tails are included).
    pub async fn start(size: usize) -> Result<EtcdCluster, String> {
        let binary = etcd_binary().ok_or_else(|| {
            format!("no etcd binary on PATH (or in {BINARY_ENV}); install etcd-server")
        })?;
        let n = STARTED.fetch_add(1, Ordering::SeqCst);
        let dir = PathBuf::from(BASE_DIR).join(format!("spawned-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {dir:?}: {e}"))?;
        let mut ports = Vec::new();
        for _ in 0..size {
            let ports_of = (free_port(), free_port());
            match ports_of {
                (Ok(client), Ok(peer)) => ports.push((client, peer)),
                _ => return Err("no free loopback port".into()),
            }
        }
        let initial: Vec<String> = (ports.iter().enumerate())
            .map(|(i, (_, peer))| format!("m{i}=http://127.0.0.1:{peer}"))
            .collect();
        let mut cluster = EtcdCluster {
            binary,
            dir,
            members: Vec::new(),
        };
        for (i, (client, peer)) in ports.into_iter().enumerate() {
            let name = format!("m{i}");
            let client_url = format!("http://127.0.0.1:{client}");
            let peer_url = format!("http://127.0.0.1:{peer}");
            let data = cluster.dir.join(format!("{name}.data"));
            let args: Vec<OsString> = [
                "--name",
                &name,
                "--listen-client-urls",
                &client_url,
                "--advertise-client-urls",
                &client_url,
                "--listen-peer-urls",
                &peer_url,
                "--initial-advertise-peer-urls",
                &peer_url,
                "--initial-cluster",
                &initial.join(","),
                "--initial-cluster-state",
                "new",
                "--initial-cluster-token",
                &format!("ccattler-{n}"),
                "--log-level",
                "warn",
                "--data-dir",
            ]
            .iter()
            .map(OsString::from)
            .chain([data.into_os_string()])
            .collect();
            cluster.members.push(Member {
                name,
                client_url,
                args,
                child: None,
            });
            cluster.spawn(i)?;
        }
        cluster.wait_healthy(Duration::from_secs(30)).await?;
        Ok(cluster)
    }

    /// Starts member `index` (again, on its data, after [`kill`](Self::kill)).
    fn spawn(&mut self, index: usize) -> Result<(), String> {
        let member = &self.members[index];
        let log_path = self.dir.join(format!("{}.log", member.name));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| format!("cannot open {log_path:?}: {e}"))?;
        let child = Command::new(&self.binary)
            .args(&member.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start {:?}: {e}", self.binary))?;
        let pid_file = self.dir.join(format!("{}.pid", member.name));
        let _ = std::fs::write(pid_file, child.id().to_string());
        self.members[index].child = Some(child);
        Ok(())
    }

    /// Starts member `index` again after [`kill`](Self::kill), on the same data and ports, and
    /// waits (up to 30 s) until it answers.
    ///
    /// # Errors
    ///
    /// Why it did not start or answer.
    pub async fn restart(&mut self, index: usize) -> Result<(), String> {
        if self.members.get(index).is_none_or(|m| m.child.is_some()) {
            return Err(format!("member {index} is running or does not exist"));
        }
        self.spawn(index)?;
        self.wait_healthy(Duration::from_secs(30)).await
    }

    async fn wait_healthy(&self, limit: Duration) -> Result<(), String> {
        let deadline = Instant::now() + limit;
        for member in self.members.iter().filter(|m| m.child.is_some()) {
            loop {
                let config = EtcdConfig::new([member.client_url.clone()])
                    .connect_timeout(Duration::from_millis(500));
                if EtcdStore::connect(config).await.is_ok() {
                    break;
                }
                if Instant::now() > deadline {
                    return Err(format!(
                        "etcd member {} at {} did not answer within {limit:?}; log:\n{}",
                        member.name,
                        member.client_url,
                        self.log_tail(&member.name)
                    ));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Ok(())
    }

    fn log_tail(&self, name: &str) -> String {
        let log = std::fs::read_to_string(self.dir.join(format!("{name}.log"))).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// The index of the member that leads the cluster now, if a running member knows one.
    pub async fn leader(&self) -> Option<usize> {
        for member in self.members.iter().filter(|m| m.child.is_some()) {
            let options =
                etcd_client::ConnectOptions::new().with_connect_timeout(Duration::from_millis(500));
            let connect = etcd_client::Client::connect([&member.client_url], Some(options));
            let Ok(Ok(mut client)) = tokio::time::timeout(Duration::from_secs(1), connect).await
            else {
                continue;
            };
            let Ok(Ok(status)) =
                tokio::time::timeout(Duration::from_secs(1), client.status()).await
            else {
                continue;
            };
            let leader = status.leader();
            for (index, other) in self.members.iter().enumerate() {
                let Ok(Ok(mut client)) = tokio::time::timeout(
                    Duration::from_secs(1),
                    etcd_client::Client::connect([&other.client_url], None),
                )
                .await
                else {
                    continue;
                };
                if let Ok(Ok(status)) =
                    tokio::time::timeout(Duration::from_secs(1), client.status()).await
                    && status.header().is_some_and(|h| h.member_id() == leader)
                {
                    return Some(index);
                }
            }
        }
        None
    }

    /// Every member's client URL.
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(|m| m.client_url.clone()).collect()
    }

    /// A config for every member, with short timeouts fit for tests.
    pub fn config(&self) -> EtcdConfig {
        EtcdConfig::new(self.endpoints()).connect_timeout(Duration::from_secs(3))
    }

    /// Kills member `index` with SIGKILL and waits for it to exit. Killing a member twice is a
    /// no-op.
    pub fn kill(&mut self, index: usize) {
        if let Some(mut child) = self.members.get_mut(index).and_then(|m| m.child.take()) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for index in 0..self.members.len() {
            self.kill(index);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
