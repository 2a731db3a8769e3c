//! Rewriting the files of a running container in place (a changed secret or config file).
//!
//! A container sees each of its spec's files through a read-only bind mount of one host file
//! under the instance's directory. A bind mount pins the inode, so a file replaced by rename
//! would not be seen: the host file is truncated and written again in place instead.
//!
//! # Caveats
//!
//! Not atomic: a workload reading the file at that moment may see it empty or half written.
//! Workloads that reload on change should reread after a short pause or check the content.

use std::path::Path;

use ccattler_core::{FileSpec, RuntimeError};
use containerd_client::services::v1::Container;

use super::Inner;

impl Inner {
    /// Rewrites `files` of container `id`: each must be one of the files it started with.
    pub(super) async fn update_files(
        &self,
        id: &str,
        files: &[FileSpec],
    ) -> Result<(), RuntimeError> {
        let container = self
            .container(id)
            .await?
            .ok_or_else(|| RuntimeError::NotFound(id.to_owned()))?;
        let own = self.instance_dir(id).join("files");
        for file in files {
            let host = host_file(&container, &file.path, &own).ok_or_else(|| {
                RuntimeError::StartFailed {
                    id: id.to_owned(),
                    reason: format!("{} is not one of the files it started with", file.path),
                }
            })?;
            write_in_place(&host, file)
                .await
                .map_err(|e| RuntimeError::StartFailed {
                    id: id.to_owned(),
                    reason: format!("cannot rewrite {}: {e}", file.path),
                })?;
        }
        Ok(())
    }
}

/// The host file bind-mounted at `target`, if it is one of the instance's own files.
fn host_file(container: &Container, target: &str, own: &Path) -> Option<std::path::PathBuf> {
    let spec: serde_json::Value = container
        .spec
        .as_ref()
        .and_then(|any| serde_json::from_slice(&any.value).ok())?;
    spec["mounts"]
        .as_array()?
        .iter()
        .find(|m| m["destination"] == target)
        .and_then(|m| m["source"].as_str())
        .map(std::path::PathBuf::from)
        .filter(|source| source.starts_with(own))
}

async fn write_in_place(host: &Path, file: &FileSpec) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    use tokio::io::AsyncWriteExt;

    let mut out = tokio::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(host)
        .await?;
    out.write_all(&file.content).await?;
    out.sync_all().await?;
    tokio::fs::set_permissions(host, std::fs::Permissions::from_mode(file.mode & 0o7777)).await
}
