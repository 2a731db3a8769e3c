//! Pulling images from OCI registries into containerd's store (containerd 1.6 has no Transfer
//! service: we are the puller). The manifest is resolved (an index to this node's platform), the
//! layers and config are streamed into the content service under a lease, each verified by
//! digest, and only then are the manifest and the image record written: an image whose pull
//! failed has no record, and the lease's end lets containerd collect what was written of it.
//! Unpacking is the container start's job, as for an imported image.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use bytes::Bytes;
use ccattler_core::RuntimeError;
use containerd_client::services::v1::GetImageRequest;
use containerd_client::tonic::Code;
use containerd_client::types::Descriptor;
use oci_client::errors::OciDistributionError;
use oci_client::manifest;
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use serde_json::Value;

use super::client::{Conn, Lease, grpc};
use super::content::{WriteFailure, has_blob, write_stream};
use super::image::{descriptor, sha256_digest};
use super::import::save_image;
use super::registry::{self, PullPolicy, RegistryCredentials};
use super::{ContainerdConfig, Inner};

const ACCEPTED: [&str; 4] = [
    manifest::OCI_IMAGE_MEDIA_TYPE,
    manifest::OCI_IMAGE_INDEX_MEDIA_TYPE,
    manifest::IMAGE_MANIFEST_MEDIA_TYPE,
    manifest::IMAGE_MANIFEST_LIST_MEDIA_TYPE,
];

/// One image's pulls: one at a time, with the progress of the one under way.
#[derive(Debug, Default)]
pub(super) struct ImagePull {
    /// Held while pulling; when the last pull that succeeded ended.
    last: tokio::sync::Mutex<Option<Instant>>,
    /// Bytes of the image's blobs in the store so far.
    done: Arc<AtomicU64>,
    /// Bytes of all its blobs (zero until the manifest is read).
    total: AtomicU64,
}

impl ImagePull {
    /// `(done, total)` bytes.
    pub(super) fn progress(&self) -> (u64, u64) {
        let total = self.total.load(Ordering::Relaxed);
        (self.done.load(Ordering::Relaxed).min(total), total)
    }
}

impl Inner {
    /// Makes sure `image` is in the store as the pull policy asks, pulling it for instance `id`
    /// (observed as pulling meanwhile). Two instances of one image never pull it twice at once:
    /// the second waits for the first, and takes its result when the first succeeded.
    pub(super) async fn ensure_image(&self, id: &str, image: &str) -> Result<(), RuntimeError> {
        let policy = self.config.pull_policy;
        if policy == PullPolicy::Never {
            return Ok(()); // a missing image is the resolver's ImageNotFound
        }
        if policy == PullPolicy::IfNotPresent && has_image(&self.conn, image).await? {
            return Ok(());
        }
        let asked = Instant::now();
        let pull = self.image_pull(image);
        self.set_pulling(id, Some((image, Arc::clone(&pull))));
        let result = async {
            let mut last = pull.last.lock().await;
            if last.is_some_and(|at| at >= asked) {
                return Ok(()); // pulled for another instance while this one waited
            }
            if policy == PullPolicy::IfNotPresent && has_image(&self.conn, image).await? {
                return Ok(());
            }
            pull.done.store(0, Ordering::Relaxed);
            pull.total.store(0, Ordering::Relaxed);
            let lease = self.conn.lease("pull").await?;
            let pulled = pull_image(&self.conn, &self.config, &lease, image, &pull).await;
            self.conn.release(lease).await?;
            pulled?;
            *last = Some(Instant::now());
            tracing::info!(image, bytes = pull.progress().1, "pulled");
            Ok(())
        }
        .await;
        self.set_pulling(id, None);
        result
    }

    fn image_pull(&self, image: &str) -> Arc<ImagePull> {
        let mut pulls = self.pulls.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(pulls.entry(image.to_owned()).or_default())
    }

    fn set_pulling(&self, id: &str, pull: Option<(&str, Arc<ImagePull>)>) {
        let mut pulling = self.pulling.lock().unwrap_or_else(|e| e.into_inner());
        match pull {
            Some((image, pull)) => pulling.insert(id.to_owned(), (image.to_owned(), pull)),
            None => pulling.remove(id),
        };
    }
}

/// Whether the image store has a record named `image`.
pub(super) async fn has_image(conn: &Conn, image: &str) -> Result<bool, RuntimeError> {
    let request = conn.req(GetImageRequest {
        name: image.to_owned(),
    });
    match conn.images().get(request).await {
        Ok(_) => Ok(true),
        Err(s) if s.code() == Code::NotFound => Ok(false),
        Err(s) => Err(grpc("images get", s)),
    }
}

/// What one pull works with: the registry, the client and the credentials.
struct Source {
    image: String,
    reference: Reference,
    client: Client,
    auth: RegistryAuth,
    with_credentials: bool,
    /// Whether the registry is spoken to over plain HTTP.
    insecure: bool,
}

impl Source {
    fn fail(&self, reason: String) -> RuntimeError {
        RuntimeError::ImagePull {
            image: self.image.clone(),
            reason,
        }
    }

    fn explain(&self, error: &OciDistributionError) -> RuntimeError {
        let registry = self.reference.resolve_registry();
        let repository = self.reference.repository();
        let (creds, insecure) = (self.with_credentials, self.insecure);
        self.fail(registry::explain(
            error, registry, repository, creds, insecure,
        ))
    }

    /// The manifest `reference` names, checked against `digest` when one is known.
    async fn manifest(&self, reference: &Reference) -> Result<(Vec<u8>, Value), RuntimeError> {
        let (bytes, _) = self
            .client
            .pull_manifest_raw(reference, &self.auth, &ACCEPTED)
            .await
            .map_err(|e| self.explain(&e))?;
        if let Some(expected) = reference.digest() {
            let actual = sha256_digest(&bytes);
            if actual != expected {
                return Err(self.fail(format!(
                    "registry {} served manifest {expected} with digest {actual}: nothing of it \
                     was kept; the registry's storage or a proxy on the way is corrupt",
                    reference.resolve_registry()
                )));
            }
        }
        let json = serde_json::from_slice(&bytes)
            .map_err(|e| self.fail(format!("the manifest is not JSON: {e}")))?;
        Ok((bytes.to_vec(), json))
    }
}

/// Pulls `image` into the store under `lease`: blobs first, then the manifest, then the record.
async fn pull_image(
    conn: &Conn,
    config: &ContainerdConfig,
    lease: &Lease,
    image: &str,
    pull: &ImagePull,
) -> Result<(), RuntimeError> {
    let fail = |reason: String| RuntimeError::ImagePull {
        image: image.to_owned(),
        reason,
    };
    let reference: Reference = image.parse().map_err(|e| {
        fail(format!(
            "not an image reference ({e}): use [REGISTRY[:PORT]/]REPOSITORY[:TAG][@DIGEST]"
        ))
    })?;
    let credentials = match &config.registry.credentials_file {
        Some(path) => RegistryCredentials::load(path).map_err(|e| fail(e.to_string()))?,
        None => RegistryCredentials::default(),
    };
    let found = credentials
        .get(reference.registry())
        .or_else(|| credentials.get(reference.resolve_registry()));
    let auth = found.map_or(RegistryAuth::Anonymous, |(user, password)| {
        RegistryAuth::Basic(user.to_owned(), password.to_owned())
    });
    let client = registry::client(&config.registry, config.timeout).map_err(fail)?;
    let insecure = config
        .registry
        .insecure
        .iter()
        .any(|r| r == reference.resolve_registry());
    let source = Source {
        image: image.to_owned(),
        reference,
        client,
        auth,
        with_credentials: found.is_some(),
        insecure,
    };
    let (mut bytes, mut json) = source.manifest(&source.reference).await?;
    if json["manifests"].is_array() {
        let entry = pick_platform(&json).map_err(&fail)?;
        let by_digest = Reference::with_digest(
            source.reference.registry().to_owned(),
            source.reference.repository().to_owned(),
            entry,
        );
        (bytes, json) = source.manifest(&by_digest).await?;
    }
    let bad = |why: &str| fail(format!("the manifest is not usable: {why}"));
    let config_blob = descriptor(&json["config"]).ok_or_else(|| bad("no config descriptor"))?;
    let layers: Vec<Descriptor> = json["layers"]
        .as_array()
        .ok_or_else(|| bad("no layers"))?
        .iter()
        .map(|layer| descriptor(layer).ok_or_else(|| bad("a layer descriptor is incomplete")))
        .collect::<Result<_, _>>()?;
    let total = layers
        .iter()
        .chain([&config_blob])
        .map(|d| u64::try_from(d.size).unwrap_or(0))
        .sum();
    pull.total.store(total, Ordering::Relaxed);
    for blob in layers.iter().chain([&config_blob]) {
        fetch_blob(conn, lease, &source, blob, &pull.done).await?;
    }
    let media_type = json["mediaType"]
        .as_str()
        .unwrap_or(manifest::OCI_IMAGE_MEDIA_TYPE)
        .to_owned();
    let target = Descriptor {
        media_type,
        digest: sha256_digest(&bytes),
        size: bytes.len() as i64,
        annotations: HashMap::new(),
    };
    let mut labels = HashMap::from([(
        "containerd.io/gc.ref.content.config".to_owned(),
        config_blob.digest.clone(),
    )]);
    for (i, layer) in layers.iter().enumerate() {
        labels.insert(
            format!("containerd.io/gc.ref.content.l.{i}"),
            layer.digest.clone(),
        );
    }
    let body = futures_util::stream::iter([Ok(Bytes::from(bytes))]);
    let ignored = Arc::new(AtomicU64::new(0));
    write_stream(conn, lease, &target, labels, body, ignored)
        .await
        .map_err(|f| failure(&source, &target, f))?;
    save_image(conn, lease, image, target).await
}

/// Streams one blob from the registry into the store, unless the store has it.
async fn fetch_blob(
    conn: &Conn,
    lease: &Lease,
    source: &Source,
    blob: &Descriptor,
    done: &Arc<AtomicU64>,
) -> Result<(), RuntimeError> {
    let what = format!("content info of {}", blob.digest);
    if has_blob(conn, &blob.digest)
        .await
        .map_err(|s| grpc(&what, s))?
    {
        done.fetch_add(u64::try_from(blob.size).unwrap_or(0), Ordering::Relaxed);
        return Ok(());
    }
    let body = source
        .client
        .pull_blob_stream(&source.reference, blob.digest.as_str())
        .await
        .map_err(|e| source.explain(&e))?;
    write_stream(conn, lease, blob, HashMap::new(), body, Arc::clone(done))
        .await
        .map_err(|f| failure(source, blob, f))
}

fn failure(source: &Source, blob: &Descriptor, failure: WriteFailure) -> RuntimeError {
    let registry = source.reference.resolve_registry();
    match failure {
        WriteFailure::Download(why) => source.fail(format!(
            "the download of blob {} from registry {registry} broke off: {why}",
            blob.digest
        )),
        WriteFailure::Mismatch(why) => source.fail(format!(
            "registry {registry} served data that does not match its digest ({why}): nothing of \
             it was kept; the registry's storage or a proxy on the way is corrupt"
        )),
        WriteFailure::Containerd(status) => {
            grpc(&format!("content write of {}", blob.digest), status)
        }
    }
}

/// The digest of the index entry for this node's platform (`linux` and its architecture).
fn pick_platform(index: &Value) -> Result<String, String> {
    let arch = super::test_image::goarch();
    let mut offered = Vec::new();
    for entry in index["manifests"].as_array().into_iter().flatten() {
        let platform = &entry["platform"];
        let os = platform["os"].as_str().unwrap_or("unknown");
        let architecture = platform["architecture"].as_str().unwrap_or("unknown");
        if os == "linux" && architecture == arch {
            return entry["digest"]
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("the index entry for linux/{arch} has no digest"));
        }
        if os != "unknown" {
            offered.push(format!("{os}/{architecture}"));
        }
    }
    Err(format!(
        "the image has no build for this node's platform, linux/{arch} (it has: {}); pull a \
         multi-platform tag or one built for linux/{arch}",
        if offered.is_empty() {
            "none".to_owned()
        } else {
            offered.join(", ")
        }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_index_entry_of_this_platform_is_picked() {
        let arch = crate::containerd::test_image::goarch();
        let index = json!({"manifests": [
            {"digest": "sha256:other", "platform": {"os": "linux", "architecture": "s390x"}},
            {"digest": "sha256:mine", "platform": {"os": "linux", "architecture": arch}},
        ]});
        assert_eq!(pick_platform(&index), Ok("sha256:mine".to_owned()));
    }

    #[test]
    fn an_index_without_this_platform_says_what_it_has() {
        let index = json!({"manifests": [
            {"digest": "sha256:a", "platform": {"os": "linux", "architecture": "s390x"}},
            {"digest": "sha256:b", "platform": {"os": "windows", "architecture": "riscv"}},
        ]});
        let error = pick_platform(&index).err().unwrap_or_default();
        assert!(error.contains("linux/s390x, windows/riscv"), "{error}");
        assert!(
            error.contains("no build for this node's platform"),
            "{error}"
        );
    }
}
