//! Helpers shared by the benchmarks in `benches/` and the figure-printing programs in `src/bin`.
//!
//! Run the benchmarks with `cargo bench -p ccattler-benches` (criterion prints the median of
//! each), and the memory figure with
//! `cargo run --release -p ccattler-benches --bin memory_footprint`.
//!
//! | module | what it holds |
//! |---|---|
//! | [`kept`] | figures kept in `benches/figures/`, printed beside those measured |
//! | [`whole_loop`] | the whole loop's phases at a size, in real time ([`whole_loop::dev`]) and in virtual time ([`whole_loop::sim`]) |

pub mod kept;
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
    status_bytes("VmRSS:")
}

/// The peak resident set size of this process so far in bytes, from `/proc/self/status`.
pub fn peak_resident_bytes() -> Option<u64> {
    status_bytes("VmHWM:")
}

/// A size field of `/proc/self/status` (given in KiB there), in bytes.
fn status_bytes(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
