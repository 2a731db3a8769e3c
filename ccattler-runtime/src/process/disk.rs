//! What the runtime keeps on disk besides `state.json`: where an instance's files live, and its
//! size-capped log.
//!
//! A process writes `stdout.log` itself (opened for appending), so its output survives an agent
//! restart without a pipe to break. The runtime keeps the size in check from outside: when the
//! log has grown past the cap, it copies it to `stdout.log.1` (replacing the previous one) and
//! truncates it to zero. Appending writers carry on at the new end. At most about twice the cap
//! is kept; lines written between the copy and the truncation are lost.

use std::fs::{self, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

/// Paths under the root: `instances/{id}/` holds `work/`, `stdout.log`, `stdout.log.1` and
/// `state.json`.
#[derive(Clone, Debug)]
pub(super) struct Layout {
    root: PathBuf,
}

impl Layout {
    pub(super) fn new(root: PathBuf) -> Self {
        Layout { root }
    }

    /// The directory holding one directory per instance.
    pub(super) fn instances(&self) -> PathBuf {
        self.root.join("instances")
    }

    /// Everything of one instance.
    pub(super) fn dir(&self, id: &str) -> PathBuf {
        self.instances().join(id)
    }

    /// The instance's working directory (its cwd, with its files and mounts).
    pub(super) fn work(&self, id: &str) -> PathBuf {
        self.dir(id).join("work")
    }

    /// The current log (stdout and stderr interleaved).
    pub(super) fn log(&self, id: &str) -> PathBuf {
        self.dir(id).join("stdout.log")
    }

    /// The previous log, kept when the current one reached the cap.
    pub(super) fn old_log(&self, id: &str) -> PathBuf {
        self.dir(id).join("stdout.log.1")
    }

    /// The instance's `state.json`.
    pub(super) fn state(&self, id: &str) -> PathBuf {
        self.dir(id).join("state.json")
    }

    /// The root directory itself.
    pub(super) fn root(&self) -> &Path {
        &self.root
    }
}

/// Rotates `log` into `old` when it is larger than `cap` bytes. Returns whether it rotated.
pub(super) fn enforce_cap(log: &Path, old: &Path, cap: u64) -> io::Result<bool> {
    let size = match fs::metadata(log) {
        Ok(meta) => meta.len(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    if size <= cap {
        return Ok(false);
    }
    fs::copy(log, old)?;
    OpenOptions::new().write(true).open(log)?.set_len(0)?;
    Ok(true)
}

/// The last `lines` lines of `old` followed by `log` (either may be missing), each ending with a
/// newline. Bytes that are not UTF-8 are replaced.
pub(super) fn tail(log: &Path, old: &Path, lines: usize) -> io::Result<String> {
    let mut bytes = read_or_empty(old)?;
    bytes.extend(read_or_empty(log)?);
    let text = String::from_utf8_lossy(&bytes);
    let all: Vec<&str> = text.lines().collect();
    let mut out = String::new();
    for line in &all[all.len().saturating_sub(lines)..] {
        out.push_str(line);
        out.push('\n');
    }
    Ok(out)
}

fn read_or_empty(path: &Path) -> io::Result<Vec<u8>> {
    match fs::read(path) {
        Ok(bytes) => Ok(bytes),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotates_past_the_cap_and_tails_across_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (log, old) = (dir.path().join("l"), dir.path().join("l.1"));
        assert_eq!(tail(&log, &old, 5).expect("tail"), "");
        fs::write(&log, "a\nb\nc\n").expect("write");
        assert!(!enforce_cap(&log, &old, 100).expect("cap"));
        assert!(enforce_cap(&log, &old, 4).expect("cap"));
        assert_eq!(fs::metadata(&log).expect("meta").len(), 0);
        fs::write(&log, "d\n").expect("write");
        assert_eq!(tail(&log, &old, 2).expect("tail"), "c\nd\n");
        assert_eq!(tail(&log, &old, 10).expect("tail"), "a\nb\nc\nd\n");
    }
}
