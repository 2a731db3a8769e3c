//! The agent's on-disk cache of the last desired state it saw, so that it keeps workloads
//! running when it restarts while the store is unreachable.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ccattler_core::LeaseId;
use ccattler_core::schema::{Assignment, ServiceSpec};
use serde::{Deserialize, Serialize};

/// What the agent knows it should run: its placements, the specs of the versions they run, and
/// the secrets those specs name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Desired {
    /// Placements on this node, by instance id.
    pub placements: BTreeMap<String, Assignment>,
    /// Service specs by service name, then by spec version. During a rollout a node may run
    /// instances of two versions of one service; each starts (and restarts) with its own.
    /// Shared (`Arc`): a spec is large, and the state is copied for every save of the cache.
    pub specs: BTreeMap<String, BTreeMap<String, Arc<ServiceSpec>>>,
    /// Secret values by name (the file is written with mode 0600).
    #[serde(default)]
    pub secrets: BTreeMap<String, Vec<u8>>,
    /// The lease the node held, to resume it after a restart.
    #[serde(default)]
    pub lease: Option<i64>,
}

impl Desired {
    /// The spec an instance runs (the version its placement names), if known.
    pub fn spec_of(&self, id: &str) -> Option<&ServiceSpec> {
        let assignment = self.placements.get(id)?;
        self.spec(&assignment.service, &assignment.version)
    }

    /// The spec of one version of a service, if known.
    pub fn spec(&self, service: &str, version: &str) -> Option<&ServiceSpec> {
        self.specs.get(service)?.get(version).map(|spec| &**spec)
    }

    /// Keeps the specs some placement runs and the secrets those specs name; drops the rest.
    pub fn forget_unused(&mut self) {
        let used: std::collections::BTreeSet<(&str, &str)> = self
            .placements
            .values()
            .map(|a| (a.service.as_str(), a.version.as_str()))
            .collect();
        for (service, versions) in &mut self.specs {
            versions.retain(|version, _| used.contains(&(service.as_str(), version.as_str())));
        }
        self.specs.retain(|_, versions| !versions.is_empty());
        let named = self.named_secrets();
        self.secrets.retain(|name, _| named.contains(name));
    }

    /// Whether any known spec names a secret (no allocation: asked at every deadline).
    pub fn names_secrets(&self) -> bool {
        self.specs
            .values()
            .flat_map(|versions| versions.values())
            .any(|spec| !spec.secrets.is_empty())
    }

    /// The secrets the known specs name.
    pub fn named_secrets(&self) -> std::collections::BTreeSet<String> {
        self.specs
            .values()
            .flat_map(|versions| versions.values())
            .flat_map(|spec| spec.secrets.iter().map(|s| s.name.clone()))
            .collect()
    }

    /// The lease to resume, if any.
    pub fn lease_id(&self) -> Option<LeaseId> {
        self.lease.map(LeaseId)
    }
}

/// The cache file in a directory.
#[derive(Clone, Debug)]
pub struct Cache {
    path: PathBuf,
}

impl Cache {
    /// The cache kept in `dir` (created on first save).
    pub fn new(dir: &Path) -> Self {
        Cache {
            path: dir.join("desired.json"),
        }
    }

    /// The cached desired state; empty when there is none or it is unreadable.
    pub fn load(&self) -> Desired {
        std::fs::read(&self.path)
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default()
    }

    /// Writes the desired state atomically and durably: a temp file created with mode 0600 (it
    /// holds secrets: private from its first byte), synced to disk, then renamed over the old
    /// one.
    ///
    /// # Errors
    ///
    /// The I/O error when the directory is not writable.
    pub fn save(&self, desired: &Desired) -> io::Result<()> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;

        let temp = self.path.with_extension("json.tmp");
        let bytes = serde_json::to_vec(desired).map_err(io::Error::other)?;
        // A temp file left by a crash may have other permissions: start from none.
        match std::fs::remove_file(&temp) {
            Ok(()) => {}
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(err) => return Err(err),
        }
        let create = || {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&temp)
        };
        // The directory is made by the first save only, not looked up again by every one.
        let mut file = match create() {
            Err(err) if err.kind() == io::ErrorKind::NotFound => {
                if let Some(dir) = self.path.parent() {
                    std::fs::create_dir_all(dir)?;
                }
                create()?
            }
            opened => opened?,
        };
        file.write_all(&bytes)?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&temp, &self.path)
    }

    /// The path of the cache file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn the_cache_is_private_from_its_first_byte_and_round_trips() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = Cache::new(dir.path());
        // A temp file a crash left, readable by everyone: not reused as it is.
        let temp = cache.path().with_extension("json.tmp");
        std::fs::write(&temp, b"stale").expect("write");
        std::fs::set_permissions(&temp, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let mut desired = Desired::default();
        desired
            .secrets
            .insert("db-pass".into(), b"hunter2".to_vec());
        cache.save(&desired).expect("save");
        let mode = std::fs::metadata(cache.path())
            .expect("metadata")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(!temp.exists(), "renamed into place");
        assert_eq!(cache.load(), desired);
    }
}
