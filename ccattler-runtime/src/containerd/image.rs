//! Images in containerd's own store: resolving a name to its manifest and config, and unpacking its
//! layers into a snapshotter (what containerd's unpacker does, driven through the diff service).

use std::collections::HashMap;

use ccattler_core::RuntimeError;
use containerd_client::services::v1::snapshots::{
    CommitSnapshotRequest, PrepareSnapshotRequest, RemoveSnapshotRequest, StatSnapshotRequest,
};
use containerd_client::services::v1::{
    ApplyRequest, GetImageRequest, Info, ReadContentRequest, UpdateRequest,
};
use containerd_client::tonic::{Code, Status};
use containerd_client::types::Descriptor;
use prost_types::FieldMask;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::client::{Conn, Lease, grpc, unique};

const INDEX_TYPES: [&str; 2] = [
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
];

/// What a container needs to know of its image.
#[derive(Clone, Debug)]
pub(crate) struct ImageInfo {
    /// The config blob's digest (the GC root of the unpacked snapshots).
    pub config: String,
    /// The layer descriptors, bottom first.
    pub layers: Vec<Descriptor>,
    /// The uncompressed digests of the layers, bottom first.
    pub diff_ids: Vec<String>,
    /// The image's environment (`KEY=value`).
    pub env: Vec<String>,
    /// The image's entrypoint and command, joined: what runs when the spec has no command.
    pub default_args: Vec<String>,
    /// The image's working directory (`/` when it has none).
    pub cwd: String,
}

impl ImageInfo {
    /// The snapshot name of the top layer's chain: the parent of a container's rootfs.
    pub(crate) fn chain_top(&self) -> String {
        chain_ids(&self.diff_ids).pop().unwrap_or_default()
    }
}

/// Looks `name` up in the image store and reads its manifest and config.
pub(crate) async fn resolve(conn: &Conn, name: &str) -> Result<ImageInfo, RuntimeError> {
    let request = conn.req(GetImageRequest {
        name: name.to_owned(),
    });
    let image = match conn.images().get(request).await {
        Ok(response) => response.into_inner().image,
        Err(s) if s.code() == Code::NotFound => None,
        Err(s) => return Err(grpc("images get", s)),
    };
    let not_found = || RuntimeError::ImageNotFound {
        image: name.to_owned(),
    };
    let mut target = image.and_then(|i| i.target).ok_or_else(not_found)?;
    if INDEX_TYPES.contains(&target.media_type.as_str()) {
        let index = read_json(conn, &target.digest).await?;
        target = pick_platform(&index).ok_or_else(|| bad_image(name, "no linux manifest"))?;
    }
    let manifest = read_json(conn, &target.digest).await?;
    let config = manifest["config"]["digest"]
        .as_str()
        .ok_or_else(|| bad_image(name, "manifest without config"))?
        .to_owned();
    let layers: Vec<Descriptor> = manifest["layers"]
        .as_array()
        .map(|layers| layers.iter().filter_map(descriptor).collect())
        .unwrap_or_default();
    let config_json = read_json(conn, &config).await?;
    let diff_ids = strings(&config_json["rootfs"]["diff_ids"]);
    if diff_ids.len() != layers.len() || layers.is_empty() {
        return Err(bad_image(name, "layers and diff_ids do not match"));
    }
    let process = &config_json["config"];
    let mut default_args = strings(&process["Entrypoint"]);
    default_args.extend(strings(&process["Cmd"]));
    let cwd = process["WorkingDir"]
        .as_str()
        .filter(|d| !d.is_empty())
        .unwrap_or("/");
    Ok(ImageInfo {
        config,
        layers,
        diff_ids,
        env: strings(&process["Env"]),
        default_args,
        cwd: cwd.to_owned(),
    })
}

/// Makes sure the image's layers are unpacked in `snapshotter`, under `lease`.
///
/// Returns the raw status on failure so that the caller can fall back to another snapshotter.
pub(crate) async fn ensure_unpacked(
    conn: &Conn,
    image: &ImageInfo,
    snapshotter: &str,
    lease: &Lease,
) -> Result<(), Status> {
    let chain = chain_ids(&image.diff_ids);
    let top = chain.last().cloned().unwrap_or_default();
    let stat = StatSnapshotRequest {
        snapshotter: snapshotter.to_owned(),
        key: top.clone(),
    };
    match conn.snapshots().stat(conn.leased(stat, Some(lease))).await {
        Ok(_) => return Ok(()),
        Err(s) if s.code() == Code::NotFound => {}
        Err(s) => return Err(s),
    }
    for (i, layer) in image.layers.iter().enumerate() {
        let parent = if i == 0 { "" } else { &chain[i - 1] };
        unpack_layer(
            conn,
            snapshotter,
            lease,
            layer,
            parent,
            &chain[i],
            &image.diff_ids[i],
        )
        .await?;
        let label = ("containerd.io/uncompressed", image.diff_ids[i].as_str());
        set_label(conn, lease, &layer.digest, label).await?;
    }
    let key = format!("containerd.io/gc.ref.snapshot.{snapshotter}");
    set_label(conn, lease, &image.config, (&key, &top)).await
}

/// Applies one layer on top of `parent` and commits it as `chain_id` (skipping it if present).
async fn unpack_layer(
    conn: &Conn,
    snapshotter: &str,
    lease: &Lease,
    layer: &Descriptor,
    parent: &str,
    chain_id: &str,
    diff_id: &str,
) -> Result<(), Status> {
    let mut snapshots = conn.snapshots();
    let stat = StatSnapshotRequest {
        snapshotter: snapshotter.to_owned(),
        key: chain_id.to_owned(),
    };
    if snapshots.stat(conn.leased(stat, Some(lease))).await.is_ok() {
        return Ok(());
    }
    let key = format!("extract-{}-{chain_id}", unique());
    let prepare = PrepareSnapshotRequest {
        snapshotter: snapshotter.to_owned(),
        key: key.clone(),
        parent: parent.to_owned(),
        labels: HashMap::new(),
    };
    let mounts = snapshots
        .prepare(conn.leased(prepare, Some(lease)))
        .await?
        .into_inner()
        .mounts;
    let apply = ApplyRequest {
        diff: Some(layer.clone()),
        mounts,
        payloads: HashMap::new(),
        sync_fs: false,
    };
    let remove = RemoveSnapshotRequest {
        snapshotter: snapshotter.to_owned(),
        key: key.clone(),
    };
    let applied = match conn.diff().apply(conn.leased(apply, Some(lease))).await {
        Ok(response) => response.into_inner().applied,
        Err(s) => {
            let _ = snapshots.remove(conn.leased(remove, Some(lease))).await;
            return Err(s);
        }
    };
    if applied.as_ref().map(|d| d.digest.as_str()) != Some(diff_id) {
        let _ = snapshots.remove(conn.leased(remove, Some(lease))).await;
        return Err(Status::data_loss(format!(
            "layer {} unpacked to {applied:?}, expected {diff_id}",
            layer.digest
        )));
    }
    let commit = CommitSnapshotRequest {
        snapshotter: snapshotter.to_owned(),
        name: chain_id.to_owned(),
        key,
        labels: HashMap::new(),
    };
    match snapshots.commit(conn.leased(commit, Some(lease))).await {
        Ok(_) => Ok(()),
        Err(s) if s.code() == Code::AlreadyExists => {
            let _ = snapshots.remove(conn.leased(remove, Some(lease))).await;
            Ok(())
        }
        Err(s) => Err(s),
    }
}

/// Sets one label on a content blob.
pub(crate) async fn set_label(
    conn: &Conn,
    lease: &Lease,
    digest: &str,
    (key, value): (&str, &str),
) -> Result<(), Status> {
    let update = UpdateRequest {
        info: Some(Info {
            digest: digest.to_owned(),
            labels: [(key.to_owned(), value.to_owned())].into(),
            ..Info::default()
        }),
        update_mask: Some(FieldMask {
            paths: vec![format!("labels.{key}")],
        }),
    };
    conn.content()
        .update(conn.leased(update, Some(lease)))
        .await?;
    Ok(())
}

/// Reads a whole content blob.
pub(crate) async fn read_blob(conn: &Conn, digest: &str) -> Result<Vec<u8>, RuntimeError> {
    let request = conn.req(ReadContentRequest {
        digest: digest.to_owned(),
        offset: 0,
        size: 0,
    });
    let what = format!("content read of {digest}");
    let mut stream = conn
        .content()
        .read(request)
        .await
        .map_err(|s| grpc(&what, s))?
        .into_inner();
    let mut data = Vec::new();
    while let Some(chunk) = stream.message().await.map_err(|s| grpc(&what, s))? {
        data.extend_from_slice(&chunk.data);
    }
    Ok(data)
}

async fn read_json(conn: &Conn, digest: &str) -> Result<Value, RuntimeError> {
    let data = read_blob(conn, digest).await?;
    serde_json::from_slice(&data).map_err(|e| bad_image(digest, &e.to_string()))
}

/// The chain ids of a layer stack: `chain[0] = diff[0]`, `chain[i] = sha256(chain[i-1] + " " + diff[i])`.
pub(crate) fn chain_ids(diff_ids: &[String]) -> Vec<String> {
    let mut chain: Vec<String> = Vec::with_capacity(diff_ids.len());
    for diff in diff_ids {
        let next = match chain.last() {
            None => diff.clone(),
            Some(parent) => sha256_digest(format!("{parent} {diff}").as_bytes()),
        };
        chain.push(next);
    }
    chain
}

/// `sha256:<hex>` of `data`.
pub(crate) fn sha256_digest(data: &[u8]) -> String {
    let hash = Sha256::digest(data);
    let mut text = String::with_capacity(71);
    text.push_str("sha256:");
    for byte in hash {
        text.push_str(&format!("{byte:02x}"));
    }
    text
}

fn pick_platform(index: &Value) -> Option<Descriptor> {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    let manifests = index["manifests"].as_array()?;
    let fits = |m: &&Value| {
        let platform = &m["platform"];
        platform.is_null() || (platform["os"] == "linux" && platform["architecture"] == arch)
    };
    manifests.iter().find(fits).and_then(descriptor)
}

/// The descriptor an OCI JSON document gives (`mediaType`, `digest`, `size`); `None` when a
/// field is missing or of the wrong type.
pub(super) fn descriptor(value: &Value) -> Option<Descriptor> {
    Some(Descriptor {
        media_type: value["mediaType"].as_str()?.to_owned(),
        digest: value["digest"].as_str()?.to_owned(),
        size: value["size"].as_i64()?,
        annotations: HashMap::new(),
    })
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn bad_image(name: &str, why: &str) -> RuntimeError {
    RuntimeError::StartFailed {
        id: String::new(),
        reason: format!("image {name} is not usable: {why}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_of_one_layer_is_its_diff_id() {
        let diff = sha256_digest(b"layer");
        assert_eq!(chain_ids(std::slice::from_ref(&diff)), vec![diff]);
    }

    #[test]
    fn chain_of_two_layers_hashes_parent_and_diff() {
        let (a, b) = (sha256_digest(b"a"), sha256_digest(b"b"));
        let chain = chain_ids(&[a.clone(), b.clone()]);
        assert_eq!(chain[1], sha256_digest(format!("{a} {b}").as_bytes()));
    }
}
