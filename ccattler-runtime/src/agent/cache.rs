//! The agent's on-disk cache of the last desired state it saw, so that it keeps workloads
//! running when it restarts while the store is unreachable.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use ccattler_core::LeaseId;
use ccattler_core::schema::{Assignment, ServiceSpec};
use serde::{Deserialize, Serialize};

/// What the agent knows it should run: its placements and the specs of their services.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Desired {
    /// Placements on this node, by instance id.
    pub placements: BTreeMap<String, Assignment>,
    /// Service specs by service name.
    pub specs: BTreeMap<String, ServiceSpec>,
    /// Secret values by name (the file is written with mode 0600).
    #[serde(default)]
    pub secrets: BTreeMap<String, Vec<u8>>,
    /// The lease the node held, to resume it after a restart.
    #[serde(default)]
    pub lease: Option<i64>,
}

impl Desired {
    /// The spec an instance runs, if known.
    pub fn spec_of(&self, id: &str) -> Option<&ServiceSpec> {
        let assignment = self.placements.get(id)?;
        self.specs.get(&assignment.service)
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

    /// Writes the desired state atomically (a temp file renamed over the old one).
    ///
    /// # Errors
    ///
    /// The I/O error when the directory is not writable.
    pub fn save(&self, desired: &Desired) -> io::Result<()> {
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let temp = self.path.with_extension("json.tmp");
        let bytes = serde_json::to_vec(desired).map_err(io::Error::other)?;
        std::fs::write(&temp, bytes)?;
        // It holds secrets: only the agent's user may read it.
        std::fs::set_permissions(&temp, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
        std::fs::rename(&temp, &self.path)
    }
}
