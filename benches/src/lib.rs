//! Helpers shared by the benchmarks in `benches/` and the figure-printing programs in `src/bin`.
//!
//! Run the benchmarks with `cargo bench -p ccattler-benches` (criterion prints the median of
//! each), and the memory figure with
//! `cargo run --release -p ccattler-benches --bin memory_footprint`.
//!
//! | module | what it holds |
//! |---|---|
//! | [`kept`] | figures kept in `benches/figures/`, printed beside those measured |
//! | [`policy`] | a cluster with network policy at a size (the rule-set bench, `network_figures`) |
//! | [`whole_loop`] | the whole loop's phases at a size, in real time ([`whole_loop::dev`]) and in virtual time ([`whole_loop::sim`]) |

pub mod kept;
pub mod policy;
pub mod whole_loop;

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

/// Polls a future once and returns its output.
///
/// MemoryStore's operations complete without waiting, so the store benchmarks measure them with
/// no executor in the way.
///
/// # Panics
///
/// If the future is not ready on its first poll.
pub fn now<F: Future>(future: F) -> F::Output {
    let mut cx = Context::from_waker(Waker::noop());
    match pin!(future).poll(&mut cx) {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("the future was expected to complete at once"),
    }
}

/// The resident set size of this process in bytes, from `/proc/self/status`.
pub fn resident_bytes() -> Option<u64> {
    status_bytes(std::process::id(), "VmRSS:")
}

/// The peak resident set size of this process so far in bytes, from `/proc/self/status`.
pub fn peak_resident_bytes() -> Option<u64> {
    status_bytes(std::process::id(), "VmHWM:")
}

/// The clock ticks per second `/proc/PID/stat` counts CPU time in (`USER_HZ`, 100 on Linux
/// whatever the kernel's own tick rate).
pub const USER_HZ: f64 = 100.0;

/// A size field of `/proc/PID/status` (`VmRSS:`, `VmHWM:`; KiB there), in bytes.
pub fn status_bytes(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The CPU time process `pid` has used so far (user and system, every thread), in seconds,
/// to the hundredth.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name, in parentheses, may hold spaces: count fields after its end.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line; the 12th and 13th after the name.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / USER_HZ)
}
