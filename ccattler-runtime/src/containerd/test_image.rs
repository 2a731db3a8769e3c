//! A tiny test image built from a static busybox binary (Debian's `busybox-static` installs one at
//! `/usr/bin/busybox`), written as an OCI image layout tarball that
//! [`ContainerdRuntime::import_oci_archive`](super::ContainerdRuntime::import_oci_archive) takes.
//!
//! The image has one gzip layer: `/bin/busybox`, a symlink per applet in [`APPLETS`], and the
//! empty directories a container needs (`/dev`, `/proc`, `/sys`, `/tmp`, ...). Every entry has
//! mtime 0 and uid/gid 0, so the same binary always gives the same digests. Its default command
//! is `sh`. [`TestImage`] holds the same image's blobs in memory, optionally padded to a size,
//! and pushes them to a registry (the tests' and benches' own loopback registry).

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
const INDEX: &str = "application/vnd.oci.image.index.v1+json";

/// The blobs of one single-layer image, in memory.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TestImage {
    /// The manifest (OCI image manifest JSON).
    pub manifest: Vec<u8>,
    /// The config JSON.
    pub config: Vec<u8>,
    /// The gzip layer.
    pub layer: Vec<u8>,
}

impl TestImage {
    /// The busybox image of the module docs, made from the busybox binary at `busybox`; with
    /// `padding` > 0 its layer also has `/padding`, that many bytes that do not compress (so
    /// the layer is about that much bigger), the same bytes every time; with a `note`, the
    /// layer has it in `/etc/note` (a unique note makes blobs no store has yet).
    ///
    /// # Errors
    ///
    /// When `busybox` cannot be read.
    pub fn busybox(busybox: &Path, padding: usize, note: &str) -> io::Result<TestImage> {
        let binary = std::fs::read(busybox)?;
        let layer_tar = layer(&binary, padding, note)?;
        let diff_id = sha256_digest(&layer_tar);
        let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
        gz.write_all(&layer_tar)?;
        let layer_gz = gz.finish()?;
        Ok(image(&diff_id, layer_gz))
    }

    /// The manifest's digest (`sha256:...`).
    pub fn manifest_digest(&self) -> String {
        sha256_digest(&self.manifest)
    }

    /// The size of all three blobs, in bytes.
    pub fn size(&self) -> usize {
        self.manifest.len() + self.config.len() + self.layer.len()
    }

    /// Pushes the image to a registry spoken to over plain HTTP (a test registry on loopback)
    /// as `reference` (`HOST:PORT/REPOSITORY:TAG`): the layer, the config, then the manifest,
    /// with basic-auth `credentials` when given. Returns the manifest's digest.
    ///
    /// # Errors
    ///
    /// What the registry client reports, as text.
    pub async fn push(
        &self,
        reference: &str,
        credentials: Option<(&str, &str)>,
    ) -> Result<String, String> {
        let (client, reference, auth) = pusher(reference, credentials)?;
        let fail =
            |e: oci_client::errors::OciDistributionError| format!("push to {reference}: {e}");
        client
            .auth(&reference, &auth, oci_client::RegistryOperation::Push)
            .await
            .map_err(fail)?;
        for blob in [&self.layer, &self.config] {
            client
                .push_blob(&reference, blob.clone(), &sha256_digest(blob))
                .await
                .map_err(fail)?;
        }
        let media_type = http::HeaderValue::from_static(MANIFEST);
        client
            .push_manifest_raw(&reference, self.manifest.clone(), media_type)
            .await
            .map_err(fail)?;
        Ok(self.manifest_digest())
    }

    /// Pushes, as `reference`, an image index whose only entry is this image's manifest (pushed
    /// already) declared for `os`/`architecture`. Returns the index's digest.
    ///
    /// # Errors
    ///
    /// What the registry client reports, as text.
    pub async fn push_index(
        &self,
        reference: &str,
        os: &str,
        architecture: &str,
    ) -> Result<String, String> {
        let (client, reference, auth) = pusher(reference, None)?;
        let fail =
            |e: oci_client::errors::OciDistributionError| format!("push to {reference}: {e}");
        client
            .auth(&reference, &auth, oci_client::RegistryOperation::Push)
            .await
            .map_err(fail)?;
        let index = json!({
            "schemaVersion": 2,
            "mediaType": INDEX,
            "manifests": [{
                "mediaType": MANIFEST,
                "digest": self.manifest_digest(),
                "size": self.manifest.len(),
                "platform": {"os": os, "architecture": architecture},
            }],
        })
        .to_string()
        .into_bytes();
        let digest = sha256_digest(&index);
        let media_type = http::HeaderValue::from_static(INDEX);
        client
            .push_manifest_raw(&reference, index, media_type)
            .await
            .map_err(fail)?;
        Ok(digest)
    }
}

/// A registry client speaking plain HTTP to the registry of `reference`.
fn pusher(
    reference: &str,
    credentials: Option<(&str, &str)>,
) -> Result<
    (
        oci_client::Client,
        oci_client::Reference,
        oci_client::secrets::RegistryAuth,
    ),
    String,
> {
    use oci_client::client::{ClientConfig, ClientProtocol};
    let _already_installed = rustls::crypto::ring::default_provider().install_default();
    let reference: oci_client::Reference = reference
        .parse()
        .map_err(|e| format!("not an image reference {reference:?}: {e}"))?;
    let config = ClientConfig {
        protocol: ClientProtocol::Http,
        ..ClientConfig::default()
    };
    let client = oci_client::Client::try_from(config).map_err(|e| e.to_string())?;
    let auth = match credentials {
        Some((user, password)) => {
            oci_client::secrets::RegistryAuth::Basic(user.to_owned(), password.to_owned())
        }
        None => oci_client::secrets::RegistryAuth::Anonymous,
    };
    Ok((client, reference, auth))
}

/// Writes an OCI image layout tarball at `archive` holding one image, `name` (recorded as the
/// index's `org.opencontainers.image.ref.name`), made from the busybox binary at `busybox`.
///
/// # Errors
///
/// When `busybox` cannot be read or `archive` cannot be written.
pub fn write_busybox_archive(busybox: &Path, name: &str, archive: &Path) -> io::Result<()> {
    let image = TestImage::busybox(busybox, 0, "")?;
    let index = json!({
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": MANIFEST,
            "digest": image.manifest_digest(),
            "size": image.manifest.len(),
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
    for blob in [&image.layer, &image.config, &image.manifest] {
        let path = format!("blobs/{}", sha256_digest(blob).replacen(':', "/", 1));
        add_file(&mut out, &path, blob, 0o644)?;
    }
    out.into_inner()?.sync_all()
}

/// The config and manifest of a single-layer image.
fn image(diff_id: &str, layer_gz: Vec<u8>) -> TestImage {
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
    TestImage {
        manifest,
        config,
        layer: layer_gz,
    }
}

/// The uncompressed layer tar, with `padding` bytes of noise in `/padding` when not zero, and
/// `note` in `/etc/note` when not empty.
fn layer(binary: &[u8], padding: usize, note: &str) -> io::Result<Vec<u8>> {
    let mut tar = tar::Builder::new(Vec::new());
    for dir in DIRS {
        let mut header = header(tar::EntryType::Directory, 0o755, 0);
        tar.append_data(&mut header, format!("{dir}/"), io::empty())?;
    }
    add_file(&mut tar, "bin/busybox", binary, 0o755)?;
    if padding > 0 {
        add_file(&mut tar, "padding", &noise(padding), 0o644)?;
    }
    if !note.is_empty() {
        add_file(&mut tar, "etc/note", note.as_bytes(), 0o644)?;
    }
    for applet in APPLETS {
        let mut header = header(tar::EntryType::Symlink, 0o777, 0);
        tar.append_link(&mut header, format!("bin/{applet}"), "busybox")?;
    }
    tar.into_inner()
}

/// `len` bytes that gzip cannot shrink (xorshift64), the same every time.
fn noise(len: usize) -> Vec<u8> {
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut data = Vec::with_capacity(len + 8);
    while data.len() < len {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        data.extend_from_slice(&state.to_le_bytes());
    }
    data.truncate(len);
    data
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

/// This machine's architecture as OCI platforms name it (`amd64`, `arm64`, ...).
pub(crate) fn goarch() -> &'static str {
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
        let a = layer(b"not really busybox", 0, "").ok();
        let b = layer(b"not really busybox", 0, "").ok();
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
