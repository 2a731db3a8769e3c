//! Starting, stopping and removing containers: the call sequence of containerd's own client,
//! with a lease around unpack, snapshot and container record, and teardown in the safe order.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ccattler_core::{InstanceSpec, RuntimeError};
use containerd_client::services::v1::container::Runtime as ContainerRuntime;
use containerd_client::services::v1::snapshots::{
    MountsRequest, PrepareSnapshotRequest, RemoveSnapshotRequest,
};
use containerd_client::services::v1::{
    Container, CreateContainerRequest, CreateTaskRequest, DeleteContainerRequest,
    DeleteTaskRequest, GetContainerRequest, GetRequest, StartRequest,
};
use containerd_client::tonic::{Code, Status};
use containerd_client::types::Mount;
use containerd_client::types::v1::{Process, Status as TaskStatus};
use prost_types::Any;

use super::client::{Lease, grpc};
use super::image::{ImageInfo, ensure_unpacked, resolve};
use super::{Inner, spec};

/// Label naming the instance; containers with it are ours.
pub(super) const INSTANCE: &str = "ccattler.instance";
/// Label naming the instance's service.
pub(super) const SERVICE: &str = "ccattler.service";
/// Label holding the log file's path.
pub(super) const LOG: &str = "ccattler.log";
/// Label holding the first port.
pub(super) const PORT: &str = "ccattler.port";
/// Label set to `true` when the instance was stopped on request.
pub(super) const STOPPED: &str = "ccattler.stopped";
/// Label counting restarts.
pub(super) const RESTARTS: &str = "ccattler.restarts";

impl Inner {
    pub(super) async fn ensure_running(&self, spec: &InstanceSpec) -> Result<(), RuntimeError> {
        match self.task(&spec.id).await? {
            Some(task) => match TaskStatus::try_from(task.status) {
                Ok(TaskStatus::Running | TaskStatus::Paused | TaskStatus::Pausing) => Ok(()),
                Ok(TaskStatus::Created) => self.start_task(&spec.id).await,
                _ => {
                    self.delete_task(&spec.id).await?;
                    self.restart(spec, true).await
                }
            },
            None => match self.container(&spec.id).await? {
                Some(_) => self.restart(spec, false).await,
                None => self.create(spec).await,
            },
        }
    }

    /// Creates a new task for an existing container (after an exit, a stop, or a start cut short).
    async fn restart(&self, spec: &InstanceSpec, count: bool) -> Result<(), RuntimeError> {
        let container = self
            .container(&spec.id)
            .await?
            .ok_or_else(|| RuntimeError::NotFound(spec.id.clone()))?;
        let mut labels = HashMap::from([(STOPPED.to_owned(), String::new())]);
        if count {
            let restarts = container.labels.get(RESTARTS).and_then(|r| r.parse().ok());
            let next = restarts.unwrap_or(0u32) + 1;
            labels.insert(RESTARTS.to_owned(), next.to_string());
        }
        self.set_labels(&spec.id, labels).await?;
        let request = self.conn.req(MountsRequest {
            snapshotter: container.snapshotter.clone(),
            key: container.snapshot_key.clone(),
        });
        let rootfs = self
            .conn
            .snapshots()
            .mounts(request)
            .await
            .map_err(|s| grpc("snapshot mounts", s))?
            .into_inner()
            .mounts;
        let log = container.labels.get(LOG).cloned().unwrap_or_default();
        let args = container_args(&container);
        self.create_task(&spec.id, rootfs, Path::new(&log), &args)
            .await?;
        self.start_task(&spec.id).await
    }

    /// Creates everything: pulled and unpacked image, its network (with CNI), snapshot,
    /// container record, task; and starts it. A container whose network cannot be set up is
    /// not created; one that fails to be created gives its network back.
    async fn create(&self, spec: &InstanceSpec) -> Result<(), RuntimeError> {
        self.ensure_image(&spec.id, &spec.image).await?;
        let netns = match &self.cni {
            Some(cni) => Some(cni.attach(&spec.id, &spec.ports).await.map_err(|e| {
                RuntimeError::StartFailed {
                    id: spec.id.clone(),
                    reason: format!("setting up its network failed: {e}"),
                }
            })?),
            None => None,
        };
        let created = self
            .create_with(spec, netns.as_ref().map(|a| a.netns.as_path()))
            .await;
        if created.is_err()
            && let Some(cni) = &self.cni
            && let Err(error) = cni.detach(&spec.id).await
        {
            tracing::warn!(%error, id = %spec.id, "the network of a container that failed to start was not removed");
        }
        created
    }

    async fn create_with(
        &self,
        spec: &InstanceSpec,
        netns: Option<&Path>,
    ) -> Result<(), RuntimeError> {
        let image = resolve(&self.conn, &spec.image).await?;
        let dir = self.instance_dir(&spec.id);
        let host = HostSide {
            files: write_files(&dir, spec).await?,
            log: dir.join("output.log"),
            netns,
        };
        let log = &host.log;
        loop {
            let snapshotter = self.snapshotter().to_owned();
            let lease = self.conn.lease("run").await?;
            let made = self
                .make_container(spec, &image, &snapshotter, &host, &lease)
                .await;
            self.conn.release(lease).await?;
            let rootfs = match made {
                Ok(rootfs) => rootfs,
                Err(s) if s.message().contains("snapshotter not loaded") && self.fall_back() => {
                    continue;
                }
                Err(s) => return Err(start_failed(&spec.id, "container create", &s)),
            };
            let args = spec::args(spec, &image);
            match self.create_task(&spec.id, rootfs, log, &args).await {
                Ok(()) => return self.start_task(&spec.id).await,
                Err(RuntimeError::StartFailed { reason, .. })
                    if reason.contains("failed to mount rootfs component") && self.fall_back() =>
                {
                    self.delete_container(&spec.id).await?;
                }
                Err(error) => {
                    self.delete_container(&spec.id).await?;
                    return Err(error);
                }
            }
        }
    }

    /// Unpacks the image, prepares the rootfs snapshot and creates the container record; returns
    /// the rootfs mounts.
    async fn make_container(
        &self,
        spec: &InstanceSpec,
        image: &ImageInfo,
        snapshotter: &str,
        host: &HostSide<'_>,
        lease: &Lease,
    ) -> Result<Vec<Mount>, Status> {
        ensure_unpacked(&self.conn, image, snapshotter, lease).await?;
        let prepare = PrepareSnapshotRequest {
            snapshotter: snapshotter.to_owned(),
            key: spec.id.clone(),
            parent: image.chain_top(),
            labels: HashMap::new(),
        };
        let mut snapshots = self.conn.snapshots();
        let rootfs = snapshots
            .prepare(self.conn.leased(prepare, Some(lease)))
            .await?
            .into_inner()
            .mounts;
        let oci = spec::container(spec, image, self.conn.namespace(), &host.files, host.netns);
        let mut labels = HashMap::from([
            (INSTANCE.to_owned(), spec.id.clone()),
            (SERVICE.to_owned(), spec.service.clone()),
            (LOG.to_owned(), host.log.to_string_lossy().into_owned()),
        ]);
        if let Some(port) = spec.served_port() {
            labels.insert(PORT.to_owned(), port.to_string());
        }
        let container = Container {
            id: spec.id.clone(),
            labels,
            image: spec.image.clone(),
            runtime: Some(ContainerRuntime {
                name: self.config.runtime.clone(),
                options: None,
            }),
            spec: Some(Any {
                type_url: spec::SPEC_TYPE.to_owned(),
                value: oci.to_string().into_bytes(),
            }),
            snapshotter: snapshotter.to_owned(),
            snapshot_key: spec.id.clone(),
            ..Container::default()
        };
        let create = CreateContainerRequest {
            container: Some(container),
        };
        if let Err(s) = self
            .conn
            .containers()
            .create(self.conn.leased(create, Some(lease)))
            .await
        {
            let remove = RemoveSnapshotRequest {
                snapshotter: snapshotter.to_owned(),
                key: spec.id.clone(),
            };
            let _ = snapshots
                .remove(self.conn.leased(remove, Some(lease)))
                .await;
            return Err(s);
        }
        Ok(rootfs)
    }

    /// Creates the task (shim and runc create), output appended to `log` (stdout and stderr
    /// must be the same `file://` URI: an empty stderr crashes containerd 1.6's shim).
    async fn create_task(
        &self,
        id: &str,
        rootfs: Vec<Mount>,
        log: &Path,
        args: &[String],
    ) -> Result<(), RuntimeError> {
        let uri = format!("file://{}", log.display());
        let request = self.conn.req(CreateTaskRequest {
            container_id: id.to_owned(),
            rootfs,
            stdout: uri.clone(),
            stderr: uri,
            ..CreateTaskRequest::default()
        });
        match self.conn.tasks().create(request).await {
            Ok(_) => Ok(()),
            Err(s) if s.code() == Code::Unavailable => Err(grpc("task create", s)),
            Err(s) if is_missing_program(s.message()) => Err(RuntimeError::CommandNotFound {
                command: args.first().cloned().unwrap_or_default(),
            }),
            Err(s) => Err(start_failed(id, "task create", &s)),
        }
    }

    async fn start_task(&self, id: &str) -> Result<(), RuntimeError> {
        let request = self.conn.req(StartRequest {
            container_id: id.to_owned(),
            exec_id: String::new(),
        });
        match self.conn.tasks().start(request).await {
            Ok(_) => Ok(()),
            Err(s) if s.code() == Code::Unavailable => Err(grpc("task start", s)),
            Err(s) => {
                let error = start_failed(id, "task start", &s);
                self.delete_task(id).await?;
                Err(error)
            }
        }
    }

    /// The task of container `id`, if it has one.
    pub(super) async fn task(&self, id: &str) -> Result<Option<Process>, RuntimeError> {
        let request = self.conn.req(GetRequest {
            container_id: id.to_owned(),
            exec_id: String::new(),
        });
        match self.conn.tasks().get(request).await {
            Ok(response) => Ok(response.into_inner().process),
            Err(s) if s.code() == Code::NotFound => Ok(None),
            Err(s) => Err(grpc("task get", s)),
        }
    }

    /// The container record `id`, if it exists.
    pub(super) async fn container(&self, id: &str) -> Result<Option<Container>, RuntimeError> {
        let request = self.conn.req(GetContainerRequest { id: id.to_owned() });
        match self.conn.containers().get(request).await {
            Ok(response) => Ok(response.into_inner().container),
            Err(s) if s.code() == Code::NotFound => Ok(None),
            Err(s) => Err(grpc("container get", s)),
        }
    }

    /// Deletes the task of `id` (it must have ended); a missing task is fine.
    pub(super) async fn delete_task(&self, id: &str) -> Result<(), RuntimeError> {
        let request = self.conn.req(DeleteTaskRequest {
            container_id: id.to_owned(),
        });
        match self.conn.tasks().delete(request).await {
            Ok(_) => Ok(()),
            Err(s) if s.code() == Code::NotFound => Ok(()),
            Err(s) => Err(grpc("task delete", s)),
        }
    }

    /// Deletes the container record, then its snapshot (the task must be gone already).
    pub(super) async fn delete_container(&self, id: &str) -> Result<(), RuntimeError> {
        let Some(container) = self.container(id).await? else {
            return Ok(());
        };
        let request = self.conn.req(DeleteContainerRequest { id: id.to_owned() });
        match self.conn.containers().delete(request).await {
            Ok(_) => {}
            Err(s) if s.code() == Code::NotFound => {}
            Err(s) => return Err(grpc("container delete", s)),
        }
        let request = self.conn.req(RemoveSnapshotRequest {
            snapshotter: container.snapshotter,
            key: container.snapshot_key,
        });
        match self.conn.snapshots().remove(request).await {
            Ok(_) => Ok(()),
            Err(s) if s.code() == Code::NotFound => Ok(()),
            Err(s) => Err(grpc("snapshot remove", s)),
        }
    }
}

/// Writes the spec's files under `<dir>/files/` (replacing what an earlier start left) and returns
/// `(host path, path in the container)` pairs.
/// What a container gets from the host: its files (`(host file, path in the container)`), its
/// log file, and its network namespace (with CNI).
struct HostSide<'a> {
    files: Vec<(String, String)>,
    log: PathBuf,
    netns: Option<&'a Path>,
}

async fn write_files(
    dir: &Path,
    spec: &InstanceSpec,
) -> Result<Vec<(String, String)>, RuntimeError> {
    use std::os::unix::fs::PermissionsExt;
    let failed = |e: std::io::Error| RuntimeError::StartFailed {
        id: spec.id.clone(),
        reason: format!("cannot write into {}: {e}", dir.display()),
    };
    let files_dir = dir.join("files");
    let _ = tokio::fs::remove_dir_all(&files_dir).await;
    tokio::fs::create_dir_all(&files_dir)
        .await
        .map_err(failed)?;
    let mut pairs = Vec::new();
    for (i, file) in spec.files.iter().enumerate() {
        let host = files_dir.join(i.to_string());
        tokio::fs::write(&host, &file.content)
            .await
            .map_err(failed)?;
        let mode = std::fs::Permissions::from_mode(file.mode);
        tokio::fs::set_permissions(&host, mode)
            .await
            .map_err(failed)?;
        pairs.push((host.to_string_lossy().into_owned(), file.path.clone()));
    }
    Ok(pairs)
}

/// The args of a container's spec, for error messages.
fn container_args(container: &Container) -> Vec<String> {
    let spec: Option<serde_json::Value> = container
        .spec
        .as_ref()
        .and_then(|any| serde_json::from_slice(&any.value).ok());
    let args = spec
        .as_ref()
        .and_then(|s| s["process"]["args"].as_array().cloned());
    args.unwrap_or_default()
        .iter()
        .filter_map(|a| a.as_str().map(str::to_owned))
        .collect()
}

/// Whether runc said the program to run does not exist in the image.
fn is_missing_program(message: &str) -> bool {
    message.contains("exec:")
        && (message.contains("no such file or directory")
            || message.contains("executable file not found"))
}

fn start_failed(id: &str, what: &str, status: &Status) -> RuntimeError {
    RuntimeError::StartFailed {
        id: id.to_owned(),
        reason: format!("{what}: {}", status.message()),
    }
}

/// How long to wait for a killed task: the grace period, then the SIGKILL budget.
pub(super) fn kill_budget(grace: Duration, timeout: Duration) -> [(u32, Duration); 2] {
    [(15, grace), (9, timeout)]
}
