//! Drawing the cluster's status while it converges.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use super::progress::ClusterStatus;

/// Draws successive [`ClusterStatus`]es to stdout.
///
/// On a terminal the table is redrawn in place (at most 20 times a second, the last state always
/// drawn on [`finish`](Self::finish)), with a footer of elapsed time and node count. Otherwise each
/// service whose row changed gets one timestamped line, so that logs and tests read a plain
/// history.
#[derive(Debug)]
pub struct Display {
    terminal: bool,
    started: Instant,
    /// Lines of the last drawing (terminal), to move the cursor back over them.
    drawn: usize,
    last_draw: Option<Instant>,
    /// Last line printed per service (plain output).
    printed: Vec<(String, String)>,
    /// Whether the last status printed was converged (plain output).
    converged: bool,
    /// A status not drawn yet because of the redraw limit.
    pending: Option<ClusterStatus>,
}

/// Shortest pause between two redraws on a terminal.
const REDRAW_EVERY: Duration = Duration::from_millis(50);

impl Display {
    /// A display that redraws in place when stdout is a terminal; `started` is time zero.
    pub fn new(started: Instant) -> Self {
        Display {
            terminal: std::io::stdout().is_terminal(),
            started,
            drawn: 0,
            last_draw: None,
            printed: Vec::new(),
            converged: false,
            pending: None,
        }
    }

    /// Shows `status` (see the type docs).
    pub fn show(&mut self, status: &ClusterStatus) {
        if self.terminal {
            let now = Instant::now();
            if self
                .last_draw
                .is_some_and(|at| now.duration_since(at) < REDRAW_EVERY)
            {
                self.pending = Some(status.clone());
                return;
            }
            self.last_draw = Some(now);
            self.pending = None;
            self.redraw(status);
        } else {
            self.print_changes(status);
        }
    }

    /// When a status held back by the redraw limit is due to be drawn (by [`flush`](Self::flush)).
    pub fn pending_until(&self) -> Option<Instant> {
        self.pending.as_ref()?;
        Some(
            self.last_draw
                .map_or_else(Instant::now, |at| at + REDRAW_EVERY),
        )
    }

    /// Draws the status [`show`](Self::show) held back, if any.
    pub fn flush(&mut self) {
        if let Some(status) = self.pending.take() {
            self.last_draw = Some(Instant::now());
            self.redraw(&status);
        }
    }

    /// Draws what is held back and leaves the cursor below the table: later output follows it.
    pub fn finish(&mut self) {
        self.flush();
        self.drawn = 0;
    }

    fn redraw(&mut self, status: &ClusterStatus) {
        let mut out = String::new();
        if self.drawn > 0 {
            // Up over the last drawing, and clear to the end of the screen.
            out.push_str(&format!("\x1b[{}A\x1b[J", self.drawn));
        }
        out.push_str(&status.table());
        out.push_str(&format!(
            "{:.1}s · {} node{} · {}\n",
            self.started.elapsed().as_secs_f64(),
            status.nodes,
            if status.nodes == 1 { "" } else { "s" },
            if status.is_converged() {
                "converged"
            } else {
                "converging"
            },
        ));
        self.drawn = out.matches('\n').count();
        let mut stdout = std::io::stdout().lock();
        let _ = stdout.write_all(out.as_bytes());
        let _ = stdout.flush();
    }

    fn print_changes(&mut self, status: &ClusterStatus) {
        let elapsed = self.started.elapsed().as_secs_f64();
        let mut stdout = std::io::stdout().lock();
        for row in &status.services {
            let line = row.line();
            match self.printed.iter_mut().find(|(name, _)| *name == row.name) {
                Some((_, last)) if *last == line => continue,
                Some((_, last)) => *last = line.clone(),
                None => self.printed.push((row.name.clone(), line.clone())),
            }
            let _ = writeln!(stdout, "[{elapsed:6.2}s] {line}");
        }
        if status.is_converged() != self.converged {
            self.converged = status.is_converged();
            let what = if self.converged {
                "converged"
            } else {
                "converging"
            };
            let _ = writeln!(stdout, "[{elapsed:6.2}s] {what} ({} nodes)", status.nodes);
        }
        let _ = stdout.flush();
    }
}
