//! A private OCI registry on loopback for tests and benches: Debian's `docker-registry` (the
//! CNCF distribution registry) with a temporary config and filesystem storage, optionally behind
//! basic authentication (an htpasswd file made with `htpasswd` from apache2-utils). Push images
//! into it with [`TestImage::push`](super::test_image::TestImage::push).

use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The registry's program, as Debian's `docker-registry` package installs it.
pub const REGISTRY_PROGRAM: &str = "docker-registry";

/// A running registry; stopped and its storage deleted when dropped.
#[derive(Debug)]
pub struct TestRegistry {
    child: Child,
    dir: PathBuf,
    addr: SocketAddr,
}

impl TestRegistry {
    /// Whether the registry program is installed (on `PATH`).
    pub fn available() -> bool {
        Command::new(REGISTRY_PROGRAM)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Starts a registry on a free loopback port, anonymous when `credentials` is `None`, else
    /// accepting only that user name and password (basic authentication), and waits until it
    /// accepts connections.
    ///
    /// # Errors
    ///
    /// When the program (or `htpasswd`, for credentials) is missing, or the registry does not
    /// come up within 10 s; the message says which, with the registry's log.
    pub fn start(credentials: Option<(&str, &str)>) -> io::Result<TestRegistry> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("ccattler-registry-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("storage"))?;
        let addr = free_port()?;
        let auth = match credentials {
            Some((user, password)) => {
                write_htpasswd(&dir.join("htpasswd"), user, password)?;
                format!(
                    "auth:\n  htpasswd:\n    realm: ccattler-test\n    path: {}\n",
                    dir.join("htpasswd").display()
                )
            }
            None => String::new(),
        };
        let config = format!(
            "version: 0.1\nlog:\n  level: info\nstorage:\n  filesystem:\n    rootdirectory: \
             {}\n  delete:\n    enabled: true\nhttp:\n  addr: {addr}\n{auth}",
            dir.join("storage").display()
        );
        std::fs::write(dir.join("config.yml"), config)?;
        let log = std::fs::File::create(dir.join("registry.log"))?;
        let child = Command::new(REGISTRY_PROGRAM)
            .arg("serve")
            .arg(dir.join("config.yml"))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("cannot start {REGISTRY_PROGRAM} (install docker-registry): {e}"),
                )
            })?;
        let mut registry = TestRegistry { child, dir, addr };
        registry.wait_up()?;
        Ok(registry)
    }

    fn wait_up(&mut self) -> io::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Err(io::Error::other(format!(
                    "{REGISTRY_PROGRAM} exited ({status}): {}",
                    self.log()
                )));
            }
            if TcpStream::connect_timeout(&self.addr, Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(io::Error::other(format!(
                    "{REGISTRY_PROGRAM} did not listen on {} within 10 s: {}",
                    self.addr,
                    self.log()
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `127.0.0.1:PORT`: the registry part of image references, and what to name as insecure.
    pub fn host(&self) -> String {
        self.addr.to_string()
    }

    /// Where the registry stores blob `digest` (`sha256:...`): a test may change the file to
    /// make the registry serve data that does not match the digest.
    pub fn blob_file(&self, digest: &str) -> PathBuf {
        let hex = digest.trim_start_matches("sha256:");
        let prefix = hex.get(..2).unwrap_or(hex);
        self.dir
            .join("storage/docker/registry/v2/blobs/sha256")
            .join(prefix)
            .join(hex)
            .join("data")
    }

    /// What the registry logged so far (one line per request, among others).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("registry.log")).unwrap_or_default()
    }

    /// How many requests for URLs containing `fragment` the registry logged with `method`.
    pub fn requests(&self, method: &str, fragment: &str) -> usize {
        let method = format!("http.request.method={method}");
        self.log()
            .lines()
            .filter(|l| l.contains(&method) && l.contains(fragment) && l.contains("response"))
            .count()
    }
}

impl Drop for TestRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A loopback address with a port nothing listened on a moment ago.
fn free_port() -> io::Result<SocketAddr> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    listener.local_addr()
}

/// An htpasswd file with one bcrypt entry, made by `htpasswd` (apache2-utils).
fn write_htpasswd(path: &Path, user: &str, password: &str) -> io::Result<()> {
    let out = Command::new("htpasswd")
        .args(["-Bbn", user, password])
        .output()
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot run htpasswd (install apache2-utils): {e}"),
            )
        })?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "htpasswd failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    std::fs::write(path, out.stdout)
}
