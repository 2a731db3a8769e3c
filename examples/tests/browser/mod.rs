//! Headless Chromium (Debian's `chromium`) for the tests of the web page, with no crate: the
//! one-shot `--dump-dom` of a page, and a page kept open and driven over the DevTools protocol
//! on a pipe (`--remote-debugging-pipe`: JSON messages ended by NUL on fds 3 and 4, which a
//! shell sets up from the child's stdin and stdout).
//!
//! [`proxy`] breaks the browser's connections on purpose.
//!
//! Every run has its own temporary profile (`--user-data-dir`) and `--no-sandbox`, which
//! Chromium needs as root.

#![allow(dead_code)]

pub(crate) mod proxy;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The browser binary: `$CHROMIUM` or `chromium`.
pub(crate) fn binary() -> PathBuf {
    std::env::var_os("CHROMIUM").map_or_else(|| PathBuf::from("chromium"), PathBuf::from)
}

/// `Ok` with its version when the browser runs, else why not.
pub(crate) fn version() -> Result<String, String> {
    match Command::new(binary()).arg("--version").output() {
        Ok(out) if out.status.success() => {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
        }
        Ok(out) => Err(format!(
            "`{} --version` failed: {out:?}",
            binary().display()
        )),
        Err(err) => Err(format!("`{}` does not run: {err}", binary().display())),
    }
}

/// Without a browser: a failure under `CI=true`, else "SKIPPED" on stderr.
pub(crate) fn skip_or_fail(test: &str, why: &str) {
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{test} needs Debian's chromium and CI=true, but {why}; scripts/test installs it"
    );
    eprintln!("SKIPPED {test}: {why} (apt-get install chromium; with CI=true this is a failure)");
}

const FLAGS: [&str; 8] = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--no-default-browser-check",
    "--hide-scrollbars",
    "--window-size=1280,900",
];

/// The DOM of `url` once the page has had `budget` of virtual time (`--dump-dom
/// --virtual-time-budget`).
pub(crate) fn dump_dom(url: &str, budget: Duration) -> String {
    let profile = tempfile::tempdir().expect("profile dir");
    let out = Command::new(binary())
        .args(FLAGS)
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--virtual-time-budget={}", budget.as_millis()))
        .arg("--dump-dom")
        .arg(url)
        .stdin(Stdio::null())
        .output()
        .expect("chromium runs");
    assert!(
        out.status.success(),
        "chromium --dump-dom failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A browser with one page, driven over the DevTools protocol; killed when dropped.
pub(crate) struct Browser {
    child: Child,
    commands: ChildStdin,
    replies: Receiver<Value>,
    next_id: u64,
    session: String,
    log: PathBuf,
    _profile: tempfile::TempDir,
}

/// How long one DevTools command may take.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(20);

impl Browser {
    /// Starts the browser and opens `url` in a 1280×900 page; its log goes to `log`.
    pub(crate) fn open(url: &str, log: &Path) -> Browser {
        let profile = tempfile::tempdir().expect("profile dir");
        let stderr = std::fs::File::create(log).expect("browser log");
        // fd 3: commands in, fd 4: replies out, as --remote-debugging-pipe expects.
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(r#"exec "$0" "$@" 3<&0 4>&1 0</dev/null 1>/dev/null"#)
            .arg(binary())
            .args(FLAGS)
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("--remote-debugging-pipe")
            .arg("about:blank")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("chromium starts");
        let commands = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        let (send, replies) = channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut message = Vec::new();
            while reader.read_until(0, &mut message).is_ok_and(|n| n > 0) {
                if message.last() == Some(&0) {
                    message.pop();
                }
                if let Ok(value) = serde_json::from_slice::<Value>(&message)
                    && send.send(value).is_err()
                {
                    return;
                }
                message.clear();
            }
        });
        let mut browser = Browser {
            child,
            commands,
            replies,
            next_id: 0,
            session: String::new(),
            log: log.to_owned(),
            _profile: profile,
        };
        let target = browser.call("Target.createTarget", json!({ "url": "about:blank" }));
        let target = target["targetId"].as_str().expect("a target id").to_owned();
        let attached = browser.call(
            "Target.attachToTarget",
            json!({ "targetId": target, "flatten": true }),
        );
        browser.session = attached["sessionId"]
            .as_str()
            .expect("a session id")
            .to_owned();
        browser.viewport(900);
        browser.call("Page.navigate", json!({ "url": url }));
        browser
    }

    /// Sends one command (to the page once attached) and returns its result.
    pub(crate) fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({ "id": id, "method": method, "params": params });
        if !self.session.is_empty() {
            message["sessionId"] = json!(self.session);
        }
        let mut bytes = serde_json::to_vec(&message).expect("json");
        bytes.push(0);
        self.commands
            .write_all(&bytes)
            .and_then(|()| self.commands.flush())
            .unwrap_or_else(|err| panic!("chromium is gone ({err}); its log: {}", self.log()));
        let deadline = Instant::now() + COMMAND_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.replies.recv_timeout(left) {
                Ok(reply) if reply["id"] == id => {
                    assert!(
                        reply.get("error").is_none(),
                        "{method} failed: {}",
                        reply["error"]
                    );
                    return reply["result"].clone();
                }
                Ok(_event) => {}
                Err(RecvTimeoutError::Timeout) => {
                    panic!(
                        "{method}: no answer in {COMMAND_TIMEOUT:?}; log: {}",
                        self.log()
                    )
                }
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("chromium is gone; its log: {}", self.log())
                }
            }
        }
    }

    /// The value of a JavaScript expression in the page (`null` when it throws).
    pub(crate) fn eval(&mut self, expression: &str) -> Value {
        let result = self.call(
            "Runtime.evaluate",
            json!({ "expression": expression, "returnByValue": true }),
        );
        if result.get("exceptionDetails").is_some() {
            return Value::Null;
        }
        result["result"]["value"].clone()
    }

    /// Evaluates `expression` every 100 ms until it is `true`; panics after `timeout` with
    /// the page's text.
    pub(crate) fn wait_until(&mut self, what: &str, expression: &str, timeout: Duration) {
        let start = Instant::now();
        while self.eval(expression) != Value::Bool(true) {
            if start.elapsed() > timeout {
                let text = self.eval("document.body ? document.body.innerText : ''");
                panic!(
                    "the page: {what}: not within {timeout:?}; it shows:\n{}",
                    text.as_str().unwrap_or("")
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A PNG of the whole page, 1280 pixels wide, written to `path`.
    pub(crate) fn screenshot(&mut self, path: &Path) {
        let height = self
            .eval("document.documentElement.scrollHeight")
            .as_u64()
            .unwrap_or(900)
            .clamp(900, 4000);
        self.viewport(height);
        let shot = self.call("Page.captureScreenshot", json!({ "format": "png" }));
        let png = base64_decode(shot["data"].as_str().expect("image data")).expect("base64");
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
        std::fs::write(path, png).expect("write the screenshot");
        self.viewport(900);
    }

    fn viewport(&mut self, height: u64) {
        self.call(
            "Emulation.setDeviceMetricsOverride",
            json!({ "width": 1280, "height": height, "deviceScaleFactor": 1, "mobile": false }),
        );
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Standard base64 (with padding) to bytes; `None` when malformed.
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let text = text.trim_end_matches('=').as_bytes();
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    for chunk in text.chunks(4) {
        let mut n = 0u32;
        for (i, c) in chunk.iter().enumerate() {
            n |= value(*c)? << (18 - 6 * i);
        }
        let bytes = n.to_be_bytes();
        out.extend_from_slice(&bytes[1..chunk.len()]);
    }
    Some(out)
}

#[test]
fn base64_decodes() {
    assert_eq!(base64_decode("aGVsbG8=").as_deref(), Some(&b"hello"[..]));
    assert_eq!(base64_decode("aGk=").as_deref(), Some(&b"hi"[..]));
    assert_eq!(base64_decode("YWJj").as_deref(), Some(&b"abc"[..]));
    assert_eq!(base64_decode("a*"), None);
}
