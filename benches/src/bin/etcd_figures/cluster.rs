//! The parent's side of a run: the `cca server` processes on the run's etcd prefix, the
//! enrollment tokens, and the processes of agents (this program again, with `--agents-child`),
//! spoken to in lines (see [`super::agents`]).

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write as _};
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use ccattler_examples::cca::client::{ApiClient, ClientArgs};
use ccattler_examples::cca::spawned::{ServerCommand, ServerProcess};
use futures_util::StreamExt;
use hyper::Method;
use serde_json::Value as Json;

use super::probe;

/// The servers of one run.
pub(crate) struct Servers {
    pub(crate) processes: Vec<ServerProcess>,
    pub(crate) admin: String,
}

impl Servers {
    /// Starts `count` servers of `cca` on etcd `etcd` under `prefix`, their admin token in
    /// `dir`, their logs there too.
    pub(crate) fn start(
        cca: &Path,
        count: usize,
        etcd: &str,
        prefix: &str,
        dir: &Path,
    ) -> Result<Self, String> {
        let token_file = dir.join("admin-token");
        let mut processes = Vec::new();
        for n in 0..count {
            let mut command = ServerCommand::next_to_this_program("127.0.0.1:0", &token_file)
                .map_err(|err| err.to_string())?
                .args(["--store", "etcd", "--etcd", etcd, "--etcd-prefix", prefix])
                .args(["--replica-id", &format!("figures-{n}")]);
            command.binary = cca.to_owned();
            command.log = Some(dir.join(format!("server-{n}.log")));
            let process = command.start().map_err(|err| {
                format!(
                    "{err}; is etcd at {etcd}, and {} built with --features etcd?",
                    cca.display()
                )
            })?;
            processes.push(process);
        }
        let admin = std::fs::read_to_string(&token_file)
            .map_err(|err| format!("the admin token: {err}"))?
            .trim()
            .to_owned();
        Ok(Servers { processes, admin })
    }

    pub(crate) fn urls(&self) -> Vec<String> {
        self.processes.iter().map(|p| p.url.clone()).collect()
    }

    pub(crate) fn admin_client(&self) -> ApiClient {
        ApiClient::new(&ClientArgs {
            server: self
                .processes
                .first()
                .map(|p| p.url.clone())
                .unwrap_or_default(),
            token: Some(self.admin.clone()),
        })
    }

    /// Resident bytes now, summed over the servers.
    pub(crate) fn resident(&self) -> u64 {
        self.sum(|pid| probe::status_bytes(pid, "VmRSS:").unwrap_or(0))
    }

    /// The highest peak resident bytes of one server.
    pub(crate) fn peak_resident(&self) -> u64 {
        self.processes
            .iter()
            .map(|p| probe::status_bytes(p.pid(), "VmHWM:").unwrap_or(0))
            .max()
            .unwrap_or(0)
    }

    /// CPU seconds used so far, summed over the servers.
    pub(crate) fn cpu_seconds(&self) -> f64 {
        self.processes
            .iter()
            .map(|p| probe::cpu_seconds(p.pid()).unwrap_or(0.0))
            .sum()
    }

    /// Established connections to the servers' ports.
    pub(crate) fn connections(&self) -> usize {
        let ports: BTreeSet<u16> = self
            .processes
            .iter()
            .filter_map(|p| p.addr().rsplit(':').next()?.parse().ok())
            .collect();
        probe::connections_to(&ports)
    }

    /// Store watches open in the servers (`ccattler_store_watches`), summed.
    pub(crate) async fn watches(&self) -> f64 {
        let mut sum = 0.0;
        for process in &self.processes {
            sum += probe::server_metric(&process.url, &self.admin, "ccattler_store_watches")
                .await
                .unwrap_or(f64::NAN);
        }
        sum
    }

    /// Writes each server's `/metrics` to `{dir}/server-{n}.metrics`, for a person to read.
    pub(crate) async fn save_metrics(&self, dir: &Path) {
        for (n, process) in self.processes.iter().enumerate() {
            if let Some(text) = probe::server_metrics(&process.url, &self.admin).await {
                let _ = std::fs::write(dir.join(format!("server-{n}.metrics")), text);
            }
        }
    }

    fn sum(&self, of: impl Fn(u32) -> u64) -> u64 {
        self.processes.iter().map(|p| of(p.pid())).sum()
    }
}

/// `count` one-time enrollment tokens, created by the admin, 32 requests at a time.
pub(crate) async fn enrollment_tokens(
    admin: &ApiClient,
    count: usize,
) -> Result<Vec<String>, String> {
    let asks = (0..count).map(|_| async {
        let answer = admin
            .ok(Method::POST, "/api/tokens", r#"{"ttl": "30m"}"#)
            .await
            .map_err(|err| err.to_string())?;
        answer["token"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| "no enrollment token in the answer".to_owned())
    });
    futures_util::stream::iter(asks)
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect()
}

/// The loopback address node `index` enrolls from, one of `addresses` (127.1.0.1 onwards;
/// 127.0.0.1, the parent's, is never one).
pub(crate) fn source_address(index: usize, addresses: usize) -> IpAddr {
    let n = index % addresses.max(1);
    let (high, low) = (n / 250, n % 250 + 1);
    IpAddr::V4(Ipv4Addr::new(
        127,
        1,
        u8::try_from(high).unwrap_or(u8::MAX),
        u8::try_from(low).unwrap_or(u8::MAX),
    ))
}

/// One process of agents.
pub(crate) struct AgentProcess {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
}

impl AgentProcess {
    /// Starts process `k` for the nodes `nodes` (`NAME TOKEN ADDRESS` lines), written to
    /// `{dir}/nodes-{k}.txt`.
    pub(crate) fn start(
        k: usize,
        servers: &[String],
        dir: &Path,
        nodes: &str,
    ) -> Result<Self, String> {
        std::fs::write(dir.join(format!("nodes-{k}.txt")), nodes).map_err(|err| err.to_string())?;
        let log = std::fs::File::create(dir.join(format!("agents-{k}.log")))
            .map_err(|err| err.to_string())?;
        let exe: PathBuf = std::env::current_exe().map_err(|err| err.to_string())?;
        let mut child = Command::new(exe)
            .args([
                "--agents-child",
                &k.to_string(),
                "--server-urls",
                &servers.join(","),
            ])
            .arg("--dir")
            .arg(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .map_err(|err| format!("starting the agents' process {k}: {err}"))?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(AgentProcess {
            child,
            stdin,
            lines,
        })
    }

    /// Waits up to `timeout` for the line starting with `word`, and returns its JSON.
    pub(crate) fn expect(&self, word: &str, timeout: Duration) -> Result<Json, String> {
        loop {
            let line = self
                .lines
                .recv_timeout(timeout)
                .map_err(|_| format!("the agents' process said no {word:?} within {timeout:?}"))?;
            if let Some(rest) = line.strip_prefix(word) {
                return serde_json::from_str(rest.trim()).map_err(|err| err.to_string());
            }
        }
    }

    /// Sends a command (`stats`, `stop`).
    pub(crate) fn tell(&mut self, command: &str) -> Result<(), String> {
        writeln!(self.stdin, "{command}").map_err(|err| format!("telling {command}: {err}"))
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Asks for the counters (see [`super::agents`]).
    pub(crate) fn stats(&mut self) -> Result<Json, String> {
        self.tell("stats")?;
        self.expect("stats", Duration::from_secs(10))
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
