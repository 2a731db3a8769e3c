//! Running CNI plugins as the specification says: one program per plugin, the command and the
//! container in the environment, the plugin's configuration on stdin, the result on stdout.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use super::CniError;

/// Who a list of plugins is run for.
pub(super) struct Target<'a> {
    /// `CNI_CONTAINERID`.
    pub container: &'a str,
    /// `CNI_NETNS`.
    pub netns: &'a Path,
    /// `CNI_IFNAME`.
    pub ifname: &'a str,
    /// Where plugins are looked for (`CNI_PATH`).
    pub dirs: &'a [PathBuf],
}

/// `ADD` of every plugin of `list`, in order, each handed the previous one's result; returns
/// the last result.
pub(super) async fn add(
    list: &Value,
    target: &Target<'_>,
    runtime: &Value,
) -> Result<Value, CniError> {
    let mut previous: Option<Value> = None;
    for plugin in plugins(list) {
        let conf = plugin_conf(list, plugin, previous.as_ref(), runtime);
        previous = Some(run("ADD", &conf, target).await?);
    }
    Ok(previous.unwrap_or_else(|| json!({})))
}

/// `CHECK` of every plugin of `list`, in order, each handed the cached result of the `ADD`.
pub(super) async fn check(
    list: &Value,
    target: &Target<'_>,
    runtime: &Value,
    result: &Value,
) -> Result<(), CniError> {
    for plugin in plugins(list) {
        run(
            "CHECK",
            &plugin_conf(list, plugin, Some(result), runtime),
            target,
        )
        .await?;
    }
    Ok(())
}

/// `DEL` of every plugin of `list`, in reverse order, each handed the cached result of the
/// `ADD` when there is one. Every plugin is asked even when one fails; the first error is
/// returned.
pub(super) async fn del(
    list: &Value,
    target: &Target<'_>,
    runtime: &Value,
    result: Option<&Value>,
) -> Result<(), CniError> {
    let mut first = None;
    for plugin in plugins(list).rev() {
        let conf = plugin_conf(list, plugin, result, runtime);
        if let Err(error) = run("DEL", &conf, target).await {
            first.get_or_insert(error);
        }
    }
    first.map_or(Ok(()), Err)
}

fn plugins(list: &Value) -> impl DoubleEndedIterator<Item = &Value> {
    list["plugins"].as_array().into_iter().flatten()
}

/// A plugin's configuration as it gets it: its object, with the list's `name` and
/// `cniVersion`, the previous result, and the runtime's values for the capabilities it declares.
fn plugin_conf(list: &Value, plugin: &Value, previous: Option<&Value>, runtime: &Value) -> Value {
    let mut conf = plugin.clone();
    conf["name"] = list["name"].clone();
    conf["cniVersion"] = list["cniVersion"].clone();
    if let Some(previous) = previous {
        conf["prevResult"] = previous.clone();
    }
    let capabilities = plugin["capabilities"].as_object();
    let wanted: serde_json::Map<String, Value> = capabilities
        .into_iter()
        .flatten()
        .filter(|(_, on)| on.as_bool() == Some(true))
        .filter_map(|(name, _)| Some((name.clone(), runtime.get(name)?.clone())))
        .collect();
    if !wanted.is_empty() {
        conf["runtimeConfig"] = Value::Object(wanted);
    }
    conf
}

/// Runs one plugin: its result, or the error it printed.
async fn run(command: &str, conf: &Value, target: &Target<'_>) -> Result<Value, CniError> {
    let kind = conf["type"].as_str().unwrap_or_default().to_owned();
    let program = target
        .dirs
        .iter()
        .map(|dir| dir.join(&kind))
        .find(|path| path.is_file())
        .ok_or_else(|| CniError::PluginMissing {
            plugin: kind.clone(),
            dirs: target
                .dirs
                .iter()
                .map(|d| d.display().to_string())
                .collect(),
        })?;
    let path = std::env::join_paths(target.dirs).unwrap_or_default();
    let mut child = Command::new(&program)
        .env("CNI_COMMAND", command)
        .env("CNI_CONTAINERID", target.container)
        .env("CNI_NETNS", target.netns)
        .env("CNI_IFNAME", target.ifname)
        .env("CNI_PATH", path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| CniError::Io {
            plugin: kind.clone(),
            source,
        })?;
    if let Some(mut stdin) = child.stdin.take() {
        let bytes = serde_json::to_vec(conf).unwrap_or_default();
        stdin
            .write_all(&bytes)
            .await
            .map_err(|source| CniError::Io {
                plugin: kind.clone(),
                source,
            })?;
    }
    let output = child
        .wait_with_output()
        .await
        .map_err(|source| CniError::Io {
            plugin: kind.clone(),
            source,
        })?;
    let printed: Value = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
    if output.status.success() {
        return Ok(printed);
    }
    let message = match printed["msg"].as_str() {
        Some(msg) => match printed["details"].as_str().filter(|d| !d.is_empty()) {
            Some(details) => format!("{msg}: {details}"),
            None => msg.to_owned(),
        },
        None => String::from_utf8_lossy(&output.stderr).trim().to_owned(),
    };
    Err(CniError::Plugin {
        plugin: kind,
        command: command.to_owned(),
        message,
    })
}
