//! Starting processes: an instance (its directory, files, mounts, environment, port and process
//! group), and commands run inside one (`exec`).

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Component, Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use ccattler_core::{ExecOutput, FileSpec, InstanceSpec, RuntimeError};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::Command as AsyncCommand;

use super::disk::Layout;

/// The `PATH` an instance gets when neither its spec nor the agent has one.
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// A running process just started, and what it was given.
#[derive(Debug)]
pub(super) struct Started {
    pub(super) child: Child,
    pub(super) env: BTreeMap<String, String>,
}

fn start_failed(id: &str, what: &str, e: impl std::fmt::Display) -> RuntimeError {
    RuntimeError::StartFailed {
        id: id.to_owned(),
        reason: format!("{what}: {e}"),
    }
}

/// Whether `id` can name a directory: not empty, no `/`, not `.` or `..`, no NUL.
pub(super) fn check_id(id: &str) -> Result<(), RuntimeError> {
    if id.is_empty() || id == "." || id == ".." || id.contains(['/', '\0']) {
        return Err(start_failed(
            id,
            "invalid instance id",
            "it must be a non-empty file name",
        ));
    }
    Ok(())
}

/// Where a path the instance sees lands: `work/` plus the path without its leading `/`.
/// Paths that climb out with `..` are refused.
pub(super) fn under_work(work: &Path, path: &str) -> Option<PathBuf> {
    let mut out = work.to_path_buf();
    for component in Path::new(path).components() {
        match component {
            Component::Normal(part) => out.push(part),
            Component::RootDir | Component::CurDir => {}
            Component::ParentDir | Component::Prefix(_) => return None,
        }
    }
    (out != work).then_some(out)
}

/// Creates the instance's directories and writes its files and mount links.
fn prepare(layout: &Layout, spec: &InstanceSpec) -> Result<(), RuntimeError> {
    let id = &spec.id;
    let work = layout.work(id);
    fs::create_dir_all(&work)
        .map_err(|e| start_failed(id, "cannot create working directory", e))?;
    for file in &spec.files {
        let target = under_work(&work, &file.path)
            .ok_or_else(|| start_failed(id, "invalid file path", &file.path))?;
        write_file(&target, &file.content, file.mode)
            .map_err(|e| start_failed(id, &format!("cannot write {}", file.path), e))?;
    }
    for mount in &spec.mounts {
        let target = under_work(&work, &mount.target)
            .ok_or_else(|| start_failed(id, "invalid mount target", &mount.target))?;
        link(&mount.source, &target)
            .map_err(|e| start_failed(id, &format!("cannot mount {}", mount.target), e))?;
    }
    Ok(())
}

/// Rewrites files of a running instance: each replaced at once (a temp file beside it, created
/// with its mode, then renamed over it), so the workload reads the old content or the new, never
/// a mix. A path the instance does not have is refused, not created.
pub(super) fn rewrite_files(
    layout: &Layout,
    id: &str,
    files: &[FileSpec],
) -> Result<(), RuntimeError> {
    let work = layout.work(id);
    for file in files {
        let target = under_work(&work, &file.path)
            .filter(|t| t.is_file())
            .ok_or_else(|| start_failed(id, "no such file to rewrite", &file.path))?;
        let temp = target.with_file_name(format!(
            ".{}.new",
            target
                .file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
        ));
        let _ = fs::remove_file(&temp);
        write_file(&temp, &file.content, file.mode)
            .and_then(|()| fs::rename(&temp, &target))
            .map_err(|e| start_failed(id, &format!("cannot rewrite {}", file.path), e))?;
    }
    Ok(())
}

/// Writes a file created with `mode` from the start (a secret is never readable by others, not
/// even for a moment), then sets `mode` exactly (the umask may have masked bits off).
fn write_file(path: &Path, content: &[u8], mode: u32) -> io::Result<()> {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent)?;
    }
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode & 0o7777)
        .open(path)?;
    file.write_all(content)?;
    file.set_permissions(fs::Permissions::from_mode(mode & 0o7777))
}

/// Makes `target` a symbolic link to `source`, replacing a link left by an earlier start.
fn link(source: &Path, target: &Path) -> io::Result<()> {
    if let Some(parent) = target.parent() {
        fs::create_dir_all(parent)?;
    }
    if fs::symlink_metadata(target).is_ok_and(|m| m.file_type().is_symlink()) {
        fs::remove_file(target)?;
    }
    std::os::unix::fs::symlink(source, target)
}

/// The environment of the instance: `PATH` (the agent's unless the spec sets one), the spec's
/// variables, then its ports (`PORT`, `PORT_{declared}`: [`InstanceSpec::port_env`]).
pub(super) fn environment(spec: &InstanceSpec) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    let path = std::env::var("PATH").unwrap_or_else(|_| DEFAULT_PATH.to_owned());
    env.insert("PATH".to_owned(), path);
    env.extend(spec.env.clone());
    env.extend(spec.port_env());
    env
}

/// Prepares the instance's directory and starts its command in a new process group, output
/// appended to `stdout.log`.
///
/// # Errors
///
/// [`RuntimeError::CommandNotFound`] when the program does not exist; [`RuntimeError::StartFailed`]
/// for an empty command, a bad id or path, or a directory or file that cannot be written.
pub(super) fn start(layout: &Layout, spec: &InstanceSpec) -> Result<Started, RuntimeError> {
    let id = &spec.id;
    check_id(id)?;
    let Some((program, args)) = spec.command.split_first() else {
        return Err(start_failed(
            id,
            "no command",
            "the process runtime ignores images and needs a command",
        ));
    };
    prepare(layout, spec)?;
    let log = open_log(&layout.log(id)).map_err(|e| start_failed(id, "cannot open log", e))?;
    let log_err = log
        .try_clone()
        .map_err(|e| start_failed(id, "cannot open log", e))?;
    let env = environment(spec);
    let child = Command::new(program)
        .args(args)
        .env_clear()
        .envs(&env)
        .current_dir(layout.work(id))
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err)
        .process_group(0)
        .spawn()
        .map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => RuntimeError::CommandNotFound {
                command: program.clone(),
            },
            _ => start_failed(id, &format!("cannot run {program:?}"), e),
        })?;
    Ok(Started { child, env })
}

/// Opens the log for appending: writers always land at its current end, so the runtime may
/// truncate it under a running process.
fn open_log(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o640)
        .open(path)
}

/// Runs a command inside an instance: in its working directory `work`, with its environment
/// `env`, in a process group of its own that is killed whole on timeout.
///
/// Runs `command` in `work` with `env`; kills its process group after `timeout`.
pub(super) async fn exec(
    id: &str,
    work: &Path,
    env: &BTreeMap<String, String>,
    command: &[String],
    timeout: Duration,
) -> Result<ExecOutput, RuntimeError> {
    let Some((program, args)) = command.split_first() else {
        return Err(RuntimeError::CommandNotFound {
            command: String::new(),
        });
    };
    let child = AsyncCommand::new(program)
        .args(args)
        .env_clear()
        .envs(env)
        .current_dir(work)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| match e.kind() {
            io::ErrorKind::NotFound if work.is_dir() => RuntimeError::CommandNotFound {
                command: program.clone(),
            },
            io::ErrorKind::NotFound => RuntimeError::NotFound(id.to_owned()),
            _ => RuntimeError::StartFailed {
                id: id.to_owned(),
                reason: format!("cannot exec {program:?}: {e}"),
            },
        })?;
    let group = child.id();
    match tokio::time::timeout(timeout, child.wait_with_output()).await {
        Ok(Ok(output)) => Ok(ExecOutput {
            code: super::exit_code(output.status),
            stdout: output.stdout,
            stderr: output.stderr,
        }),
        Ok(Err(e)) => Err(RuntimeError::StartFailed {
            id: id.to_owned(),
            reason: format!("exec {program:?} failed: {e}"),
        }),
        Err(_) => {
            if let Some(pid) = group.and_then(|g| i32::try_from(g).ok()) {
                let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
            }
            Err(RuntimeError::Timeout {
                what: format!("exec {program:?} in {id}"),
                after: timeout,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_land_under_work() {
        let work = Path::new("/r/work");
        assert_eq!(
            under_work(work, "/etc/app/config.yaml"),
            Some(PathBuf::from("/r/work/etc/app/config.yaml"))
        );
        assert_eq!(under_work(work, "a/b"), Some(PathBuf::from("/r/work/a/b")));
        assert_eq!(under_work(work, "/etc/../../x"), None);
        assert_eq!(under_work(work, "/"), None);
    }

    #[test]
    fn ids_must_be_file_names() {
        assert!(check_id("web-1").is_ok());
        for bad in ["", ".", "..", "a/b"] {
            assert!(check_id(bad).is_err(), "{bad:?}");
        }
    }
}
