//! Hosts that are real network namespaces on this machine: each host a namespace of its own with
//! one interface (`eth0`, a veth pair) plugged into a bridge that lives in one more namespace, so
//! hosts reach each other only over that bridge, at addresses of a test range. The test process
//! itself is plugged into the bridge too (as `.254`), so it can call the hosts' APIs.
//!
//! Everything is made by [`Hosts::new`] and removed when the value is dropped, also when the test
//! panics: the namespaces are deleted, which deletes their interfaces. Making namespaces needs
//! root and `ip` (iproute2); without them a test fails under CI (`CI=true`) and says it was
//! skipped when run by hand.

#![allow(dead_code)]

use std::net::Ipv4Addr;
use std::path::Path;
use std::process::{Child, Command};

use crate::processes::{enrollment_token, spawn_agent, spawn_server};

/// One host: its namespace and its address on the bridge.
#[derive(Clone, Debug)]
pub(crate) struct Host {
    /// The network namespace's name.
    pub ns: String,
    /// Its address.
    pub address: Ipv4Addr,
    /// Its port on the bridge (in the bridge's namespace), which [`Hosts::cut`] takes down.
    port: String,
}

/// A set of hosts on one bridge; see the [module docs](self).
pub(crate) struct Hosts {
    bridge_ns: String,
    /// The test process's interface on the bridge (in this namespace).
    uplink: String,
    pub hosts: Vec<Host>,
}

/// Runs `ip` with `args`; panics with its output when it fails.
fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("ip runs");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Hosts {
    /// Makes `count` hosts for `test`; `None` (after failing under CI, or saying the test was
    /// skipped) when this machine cannot make network namespaces.
    pub(crate) fn new(test: &str, count: usize) -> Option<Hosts> {
        let probe = format!("cca-probe-{}", std::process::id());
        let made = Command::new("ip")
            .args(["netns", "add", &probe])
            .output()
            .is_ok_and(|o| o.status.success());
        if !made {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "{test} needs network namespaces (root and iproute2's `ip`), which this machine cannot make"
            );
            eprintln!("SKIPPED {test}: cannot make network namespaces (needs root and `ip`)");
            return None;
        }
        ip(&["netns", "del", &probe]);
        // A subnet of its own per test process, so that tests running at once do not meet.
        let id = std::process::id();
        let subnet = [10, 231, u8::try_from(id % 250).unwrap_or(0)];
        let tag = format!("{:x}", id % 0xffff);
        let bridge_ns = format!("cca-{tag}-br");
        let mut hosts = Hosts {
            bridge_ns: bridge_ns.clone(),
            uplink: format!("cca{tag}up"),
            hosts: Vec::new(),
        };
        ip(&["netns", "add", &bridge_ns]);
        ip(&["-n", &bridge_ns, "link", "add", "br0", "type", "bridge"]);
        ip(&["-n", &bridge_ns, "link", "set", "br0", "up"]);
        for i in 0..count {
            let ns = format!("cca-{tag}-h{i}");
            let port = format!("p{i}");
            let address = Ipv4Addr::new(
                subnet[0],
                subnet[1],
                subnet[2],
                u8::try_from(i + 1).unwrap_or(1),
            );
            ip(&["netns", "add", &ns]);
            // Pushed at once, so that a failure below still deletes it.
            hosts.hosts.push(Host {
                ns: ns.clone(),
                address,
                port: port.clone(),
            });
            ip(&[
                "-n", &ns, "link", "add", "eth0", "type", "veth", "peer", "name", &port, "netns",
                &bridge_ns,
            ]);
            ip(&[
                "-n", &bridge_ns, "link", "set", &port, "master", "br0", "up",
            ]);
            ip(&[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{address}/24"),
                "dev",
                "eth0",
            ]);
            ip(&["-n", &ns, "link", "set", "eth0", "up"]);
            ip(&["-n", &ns, "link", "set", "lo", "up"]);
        }
        let uplink = hosts.uplink.clone();
        ip(&[
            "link", "add", &uplink, "type", "veth", "peer", "name", "tester", "netns", &bridge_ns,
        ]);
        ip(&[
            "-n", &bridge_ns, "link", "set", "tester", "master", "br0", "up",
        ]);
        let own = format!("{}.{}.{}.254/24", subnet[0], subnet[1], subnet[2]);
        ip(&["addr", "add", &own, "dev", &uplink]);
        ip(&["link", "set", &uplink, "up"]);
        Some(hosts)
    }

    /// `program` to run on host `i` (`ip netns exec`, which becomes `program` itself, so
    /// killing the child kills the program).
    pub(crate) fn command(&self, i: usize, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec", &self.hosts[i].ns])
            .arg(program);
        command
    }

    /// `program` to run on host `i` in its network namespace only (`nsenter --net`): unlike
    /// [`command`](Self::command), it keeps this machine's mount namespace, so the network
    /// namespaces it makes under `/run/netns` (CNI's, one per container) are seen by
    /// containerd too.
    pub(crate) fn command_net_only(
        &self,
        i: usize,
        program: impl AsRef<std::ffi::OsStr>,
    ) -> Command {
        let mut command = Command::new("nsenter");
        command
            .arg(format!("--net=/run/netns/{}", self.hosts[i].ns))
            .arg("--")
            .arg(program);
        command
    }

    /// Starts `cca` (the binary at `cca`) `server --dns` on host 0, logging under `dir`: DNS on
    /// port 53 of its address, the API on a free port. Returns the child, the API's URL and
    /// the DNS server's address.
    pub(crate) fn start_server(&self, cca: &str, dir: &Path) -> (Child, String, String) {
        let server = self.hosts[0].address.to_string();
        let flags = ["--dns".to_owned(), format!("{server}:53")];
        let listen = format!("{server}:0");
        let (child, url) = spawn_server(self.command(0, cca), dir, &listen, &flags, 1);
        (child, url, server)
    }

    /// Enrolls node `h{i}` with the server at `url` and starts its agent with `flags`, run by
    /// `command` (host `i`'s `cca`, from [`command`](Self::command) or
    /// [`command_net_only`](Self::command_net_only)).
    pub(crate) fn start_agent(
        &self,
        command: Command,
        i: usize,
        (dir, url, admin): (&Path, &str, &str),
        flags: &[&str],
    ) -> Child {
        let token = enrollment_token(url, admin);
        spawn_agent(command, dir, url, &format!("h{i}"), &token, flags)
    }

    /// What `command` printed on stdout, trimmed.
    pub(crate) fn stdout(mut command: Command) -> String {
        let out = command.output().expect("the command runs");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// The SRV answers of `name` as host `from` gets them from the DNS server at `server`:
    /// (port, target).
    pub(crate) fn srv(&self, from: usize, server: &str, name: &str) -> Vec<(String, String)> {
        let mut dig = self.command(from, "dig");
        dig.args([&format!("@{server}"), name, "SRV", "+short", "+tries=1"]);
        Hosts::stdout(dig)
            .lines()
            .filter_map(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                Some((fields.get(2)?.to_string(), fields.get(3)?.to_string()))
            })
            .collect()
    }

    /// The address `name` resolves to, as host `from` asks the DNS server at `server`.
    pub(crate) fn resolve(&self, from: usize, server: &str, name: &str) -> String {
        let mut dig = self.command(from, "dig");
        dig.args([&format!("@{server}"), name, "A", "+short", "+tries=1"]);
        Hosts::stdout(dig)
    }

    /// The HTTP status host `from` gets from `http://{target}/` ("000": no connection, or a
    /// connection refused or reset).
    pub(crate) fn http(&self, from: usize, target: &str) -> String {
        Hosts::curl(self.command(from, "curl"), target)
    }

    /// The HTTP status this test process gets from `http://{target}/`: an address on the
    /// bridge that is no host of the cluster ("000": no connection).
    pub(crate) fn http_outside(&self, target: &str) -> String {
        Hosts::curl(Command::new("curl"), target)
    }

    fn curl(mut curl: Command, target: &str) -> String {
        curl.args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "3",
        ])
        .arg(format!("http://{target}/"));
        Hosts::stdout(curl)
    }

    /// Cuts host `i` off the network (its bridge port goes down), as a pulled cable does.
    pub(crate) fn cut(&self, i: usize) {
        ip(&[
            "-n",
            &self.bridge_ns,
            "link",
            "set",
            &self.hosts[i].port,
            "down",
        ]);
    }

    /// Plugs host `i` back in.
    pub(crate) fn restore(&self, i: usize) {
        ip(&[
            "-n",
            &self.bridge_ns,
            "link",
            "set",
            &self.hosts[i].port,
            "up",
        ]);
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for host in &self.hosts {
            let _ = Command::new("ip").args(["netns", "del", &host.ns]).output();
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.bridge_ns])
            .output();
        // Gone with its peer in the bridge's namespace; deleted here should that have failed.
        let _ = Command::new("ip")
            .args(["link", "del", &self.uplink])
            .output();
    }
}
