//! A tiny test image built from a static busybox binary (Debian's `busybox-static` installs one at
//! `/usr/bin/busybox`), written as an OCI image layout tarball that
//! [`ContainerdRuntime::import_oci_archive`](super::ContainerdRuntime::import_oci_archive) takes.
//!
//! The image has one gzip layer: `/bin/busybox`, a symlink per applet in [`APPLETS`], and the
//! empty directories a container needs (`/dev`, `/proc`, `/sys`, `/tmp`, ...). Every entry has
//! mtime 0 and uid/gid 0, so the same binary always gives the same digests. Its default command
//! is `sh`.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use flate2::Compression;
use flate2::write::GzEncoder;
use serde_json::json;

use super::image::sha256_digest;

/// Where Debian's `busybox-static` puts the binary.
pub const DEBIAN_BUSYBOX: &str = "/usr/bin/busybox";

/// The socket of the private containerd that `scripts/containerd-up` starts, for tests and
/// benches: `CCATTLER_CONTAINERD_SOCKET` if set, else the path that script records, else its
/// default.
pub fn test_socket() -> PathBuf {
    if let Ok(path) = std::env::var("CCATTLER_CONTAINERD_SOCKET") {
        return PathBuf::from(path);
    }
    std::fs::read_to_string("/tmp/ccattler-containerd/socket-path")
        .map(|p| PathBuf::from(p.trim()))
        .unwrap_or_else(|_| PathBuf::from("/tmp/ccattler-containerd/containerd.sock"))
}

/// The applets linked into `/bin`.
pub const APPLETS: &[&str] = &[
    "sh", "ash", "cat", "echo", "env", "false", "head", "hostname", "id", "kill", "ls", "mkdir",
    "printf", "ps", "pwd", "rm", "seq", "sleep", "tail", "test", "touch", "true", "wc", "yes",
];

const DIRS: &[&str] = &["bin", "dev", "etc", "proc", "root", "run", "sys", "tmp"];
const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const CONFIG: &str = "application/vnd.oci.image.config.v1+json";
const LAYER: &str = "application/vnd.oci.image.layer.v1.tar+gzip";

/// Writes an OCI image layout tarball at `archive` holding one image, `name` (recorded as the
/// index's `org.opencontainers.image.ref.name`), made from the busybox binary at `busybox`.
///
/// # Errors
///
/// When `busybox` cannot be read or `archive` cannot be written.
pub fn write_busybox_archive(busybox: &Path, name: &str, archive: &Path) -> io::Result<()> {
    let binary = std::fs::read(busybox)?;
    let layer_tar = layer(&binary)?;
    let diff_id = sha256_digest(&layer_tar);
    let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
    gz.write_all(&layer_tar)?;
    let layer_gz = gz.finish()?;
    let config = json!({
        "architecture": goarch(),
        "os": "linux",
        "config": {
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "Cmd": ["sh"],
            "WorkingDir": "/",
        },
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    })
    .to_string()
    .into_bytes();
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "config": {"mediaType": CONFIG, "digest": sha256_digest(&config), "size": config.len()},
        "layers": [{"mediaType": LAYER, "digest": sha256_digest(&layer_gz), "size": layer_gz.len()}],
    })
    .to_string()
    .into_bytes();
    let index = json!({
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": MANIFEST,
            "digest": sha256_digest(&manifest),
            "size": manifest.len(),
            "annotations": {"org.opencontainers.image.ref.name": name},
        }],
    })
    .to_string()
    .into_bytes();

    let mut out = tar::Builder::new(std::fs::File::create(archive)?);
    add_file(
        &mut out,
        "oci-layout",
        br#"{"imageLayoutVersion":"1.0.0"}"#,
        0o644,
    )?;
    add_file(&mut out, "index.json", &index, 0o644)?;
    for blob in [&layer_gz, &config, &manifest] {
        let path = format!("blobs/{}", sha256_digest(blob).replacen(':', "/", 1));
        add_file(&mut out, &path, blob, 0o644)?;
    }
    out.into_inner()?.sync_all()
}

/// The uncompressed layer tar.
fn layer(binary: &[u8]) -> io::Result<Vec<u8>> {
    let mut tar = tar::Builder::new(Vec::new());
    for dir in DIRS {
        let mut header = header(tar::EntryType::Directory, 0o755, 0);
        tar.append_data(&mut header, format!("{dir}/"), io::empty())?;
    }
    add_file(&mut tar, "bin/busybox", binary, 0o755)?;
    for applet in APPLETS {
        let mut header = header(tar::EntryType::Symlink, 0o777, 0);
        tar.append_link(&mut header, format!("bin/{applet}"), "busybox")?;
    }
    tar.into_inner()
}

fn add_file<W: Write>(
    tar: &mut tar::Builder<W>,
    path: &str,
    data: &[u8],
    mode: u32,
) -> io::Result<()> {
    let mut header = header(tar::EntryType::Regular, mode, data.len() as u64);
    tar.append_data(&mut header, path, data)
}

fn header(kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(kind);
    header.set_mode(mode);
    header.set_size(size);
    header.set_mtime(0);
    header.set_uid(0);
    header.set_gid(0);
    header
}

fn goarch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layer_is_deterministic_and_links_the_applets() {
        let a = layer(b"not really busybox").ok();
        let b = layer(b"not really busybox").ok();
        assert!(a.is_some());
        assert_eq!(a, b);
        let data = a.unwrap_or_default();
        let mut archive = tar::Archive::new(data.as_slice());
        let names: Vec<String> = archive
            .entries()
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.path().ok().map(|p| p.to_string_lossy().into_owned()))
            .collect();
        assert!(names.contains(&"bin/sh".to_owned()));
        assert!(names.contains(&"bin/busybox".to_owned()));
    }
}
