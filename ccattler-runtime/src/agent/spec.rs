//! From the schema's service spec to the runtime's instance spec.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::{Path, PathBuf};

use ccattler_core::schema::{PortBinding, RestartPolicy, ServiceSpec, claimed_volume};
use ccattler_core::{FileSpec, InstanceSpec, InstanceState, MountSpec};

use super::action::Sample;
use super::cache::Desired;
use super::disk::claim_dir;

/// A secret a spec names whose value the agent does not hold: the instance cannot be built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct MissingSecret(pub String);

/// The runtime spec of instance `id` of `spec`: command, env, config files (0644), secrets
/// (files 0600 at their mount path, or environment variables named after the secret in upper
/// case with `-` and `.` turned into `_`), volumes (directories under `volumes_dir`), ports and
/// limits.
///
/// # Errors
///
/// The first secret `spec` names that `desired` holds no value of: never an empty value in its
/// place.
pub(super) fn instance_spec(
    id: &str,
    spec: &ServiceSpec,
    desired: &Desired,
    volumes_dir: &Path,
) -> Result<InstanceSpec, MissingSecret> {
    let mut instance = InstanceSpec::new(id, spec.image.clone());
    instance.service = spec.name.clone();
    instance.command = spec.command.clone();
    instance.env = spec.env.clone();
    instance
        .env
        .insert("CCATTLER_INSTANCE".into(), id.to_owned());
    instance
        .env
        .insert("CCATTLER_SERVICE".into(), spec.name.clone());
    instance.files = spec
        .files
        .iter()
        .map(|f| FileSpec {
            path: f.path.clone(),
            content: f.content.clone().into_bytes(),
            mode: 0o644,
        })
        .collect();
    for secret in &spec.secrets {
        let value = desired
            .secrets
            .get(&secret.name)
            .cloned()
            .ok_or_else(|| MissingSecret(secret.name.clone()))?;
        match &secret.mount {
            Some(path) => instance.files.push(FileSpec {
                path: path.clone(),
                content: value,
                mode: 0o600,
            }),
            None => {
                let name = secret.name.to_uppercase().replace(['-', '.'], "_");
                instance
                    .env
                    .insert(name, String::from_utf8_lossy(&value).into_owned());
            }
        }
    }
    instance.mounts = mounts(id, spec, desired, volumes_dir);
    // The host ports the scheduler gave (a placement written before it gave any has none: the
    // declared ports then serve as they are).
    let given = desired.placements.get(id).map(|a| a.ports.as_slice());
    instance.ports = match given {
        Some(given) if given.len() == spec.expose.len() => given.to_vec(),
        _ => spec
            .expose
            .iter()
            .map(|e| PortBinding {
                port: e.port,
                host: e.port,
            })
            .collect(),
    };
    instance.cpu = spec.resources.cpu;
    instance.memory = spec.resources.memory;
    Ok(instance)
}

/// The mounts of placed instance `id`'s volumes. Where a volume's data is on the node follows
/// what its placement carries (the volume's name for this instance, and whether it is
/// persistent): a persistent volume's under `{volumes_dir}/persistent/{name}` (`data`, or
/// `data@0` for the first identity of a stateful service; see [`claim_dir`]), kept for the
/// next instance; any
/// other's under `{volumes_dir}/instance/{id}/{volume}`, deleted with the instance
/// ([`instance_data`]). A volume the placement does not list (written by a scheduler that
/// listed none) is taken as persistent under its declared name: nothing is deleted that might
/// be wanted.
fn mounts(id: &str, spec: &ServiceSpec, desired: &Desired, volumes_dir: &Path) -> Vec<MountSpec> {
    let placed = desired.placements.get(id).map(|a| a.volumes.as_slice());
    spec.volumes
        .iter()
        .map(|v| {
            let attached =
                placed.and_then(|list| list.iter().find(|p| claimed_volume(&p.name) == v.volume));
            let persistent = attached.is_none_or(|p| p.persistent);
            let name = attached.map_or(v.volume.as_str(), |p| p.name.as_str());
            let source = match instance_data(volumes_dir, id) {
                Some(data) if !persistent => data.join(&v.volume),
                _ => claim_dir(volumes_dir, name),
            };
            MountSpec {
                source,
                target: v.path.clone(),
                read_only: false,
            }
        })
        .collect()
}

/// The directory holding the data of instance `id`'s volumes that are not persistent, deleted
/// when the instance is removed: `{volumes_dir}/instance/{id}`. `None` for an id that is not one
/// plain path segment (never a directory outside that one).
pub(super) fn instance_data(volumes_dir: &Path, id: &str) -> Option<PathBuf> {
    let plain = !id.is_empty() && id != "." && id != ".." && !id.contains(['/', '\\', '\0']);
    plain.then(|| volumes_dir.join("instance").join(id))
}

/// Whether a secret of `spec` reaches the instance through its environment (a change then
/// needs a restart) rather than a file (rewritten in place).
pub(super) fn secret_in_env(spec: &ServiceSpec, name: &str) -> bool {
    spec.secrets
        .iter()
        .any(|s| s.name == name && s.mount.is_none())
}

/// The spec of the `step`-th init step of instance `id`: a short-lived instance of the same
/// image running the step's command in a shell.
///
/// # Errors
///
/// As [`instance_spec`].
pub(super) fn init_spec(
    id: &str,
    step: usize,
    spec: &ServiceSpec,
    desired: &Desired,
    volumes_dir: &Path,
) -> Result<InstanceSpec, MissingSecret> {
    let mut init = instance_spec(&init_id(id, step), spec, desired, volumes_dir)?;
    // Its volumes are its instance's: the same data.
    init.mounts = mounts(id, spec, desired, volumes_dir);
    // The step prepares instance `id`: it is told so, and which step it is.
    init.env.insert("CCATTLER_INSTANCE".into(), id.to_owned());
    init.env
        .insert(super::INIT_STEP_ENV.into(), step.to_string());
    let command = spec
        .init
        .get(step)
        .map(|s| s.exec.clone())
        .unwrap_or_default();
    init.command = vec!["sh".into(), "-c".into(), command];
    init.ports.clear();
    Ok(init)
}

/// The id of an init step's instance.
pub(super) fn init_id(id: &str, step: usize) -> String {
    format!("{id}.init{step}")
}

/// Of the init steps' containers the runtime holds (`observed`, by runtime id) for instance
/// `id`, the first: its runtime id, and whether it has ended. Read by the ids' form
/// ([`init_id`]), not by a spec's steps: an earlier incarnation of the id may have had more.
pub(super) fn held_init_step(
    observed: &BTreeMap<String, Sample>,
    id: &str,
) -> Option<(String, bool)> {
    let prefix = format!("{id}.init");
    observed
        .range::<str, _>((Bound::Included(prefix.as_str()), Bound::Unbounded))
        .take_while(|(key, _)| key.starts_with(&prefix))
        .find(|(key, _)| {
            let step = key[prefix.len()..].parse::<usize>();
            step.is_ok_and(|step| init_id(id, step) == **key)
        })
        .map(|(key, sample)| (key.clone(), sample.instance.state.has_ended()))
}

/// The placed instance an id the runtime reports belongs to: the instance itself when it is
/// placed here, or the placed instance `owner` of which it is init step `k`, when the id is
/// exactly [`init_id`]`(owner, k)` and `k` is one of the steps its spec has (any step when the
/// spec is not known yet). Never read out of the name alone: a service may be called
/// `shop.initial` or `team/initdb`, and its instances are owned by themselves.
pub(super) fn owner<'a>(id: &'a str, desired: &'a Desired) -> Option<&'a str> {
    if desired.placements.contains_key(id) {
        return Some(id);
    }
    let (owner, step) = id.rsplit_once(".init")?;
    let step: usize = step.parse().ok()?;
    if init_id(owner, step) != id || !desired.placements.contains_key(owner) {
        return None;
    }
    let steps = desired.spec_of(owner).map(|spec| spec.init.len());
    steps.is_none_or(|n| step < n).then_some(owner)
}

/// Whether an instance that ended in `state` is started again under `policy`.
pub(super) fn restarts(policy: RestartPolicy, state: &InstanceState) -> bool {
    match policy {
        RestartPolicy::Always => true,
        RestartPolicy::OnFailure => !matches!(state, InstanceState::Exited { code: 0 }),
        RestartPolicy::Never => false,
    }
}
