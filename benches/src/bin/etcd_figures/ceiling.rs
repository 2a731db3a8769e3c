//! The ceiling: the agents' writes of a run, as the agents' processes recorded them
//! ([`super::counting`]), sent straight to etcd with `etcd-client`, as fast as etcd takes them.
//!
//! Each agent's writes are replayed in its order: a grant grants a lease of the same TTL (10 s),
//! a keep-alive renews the agent's latest lease (one keep-alive stream per renewal, as
//! `EtcdStore` renews), a put or a transaction writes keys and values of the same lengths (the
//! keys under `{prefix}ceiling/`, padded), attached to that lease where the agent's were. The
//! agents are shared out between `tasks` tasks, each sending one request at a time.

use std::path::Path;
use std::time::{Duration, Instant};

use etcd_client::{Client, PutOptions, Txn, TxnOp};

/// The TTL of the leases granted (the agents' `--lease-ttl` default).
const LEASE_TTL_S: i64 = 10;

/// What the replay took.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Replayed {
    /// Write requests sent.
    pub(crate) writes: u64,
    /// From the first to the last answer.
    pub(crate) seconds: f64,
}

/// Every agent's writes, from the `writes-*.txt` files in `dir`: one list of lines per agent.
///
/// # Errors
///
/// A file that cannot be read.
pub(crate) fn read_writes(dir: &Path, processes: usize) -> Result<Vec<Vec<String>>, String> {
    let mut agents = Vec::new();
    for k in 0..processes {
        let file = dir.join(format!("writes-{k}.txt"));
        let text = std::fs::read_to_string(&file)
            .map_err(|err| format!("reading {}: {err}", file.display()))?;
        for line in text.lines() {
            if line == "agent" {
                agents.push(Vec::new());
            } else if let Some(agent) = agents.last_mut() {
                agent.push(line.to_owned());
            }
        }
    }
    Ok(agents)
}

/// Replays `agents`' writes under `prefix` from `tasks` tasks; see the module docs.
///
/// # Errors
///
/// etcd's first error, in words.
pub(crate) async fn replay(
    client: &Client,
    prefix: &str,
    agents: Vec<Vec<String>>,
    tasks: usize,
) -> Result<Replayed, String> {
    let tasks = tasks.max(1);
    let mut shares: Vec<Vec<(usize, Vec<String>)>> = vec![Vec::new(); tasks];
    for (i, writes) in agents.into_iter().enumerate() {
        shares[i % tasks].push((i, writes));
    }
    let started = Instant::now();
    let mut running = Vec::new();
    for share in shares {
        let client = client.clone();
        let prefix = format!("{prefix}ceiling/");
        running.push(tokio::spawn(async move {
            let mut writes = 0u64;
            for (agent, lines) in share {
                let mut lease = 0i64;
                for (n, line) in lines.iter().enumerate() {
                    let mut keys = Keys {
                        prefix: &prefix,
                        agent,
                        n,
                        op: 0,
                    };
                    send(&client, line, &mut lease, &mut keys).await?;
                    writes += 1;
                }
            }
            Ok::<_, String>(writes)
        }));
    }
    let mut writes = 0;
    for task in running {
        writes += task.await.map_err(|err| err.to_string())??;
    }
    Ok(Replayed {
        writes,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Names the keys of one replayed write: distinct per agent, write and operation, padded to
/// the recorded length.
struct Keys<'a> {
    prefix: &'a str,
    agent: usize,
    n: usize,
    op: usize,
}

impl Keys<'_> {
    fn next(&mut self, len: usize) -> String {
        let mut key = format!("{}{}/{}/{}", self.prefix, self.agent, self.n, self.op);
        self.op += 1;
        let want = self.prefix.len() + len;
        if key.len() < want {
            key.push('/');
            key.extend(std::iter::repeat_n('k', want - key.len()));
        }
        key
    }
}

/// Parses `KEY:VALUE:LEASE` (or `KEY` and `VALUE` of a put line) into lengths; a delete's
/// value is `None`.
fn lengths(key: &str, value: &str) -> Option<(usize, Option<usize>)> {
    let key = key.parse().ok()?;
    let value = if value == "-" {
        None
    } else {
        Some(value.parse().ok()?)
    };
    Some((key, value))
}

async fn send(
    client: &Client,
    line: &str,
    lease: &mut i64,
    keys: &mut Keys<'_>,
) -> Result<(), String> {
    let failed = |err: etcd_client::Error| format!("the ceiling's {line:?}: {err}");
    let mut words = line.split_whitespace();
    match words.next() {
        Some("g") => {
            let granted = client
                .lease_client()
                .grant(LEASE_TTL_S, None)
                .await
                .map_err(failed)?;
            *lease = granted.id();
        }
        Some("k") => {
            let (mut keeper, mut stream) = client
                .lease_client()
                .keep_alive(*lease)
                .await
                .map_err(failed)?;
            keeper.keep_alive().await.map_err(failed)?;
            stream.message().await.map_err(failed)?;
        }
        Some("p") => {
            let (Some(key), Some(value), Some(leased)) = (words.next(), words.next(), words.next())
            else {
                return Err(format!("a malformed write {line:?}"));
            };
            let (key, Some(value)) = lengths(key, value).ok_or(format!("{line:?}"))? else {
                return Err(format!("a malformed write {line:?}"));
            };
            let options = (leased == "1").then(|| PutOptions::new().with_lease(*lease));
            client
                .kv_client()
                .put(keys.next(key), vec![b'v'; value], options)
                .await
                .map_err(failed)?;
        }
        Some("t") => {
            let mut ops = Vec::new();
            for op in words.next().unwrap_or_default().split(',') {
                let mut parts = op.split(':');
                let (Some(key), Some(value), Some(leased)) =
                    (parts.next(), parts.next(), parts.next())
                else {
                    return Err(format!("a malformed write {line:?}"));
                };
                let (key, value) = lengths(key, value).ok_or(format!("{line:?}"))?;
                let key = keys.next(key);
                ops.push(match value {
                    Some(value) => {
                        let options = (leased == "1").then(|| PutOptions::new().with_lease(*lease));
                        TxnOp::put(key, vec![b'v'; value], options)
                    }
                    None => TxnOp::delete(key, None),
                });
            }
            client
                .kv_client()
                .txn(Txn::new().and_then(ops))
                .await
                .map_err(failed)?;
        }
        _ => return Err(format!("a malformed write {line:?}")),
    }
    Ok(())
}

/// Deletes every key under `prefix` (the run's), so that runs do not pile up in the shared
/// etcd. History stays until etcd compacts it.
///
/// # Errors
///
/// etcd's error, in words.
pub(crate) async fn delete_prefix(client: &Client, prefix: &str) -> Result<(), String> {
    let options = etcd_client::DeleteOptions::new().with_prefix();
    tokio::time::timeout(
        Duration::from_secs(30),
        client.kv_client().delete(prefix, Some(options)),
    )
    .await
    .map_err(|_| "deleting the run's keys took over 30 s".to_owned())?
    .map_err(|err| format!("deleting the run's keys: {err}"))?;
    Ok(())
}
