//! Host directories behind an instance's volume mounts.

use ccattler_core::{InstanceSpec, RuntimeError};

/// Creates the host directory of each of `spec`'s mounts (a volume's directory on the node), so
/// that a runtime that mounts host paths finds them. Runtimes that run on the host call it
/// before they start an instance; the simulator, which touches no disk, does not.
///
/// # Errors
///
/// [`RuntimeError::StartFailed`] naming the directory that cannot be created.
pub(crate) fn prepare(spec: &InstanceSpec) -> Result<(), RuntimeError> {
    spec.mounts.iter().try_for_each(|mount| {
        std::fs::create_dir_all(&mount.source).map_err(|err| RuntimeError::StartFailed {
            id: spec.id.clone(),
            reason: format!("volume directory {}: {err}", mount.source.display()),
        })
    })
}
