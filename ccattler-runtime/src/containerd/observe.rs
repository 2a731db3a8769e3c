//! What runs: containers with our labels and their tasks, their logs, and their cgroup stats.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ccattler_core::schema::{Cpu, Memory};
use ccattler_core::{InstanceState, InstanceStats, ObservedInstance, RuntimeError};
use containerd_client::services::v1::{Container, ListContainersRequest, ListTasksRequest};
use containerd_client::types::v1::{Process, Status as TaskStatus};

use super::Inner;
use super::client::grpc;
use super::lifecycle::{INSTANCE, LOG, PORT, RESTARTS, STOPPED};
use super::spec::cgroups_path;

const CGROUP_ROOT: &str = "/sys/fs/cgroup";

impl Inner {
    pub(super) async fn observe(&self) -> Result<Vec<ObservedInstance>, RuntimeError> {
        let request = self.conn.req(ListContainersRequest { filters: vec![] });
        let containers = self
            .conn
            .containers()
            .list(request)
            .await
            .map_err(|s| grpc("container list", s))?
            .into_inner()
            .containers;
        let request = self.conn.req(ListTasksRequest {
            filter: String::new(),
        });
        let tasks: HashMap<String, Process> = self
            .conn
            .tasks()
            .list(request)
            .await
            .map_err(|s| grpc("task list", s))?
            .into_inner()
            .tasks
            .into_iter()
            .map(|t| (task_container(&t).to_owned(), t))
            .collect();
        let ours = containers
            .into_iter()
            .filter(|c| c.labels.contains_key(INSTANCE));
        let host = self.config.host.as_str();
        Ok(ours.map(|c| observed(&c, tasks.get(&c.id), host)).collect())
    }

    pub(super) async fn logs(&self, id: &str, lines: usize) -> Result<String, RuntimeError> {
        let container = self.known(id).await?;
        let Some(log) = container.labels.get(LOG) else {
            return Ok(String::new());
        };
        let text = match tokio::fs::read(log).await {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => {
                return Err(RuntimeError::Unreachable {
                    message: format!("cannot read the log {log}: {e}"),
                    source: Some(Box::new(e)),
                });
            }
        };
        Ok(tail(&text, lines))
    }

    pub(super) async fn stats(&self, id: &str) -> Result<InstanceStats, RuntimeError> {
        let container = self.known(id).await?;
        let running = self
            .task(id)
            .await?
            .is_some_and(|t| TaskStatus::try_from(t.status) == Ok(TaskStatus::Running));
        if !running {
            return Ok(InstanceStats::default());
        }
        let cgroup = cgroups_path(self.conn.namespace(), id);
        let root = Path::new(CGROUP_ROOT);
        let (memory, cpu_ns) = tokio::task::spawn_blocking(move || read_cgroup(root, &cgroup))
            .await
            .unwrap_or((0, 0));
        let now = Instant::now();
        let previous = {
            let mut samples = self.cpu_samples.lock().unwrap_or_else(|e| e.into_inner());
            samples.insert(id.to_owned(), (cpu_ns, now))
        };
        let (used, elapsed) = match previous {
            Some((before, at)) => (cpu_ns.saturating_sub(before), now.duration_since(at)),
            None => (cpu_ns, since_start(&container)),
        };
        let elapsed_ns = elapsed.as_nanos().max(1);
        let millis = u128::from(used) * 1000 / elapsed_ns;
        Ok(InstanceStats {
            cpu: Cpu::from_millis(u64::try_from(millis).unwrap_or(u64::MAX)),
            memory: Memory::from_bytes(memory),
        })
    }

    /// The container `id`, or [`RuntimeError::NotFound`].
    async fn known(&self, id: &str) -> Result<Container, RuntimeError> {
        self.container(id)
            .await?
            .ok_or_else(|| RuntimeError::NotFound(id.to_owned()))
    }
}

fn task_container(task: &Process) -> &str {
    if task.container_id.is_empty() {
        &task.id
    } else {
        &task.container_id
    }
}

/// How a container and its task (if any) look to the agent.
fn observed(container: &Container, task: Option<&Process>, host: &str) -> ObservedInstance {
    let stopped = container.labels.get(STOPPED).is_some_and(|v| v == "true");
    let state = match task.map(|t| (TaskStatus::try_from(t.status), t.exit_status)) {
        None if stopped => InstanceState::Stopped,
        None => InstanceState::Starting,
        Some((Ok(TaskStatus::Running | TaskStatus::Paused | TaskStatus::Pausing), _)) => {
            InstanceState::Running
        }
        Some((Ok(TaskStatus::Stopped), _)) if stopped => InstanceState::Stopped,
        Some((Ok(TaskStatus::Stopped), code)) => InstanceState::Exited {
            code: i32::try_from(code).unwrap_or(i32::MAX),
        },
        Some(_) => InstanceState::Starting,
    };
    let mut instance = ObservedInstance::new(container.id.clone(), state);
    instance.address = container
        .labels
        .get(PORT)
        .and_then(|p| p.parse().ok())
        .map(|port| crate::address::served_at(host, port));
    instance.restarts = container
        .labels
        .get(RESTARTS)
        .and_then(|r| r.parse().ok())
        .unwrap_or(0);
    instance
}

/// The last `lines` lines of `text`, each ending in a newline.
fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    let skip = all.len().saturating_sub(lines);
    all[skip..].iter().map(|l| format!("{l}\n")).collect()
}

/// Time since the container's record last changed (its creation or latest restart).
fn since_start(container: &Container) -> Duration {
    let stamp = container.updated_at.or(container.created_at);
    let started = stamp.map_or(UNIX_EPOCH, |t| {
        UNIX_EPOCH + Duration::new(t.seconds.max(0) as u64, t.nanos.max(0) as u32)
    });
    SystemTime::now()
        .duration_since(started)
        .unwrap_or(Duration::from_secs(1))
}

/// Memory in use (bytes, without inactive page cache) and cumulative CPU (ns) of a cgroup,
/// from cgroup v2 files if present, else cgroup v1's memory and cpuacct hierarchies.
fn read_cgroup(root: &Path, cgroup: &str) -> (u64, u64) {
    let relative = cgroup.trim_start_matches('/');
    let unified = root.join(relative);
    if let Some(current) = read_number(&unified.join("memory.current")) {
        let inactive = stat_field(&unified.join("memory.stat"), "inactive_file");
        let usage_usec = stat_field(&unified.join("cpu.stat"), "usage_usec");
        return (current.saturating_sub(inactive), usage_usec * 1000);
    }
    let memory_dir = root.join("memory").join(relative);
    let usage = read_number(&memory_dir.join("memory.usage_in_bytes")).unwrap_or(0);
    let inactive = stat_field(&memory_dir.join("memory.stat"), "total_inactive_file");
    let cpu = ["cpuacct", "cpu,cpuacct"]
        .iter()
        .find_map(|h| read_number(&root.join(h).join(relative).join("cpuacct.usage")))
        .unwrap_or(0);
    (usage.saturating_sub(inactive), cpu)
}

fn read_number(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn stat_field(path: &Path, key: &str) -> u64 {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|l| l.split_once(' '))
        .find(|(k, _)| *k == key)
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(tail("a\nb\nc\n", 2), "b\nc\n");
        assert_eq!(tail("a\nb", 5), "a\nb\n");
        assert_eq!(tail("", 3), "");
    }

    #[test]
    fn a_stopped_task_is_stopped_only_when_stop_was_asked() {
        let mut container = Container {
            id: "a".to_owned(),
            ..Container::default()
        };
        let task = Process {
            status: TaskStatus::Stopped as i32,
            exit_status: 3,
            ..Process::default()
        };
        assert_eq!(
            observed(&container, Some(&task), "127.0.0.1").state,
            InstanceState::Exited { code: 3 }
        );
        container
            .labels
            .insert(STOPPED.to_owned(), "true".to_owned());
        assert_eq!(
            observed(&container, Some(&task), "127.0.0.1").state,
            InstanceState::Stopped
        );
    }
}
