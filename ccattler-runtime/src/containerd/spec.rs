//! The OCI runtime spec of a container, built from an [`InstanceSpec`] and its image: the JSON
//! equivalent of `ctr oci spec` plus the instance's args, env, cwd, mounts and limits.

use std::path::Path;

use ccattler_core::InstanceSpec;
use serde_json::{Value, json};

use super::image::ImageInfo;

/// The type URL containerd expects on a container's spec.
pub(crate) const SPEC_TYPE: &str = "types.containerd.io/opencontainers/runtime-spec/1/Spec";
/// The type URL of an exec'd process spec.
pub(crate) const PROCESS_TYPE: &str = "types.containerd.io/opencontainers/runtime-spec/1/Process";

const CAPABILITIES: [&str; 14] = [
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FSETID",
    "CAP_FOWNER",
    "CAP_MKNOD",
    "CAP_NET_RAW",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETFCAP",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_KILL",
    "CAP_AUDIT_WRITE",
];

/// CFS period in microseconds; a CPU limit of `m` millicores is a quota of `m * 100` per period.
const CPU_PERIOD: u64 = 100_000;

/// The argument vector: the spec's command, or the image's entrypoint and command.
pub(crate) fn args(spec: &InstanceSpec, image: &ImageInfo) -> Vec<String> {
    if spec.command.is_empty() {
        image.default_args.clone()
    } else {
        spec.command.clone()
    }
}

/// The process part: args, the image's env then the spec's (later wins), cwd, root, caps.
pub(crate) fn process(args: &[String], env: &[String], cwd: &str) -> Value {
    json!({
        "terminal": false,
        "user": {"uid": 0, "gid": 0},
        "args": args,
        "env": env,
        "cwd": cwd,
        "capabilities": {
            "bounding": CAPABILITIES,
            "effective": CAPABILITIES,
            "permitted": CAPABILITIES,
        },
        "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
        "noNewPrivileges": true,
    })
}

/// The environment: the image's, then `PATH` if missing, then the spec's (overriding by key),
/// then where to listen: `PORT` (the first port) and `PORT_{declared}`, each the host port on
/// the node's network, or the declared port itself in a network namespace of its own
/// (`own_network`).
pub(crate) fn env(spec: &InstanceSpec, image: &ImageInfo, own_network: bool) -> Vec<String> {
    let mut env: Vec<String> = image.env.clone();
    if !env.iter().any(|e| e.starts_with("PATH=")) {
        env.push("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_owned());
    }
    let mut set = |key: &str, value: &str| {
        let prefix = format!("{key}=");
        env.retain(|e| !e.starts_with(&prefix));
        env.push(format!("{key}={value}"));
    };
    for (key, value) in &spec.env {
        set(key, value);
    }
    let ports = if own_network {
        spec.declared_port_env()
    } else {
        spec.port_env()
    };
    for (key, value) in ports {
        set(&key, &value);
    }
    env
}

/// The whole container spec. `files` are `(host file, path in the container)` pairs, bind-mounted
/// read-only. With `netns` (its CNI network) the container joins that network namespace;
/// without, a container with ports shares the node's network (no network namespace), so that
/// `127.0.0.1:{port}` reaches it, and one without ports gets an empty namespace of its own.
pub(crate) fn container(
    spec: &InstanceSpec,
    image: &ImageInfo,
    namespace: &str,
    files: &[(String, String)],
    netns: Option<&Path>,
) -> Value {
    let args = args(spec, image);
    let mut mounts = default_mounts();
    for (host, target) in files {
        mounts.push(bind(host, target, true));
    }
    for mount in &spec.mounts {
        mounts.push(bind(
            &path_text(&mount.source),
            &mount.target,
            mount.read_only,
        ));
    }
    let mut namespaces = vec![
        json!({"type": "pid"}),
        json!({"type": "ipc"}),
        json!({"type": "uts"}),
        json!({"type": "mount"}),
    ];
    match netns {
        Some(path) => namespaces.push(json!({"type": "network", "path": path})),
        None if spec.ports.is_empty() => namespaces.push(json!({"type": "network"})),
        None => {}
    }
    let mut resources = json!({"devices": [{"allow": false, "access": "rwm"}]});
    if spec.memory.bytes() > 0 {
        resources["memory"] = json!({"limit": spec.memory.bytes()});
    }
    if spec.cpu.millis() > 0 {
        let quota = spec.cpu.millis() * (CPU_PERIOD / 1000);
        resources["cpu"] = json!({"quota": quota, "period": CPU_PERIOD});
    }
    json!({
        "ociVersion": "1.0.2-dev",
        "process": process(&args, &env(spec, image, netns.is_some()), &image.cwd),
        "root": {"path": "rootfs"},
        "hostname": hostname(&spec.id),
        "mounts": mounts,
        "linux": {
            "resources": resources,
            "cgroupsPath": cgroups_path(namespace, &spec.id),
            "namespaces": namespaces,
            "maskedPaths": [
                "/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
                "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware",
                "/proc/scsi",
            ],
            "readonlyPaths": [
                "/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
            ],
        },
    })
}

/// The container's cgroup, relative to each hierarchy's root: `/<namespace>/<id>`.
pub(crate) fn cgroups_path(namespace: &str, id: &str) -> String {
    format!("/{namespace}/{id}")
}

fn hostname(id: &str) -> String {
    id.chars().take(63).collect()
}

fn bind(source: &str, target: &str, read_only: bool) -> Value {
    let mode = if read_only { "ro" } else { "rw" };
    json!({"destination": target, "type": "bind", "source": source, "options": ["rbind", mode]})
}

fn path_text(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

fn default_mounts() -> Vec<Value> {
    vec![
        json!({"destination": "/proc", "type": "proc", "source": "proc",
               "options": ["nosuid", "noexec", "nodev"]}),
        json!({"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
               "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]}),
        json!({"destination": "/dev/pts", "type": "devpts", "source": "devpts",
               "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620",
                           "gid=5"]}),
        json!({"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
               "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]}),
        json!({"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue",
               "options": ["nosuid", "noexec", "nodev"]}),
        json!({"destination": "/sys", "type": "sysfs", "source": "sysfs",
               "options": ["nosuid", "noexec", "nodev", "ro"]}),
        json!({"destination": "/run", "type": "tmpfs", "source": "tmpfs",
               "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]}),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use ccattler_core::schema::{Cpu, Memory};

    fn image() -> ImageInfo {
        ImageInfo {
            config: String::new(),
            layers: Vec::new(),
            diff_ids: Vec::new(),
            env: vec!["PATH=/bin".to_owned(), "A=image".to_owned()],
            default_args: vec!["sh".to_owned()],
            cwd: "/".to_owned(),
        }
    }

    #[test]
    fn spec_env_overrides_image_env_and_port_is_passed() {
        let mut spec = InstanceSpec::new("web-1", "img").env("A", "spec");
        spec.ports = vec![ccattler_core::schema::PortBinding {
            port: 8080,
            host: 20001,
        }];
        let env = env(&spec, &image(), false);
        assert_eq!(
            env,
            ["PATH=/bin", "A=spec", "PORT=20001", "PORT_8080=20001"]
        );
        // In a network namespace of its own it listens on the declared port, mapped from the
        // host port, and joins that namespace.
        let own = super::env(&spec, &image(), true);
        assert_eq!(own, ["PATH=/bin", "A=spec", "PORT=8080", "PORT_8080=8080"]);
        let netns = Path::new("/run/netns/cca-1");
        let oci = container(&spec, &image(), "ns", &[], Some(netns));
        let namespaces = oci["linux"]["namespaces"].as_array().expect("namespaces");
        assert!(namespaces.contains(&json!({"type": "network", "path": netns})));
    }

    #[test]
    fn limits_and_mounts_reach_the_spec() {
        let mut spec = InstanceSpec::new("web-1", "img").command(["sleep", "1"]);
        spec.cpu = Cpu::from_millis(500);
        spec.memory = Memory::from_bytes(64 << 20);
        let files = [("/host/f".to_owned(), "/etc/app.conf".to_owned())];
        let oci = container(&spec, &image(), "ns", &files, None);
        assert_eq!(oci["process"]["args"], json!(["sleep", "1"]));
        assert_eq!(oci["linux"]["resources"]["cpu"]["quota"], 50_000);
        assert_eq!(oci["linux"]["resources"]["memory"]["limit"], 64 << 20);
        assert_eq!(oci["linux"]["cgroupsPath"], "/ns/web-1");
        let last = oci["mounts"].as_array().and_then(|m| m.last()).cloned();
        assert_eq!(
            last.map(|m| m["destination"].clone()),
            Some(json!("/etc/app.conf"))
        );
    }
}
