//! [`Trace`]: what a simulation did, one line per commit, delivery, fault and action, stamped
//! with virtual time.

use std::collections::VecDeque;
use std::fmt::{self, Write as _};
use std::time::Duration;

/// How much of the trace a run keeps in memory. Every line is hashed either way, so two runs can
/// be compared by [`Trace::digest`] whatever they kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keep {
    /// Every line (for tests that compare or print whole traces).
    All,
    /// The last `n` lines (for long or many runs: enough to show what led to a failure).
    Last(usize),
}

/// The text of a run: lines like `   12.345s n1: ensure_running web-3f2a...`.
///
/// # Guarantees
///
/// The same seed and the same inputs give the same lines, byte for byte: lines hold no
/// addresses, no wall-clock time and nothing drawn from entropy.
#[derive(Clone, Debug)]
pub struct Trace {
    keep: Keep,
    lines: VecDeque<String>,
    count: u64,
    digest: u64,
}

impl Trace {
    /// An empty trace keeping `keep`.
    pub fn new(keep: Keep) -> Self {
        Trace {
            keep,
            lines: VecDeque::new(),
            count: 0,
            digest: 0xcbf2_9ce4_8422_2325,
        }
    }

    /// Appends a line: `who` did `what` at virtual time `at`.
    pub fn line(&mut self, at: Duration, who: &str, what: impl fmt::Display) {
        let mut line = String::with_capacity(64);
        let _ = write!(
            line,
            "{:>6}.{:03}s {who}: {what}",
            at.as_secs(),
            at.subsec_millis()
        );
        // FNV-1a over every line and its end: cheap, stable, enough to tell runs apart.
        for byte in line.bytes().chain(std::iter::once(b'\n')) {
            self.digest = (self.digest ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        self.count += 1;
        self.lines.push_back(line);
        if let Keep::Last(n) = self.keep {
            while self.lines.len() > n {
                self.lines.pop_front();
            }
        }
    }

    /// How many lines were written (kept or not).
    pub fn len(&self) -> u64 {
        self.count
    }

    /// Whether nothing was written.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// A hash of every line written: equal for equal traces.
    pub fn digest(&self) -> u64 {
        self.digest
    }

    /// The lines kept, oldest first.
    pub fn lines(&self) -> impl Iterator<Item = &str> {
        self.lines.iter().map(String::as_str)
    }

    /// The last `n` lines kept, joined by newlines.
    pub fn tail(&self, n: usize) -> String {
        let skip = self.lines.len().saturating_sub(n);
        let mut out = String::new();
        for line in self.lines.iter().skip(skip) {
            out.push_str(line);
            out.push('\n');
        }
        out
    }
}

/// The kept lines, one per line.
impl fmt::Display for Trace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for line in &self.lines {
            writeln!(f, "{line}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_stamped_kept_and_hashed() {
        let mut all = Trace::new(Keep::All);
        let mut last = Trace::new(Keep::Last(1));
        for trace in [&mut all, &mut last] {
            trace.line(Duration::from_millis(12_345), "n1", "observe");
            trace.line(Duration::from_millis(12_350), "n1", "report +web-1");
        }
        assert_eq!(
            all.to_string(),
            "    12.345s n1: observe\n    12.350s n1: report +web-1\n"
        );
        assert_eq!(last.tail(5), "    12.350s n1: report +web-1\n");
        assert_eq!(all.digest(), last.digest(), "the hash covers dropped lines");
        assert_eq!(last.len(), 2);
    }
}
