//! Stopping (SIGTERM, then SIGKILL after the grace period) and removing (task, container,
//! snapshot, state directory, in that order).

use std::collections::HashMap;
use std::time::Duration;

use ccattler_core::RuntimeError;
use containerd_client::services::v1::{
    Container, KillRequest, UpdateContainerRequest, WaitRequest,
};
use containerd_client::tonic::Code;
use containerd_client::types::v1::Status as TaskStatus;
use prost_types::FieldMask;

use super::Inner;
use super::client::grpc;
use super::lifecycle::{STOPPED, kill_budget};

impl Inner {
    pub(super) async fn ensure_stopped(
        &self,
        id: &str,
        grace: Duration,
    ) -> Result<(), RuntimeError> {
        let Some(task) = self.task(id).await? else {
            return Ok(());
        };
        if TaskStatus::try_from(task.status) == Ok(TaskStatus::Stopped) {
            return Ok(());
        }
        let labels = HashMap::from([(STOPPED.to_owned(), "true".to_owned())]);
        self.set_labels(id, labels).await?;
        for (signal, budget) in kill_budget(grace, self.config.timeout) {
            self.kill(id, "", signal).await?;
            if self.wait(id, "", budget).await?.is_some() {
                return Ok(());
            }
        }
        Err(RuntimeError::Timeout {
            what: format!("stopping {id} after SIGKILL"),
            after: self.config.timeout,
        })
    }

    /// Removes the instance: stops it at once if it still runs (SIGKILL), then deletes the
    /// task, the container, its snapshot and its state directory. Unknown ids are fine.
    pub(super) async fn remove(&self, id: &str) -> Result<(), RuntimeError> {
        self.ensure_stopped(id, Duration::ZERO).await?;
        self.delete_task(id).await?;
        self.delete_container(id).await?;
        if let Some(cni) = &self.cni {
            cni.detach(id)
                .await
                .map_err(|e| RuntimeError::Unreachable {
                    message: format!("removing the network of {id} failed: {e}"),
                    source: Some(Box::new(e)),
                })?;
        }
        let dir = self.instance_dir(id);
        match tokio::fs::remove_dir_all(&dir).await {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(RuntimeError::Unreachable {
                    message: format!("cannot remove {}: {e}", dir.display()),
                    source: Some(Box::new(e)),
                });
            }
        }
        let mut samples = self.cpu_samples.lock().unwrap_or_else(|e| e.into_inner());
        samples.remove(id);
        Ok(())
    }

    /// Sends `signal` to the task (or its exec process); an ended process is fine.
    pub(super) async fn kill(
        &self,
        id: &str,
        exec_id: &str,
        signal: u32,
    ) -> Result<(), RuntimeError> {
        let request = self.conn.req(KillRequest {
            container_id: id.to_owned(),
            exec_id: exec_id.to_owned(),
            signal,
            all: false,
        });
        match self.conn.tasks().kill(request).await {
            Ok(_) => Ok(()),
            Err(s) if s.code() == Code::NotFound => Ok(()),
            Err(s) => Err(grpc("task kill", s)),
        }
    }

    /// Waits up to `budget` for the task (or exec process) to end; its exit status, or `None`
    /// when it still runs.
    pub(super) async fn wait(
        &self,
        id: &str,
        exec_id: &str,
        budget: Duration,
    ) -> Result<Option<u32>, RuntimeError> {
        let request = self.conn.req(WaitRequest {
            container_id: id.to_owned(),
            exec_id: exec_id.to_owned(),
        });
        let mut tasks = self.conn.tasks();
        match tokio::time::timeout(budget, tasks.wait(request)).await {
            Err(_) => Ok(None),
            Ok(Ok(response)) => Ok(Some(response.into_inner().exit_status)),
            Ok(Err(s)) if s.code() == Code::NotFound => Ok(Some(0)),
            Ok(Err(s)) => Err(grpc("task wait", s)),
        }
    }

    /// Sets (or, with an empty value, clears) labels on container `id`.
    pub(super) async fn set_labels(
        &self,
        id: &str,
        labels: HashMap<String, String>,
    ) -> Result<(), RuntimeError> {
        let paths = labels.keys().map(|k| format!("labels.{k}")).collect();
        let labels = labels.into_iter().filter(|(_, v)| !v.is_empty()).collect();
        let request = self.conn.req(UpdateContainerRequest {
            container: Some(Container {
                id: id.to_owned(),
                labels,
                ..Container::default()
            }),
            update_mask: Some(FieldMask { paths }),
        });
        match self.conn.containers().update(request).await {
            Ok(_) => Ok(()),
            Err(s) if s.code() == Code::NotFound => Err(RuntimeError::NotFound(id.to_owned())),
            Err(s) => Err(grpc("container update", s)),
        }
    }
}
