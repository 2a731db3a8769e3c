//! The simulator's table of instances and the faults waiting to happen to them.

use std::collections::{BTreeMap, BTreeSet};

use ccattler_core::schema::{Cpu, Memory};
use ccattler_core::{
    ExecOutput, FileSpec, InstanceSpec, InstanceState, InstanceStats, ObservedInstance,
    RuntimeError,
};

use super::{exit_code, init_step_exit, is_live};

/// Memory a running instance reports when its spec sets no limit.
const DEFAULT_MEMORY: Memory = Memory::from_bytes(16 * 1024 * 1024);

/// One simulated instance.
#[derive(Debug)]
pub(super) struct SimInstance {
    pub(super) spec: InstanceSpec,
    /// Where it serves, when its spec asks for a port: one host port per instance id.
    pub(super) address: Option<String>,
    pub(super) state: InstanceState,
    pub(super) restarts: u32,
    pub(super) output: Vec<String>,
}

impl SimInstance {
    fn observed(&self) -> ObservedInstance {
        let mut seen = ObservedInstance::new(self.spec.id.clone(), self.state.clone());
        seen.address = self.address.clone();
        seen.restarts = self.restarts;
        seen
    }

    /// What the instance does once it is past starting: ends if its program says so (or it is
    /// an init step that ends, see [`init_step_exit`]), else runs. An init step that fails
    /// prints its command line and its code, as the output a failed step is reported with.
    pub(super) fn settle(&mut self) {
        let init = self.spec.env.contains_key(crate::agent::INIT_STEP_ENV);
        let ends = if init {
            init_step_exit(&self.spec.command)
        } else {
            exit_code(&self.spec.command)
        };
        if let Some(code) = ends.filter(|code| init && *code != 0) {
            let line = self.spec.command.last().map_or("", String::as_str);
            self.output.push(format!("{line}: exit status {code}"));
        }
        self.state = match ends {
            Some(code) => InstanceState::Exited { code },
            None => InstanceState::Running,
        };
    }
}

/// Everything the simulator knows, behind one lock.
#[derive(Debug, Default)]
pub(super) struct Table {
    pub(super) instances: BTreeMap<String, SimInstance>,
    /// Ids or images whose next start fails, with the reason.
    pub(super) fail_next: BTreeMap<String, String>,
    pub(super) missing_images: BTreeSet<String>,
    pub(super) missing_commands: BTreeSet<String>,
    /// Ids whose next start stays `Starting` until released.
    pub(super) slow: BTreeSet<String>,
    /// The snapshot `observe` keeps returning while observations are stale.
    pub(super) frozen: Option<Vec<ObservedInstance>>,
    /// Why the runtime is unreachable, while it is.
    pub(super) unreachable: Option<String>,
    /// Ids or images whose network probes fail.
    pub(super) failing_probes: BTreeSet<String>,
    /// The host addresses are on (`127.0.0.1` unless set).
    pub(super) host: Option<String>,
}

impl Table {
    fn reachable(&self) -> Result<(), RuntimeError> {
        match &self.unreachable {
            Some(message) => Err(RuntimeError::Unreachable {
                message: message.clone(),
                source: None,
            }),
            None => Ok(()),
        }
    }

    fn known(&self, id: &str) -> Result<&SimInstance, RuntimeError> {
        self.reachable()?;
        self.instances
            .get(id)
            .ok_or_else(|| RuntimeError::NotFound(id.to_owned()))
    }

    pub(super) fn ensure_running(&mut self, spec: &InstanceSpec) -> Result<(), RuntimeError> {
        self.reachable()?;
        let restarts = match self.instances.get(&spec.id) {
            Some(old) if !old.state.has_ended() => return Ok(()),
            Some(old) => old.restarts + 1,
            None => 0,
        };
        let output = self
            .instances
            .remove(&spec.id)
            .map(|old| old.output)
            .unwrap_or_default();
        let address = spec.served_port().map(|port| {
            let host = self.host.as_deref().unwrap_or("127.0.0.1");
            crate::address::served_at(host, port)
        });
        let mut instance = SimInstance {
            address,
            spec: spec.clone(),
            state: InstanceState::Starting,
            restarts,
            output,
        };
        let result = self.start(&mut instance);
        self.instances.insert(spec.id.clone(), instance);
        result
    }

    /// Rewrites files of a running instance: the spec it reports keeps its start, with the new
    /// contents and modes of the files it already had (a path it does not have is refused).
    pub(super) fn update_files(
        &mut self,
        id: &str,
        files: &[FileSpec],
    ) -> Result<(), RuntimeError> {
        self.reachable()?;
        let instance = self
            .instances
            .get_mut(id)
            .filter(|i| !i.state.has_ended())
            .ok_or_else(|| RuntimeError::NotFound(id.to_owned()))?;
        for file in files {
            let old = instance
                .spec
                .files
                .iter_mut()
                .find(|f| f.path == file.path)
                .ok_or_else(|| RuntimeError::StartFailed {
                    id: id.to_owned(),
                    reason: format!("{} is not one of the files it started with", file.path),
                })?;
            *old = file.clone();
        }
        Ok(())
    }

    /// Starts `instance`, or records why it could not start and returns that error.
    fn start(&mut self, instance: &mut SimInstance) -> Result<(), RuntimeError> {
        let spec = &instance.spec;
        let error = if self.missing_images.contains(&spec.image) {
            Some(RuntimeError::ImageNotFound {
                image: spec.image.clone(),
            })
        } else if let Some(program) = spec
            .command
            .first()
            .filter(|p| self.missing_commands.contains(*p))
        {
            Some(RuntimeError::CommandNotFound {
                command: program.clone(),
            })
        } else {
            let reason = self
                .fail_next
                .remove(&spec.id)
                .or_else(|| self.fail_next.remove(&spec.image));
            reason.map(|reason| RuntimeError::StartFailed {
                id: spec.id.clone(),
                reason,
            })
        };
        if let Some(error) = error {
            instance.state = InstanceState::Failed {
                reason: error.to_string(),
            };
            return Err(error);
        }
        if let [program, lines @ ..] = spec.command.as_slice()
            && program == "print"
        {
            instance.output.extend(lines.iter().cloned());
        }
        if !self.slow.remove(&spec.id) {
            instance.settle();
        }
        Ok(())
    }

    pub(super) fn ensure_stopped(&mut self, id: &str) -> Result<(), RuntimeError> {
        self.reachable()?;
        if let Some(instance) = self.instances.get_mut(id)
            && is_live(&instance.state)
        {
            instance.state = InstanceState::Stopped;
        }
        Ok(())
    }

    pub(super) fn remove(&mut self, id: &str) -> Result<(), RuntimeError> {
        self.reachable()?;
        self.instances.remove(id);
        Ok(())
    }

    pub(super) fn observe(&self) -> Result<Vec<ObservedInstance>, RuntimeError> {
        self.reachable()?;
        if let Some(frozen) = &self.frozen {
            return Ok(frozen.clone());
        }
        Ok(self.snapshot())
    }

    /// What `observe` holds of `ids`: each looked up, not every instance walked.
    pub(super) fn observe_some(
        &self,
        ids: &BTreeSet<String>,
    ) -> Result<Vec<ObservedInstance>, RuntimeError> {
        self.reachable()?;
        if let Some(frozen) = &self.frozen {
            let seen = frozen.iter().filter(|seen| ids.contains(&seen.id));
            return Ok(seen.cloned().collect());
        }
        let known = ids.iter().filter_map(|id| self.instances.get(id));
        Ok(known.map(SimInstance::observed).collect())
    }

    /// What `observe` would return now, stale or not.
    pub(super) fn snapshot(&self) -> Vec<ObservedInstance> {
        self.instances.values().map(SimInstance::observed).collect()
    }

    pub(super) fn stats(&self, id: &str) -> Result<InstanceStats, RuntimeError> {
        let instance = self.known(id)?;
        if !is_live(&instance.state) {
            return Ok(InstanceStats::default());
        }
        let limit = instance.spec.memory;
        Ok(InstanceStats {
            cpu: Cpu::ZERO,
            memory: if limit == Memory::ZERO {
                DEFAULT_MEMORY
            } else {
                limit
            },
        })
    }

    pub(super) fn logs(&self, id: &str, lines: usize) -> Result<String, RuntimeError> {
        let instance = self.known(id)?;
        let skip = instance.output.len().saturating_sub(lines);
        let mut text = String::new();
        for line in &instance.output[skip..] {
            text.push_str(line);
            text.push('\n');
        }
        Ok(text)
    }

    pub(super) fn exec(&self, id: &str, command: &[String]) -> Result<ExecOutput, RuntimeError> {
        self.known(id)?;
        if let Some(program) = command.first()
            && self.missing_commands.contains(program)
        {
            return Err(RuntimeError::CommandNotFound {
                command: program.clone(),
            });
        }
        let Some(code) = exit_code(command) else {
            return Ok(ExecOutput::default());
        };
        let mut stdout = Vec::new();
        for word in command.iter().skip(2) {
            stdout.extend_from_slice(word.as_bytes());
            stdout.push(b'\n');
        }
        Ok(ExecOutput {
            code,
            stdout,
            stderr: Vec::new(),
        })
    }
}
