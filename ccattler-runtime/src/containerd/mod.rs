//! [`ContainerdRuntime`]: instances as containerd containers, driven over containerd's gRPC API
//! (the `containerd-client` crate) on its unix socket.
//!
//! Building this module needs `protoc` (Debian: `protobuf-compiler`, 3.12 or newer): the
//! `containerd-client` crate compiles containerd's protos in its build script.
//! `scripts/containerd-up` installs it with containerd and runc.
//!
//! # Expected flow
//!
//! 1. [`ContainerdRuntime::connect`] to the socket, with one containerd namespace per cluster.
//! 2. The image comes from its registry: [`Runtime::ensure_running`] pulls it as the
//!    [`PullPolicy`] says (if not present, by default), through the registry settings of
//!    [`RegistryConfig`] (credentials, registries over plain HTTP); meanwhile the instance is
//!    observed as [`InstanceState::Pulling`] with the bytes pulled so far. Or put it into
//!    containerd's store beforehand: [`ContainerdRuntime::import_oci_archive`] imports an OCI image
//!    layout tarball. containerd 1.6 has no Transfer service, so both go through the content,
//!    images and diff services.
//! 3. [`Runtime::ensure_running`]: under a lease (containerd's GC would otherwise sweep a fresh
//!    snapshot), the image is unpacked if needed, a snapshot is prepared for the rootfs and the
//!    container is created with an OCI spec built from the [`InstanceSpec`]; then the task is
//!    created with its output appended to a log file, and started.
//! 4. [`Runtime::ensure_stopped`]: SIGTERM, then SIGKILL after the grace period (a PID 1 without
//!    a TERM handler ignores SIGTERM).
//! 5. [`Runtime::remove`]: task, then container, then snapshot (another order orphans the task).
//!
//! # Guarantees
//!
//! - Containers carry the labels `ccattler.instance` and `ccattler.service`; a new runtime object
//!   on the same namespace (an agent restarted) observes and drives them: they are adopted.
//! - A start that fails is returned as a typed error and observed as [`InstanceState::Failed`]
//!   with the reason until the instance is removed or started: [`RuntimeError::ImageNotFound`]
//!   for an image not in the store, [`RuntimeError::CommandNotFound`] for a program missing from
//!   the image, [`RuntimeError::StartFailed`] otherwise. A socket nobody answers on is
//!   [`RuntimeError::Unreachable`]; nothing panics.
//! - A pull that fails (registry unreachable, credentials refused, no such image, a blob that
//!   does not match its digest, no build for this node's platform) is [`RuntimeError::ImagePull`]
//!   with the reason and what to do. Every blob is verified by digest, by us and by containerd,
//!   before it is committed, and the image record is written only once all its blobs are in:
//!   nothing half-pulled is ever used. Two instances of one image do not pull it twice at once.
//!
//! # Caveats
//!
//! - Files of the spec are written under the state directory and bind-mounted read-only; volumes
//!   are bind mounts.
//! - Networking ([`ContainerNetwork`]): with `Cni`, each container has a network namespace of
//!   its own and listens on its declared ports, which its host ports are mapped to; with
//!   `Host` (the default), an instance with ports shares the node's network and must listen on
//!   the host ports its spec gives, and one without ports gets an empty network namespace. The
//!   environment says where to listen (`PORT`, `PORT_{declared}`). Either way the instance is
//!   reported at `{host}:{first host port}` ([`ContainerdConfig::host`]).
//! - Stats are read from the container's cgroup (`/<namespace>/<id>`, cgroup v2 or v1): memory in
//!   use without the inactive page cache, CPU averaged since the previous sample or the start.
//!   Best effort: a missing cgroup file reads as zero.
//! - If overlayfs cannot be used (not loaded, or the rootfs mount fails), the runtime falls back
//!   to the configured fallback snapshotter (`native`) and stays on it.
//! - Failures of containerd calls that have no matching [`RuntimeError`] variant are reported as
//!   [`RuntimeError::Unreachable`] with containerd's message.

mod client;
mod content;
mod exec;
mod files;
mod image;
mod import;
mod lifecycle;
mod observe;
mod pull;
mod registry;
mod spec;
mod stop;
pub mod test_image;
pub mod test_registry;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ccattler_core::{ExecOutput, InstanceSpec, InstanceStats, ObservedInstance, Runtime};
use ccattler_core::{FileSpec, InstanceState, RuntimeError};

use client::Conn;
use pull::ImagePull;
pub use registry::{CredentialsError, PullPolicy, RegistryConfig, RegistryCredentials};

/// Settings of a [`ContainerdRuntime`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ContainerdConfig {
    /// The snapshotter for rootfs snapshots. Default `overlayfs`.
    pub snapshotter: String,
    /// The snapshotter used when the first cannot be (`None`: no fallback). Default `native`.
    pub fallback_snapshotter: Option<String>,
    /// The containerd runtime (shim) name. Default `io.containerd.runc.v2`.
    pub runtime: String,
    /// Where log files and the spec's files go (`<dir>/<namespace>/<id>/`). Default
    /// `/var/lib/ccattler/containerd`.
    pub state_dir: PathBuf,
    /// How long connecting may take, and how long a killed task may take to end; also how long
    /// connecting to a registry may take. Default 10 s.
    pub timeout: Duration,
    /// When images are pulled from their registry. Default [`PullPolicy::IfNotPresent`].
    pub pull_policy: PullPolicy,
    /// How registries are reached (credentials, plain-HTTP registries).
    pub registry: RegistryConfig,
    /// How containers are networked. Default [`ContainerNetwork::Host`].
    pub network: ContainerNetwork,
    /// The address other hosts reach this node at: an instance with a port is reported at
    /// `{host}:{its first host port}`. Default `127.0.0.1`, reachable from this host only.
    pub host: String,
}

/// How containers are networked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ContainerNetwork {
    /// A container with ports shares the node's network and listens on its host ports (`PORT`
    /// is the first host port); one without ports gets an empty network namespace of its own.
    #[default]
    Host,
    /// Every container gets a network namespace of its own through the CNI plugins
    /// ([`crate::cni`]): an address on the node's bridge, and each host port mapped to its
    /// declared port, which is where it listens (`PORT` is the first declared port). Its
    /// network is set up before it is created (a container whose network fails is not
    /// started, and says why) and removed with it.
    Cni(crate::cni::CniConfig),
}

impl Default for ContainerdConfig {
    fn default() -> Self {
        ContainerdConfig {
            snapshotter: "overlayfs".to_owned(),
            fallback_snapshotter: Some("native".to_owned()),
            runtime: "io.containerd.runc.v2".to_owned(),
            state_dir: PathBuf::from("/var/lib/ccattler/containerd"),
            timeout: Duration::from_secs(10),
            pull_policy: PullPolicy::default(),
            registry: RegistryConfig::default(),
            network: ContainerNetwork::default(),
            host: "127.0.0.1".to_owned(),
        }
    }
}

impl ContainerdConfig {
    /// Sets how containers are networked.
    #[must_use]
    pub fn network(mut self, network: ContainerNetwork) -> Self {
        self.network = network;
        self
    }

    /// Sets the node's address ([`ContainerdConfig::host`]).
    #[must_use]
    pub fn host(mut self, host: impl Into<String>) -> Self {
        self.host = host.into();
        self
    }

    /// Sets the snapshotter.
    #[must_use]
    pub fn snapshotter(mut self, name: impl Into<String>) -> Self {
        self.snapshotter = name.into();
        self
    }

    /// Sets the fallback snapshotter (`None`: no fallback).
    #[must_use]
    pub fn fallback_snapshotter(mut self, name: Option<String>) -> Self {
        self.fallback_snapshotter = name;
        self
    }

    /// Sets the state directory.
    #[must_use]
    pub fn state_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.state_dir = dir.into();
        self
    }

    /// Sets the timeout.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets the pull policy.
    #[must_use]
    pub fn pull_policy(mut self, policy: PullPolicy) -> Self {
        self.pull_policy = policy;
        self
    }

    /// Sets the registry credentials file (see [`RegistryConfig::credentials_file`]).
    #[must_use]
    pub fn registry_credentials(mut self, file: impl Into<PathBuf>) -> Self {
        self.registry.credentials_file = Some(file.into());
        self
    }

    /// Adds a registry spoken to over plain HTTP (`HOST` or `HOST:PORT`).
    #[must_use]
    pub fn insecure_registry(mut self, registry: impl Into<String>) -> Self {
        self.registry.insecure.push(registry.into());
        self
    }
}

/// A [`Runtime`] on containerd. Cheap to clone: clones share the connection.
#[derive(Clone, Debug)]
pub struct ContainerdRuntime {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    conn: Conn,
    config: ContainerdConfig,
    /// Set once the primary snapshotter proved unusable.
    use_fallback: AtomicBool,
    /// Starts that failed, by id, with the reason: observed as `Failed` until removed or started.
    failed: Mutex<BTreeMap<String, String>>,
    /// The previous CPU sample of each instance: (cumulative CPU nanoseconds, when).
    cpu_samples: Mutex<HashMap<String, (u64, Instant)>>,
    /// One lock per instance id, so that two calls on one instance do not interleave.
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// One entry per image ever pulled: its lock (one pull at a time) and progress.
    pulls: Mutex<HashMap<String, Arc<ImagePull>>>,
    /// The instances whose image is being pulled, with the image and its pull.
    pulling: Mutex<BTreeMap<String, (String, Arc<ImagePull>)>>,
    /// The containers' networks, with [`ContainerNetwork::Cni`].
    cni: Option<crate::cni::Cni>,
}

impl ContainerdRuntime {
    /// Connects to containerd at `socket` and works in `namespace` (one per cluster).
    ///
    /// # Errors
    ///
    /// [`RuntimeError::Unreachable`] when nothing answers on the socket in time, or the
    /// namespace is not a valid containerd namespace name.
    pub async fn connect(
        socket: impl AsRef<Path>,
        namespace: &str,
        config: ContainerdConfig,
    ) -> Result<ContainerdRuntime, RuntimeError> {
        let conn = Conn::connect(socket.as_ref(), namespace, config.timeout).await?;
        let cni = match &config.network {
            ContainerNetwork::Host => None,
            ContainerNetwork::Cni(cni) => Some(crate::cni::Cni::new(cni.clone())),
        };
        Ok(ContainerdRuntime {
            inner: Arc::new(Inner {
                conn,
                cni,
                config,
                use_fallback: AtomicBool::new(false),
                failed: Mutex::default(),
                cpu_samples: Mutex::default(),
                locks: Mutex::default(),
                pulls: Mutex::default(),
                pulling: Mutex::default(),
            }),
        })
    }

    /// The containerd namespace this runtime works in.
    pub fn namespace(&self) -> &str {
        self.inner.conn.namespace()
    }

    /// Imports the OCI image layout tarball at `archive` (an `oci-layout`, `index.json` and
    /// `blobs/sha256/*`) as image `name` (or under the name its index annotates with
    /// `org.opencontainers.image.ref.name`), and unpacks it into the snapshotter, so that a
    /// first start need not. Importing the same archive again is harmless. Returns the name.
    ///
    /// # Errors
    ///
    /// [`RuntimeError::StartFailed`] (with an empty id) when the archive is unreadable or not
    /// an OCI layout; [`RuntimeError::Unreachable`] when containerd fails.
    pub async fn import_oci_archive(
        &self,
        archive: impl AsRef<Path>,
        name: Option<&str>,
    ) -> Result<String, RuntimeError> {
        let conn = &self.inner.conn;
        let lease = conn.lease("import").await?;
        let result = self.inner.import(&lease, archive.as_ref(), name).await;
        conn.release(lease).await?;
        result
    }
}

impl ContainerdRuntime {
    /// Whether containerd's store has an image record named `name` (pulled or imported). A pull
    /// that failed leaves none.
    ///
    /// # Errors
    ///
    /// [`RuntimeError::Unreachable`] when containerd fails.
    pub async fn has_image(&self, name: &str) -> Result<bool, RuntimeError> {
        pull::has_image(&self.inner.conn, name).await
    }
}

impl Inner {
    fn lock_for(&self, id: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        locks.entry(id.to_owned()).or_default().clone()
    }

    fn record_failure(&self, id: &str, error: &RuntimeError) {
        let mut failed = self.failed.lock().unwrap_or_else(|e| e.into_inner());
        failed.insert(id.to_owned(), error.to_string());
    }

    fn clear_failure(&self, id: &str) -> bool {
        let mut failed = self.failed.lock().unwrap_or_else(|e| e.into_inner());
        failed.remove(id).is_some()
    }

    fn failures(&self) -> BTreeMap<String, String> {
        self.failed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The instances whose image is being pulled, observed as pulling.
    fn pulling_now(&self) -> Vec<(String, InstanceState)> {
        let pulling = self.pulling.lock().unwrap_or_else(|e| e.into_inner());
        let state = |image: &String, pull: &ImagePull| {
            let (done, total) = pull.progress();
            InstanceState::Pulling {
                image: image.clone(),
                done,
                total,
            }
        };
        pulling
            .iter()
            .map(|(id, (image, pull))| (id.clone(), state(image, pull)))
            .collect()
    }

    /// The snapshotter new containers use now.
    fn snapshotter(&self) -> &str {
        match &self.config.fallback_snapshotter {
            Some(fallback) if self.use_fallback.load(Ordering::Relaxed) => fallback,
            _ => &self.config.snapshotter,
        }
    }

    /// Switches to the fallback snapshotter; false when there is none or it is already in use.
    fn fall_back(&self) -> bool {
        self.config.fallback_snapshotter.is_some()
            && !self.use_fallback.swap(true, Ordering::Relaxed)
    }

    /// The directory of one instance's log and files.
    fn instance_dir(&self, id: &str) -> PathBuf {
        self.config.state_dir.join(self.conn.namespace()).join(id)
    }
}

impl Runtime for ContainerdRuntime {
    async fn ensure_running(&self, spec: &InstanceSpec) -> Result<(), RuntimeError> {
        let lock = self.inner.lock_for(&spec.id);
        let _guard = lock.lock().await;
        let result = match crate::mounts::prepare(spec) {
            Ok(()) => self.inner.ensure_running(spec).await,
            Err(err) => Err(err),
        };
        match &result {
            Ok(()) => {
                self.inner.clear_failure(&spec.id);
            }
            Err(RuntimeError::Unreachable { .. }) => {}
            Err(error) => self.inner.record_failure(&spec.id, error),
        }
        result
    }

    async fn ensure_stopped(&self, id: &str, grace: Duration) -> Result<(), RuntimeError> {
        let lock = self.inner.lock_for(id);
        let _guard = lock.lock().await;
        self.inner.ensure_stopped(id, grace).await
    }

    async fn remove(&self, id: &str) -> Result<(), RuntimeError> {
        let lock = self.inner.lock_for(id);
        let _guard = lock.lock().await;
        self.inner.remove(id).await?;
        self.inner.clear_failure(id);
        Ok(())
    }

    async fn observe(&self) -> Result<Vec<ObservedInstance>, RuntimeError> {
        let mut observed = self.inner.observe().await?;
        let mut failures = self.inner.failures();
        for instance in &mut observed {
            if let Some(reason) = failures.remove(&instance.id) {
                instance.state = InstanceState::Failed { reason };
            }
        }
        let pulling = self.inner.pulling_now();
        for (id, _) in &pulling {
            failures.remove(id);
        }
        for (id, reason) in failures {
            observed.push(ObservedInstance::new(id, InstanceState::Failed { reason }));
        }
        for (id, state) in pulling {
            if !observed.iter().any(|o| o.id == id) {
                observed.push(ObservedInstance::new(id, state));
            }
        }
        Ok(observed)
    }

    async fn stats(&self, id: &str) -> Result<InstanceStats, RuntimeError> {
        self.inner.stats(id).await
    }

    async fn logs(&self, id: &str, lines: usize) -> Result<String, RuntimeError> {
        self.inner.logs(id, lines).await
    }

    async fn exec(
        &self,
        id: &str,
        command: &[String],
        timeout: Duration,
    ) -> Result<ExecOutput, RuntimeError> {
        self.inner.exec(id, command, timeout).await
    }

    async fn update_files(&self, id: &str, files: &[FileSpec]) -> Result<(), RuntimeError> {
        let lock = self.inner.lock_for(id);
        let _guard = lock.lock().await;
        self.inner.update_files(id, files).await
    }
}
