//! The disk a node's volumes use: the agent measures their directories at its telemetry
//! interval and reports the figures in `telemetry/node/{node}`.
//!
//! The layout is the agent's (see [`claim_dir`] and [`instance_data`](super::spec)): each
//! persistent volume's data in a directory of its own under `{volumes}/persistent/`, named
//! after its claim with `%` and `/` escaped (a claim is one directory, whatever its name),
//! and each instance's other volumes under `{volumes}/instance/{id}/`.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use ccattler_core::schema::Memory;

/// What one measurement of the node's volumes found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VolumeDisk {
    /// Each persistent volume's data on the node, by claim (`data`, `data@0`).
    pub persistent: BTreeMap<String, Memory>,
    /// The data of each instance's volumes that are not persistent, by instance id.
    pub instances: BTreeMap<String, Memory>,
}

impl VolumeDisk {
    /// Whether the node holds no volume data at all.
    pub fn is_empty(&self) -> bool {
        self.persistent.is_empty() && self.instances.is_empty()
    }
}

/// The directory of persistent volume `claim`'s data under `volumes`: one directory whatever
/// the claim (`team/data` is `team%2Fdata`), so that a walk of `persistent/` finds each claim.
pub(super) fn claim_dir(volumes: &Path, claim: &str) -> PathBuf {
    let escaped = claim.replace('%', "%25").replace('/', "%2F");
    volumes.join("persistent").join(escaped)
}

/// The claim a directory under `persistent/` holds (the inverse of [`claim_dir`]).
fn claim_of(dir_name: &str) -> String {
    dir_name.replace("%2F", "/").replace("%25", "%")
}

/// Measures the data under `volumes` (the node's volumes directory): the blocks each file and
/// directory holds, as `du` counts them. A directory that does not exist holds nothing; an
/// entry that cannot be read (removed during the walk, no permission) is left out, so a
/// figure may be low but the measurement never fails. Blocking: the driver runs it on a
/// thread of its own.
pub fn measure(volumes: &Path) -> VolumeDisk {
    let per_entry = |dir: PathBuf| -> BTreeMap<String, Memory> {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return BTreeMap::new();
        };
        entries
            .filter_map(Result::ok)
            .filter_map(|entry| {
                let name = entry.file_name().into_string().ok()?;
                Some((name, Memory::from_bytes(tree_bytes(&entry.path()))))
            })
            .collect()
    };
    VolumeDisk {
        persistent: per_entry(volumes.join("persistent"))
            .into_iter()
            .map(|(name, used)| (claim_of(&name), used))
            .collect(),
        instances: per_entry(volumes.join("instance")),
    }
}

/// The bytes of the blocks under `root` (itself included), links not followed.
fn tree_bytes(root: &Path) -> u64 {
    walkdir::WalkDir::new(root)
        .into_iter()
        .filter_map(Result::ok)
        .filter_map(|entry| entry.metadata().ok())
        .map(|meta| meta.blocks().saturating_mul(512))
        .fold(0, u64::saturating_add)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_claim_and_instance_is_measured_apart() {
        let dir = tempfile::tempdir().expect("temp dir");
        let volumes = dir.path();
        for (claim, bytes) in [("data@0", 3 << 20), ("team/data", 1 << 20)] {
            let data = claim_dir(volumes, claim).join("sub");
            std::fs::create_dir_all(&data).expect("dir");
            std::fs::write(data.join("file"), vec![7u8; bytes]).expect("write");
        }
        let scratch = volumes.join("instance").join("web-1").join("cache");
        std::fs::create_dir_all(&scratch).expect("dir");
        std::fs::write(scratch.join("file"), vec![1u8; 2 << 20]).expect("write");

        let disk = measure(volumes);
        let names: Vec<&str> = disk.persistent.keys().map(String::as_str).collect();
        assert_eq!(names, ["data@0", "team/data"]);
        assert!(disk.persistent["data@0"].bytes() >= 3 << 20);
        assert!(disk.persistent["team/data"].bytes() >= 1 << 20);
        assert!(disk.persistent["team/data"].bytes() < 3 << 20);
        assert!(disk.instances["web-1"].bytes() >= 2 << 20);
        assert!(measure(&volumes.join("absent")).is_empty());
    }

    #[test]
    fn escaping_is_reversible() {
        for claim in ["data", "data@2", "team/data", "100%", "a%2Fb"] {
            let dir = claim_dir(Path::new("/v"), claim);
            let name = dir.file_name().and_then(|n| n.to_str()).expect("name");
            assert!(!name.contains('/'));
            assert_eq!(claim_of(name), claim);
        }
    }
}
