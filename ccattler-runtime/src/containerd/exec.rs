//! Running a command inside a running instance: a containerd exec process with the container's
//! environment and working directory, stdout and stderr to two files under the instance's
//! directory.

use std::path::Path;
use std::time::Duration;

use ccattler_core::{ExecOutput, RuntimeError};
use containerd_client::services::v1::{DeleteProcessRequest, ExecProcessRequest, StartRequest};
use containerd_client::tonic::Code;
use containerd_client::types::v1::Status as TaskStatus;
use prost_types::Any;
use serde_json::Value;

use super::Inner;
use super::client::{grpc, unique};
use super::spec;

impl Inner {
    pub(super) async fn exec(
        &self,
        id: &str,
        command: &[String],
        timeout: Duration,
    ) -> Result<ExecOutput, RuntimeError> {
        let container = self
            .container(id)
            .await?
            .ok_or_else(|| RuntimeError::NotFound(id.to_owned()))?;
        let running = self
            .task(id)
            .await?
            .is_some_and(|t| TaskStatus::try_from(t.status) == Ok(TaskStatus::Running));
        if !running {
            return Err(RuntimeError::StartFailed {
                id: id.to_owned(),
                reason: "exec needs a running instance".to_owned(),
            });
        }
        let oci: Value = container
            .spec
            .as_ref()
            .and_then(|any| serde_json::from_slice(&any.value).ok())
            .unwrap_or(Value::Null);
        let env: Vec<String> = oci["process"]["env"]
            .as_array()
            .map(|e| {
                e.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        let cwd = oci["process"]["cwd"].as_str().unwrap_or("/");
        let process = spec::process(command, &env, cwd);
        let exec_id = format!("exec-{}", unique());
        let dir = self.instance_dir(id);
        let out = dir.join(format!("{exec_id}.out"));
        let err = dir.join(format!("{exec_id}.err"));
        // Plain paths of existing files: the shim opens them as they are (a `file://` URI would
        // send stderr into the stdout file).
        for path in [&out, &err] {
            tokio::fs::write(path, b"")
                .await
                .map_err(|e| RuntimeError::StartFailed {
                    id: id.to_owned(),
                    reason: format!("cannot create {}: {e}", path.display()),
                })?;
        }
        let result = self
            .run_exec(id, &exec_id, process, (&out, &err), command, timeout)
            .await;
        let _ = tokio::fs::remove_file(&out).await;
        let _ = tokio::fs::remove_file(&err).await;
        result
    }

    async fn run_exec(
        &self,
        id: &str,
        exec_id: &str,
        process: Value,
        (out, err): (&Path, &Path),
        command: &[String],
        timeout: Duration,
    ) -> Result<ExecOutput, RuntimeError> {
        let request = self.conn.req(ExecProcessRequest {
            container_id: id.to_owned(),
            exec_id: exec_id.to_owned(),
            stdin: String::new(),
            stdout: out.to_string_lossy().into_owned(),
            stderr: err.to_string_lossy().into_owned(),
            terminal: false,
            spec: Some(Any {
                type_url: spec::PROCESS_TYPE.to_owned(),
                value: process.to_string().into_bytes(),
            }),
        });
        self.conn
            .tasks()
            .exec(request)
            .await
            .map_err(|s| grpc("exec", s))?;
        let start = self.conn.req(StartRequest {
            container_id: id.to_owned(),
            exec_id: exec_id.to_owned(),
        });
        if let Err(s) = self.conn.tasks().start(start).await {
            self.delete_process(id, exec_id).await;
            let message = s.message();
            if message.contains("no such file or directory")
                || message.contains("executable file not found")
            {
                return Err(RuntimeError::CommandNotFound {
                    command: command.first().cloned().unwrap_or_default(),
                });
            }
            return Err(grpc("exec start", s));
        }
        let code = match self.wait(id, exec_id, timeout).await? {
            Some(code) => code,
            None => {
                self.kill(id, exec_id, 9).await?;
                let _ = self.wait(id, exec_id, self.config.timeout).await;
                self.delete_process(id, exec_id).await;
                return Err(RuntimeError::Timeout {
                    what: format!("exec {command:?} in {id}"),
                    after: timeout,
                });
            }
        };
        self.delete_process(id, exec_id).await;
        Ok(ExecOutput {
            code: i32::try_from(code).unwrap_or(i32::MAX),
            stdout: tokio::fs::read(out).await.unwrap_or_default(),
            stderr: tokio::fs::read(err).await.unwrap_or_default(),
        })
    }

    /// Deletes an exec process; failures are ignored (it may be gone with its task).
    async fn delete_process(&self, id: &str, exec_id: &str) {
        let request = self.conn.req(DeleteProcessRequest {
            container_id: id.to_owned(),
            exec_id: exec_id.to_owned(),
        });
        match self.conn.tasks().delete_process(request).await {
            Ok(_) => {}
            Err(s) if s.code() == Code::NotFound => {}
            Err(_) => {}
        }
    }
}
