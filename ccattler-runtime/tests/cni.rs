//! `Cni` with the real standard plugins (Debian's `containernetworking-plugins`): two
//! containers (network namespaces serving HTTP with python3) on one node with the same declared
//! port, reached from another network namespace at the node's address and their two host ports;
//! checked, found again by a new `Cni` (an agent restarted), detached. The test's bridge,
//! subnet and namespaces are its own, and removed at the end.
//!
//! Needs root, `ip`, `iptables`, `curl`, `python3` and the plugins: without them it fails under
//! CI (`CI=true`) and says it was skipped when run by hand.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use ccattler_core::schema::PortBinding;
use ccattler_runtime::cni::{Cni, CniConfig, CniError};

fn runs(program: &str, arg: &str) -> bool {
    Command::new(program).arg(arg).output().is_ok()
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("ip runs");
    assert!(out.status.success(), "ip {args:?}: {out:?}");
}

/// Everything the test made outside the plugins' own state, removed on drop.
struct Made {
    client: String,
    veth: String,
    bridge: String,
    servers: Vec<Child>,
}

impl Made {
    /// Plugs the client namespace in: a veth whose end here has `node` and whose end there
    /// (`eth9`) has `client`, both /24.
    fn plug_client(&self, node: &str, client: &str) {
        ip(&["netns", "add", &self.client]);
        let peer = ["peer", "name", "eth9", "netns", &self.client];
        ip(&[&["link", "add", &self.veth, "type", "veth"][..], &peer[..]].concat());
        ip(&["addr", "add", &format!("{node}/24"), "dev", &self.veth]);
        ip(&["link", "set", &self.veth, "up"]);
        let there = ["-n", &self.client];
        ip(&[
            &there[..],
            &["addr", "add", &format!("{client}/24"), "dev", "eth9"],
        ]
        .concat());
        ip(&[&there[..], &["link", "set", "eth9", "up"]].concat());
        ip(&[&there[..], &["link", "set", "lo", "up"]].concat());
    }
}

impl Drop for Made {
    fn drop(&mut self) {
        for server in &mut self.servers {
            let _ = server.kill();
            let _ = server.wait();
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.client])
            .output();
        let _ = Command::new("ip")
            .args(["link", "del", &self.veth])
            .output();
        let _ = Command::new("ip")
            .args(["link", "del", &self.bridge])
            .output();
    }
}

/// python3 serving `dir` on port 8080 inside namespace `netns`.
fn serve(netns: &str, dir: &Path) -> Child {
    Command::new("ip")
        .args([
            "netns",
            "exec",
            netns,
            "python3",
            "-m",
            "http.server",
            "8080",
            "--directory",
        ])
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("python3 starts")
}

/// What `who` answers from namespace `from` at `node`'s two `ports`, once both answer, or
/// after 10 s of trying.
async fn who_answers(from: &str, node: &str, ports: [u16; 2]) -> (String, String) {
    let mut answers = (String::new(), String::new());
    for _ in 0..100 {
        answers = (
            who(from, &format!("{node}:{}", ports[0])),
            who(from, &format!("{node}:{}", ports[1])),
        );
        if !answers.0.is_empty() && !answers.1.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    answers
}

/// What `http://{target}/who` answers from namespace `from` (empty: no answer).
fn who(from: &str, target: &str) -> String {
    let out = Command::new("ip")
        .args(["netns", "exec", from, "curl", "-s", "--max-time", "2"])
        .arg(format!("http://{target}/who"))
        .output()
        .expect("curl runs");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[tokio::test]
async fn containers_get_their_own_network_and_their_host_ports() {
    const TEST: &str = "containers_get_their_own_network_and_their_host_ports";
    let plugins = Path::new("/usr/lib/cni/bridge").exists();
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout == b"0\n");
    let tools = ["curl", "python3", "iptables"]
        .iter()
        .all(|t| runs(t, "--version"));
    if !(plugins && root && tools) {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{TEST} needs root, curl, python3, iptables and the CNI plugins (scripts/test installs them)"
        );
        eprintln!("SKIPPED {TEST}: needs root, curl, python3, iptables and the CNI plugins");
        return;
    }
    let pid = std::process::id();
    let net = pid % 250;
    let state = tempfile::tempdir().expect("tempdir");
    let mut made = Made {
        client: format!("cca-cni-client-{pid}"),
        veth: format!("ccv{}", pid % 100_000),
        bridge: format!("ccb{}", pid % 100_000),
        servers: Vec::new(),
    };
    let config = CniConfig::default()
        .state_dir(state.path())
        .bridge(made.bridge.clone())
        .subnet(format!("10.233.{net}.0/24"));
    let cni = Cni::new(config.clone());

    // Two containers of one declared port, at two host ports.
    let a = cni
        .attach(
            "web-a",
            &[PortBinding {
                port: 8080,
                host: 20401,
            }],
        )
        .await
        .expect("a attached");
    let b = cni
        .attach(
            "web-b",
            &[PortBinding {
                port: 8080,
                host: 20402,
            }],
        )
        .await
        .expect("b attached");
    assert!(a.netns.exists() && b.netns.exists());
    assert_ne!(a.address, b.address);
    assert!(
        a.address
            .is_some_and(|ip| ip.to_string().starts_with(&format!("10.233.{net}."))),
        "{a:?}"
    );
    assert_eq!(
        cni.attach("web-a", &a.ports).await.expect("again"),
        a,
        "attaching is idempotent"
    );
    for (id, name) in [("web-a", "a"), ("web-b", "b")] {
        let dir = state.path().join(name);
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(dir.join("who"), name).expect("file");
        made.servers.push(serve(&Cni::netns_name(id), &dir));
    }

    // Another host: a namespace with a veth to this one.
    let node = format!("10.234.{net}.1");
    made.plug_client(&node, &format!("10.234.{net}.2"));
    let answers = who_answers(&made.client, &node, [20401, 20402]).await;
    assert_eq!(
        answers,
        ("a".to_owned(), "b".to_owned()),
        "each host port reaches its container"
    );

    // An agent started again finds the attachments and checks them.
    let again = Cni::new(config.clone());
    assert_eq!(again.attached("web-a").expect("read"), Some(a.clone()));
    again.check("web-a").await.expect("a checks");

    // Detached: the namespace and the mapping go; detaching again is fine.
    made.servers.remove(0).kill().expect("kill a");
    again.detach("web-a").await.expect("a detached");
    again.detach("web-a").await.expect("detached twice");
    assert!(!a.netns.exists());
    assert_eq!(again.attached("web-a").expect("read"), None);
    assert_eq!(who(&made.client, &format!("{node}:20401")), "");
    assert_eq!(
        who(&made.client, &format!("{node}:20402")),
        "b",
        "b is untouched"
    );

    // A plugin that is not installed: a clear error, nothing left behind.
    let empty = tempfile::tempdir().expect("tempdir");
    let mut broken = config.clone();
    broken.plugin_dirs = vec![empty.path().to_owned()];
    let err = Cni::new(broken)
        .attach("web-c", &[])
        .await
        .expect_err("no plugins");
    assert!(
        matches!(err, CniError::PluginMissing { .. })
            && err.to_string().contains("containernetworking-plugins"),
        "{err}"
    );
    assert!(
        !Path::new("/run/netns")
            .join(Cni::netns_name("web-c"))
            .exists()
    );

    cni.detach("web-b").await.expect("b detached");
}

/// Two busybox containers of one declared port on one node, each in a network namespace of
/// its own through CNI, reached from another namespace at the node's address and their host
/// ports; observed at `{host}:{host port}`; removed with their networks.
#[cfg(feature = "containerd")]
#[tokio::test]
async fn containerd_containers_get_their_own_network() {
    use ccattler_core::{InstanceSpec, InstanceState, Runtime};
    use ccattler_runtime::containerd::test_image::{self, DEBIAN_BUSYBOX, write_busybox_archive};
    use ccattler_runtime::containerd::{
        ContainerNetwork, ContainerdConfig, ContainerdRuntime, PullPolicy,
    };

    const TEST: &str = "containerd_containers_get_their_own_network";
    const IMAGE: &str = "local/ccattler-busybox:1";
    let plugins = Path::new("/usr/lib/cni/bridge").exists();
    let tools = ["curl", "iptables"].iter().all(|t| runs(t, "--version"));
    if !(plugins && tools) {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{TEST} needs root, curl, iptables and the CNI plugins (scripts/test installs them)"
        );
        eprintln!("SKIPPED {TEST}: needs root, curl, iptables and the CNI plugins");
        return;
    }
    let pid = std::process::id();
    let net = (pid + 7) % 250;
    let state = tempfile::tempdir().expect("tempdir");
    let made = Made {
        client: format!("cca-ctr-client-{pid}"),
        veth: format!("cdv{}", pid % 100_000),
        bridge: format!("cdb{}", pid % 100_000),
        servers: Vec::new(),
    };
    let node = format!("10.236.{net}.1");
    let cni = CniConfig::default()
        .state_dir(state.path().join("cni"))
        .bridge(made.bridge.clone())
        .subnet(format!("10.235.{net}.0/24"));
    let config = ContainerdConfig::default()
        .state_dir(state.path().join("containerd"))
        .pull_policy(PullPolicy::Never)
        .network(ContainerNetwork::Cni(cni.clone()))
        .host(node.clone());
    let socket = test_image::test_socket();
    let runtime = match ContainerdRuntime::connect(&socket, "ccattler-cni-test", config).await {
        Ok(runtime) => runtime,
        Err(e) => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "{TEST} needs containerd (scripts/containerd-up): {e}"
            );
            eprintln!("SKIPPED {TEST}: containerd not running ({e})");
            return;
        }
    };
    let archive = state.path().join("busybox.tar");
    write_busybox_archive(Path::new(DEBIAN_BUSYBOX), IMAGE, &archive).expect("the image");
    runtime
        .import_oci_archive(&archive, None)
        .await
        .expect("imported");

    made.plug_client(&node, &format!("10.236.{net}.2"));

    let script = "mkdir -p /tmp/w && echo $NAME > /tmp/w/who && exec httpd -f -p $PORT -h /tmp/w";
    let mut specs = Vec::new();
    for (name, host) in [("a", 20501), ("b", 20502)] {
        let mut spec =
            InstanceSpec::new(format!("cni-{name}"), IMAGE).command(["sh", "-c", script]);
        spec.service = "tests".to_owned();
        spec.env.insert("NAME".to_owned(), name.to_owned());
        spec.ports = vec![PortBinding { port: 8080, host }];
        let _ = runtime.remove(&spec.id).await;
        runtime.ensure_running(&spec).await.expect("started");
        specs.push(spec);
    }
    let answers = who_answers(&made.client, &node, [20501, 20502]).await;
    assert_eq!(
        answers,
        ("a".to_owned(), "b".to_owned()),
        "each host port reaches its container"
    );
    // The node itself reaches them at its own address and on loopback (the agent's probes do).
    let local = Command::new("curl")
        .args(["-s", "--max-time", "2"])
        .arg(format!("http://{node}:20502/who"))
        .output()
        .expect("curl runs");
    assert_eq!(String::from_utf8_lossy(&local.stdout).trim(), "b");
    let looped = Command::new("curl")
        .args(["-s", "--max-time", "2", "http://127.0.0.1:20502/who"])
        .output()
        .expect("curl runs");
    assert_eq!(
        String::from_utf8_lossy(&looped.stdout).trim(),
        "b",
        "and on loopback"
    );
    let observed = runtime.observe().await.expect("observe");
    let a = observed
        .iter()
        .find(|o| o.id == "cni-a")
        .expect("a observed");
    assert_eq!(a.state, InstanceState::Running);
    assert_eq!(a.address.as_deref(), Some(format!("{node}:20501").as_str()));

    for spec in &specs {
        runtime.remove(&spec.id).await.expect("removed");
        assert!(
            !Path::new("/run/netns")
                .join(Cni::netns_name(&spec.id))
                .exists()
        );
    }
    assert_eq!(who(&made.client, &format!("{node}:20501")), "");
    assert_eq!(Cni::new(cni).attached("cni-a").expect("read"), None);
}
