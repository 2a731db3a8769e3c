//! Probes: HTTP, TCP and exec checks with thresholds, and the health they add up to.

use std::time::Duration;

use ccattler_core::Runtime;
use ccattler_core::schema::{Probe, ProbeCheck};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

/// Which of an instance's three probes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ProbeKind {
    /// Gates the other two until it first passes.
    Startup,
    /// A failure restarts the instance (per its restart policy).
    Liveness,
    /// A failure takes the instance out of its service's endpoints.
    Readiness,
}

impl ProbeKind {
    /// The three kinds, in the order the agent checks them.
    pub const ALL: [ProbeKind; 3] = [
        ProbeKind::Startup,
        ProbeKind::Liveness,
        ProbeKind::Readiness,
    ];

    /// The probe of this kind that `spec` declares, if any.
    pub fn of(self, spec: &ccattler_core::schema::ServiceSpec) -> Option<&Probe> {
        match self {
            ProbeKind::Startup => spec.startup.as_ref(),
            ProbeKind::Liveness => spec.liveness.as_ref(),
            ProbeKind::Readiness => spec.readiness.as_ref(),
        }
    }

    /// The kind's name as the trace and the logs show it.
    pub fn name(self) -> &'static str {
        match self {
            ProbeKind::Startup => "startup",
            ProbeKind::Liveness => "liveness",
            ProbeKind::Readiness => "readiness",
        }
    }
}

/// The running verdict of one probe of one instance, on the agent's clock (time since the
/// agent's origin, so that the state machine can be stepped on virtual time).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeState {
    probe: Probe,
    started: Duration,
    next: Duration,
    successes: u32,
    failures: u32,
    /// `None` until the thresholds decided; then whether the probe passes.
    pub passing: Option<bool>,
    /// The last failure's reason.
    pub last_error: Option<String>,
}

impl ProbeState {
    /// A probe that starts checking `initial_delay` after `started`.
    pub fn new(probe: Probe, started: Duration) -> Self {
        let next = started.saturating_add(probe.initial_delay);
        ProbeState {
            probe,
            started,
            next,
            successes: 0,
            failures: 0,
            passing: None,
            last_error: None,
        }
    }

    /// The probe checked.
    pub fn probe(&self) -> &Probe {
        &self.probe
    }

    /// When the instance this probe watches was (re)started.
    pub fn started(&self) -> Duration {
        self.started
    }

    /// Whether a check is due at `now`.
    pub fn due(&self, now: Duration) -> bool {
        now >= self.next
    }

    /// Records a check's result; returns whether the verdict changed. The next check is due one
    /// period (at least 100 ms) later.
    pub fn record(&mut self, now: Duration, result: Result<(), String>) -> bool {
        self.next = now.saturating_add(self.probe.every.max(Duration::from_millis(100)));
        let before = self.passing;
        match result {
            Ok(()) => {
                self.successes += 1;
                self.failures = 0;
                self.last_error = None;
                if self.successes >= self.probe.success_threshold.max(1) {
                    self.passing = Some(true);
                }
            }
            Err(reason) => {
                self.failures += 1;
                self.successes = 0;
                self.last_error = Some(reason);
                if self.failures >= self.probe.failure_threshold.max(1) {
                    self.passing = Some(false);
                }
            }
        }
        before != self.passing
    }
}

/// Runs `probe` once against instance `id`, served at `address` (`host:port`): the I/O half of a
/// probe, which the agent's driver performs for an [`Action::Probe`](super::Action::Probe).
///
/// # Errors
///
/// Why the check failed, for people (refused, timed out, a status or exit code).
pub async fn check<R: Runtime>(
    probe: &Probe,
    runtime: &R,
    id: &str,
    address: Option<&str>,
) -> Result<(), String> {
    let limit = probe.timeout.max(Duration::from_millis(10));
    match &probe.check {
        ProbeCheck::Tcp => {
            let address = address.ok_or("the instance exposes no port")?;
            match timeout(limit, TcpStream::connect(address)).await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(err)) => Err(format!("tcp {address}: {err}")),
                Err(_) => Err(format!("tcp {address}: timed out after {limit:?}")),
            }
        }
        ProbeCheck::Http { path } => {
            let address = address.ok_or("the instance exposes no port")?;
            match timeout(limit, http_get(address, path)).await {
                Ok(Ok(status)) if (200..400).contains(&status) => Ok(()),
                Ok(Ok(status)) => Err(format!("http {address}{path}: status {status}")),
                Ok(Err(err)) => Err(format!("http {address}{path}: {err}")),
                Err(_) => Err(format!("http {address}{path}: timed out after {limit:?}")),
            }
        }
        ProbeCheck::Exec { command } => {
            let argv = vec!["sh".to_owned(), "-c".to_owned(), command.clone()];
            match runtime.exec(id, &argv, limit).await {
                Ok(output) if output.code == 0 => Ok(()),
                Ok(output) => Err(format!("exec {command:?}: exit code {}", output.code)),
                Err(err) => Err(format!("exec {command:?}: {err}")),
            }
        }
    }
}

/// A minimal HTTP/1.0 GET: the status code of the answer.
async fn http_get(address: &str, path: &str) -> std::io::Result<u16> {
    let mut stream = TcpStream::connect(address).await?;
    let request =
        format!("GET {path} HTTP/1.0\r\nHost: {address}\r\nUser-Agent: ccattler-probe\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut head = [0u8; 64];
    let mut read = 0;
    while read < 12 {
        let n = stream.read(&mut head[read..]).await?;
        if n == 0 {
            break;
        }
        read += n;
    }
    let line = String::from_utf8_lossy(&head[..read]);
    line.split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP answer: {line:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_decide_the_verdict() {
        let now = Duration::from_secs(1);
        let mut probe = Probe::new(ProbeCheck::Tcp);
        probe.failure_threshold = 2;
        probe.success_threshold = 2;
        let mut state = ProbeState::new(probe, now);
        assert!(!state.record(now, Ok(())), "one success is not enough");
        assert!(state.record(now, Ok(())));
        assert_eq!(state.passing, Some(true));
        assert!(!state.record(now, Err("refused".into())));
        assert!(state.record(now, Err("refused".into())));
        assert_eq!(state.passing, Some(false));
        assert_eq!(state.last_error.as_deref(), Some("refused"));
    }
}
