//! What the parent reads about the processes it measures: a process's resident memory and CPU
//! time (`/proc/PID/status`, `/proc/PID/stat`), the TCP connections a server holds
//! (`/proc/net/tcp`), a server's open watches (its `/metrics`), and etcd's revision and
//! database size (etcd's status).

use std::collections::BTreeSet;

use ccattler_examples::cca::client::{ApiClient, ClientArgs};
use etcd_client::Client;
use hyper::Method;

use ccattler_benches::USER_HZ;
pub(crate) use ccattler_benches::{cpu_seconds, status_bytes};

/// The CPU time every process of the machine has used so far (user, system, interrupts, all
/// cores), in seconds, from `/proc/stat`.
pub(crate) fn machine_busy_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let ticks: Vec<f64> = line
        .split_whitespace()
        .filter_map(|t| t.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal: all but idle and iowait.
    let busy: f64 = [0, 1, 2, 5, 6, 7]
        .iter()
        .filter_map(|&i| ticks.get(i))
        .sum();
    Some(busy / USER_HZ)
}

/// The process id of the `etcd` serving `url` (found by its command line).
pub(crate) fn etcd_pid(url: &str) -> Option<u32> {
    let entries = std::fs::read_dir("/proc").ok()?;
    entries.flatten().find_map(|entry| {
        let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let listens = String::from_utf8_lossy(&cmdline).contains(url);
        (comm.trim() == "etcd" && listens).then_some(pid)
    })
}

/// How many established TCP connections have a local port among `ports` (a server's side of
/// its clients' connections), from `/proc/net/tcp` and `/proc/net/tcp6`.
pub(crate) fn connections_to(ports: &BTreeSet<u16>) -> usize {
    const ESTABLISHED: &str = "01";
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|file| std::fs::read_to_string(file).ok())
        .map(|text| {
            text.lines()
                .skip(1)
                .filter(|line| {
                    let fields: Vec<&str> = line.split_whitespace().collect();
                    let local_port = fields
                        .get(1)
                        .and_then(|local| local.rsplit(':').next())
                        .and_then(|hex| u16::from_str_radix(hex, 16).ok());
                    fields.get(3) == Some(&ESTABLISHED)
                        && local_port.is_some_and(|port| ports.contains(&port))
                })
                .count()
        })
        .sum()
}

/// The whole `/metrics` of the server at `url`, read with the admin token.
pub(crate) async fn server_metrics(url: &str, admin: &str) -> Option<String> {
    let client = ApiClient::new(&ClientArgs {
        server: url.to_owned(),
        token: Some(admin.to_owned()),
    });
    let response = client
        .send(Method::GET, "/metrics", bytes::Bytes::new(), &[])
        .await
        .ok()?;
    let body = http_body_util::BodyExt::collect(response.into_body())
        .await
        .ok()?
        .to_bytes();
    Some(String::from_utf8_lossy(&body).into_owned())
}

/// The value of metric `name` (a line `name VALUE`, without labels) in `/metrics` of the
/// server at `url`, read with the admin token.
pub(crate) async fn server_metric(url: &str, admin: &str, name: &str) -> Option<f64> {
    server_metrics(url, admin).await?.lines().find_map(|line| {
        line.strip_prefix(name)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

/// etcd's state as its status tells it.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct EtcdStatus {
    /// The store's revision.
    pub(crate) revision: i64,
    /// The database file's size in bytes.
    pub(crate) db_bytes: i64,
    /// Of it, the bytes in use (the rest is free pages a defragmentation would return).
    pub(crate) db_in_use_bytes: i64,
}

/// Asks etcd for its status.
///
/// # Errors
///
/// etcd's error, in words.
pub(crate) async fn etcd_status(client: &Client) -> Result<EtcdStatus, String> {
    let mut maintenance = client.maintenance_client();
    let status = maintenance
        .status()
        .await
        .map_err(|err| format!("etcd status: {err}"))?;
    Ok(EtcdStatus {
        revision: status.header().map_or(0, |h| h.revision()),
        db_bytes: status.db_size(),
        db_in_use_bytes: status.raft_used_db_size(),
    })
}
