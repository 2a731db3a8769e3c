//! Prints the resident memory of a MemoryStore holding 1,000,000 facts with 100-byte values,
//! after compaction.
//!
//! `cargo run --release -p ccattler-benches --bin memory_footprint [-- FACTS] [--sequential]`
//!
//! Keys are `desired/instance/{16 hex digits}`, spread over the key space like the random ids
//! controllers create; `--sequential` inserts them in ascending order instead, the worst case for
//! the B-tree (its nodes stay about half full).

use std::fmt::Write;

use ccattler_benches::{now, resident_bytes};
use ccattler_core::{FactStore, Key, Value};
use ccattler_store::MemoryStore;

/// Spreads sequential numbers over the key space, as the random 64-bit ids that controllers
/// create do (keys inserted in ascending order would leave the B-tree's nodes half full).
fn spread(i: usize) -> u64 {
    (i as u64)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .rotate_left(29)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let sequential = args.iter().any(|a| a == "--sequential");
    let facts: usize = args
        .iter()
        .find(|a| !a.starts_with("--"))
        .map(|n| n.parse())
        .transpose()?
        .unwrap_or(1_000_000);
    let before = resident_bytes().unwrap_or(0);
    let store = MemoryStore::new();
    // Keys and values are formatted into reused buffers, so that the only allocations left
    // behind are the store's own.
    let (mut key, mut value) = (String::new(), String::new());
    for i in 0..facts {
        key.clear();
        value.clear();
        let id = if sequential { i as u64 } else { spread(i) };
        write!(key, "desired/instance/{id:016x}")?;
        write!(value, "{i:0100}")?;
        // A value of its own per fact, as real facts have, exactly 100 bytes long.
        now(store.put(&Key::new(&key)?, Value::copy_from_slice(value.as_bytes())))?;
    }
    let filled = resident_bytes().unwrap_or(0);
    let order = if sequential { "ascending" } else { "spread" };
    println!(
        "{order} keys, before compaction: {:.1} MB resident",
        filled as f64 / 1e6
    );
    let revision = now(store.revision())?;
    now(store.compact(revision))?;
    let after = resident_bytes().unwrap_or(0);
    let used = after.saturating_sub(before);
    println!(
        "{facts} facts of 100 bytes (keys of {} bytes) after compaction: {:.1} MB resident \
         ({:.0} bytes per fact; process total {:.1} MB)",
        "desired/instance/0123456789abcdef".len(),
        used as f64 / 1e6,
        used as f64 / facts as f64,
        after as f64 / 1e6,
    );
    Ok(())
}
