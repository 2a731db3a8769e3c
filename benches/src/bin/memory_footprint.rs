//! Prints the resident memory of a MemoryStore holding 1,000,000 facts with 100-byte values,
//! after compaction.
//!
//! `cargo run --release -p ccattler-benches --bin memory_footprint [-- FACTS]`

use ccattler_benches::{now, resident_bytes};
use ccattler_core::{FactStore, Key, Value};
use ccattler_store::MemoryStore;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let facts: usize = std::env::args()
        .nth(1)
        .map(|n| n.parse())
        .transpose()?
        .unwrap_or(1_000_000);
    let before = resident_bytes().unwrap_or(0);
    let store = MemoryStore::new();
    for i in 0..facts {
        let key = Key::new(format!("desired/instance/{i:012}"))?;
        // A value of its own per fact, as real facts have.
        let mut value = format!("{i:0100}").into_bytes();
        value.truncate(100);
        now(store.put(&key, Value::from(value)))?;
    }
    let revision = now(store.revision())?;
    now(store.compact(revision))?;
    let after = resident_bytes().unwrap_or(0);
    let used = after.saturating_sub(before);
    println!(
        "{facts} facts of 100 bytes (keys of {} bytes) after compaction: {:.1} MB resident \
         ({:.0} bytes per fact; process total {:.1} MB)",
        "desired/instance/000000000000".len(),
        used as f64 / 1e6,
        used as f64 / facts as f64,
        after as f64 / 1e6,
    );
    Ok(())
}
