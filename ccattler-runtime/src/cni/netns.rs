//! Named network namespaces (`/run/netns/{name}`), made and deleted with iproute2's `ip netns`.

use std::path::PathBuf;

use tokio::process::Command;

use super::CniError;

/// Where `ip netns` keeps named namespaces.
const NETNS_DIR: &str = "/run/netns";

/// The path of namespace `name`.
pub(super) fn path(name: &str) -> PathBuf {
    PathBuf::from(NETNS_DIR).join(name)
}

/// Makes namespace `name`.
pub(super) async fn create(name: &str) -> Result<PathBuf, CniError> {
    ip(&["netns", "add", name]).await?;
    Ok(path(name))
}

/// Deletes namespace `name`, if it exists.
pub(super) async fn delete(name: &str) -> Result<(), CniError> {
    if !path(name).exists() {
        return Ok(());
    }
    ip(&["netns", "del", name]).await
}

async fn ip(args: &[&str]) -> Result<(), CniError> {
    let output = Command::new("ip")
        .args(args)
        .output()
        .await
        .map_err(|source| CniError::Netns {
            what: format!("ip {}", args.join(" ")),
            reason: format!("{source}; install iproute2"),
        })?;
    if output.status.success() {
        Ok(())
    } else {
        Err(CniError::Netns {
            what: format!("ip {}", args.join(" ")),
            reason: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        })
    }
}
