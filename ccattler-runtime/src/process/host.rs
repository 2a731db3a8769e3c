//! What the host kernel tells and enforces: `/proc` (whether a process is still the one we
//! started, its CPU time and resident memory) and cgroup v2 limits.
//!
//! # Limits
//!
//! Limits apply only when the agent runs as root, `/sys/fs/cgroup` is a cgroup v2 hierarchy
//! (`cgroup.controllers` exists) and the spec sets a limit. Each limited instance gets
//! `{parent}/{id}` (by default `/sys/fs/cgroup/ccattler/{id}`) with `memory.max` and `cpu.max`,
//! and its process is moved there right after it started (its first instants run unlimited).
//! On a cgroup v1 (or hybrid) host, the same group name is used under the `memory` and `cpu`
//! controllers instead (`/sys/fs/cgroup/memory/ccattler/{id}` with `memory.limit_in_bytes`,
//! `/sys/fs/cgroup/cpu/ccattler/{id}` with `cpu.cfs_quota_us` and `cpu.cfs_period_us`).
//! Anything that fails (no root, a read-only hierarchy, a missing controller) is skipped
//! silently: a start never fails because of limits.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use ccattler_core::schema::{Cpu, Memory};
use nix::sys::signal::killpg;
use nix::unistd::{Pid, SysconfVar, geteuid, sysconf};

/// The fields of `/proc/<pid>/stat` the runtime uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct ProcStat {
    /// The state letter (`R`, `S`, `Z`, ...).
    pub(super) state: char,
    /// The process group (field 5).
    pub(super) group: u32,
    /// User plus system CPU time, in clock ticks.
    pub(super) cpu_ticks: u64,
    /// When the process started, in clock ticks since boot (field 22).
    pub(super) start_time: u64,
}

/// Parses the text of `/proc/<pid>/stat`. The command name (field 2) may hold spaces and
/// parentheses, so fields are counted from the last `)`.
pub(super) fn parse_stat(text: &str) -> Option<ProcStat> {
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // fields[0] is field 3 (state); field n is fields[n - 3].
    let number = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok());
    Some(ProcStat {
        state: fields.first()?.chars().next()?,
        group: u32::try_from(number(5)?).ok()?,
        cpu_ticks: number(14)?.checked_add(number(15)?)?,
        start_time: number(22)?,
    })
}

/// Reads `/proc/<pid>/stat`; `None` when the process does not exist (or cannot be read).
pub(super) fn stat(pid: u32) -> Option<ProcStat> {
    parse_stat(&fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Whether `pid` is alive (not a zombie) and is the process that started at `start_time`: a pid
/// the kernel gave to another process since never matches.
pub(super) fn is_same_process(pid: u32, start_time: u64) -> bool {
    matches!(stat(pid), Some(s) if s.start_time == start_time && s.state != 'Z' && s.state != 'X')
}

/// Whether process group `group` still has a member that is not a zombie. A member that got
/// SIGKILL may take a moment to end (longer when its cgroup's CPU quota is spent), and the
/// leader's children may outlive it; a stop is complete only once none is left.
pub(super) fn group_has_live_members(group: u32) -> bool {
    let Ok(pgid) = i32::try_from(group) else {
        return false;
    };
    // The cheap answer first: no member at all, zombie or not.
    if killpg(Pid::from_raw(pgid), None).is_err() {
        return false;
    }
    let Ok(entries) = fs::read_dir("/proc") else {
        return true;
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(stat)
        .any(|s| s.group == group && s.state != 'Z' && s.state != 'X')
}

/// Clock ticks per second (`CLK_TCK`), 100 when it cannot be read.
pub(super) fn ticks_per_second() -> u64 {
    static TICKS: OnceLock<u64> = OnceLock::new();
    *TICKS.get_or_init(|| match sysconf(SysconfVar::CLK_TCK) {
        Ok(Some(t)) if t > 0 => t.unsigned_abs(),
        _ => 100,
    })
}

fn page_size() -> u64 {
    static PAGE: OnceLock<u64> = OnceLock::new();
    *PAGE.get_or_init(|| match sysconf(SysconfVar::PAGE_SIZE) {
        Ok(Some(p)) if p > 0 => p.unsigned_abs(),
        _ => 4096,
    })
}

/// Resident memory of `pid` in bytes, from `/proc/<pid>/statm` (field 2, in pages).
fn rss_bytes(pid: u32) -> Option<u64> {
    let text = fs::read_to_string(format!("/proc/{pid}/statm")).ok()?;
    let pages: u64 = text.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages.saturating_mul(page_size()))
}

/// `pid` and all its descendants, found through `/proc/<pid>/task/<tid>/children` (when the
/// kernel has it; otherwise only `pid`). Bounded, so a fork bomb cannot keep it walking.
fn family(pid: u32) -> BTreeSet<u32> {
    const MAX: usize = 4096;
    let mut seen = BTreeSet::from([pid]);
    let mut queue = vec![pid];
    while let Some(next) = queue.pop() {
        let Ok(tasks) = fs::read_dir(format!("/proc/{next}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let Ok(children) = fs::read_to_string(task.path().join("children")) else {
                continue;
            };
            for child in children.split_whitespace().filter_map(|c| c.parse().ok()) {
                if seen.len() < MAX && seen.insert(child) {
                    queue.push(child);
                }
            }
        }
    }
    seen
}

/// CPU ticks used so far and resident bytes of `pid` and its descendants.
pub(super) fn usage(pid: u32) -> (u64, u64) {
    let (mut ticks, mut bytes) = (0u64, 0u64);
    for member in family(pid) {
        if let Some(s) = stat(member) {
            ticks = ticks.saturating_add(s.cpu_ticks);
        }
        bytes = bytes.saturating_add(rss_bytes(member).unwrap_or(0));
    }
    (ticks, bytes)
}

/// Seconds since boot, from `/proc/uptime`.
pub(super) fn uptime_seconds() -> Option<f64> {
    let text = fs::read_to_string("/proc/uptime").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// The period `cpu.max` is written with, in microseconds.
const CPU_PERIOD_US: u64 = 100_000;

/// Puts `pid` in a cgroup limited to `cpu` and `memory`. Returns the cgroup when it did.
pub(super) fn apply_limits(
    parent: &Path,
    id: &str,
    pid: u32,
    cpu: Cpu,
    memory: Memory,
) -> Option<PathBuf> {
    if (cpu == Cpu::ZERO && memory == Memory::ZERO) || !geteuid().is_root() {
        return None;
    }
    let hierarchy = parent.parent()?;
    if !hierarchy.join("cgroup.controllers").exists() {
        return apply_v1_limits(hierarchy, parent.file_name()?, id, pid, cpu, memory);
    }
    fs::create_dir_all(parent).ok()?;
    // Controllers must be enabled for the children of every level on the way down; a level
    // that refuses leaves the files below missing, and the writes below fail quietly.
    let _ = fs::write(hierarchy.join("cgroup.subtree_control"), "+cpu +memory");
    let _ = fs::write(parent.join("cgroup.subtree_control"), "+cpu +memory");
    let dir = parent.join(id);
    fs::create_dir_all(&dir).ok()?;
    if memory != Memory::ZERO {
        let _ = fs::write(dir.join("memory.max"), memory.bytes().to_string());
    }
    if cpu != Cpu::ZERO {
        let quota = cpu.millis().saturating_mul(CPU_PERIOD_US) / 1000;
        let _ = fs::write(
            dir.join("cpu.max"),
            format!("{} {CPU_PERIOD_US}", quota.max(1000)),
        );
    }
    fs::write(dir.join("cgroup.procs"), pid.to_string()).ok()?;
    Some(dir)
}

/// The cgroup v1 way: one group per controller. Returns the memory group when it holds the pid.
fn apply_v1_limits(
    hierarchy: &Path,
    name: &std::ffi::OsStr,
    id: &str,
    pid: u32,
    cpu: Cpu,
    memory: Memory,
) -> Option<PathBuf> {
    let mut placed = None;
    if cpu != Cpu::ZERO {
        let dir = hierarchy.join("cpu").join(name).join(id);
        if fs::create_dir_all(&dir).is_ok() {
            let quota = cpu.millis().saturating_mul(CPU_PERIOD_US) / 1000;
            let _ = fs::write(dir.join("cpu.cfs_period_us"), CPU_PERIOD_US.to_string());
            let _ = fs::write(dir.join("cpu.cfs_quota_us"), quota.max(1000).to_string());
            if fs::write(dir.join("cgroup.procs"), pid.to_string()).is_ok() {
                placed = Some(dir);
            }
        }
    }
    if memory != Memory::ZERO {
        let dir = hierarchy.join("memory").join(name).join(id);
        if fs::create_dir_all(&dir).is_ok() {
            let _ = fs::write(
                dir.join("memory.limit_in_bytes"),
                memory.bytes().to_string(),
            );
            if fs::write(dir.join("cgroup.procs"), pid.to_string()).is_ok() {
                placed = Some(dir);
            }
        }
    }
    placed
}

/// Removes an instance's cgroups (v2, or v1 per controller), if it has them and they are empty.
pub(super) fn release_limits(parent: &Path, id: &str) {
    let _ = fs::remove_dir(parent.join(id));
    if let (Some(hierarchy), Some(name)) = (parent.parent(), parent.file_name()) {
        for controller in ["cpu", "memory"] {
            let _ = fs::remove_dir(hierarchy.join(controller).join(name).join(id));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_name_with_spaces_and_parens() {
        let line = "4242 (my (odd) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 7 5 0 0 20 0 1 0 \
                    123456 5000000 300 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0";
        let s = parse_stat(line).expect("parses");
        assert_eq!(s.state, 'S');
        assert_eq!(s.group, 4242);
        assert_eq!(s.cpu_ticks, 12);
        assert_eq!(s.start_time, 123_456);
    }

    #[test]
    fn rejects_garbage() {
        assert_eq!(parse_stat("nonsense"), None);
        assert_eq!(parse_stat("1 (x) S 1 2"), None);
    }

    #[test]
    fn sees_itself() {
        let me = std::process::id();
        let s = stat(me).expect("own stat");
        assert!(is_same_process(me, s.start_time));
        assert!(!is_same_process(me, s.start_time + 1));
        assert!(usage(me).1 > 0);
    }
}
