//! Importing an OCI image layout tarball into containerd's store through the content and images
//! services (containerd 1.6 has no Transfer service), all under one lease so that nothing written
//! is collected before the image references it.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use ccattler_core::RuntimeError;
use containerd_client::services::v1::{
    CreateImageRequest, Image, UpdateImageRequest, WriteAction, WriteContentRequest,
};
use containerd_client::tonic::Code;
use containerd_client::types::Descriptor;
use prost_types::FieldMask;
use serde_json::Value;

use super::Inner;
use super::client::{Conn, Lease, grpc, unique};
use super::content::send_write;
use super::image::{descriptor, ensure_unpacked, resolve, set_label};

const CHUNK: usize = 1 << 20;
const REF_NAME: &str = "org.opencontainers.image.ref.name";

impl Inner {
    /// Imports the archive, then unpacks the image into the snapshotter in use.
    pub(super) async fn import(
        &self,
        lease: &Lease,
        archive: &Path,
        name: Option<&str>,
    ) -> Result<String, RuntimeError> {
        let name = import(&self.conn, lease, archive, name).await?;
        let image = resolve(&self.conn, &name).await?;
        loop {
            match ensure_unpacked(&self.conn, &image, self.snapshotter(), lease).await {
                Ok(()) => return Ok(name),
                Err(s) if s.message().contains("snapshotter not loaded") && self.fall_back() => {}
                Err(s) => return Err(grpc("unpack", s)),
            }
        }
    }
}

/// Imports the first manifest of the OCI layout tarball at `archive` as image `name`, or under the
/// name its index annotates (`org.opencontainers.image.ref.name`) when `name` is `None`.
/// Returns the image name.
pub(crate) async fn import(
    conn: &Conn,
    lease: &Lease,
    archive: &Path,
    name: Option<&str>,
) -> Result<String, RuntimeError> {
    let path = archive.to_path_buf();
    let blobs = tokio::task::spawn_blocking(move || read_archive(&path))
        .await
        .map_err(|e| invalid(archive, &e.to_string()))??;
    let index: Value = json(&blobs, "index.json", archive)?;
    let entry = index["manifests"]
        .get(0)
        .ok_or_else(|| invalid(archive, "index.json lists no manifest"))?;
    let image_name = name
        .map(str::to_owned)
        .or_else(|| entry["annotations"][REF_NAME].as_str().map(str::to_owned))
        .ok_or_else(|| invalid(archive, "no image name given and none in index.json"))?;
    let target = descriptor(entry).ok_or_else(|| invalid(archive, "bad manifest descriptor"))?;
    let manifest: Value = json(&blobs, &blob_path(&target.digest), archive)?;
    let mut children = Vec::new();
    for layer in manifest["layers"].as_array().into_iter().flatten() {
        children.push(descriptor(layer).ok_or_else(|| invalid(archive, "bad layer"))?);
    }
    let config = descriptor(&manifest["config"]).ok_or_else(|| invalid(archive, "bad config"))?;
    let mut refs = vec![(
        "containerd.io/gc.ref.content.config".to_owned(),
        config.digest.clone(),
    )];
    for (i, layer) in children.iter().enumerate() {
        refs.push((
            format!("containerd.io/gc.ref.content.l.{i}"),
            layer.digest.clone(),
        ));
    }
    children.push(config);
    for blob in &children {
        write_blob(conn, lease, &blobs, blob, HashMap::new(), archive).await?;
    }
    write_blob(
        conn,
        lease,
        &blobs,
        &target,
        refs.into_iter().collect(),
        archive,
    )
    .await?;
    save_image(conn, lease, &image_name, target).await?;
    Ok(image_name)
}

/// Writes one blob with its labels; a blob already present only gets its labels updated.
async fn write_blob(
    conn: &Conn,
    lease: &Lease,
    blobs: &HashMap<PathBuf, Vec<u8>>,
    blob: &Descriptor,
    labels: HashMap<String, String>,
    archive: &Path,
) -> Result<(), RuntimeError> {
    let data = blobs
        .get(Path::new(&blob_path(&blob.digest)))
        .ok_or_else(|| invalid(archive, &format!("blob {} missing", blob.digest)))?;
    let reference = format!("ccattler-import-{}-{}", unique(), blob.digest);
    let mut requests = vec![WriteContentRequest {
        action: WriteAction::Stat as i32,
        r#ref: reference.clone(),
        ..WriteContentRequest::default()
    }];
    for (i, chunk) in data.chunks(CHUNK).enumerate() {
        requests.push(WriteContentRequest {
            action: WriteAction::Write as i32,
            r#ref: reference.clone(),
            offset: (i * CHUNK) as i64,
            data: chunk.to_vec(),
            ..WriteContentRequest::default()
        });
    }
    requests.push(WriteContentRequest {
        action: WriteAction::Commit as i32,
        r#ref: reference,
        offset: data.len() as i64,
        total: data.len() as i64,
        expected: blob.digest.clone(),
        labels: labels.clone(),
        data: Vec::new(),
    });
    let what = format!("content write of {}", blob.digest);
    let outcome = send_write(conn, lease, tokio_stream::iter(requests)).await;
    match outcome {
        Ok(()) => Ok(()),
        Err(s) if s.code() == Code::AlreadyExists => {
            for (key, value) in &labels {
                set_label(conn, lease, &blob.digest, (key, value))
                    .await
                    .map_err(|s| grpc(&what, s))?;
            }
            Ok(())
        }
        Err(s) => Err(grpc(&what, s)),
    }
}

/// Creates the image record, or points an existing one at the new target.
pub(super) async fn save_image(
    conn: &Conn,
    lease: &Lease,
    name: &str,
    target: Descriptor,
) -> Result<(), RuntimeError> {
    let image = Image {
        name: name.to_owned(),
        target: Some(target),
        ..Image::default()
    };
    let create = CreateImageRequest {
        image: Some(image.clone()),
        source_date_epoch: None,
    };
    match conn.images().create(conn.leased(create, Some(lease))).await {
        Ok(_) => Ok(()),
        Err(s) if s.code() == Code::AlreadyExists => {
            let update = UpdateImageRequest {
                image: Some(image),
                update_mask: Some(FieldMask {
                    paths: vec!["target".to_owned()],
                }),
                source_date_epoch: None,
            };
            conn.images()
                .update(conn.leased(update, Some(lease)))
                .await
                .map(|_| ())
                .map_err(|s| grpc("images update", s))
        }
        Err(s) => Err(grpc("images create", s)),
    }
}

/// Every regular file of the tarball, by its path.
fn read_archive(archive: &Path) -> Result<HashMap<PathBuf, Vec<u8>>, RuntimeError> {
    let file = std::fs::File::open(archive).map_err(|e| invalid(archive, &e.to_string()))?;
    let mut tar = tar::Archive::new(file);
    let mut blobs = HashMap::new();
    let entries = tar
        .entries()
        .map_err(|e| invalid(archive, &e.to_string()))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| invalid(archive, &e.to_string()))?;
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let path = entry
            .path()
            .map_err(|e| invalid(archive, &e.to_string()))?
            .components()
            .filter(|c| !matches!(c, std::path::Component::CurDir))
            .collect::<PathBuf>();
        let mut data = Vec::new();
        entry
            .read_to_end(&mut data)
            .map_err(|e| invalid(archive, &e.to_string()))?;
        blobs.insert(path, data);
    }
    Ok(blobs)
}

fn json(
    blobs: &HashMap<PathBuf, Vec<u8>>,
    path: &str,
    archive: &Path,
) -> Result<Value, RuntimeError> {
    let data = blobs
        .get(Path::new(path))
        .ok_or_else(|| invalid(archive, &format!("{path} missing")))?;
    serde_json::from_slice(data).map_err(|e| invalid(archive, &format!("{path}: {e}")))
}

/// `blobs/sha256/<hex>` for `sha256:<hex>`.
fn blob_path(digest: &str) -> String {
    format!("blobs/{}", digest.replacen(':', "/", 1))
}

fn invalid(archive: &Path, why: &str) -> RuntimeError {
    RuntimeError::StartFailed {
        id: String::new(),
        reason: format!("cannot import {}: {why}", archive.display()),
    }
}
