//! `cca server` as a child process, for the programs that measure a cluster of separate
//! processes (`failover_figures`, and `etcd_figures` in `ccattler-benches`): started with the
//! flags a user gives, waited for until it prints that it listens, and killed when dropped.
//!
//! The end-to-end tests start their servers the same way (`examples/tests/processes`), with
//! panics instead of errors.

use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// Why a server could not be started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SpawnError {
    /// The binary could not be run.
    #[error("cannot run {binary}: {source}")]
    Run {
        /// The `cca` binary.
        binary: PathBuf,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// It ran but did not print that it listens; its log may say why.
    #[error("cca server did not start (it printed {printed:?}); its log: {log}")]
    NotListening {
        /// What it printed on stdout instead.
        printed: String,
        /// Its log file.
        log: String,
    },
}

/// How to start one `cca server`.
#[derive(Clone, Debug)]
pub struct ServerCommand {
    /// The `cca` binary (built with `--features etcd` for `--store etcd`).
    pub binary: PathBuf,
    /// `--listen` (`127.0.0.1:0` picks a free port).
    pub listen: String,
    /// The admin token's file (`--token-file`): read when it exists, else written.
    pub token_file: PathBuf,
    /// Where its stderr goes (`None`: discarded).
    pub log: Option<PathBuf>,
    /// Every other flag (`--store etcd --etcd URL --etcd-prefix P`...).
    pub args: Vec<OsString>,
}

/// A running `cca server`, killed (SIGKILL) when dropped.
#[derive(Debug)]
pub struct ServerProcess {
    /// The base URL it printed (`http://127.0.0.1:PORT`).
    pub url: String,
    /// The command it was started with, to start it again.
    pub command: ServerCommand,
    child: Child,
}

impl ServerCommand {
    /// The `cca` binary next to the running program (as cargo builds them), listening on
    /// `listen` with `token_file`, and no other flag yet.
    ///
    /// # Errors
    ///
    /// The system's error when the running program's path is unknown.
    pub fn next_to_this_program(listen: &str, token_file: &Path) -> std::io::Result<Self> {
        let binary = std::env::current_exe()?.with_file_name("cca");
        Ok(ServerCommand {
            binary,
            listen: listen.to_owned(),
            token_file: token_file.to_owned(),
            log: None,
            args: Vec::new(),
        })
    }

    /// Adds flags.
    #[must_use]
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Starts the server and waits until it prints `listening on http://ADDR`.
    ///
    /// # Errors
    ///
    /// [`SpawnError`] when it cannot be run or ends before it listens.
    pub fn start(&self) -> Result<ServerProcess, SpawnError> {
        let stderr = match &self.log {
            Some(path) => std::fs::File::create(path)
                .map(Stdio::from)
                .map_err(|source| self.run_error(source))?,
            None => Stdio::null(),
        };
        let mut child = Command::new(&self.binary)
            .args(["server", "--listen", &self.listen, "--token-file"])
            .arg(&self.token_file)
            .args(&self.args)
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .map_err(|source| self.run_error(source))?;
        let mut line = String::new();
        if let Some(stdout) = child.stdout.take() {
            let _ = BufReader::new(stdout).read_line(&mut line);
        }
        let Some(url) = line.split_whitespace().find(|w| w.starts_with("http://")) else {
            let _ = child.kill();
            let _ = child.wait();
            let log = self.log.as_ref().map_or_else(
                || "(discarded)".to_owned(),
                |path| std::fs::read_to_string(path).unwrap_or_default(),
            );
            return Err(SpawnError::NotListening { printed: line, log });
        };
        Ok(ServerProcess {
            url: url.to_owned(),
            command: self.clone(),
            child,
        })
    }

    fn run_error(&self, source: std::io::Error) -> SpawnError {
        SpawnError::Run {
            binary: self.binary.clone(),
            source,
        }
    }
}

impl ServerProcess {
    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The address it listens on (`127.0.0.1:PORT`), from its URL.
    pub fn addr(&self) -> &str {
        self.url.trim_start_matches("http://")
    }

    /// Kills it (SIGKILL) and waits for it to end.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}
