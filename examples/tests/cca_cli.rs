//! The `cca` binary end to end: `check`, `fmt`, `completions`, and `dev` with the simulator and
//! with real processes (converging, timing out, stopping on a signal, leaving nothing behind).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const CCA: &str = env!("CARGO_BIN_EXE_cca");

fn hello() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("hello.cca")
}

fn cca(args: &[&str]) -> Output {
    Command::new(CCA).args(args).output().expect("cca runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn write(dir: &Path, name: &str, content: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, content).expect("write test file");
    path
}

/// Processes whose working directory is under `dir`: the workloads of a dev cluster with
/// `--state-dir dir`.
fn processes_under(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(cwd) = std::fs::read_link(entry.path().join("cwd")) else {
            continue;
        };
        if cwd.starts_with(dir) {
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            found.push(text(&cmdline).replace('\0', " "));
        }
    }
    found
}

#[test]
fn check_accepts_a_valid_file_with_a_summary() {
    let out = cca(&["check", hello().to_str().expect("utf-8 path")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("ok, 2 services, 5 instances, 0 volumes"),
        "{stdout}"
    );
}

#[test]
fn check_prints_every_diagnostic_of_every_file_and_fails() {
    let dir = tempfile::tempdir().expect("temp dir");
    let bad = write(
        dir.path(),
        "bad.cca",
        "service web {\n    imgae nginx\n    instances 3\n    expose 70000 http\n}\n",
    );
    let also_bad = write(dir.path(), "also.cca", "service api {\n    image x;\n}\n");
    let good = hello();
    let out = cca(&[
        "check",
        bad.to_str().expect("utf-8"),
        good.to_str().expect("utf-8"),
        also_bad.to_str().expect("utf-8"),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    for expected in [
        "cca::missing-image",
        "cca::unknown-field",
        "did you mean `image`?",
        "70000",
        "cca::stray-semicolon",
        "bad.cca:2:5",
        "bad.cca: 3 errors",
        "also.cca:",
    ] {
        assert!(
            stderr.contains(expected),
            "missing {expected:?} in:\n{stderr}"
        );
    }
    assert!(
        stderr.contains('^') || stderr.contains('─'),
        "carets: {stderr}"
    );
    assert!(
        text(&out.stdout).contains("hello.cca: ok"),
        "the valid file is still checked"
    );
}

#[test]
fn check_and_fmt_report_unreadable_files_without_panicking() {
    for args in [
        &["check", "/nonexistent/x.cca"][..],
        &["fmt", "/nonexistent/x.cca"][..],
    ] {
        let out = cca(args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains("cannot read /nonexistent/x.cca"),
            "{stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

#[test]
fn fmt_prints_checks_and_writes_the_canonical_format() {
    let dir = tempfile::tempdir().expect("temp dir");
    let messy = "service   web {\n  image nginx:1.28   # the image\n\n\n  instances 3\n}\n";
    let path = write(dir.path(), "messy.cca", messy);
    let file = path.to_str().expect("utf-8");

    let printed = cca(&["fmt", file]);
    assert!(printed.status.success(), "{}", text(&printed.stderr));
    let canonical = text(&printed.stdout);
    assert_ne!(canonical, messy);
    assert!(
        canonical.contains("    image nginx:1.28 # the image"),
        "{canonical}"
    );

    let check = cca(&["fmt", "--check", file]);
    assert_eq!(check.status.code(), Some(1));
    assert!(text(&check.stdout).is_empty());
    assert!(text(&check.stderr).contains("not in canonical format"));

    let written = cca(&["fmt", "--write", file]);
    assert!(written.status.success());
    assert_eq!(std::fs::read_to_string(&path).expect("read"), canonical);
    assert!(cca(&["fmt", "--check", file]).status.success());
    assert_eq!(text(&cca(&["fmt", file]).stdout), canonical, "idempotent");

    // The example file is canonical.
    assert!(
        cca(&["fmt", "--check", hello().to_str().expect("utf-8")])
            .status
            .success()
    );

    let broken = write(dir.path(), "broken.cca", "service web {\n    image \"x\n");
    let out = cca(&["fmt", broken.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("unterminated"),
        "{}",
        text(&out.stderr)
    );
}

/// `cca check ... | head -1`: the reader goes away after one line. The command ends quietly
/// (no panic, no backtrace) with the status of a process ended by SIGPIPE, as Unix tools do.
#[test]
fn a_closed_output_pipe_ends_the_command_quietly() {
    let dir = tempfile::tempdir().expect("temp dir");
    let files: Vec<String> = (0..2000)
        .map(|i| {
            let path = write(
                dir.path(),
                &format!("s{i}.cca"),
                "service web {\n    image nginx\n}\n",
            );
            path.display().to_string()
        })
        .collect();
    let mut child = Command::new(CCA)
        .arg("check")
        .args(&files)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cca runs");
    let stdout = child.stdout.take().expect("stdout");
    let mut first = String::new();
    BufReader::new(stdout)
        .read_line(&mut first)
        .expect("one line");
    // Dropping the reader closes the pipe: the next writes fail with EPIPE.
    let out = child.wait_with_output().expect("cca ends");
    assert!(first.contains(": ok, 1 service"), "{first}");
    assert_eq!(out.status.code(), Some(141), "{}", text(&out.stderr));
    assert!(
        !text(&out.stderr).contains("panicked"),
        "no panic: {}",
        text(&out.stderr)
    );
}

/// `cca dev --api`: `/metrics` counts from the start, not from its first scrape. The first
/// scrape, once the cluster converged, shows every instance the controllers created.
#[test]
fn dev_metrics_count_from_the_start() {
    let mut child = Command::new(CCA)
        .args(["dev", "--runtime", "sim", "--api", "127.0.0.1:0"])
        .arg(hello())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("cca dev runs");
    let stdout = child.stdout.take().expect("stdout");
    let mut api = None;
    let (mut web, mut worker) = (false, false);
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("a line");
        if let Some(rest) = line.strip_prefix("API on ") {
            let (url, token) = rest.split_once(" (admin token: ").expect("url and token");
            api = Some((url.to_owned(), token.trim_end_matches(')').to_owned()));
        }
        web |= line.contains("web: desired 3, placed 3, running 3, ready 3");
        worker |= line.contains("worker: desired 2, placed 2, running 2, ready 2");
        if web && worker {
            break;
        }
    }
    let (url, token) = api.expect("the API's address");
    let scrape = Command::new("curl")
        .args(["-sS", "-H", &format!("Authorization: Bearer {token}")])
        .arg(format!("{url}/metrics"))
        .output()
        .expect("curl runs (scripts/test installs it)");
    let _ = child.kill();
    let _ = child.wait();
    let metrics = text(&scrape.stdout);
    let committed = metrics
        .lines()
        .find(|l| l.starts_with("ccattler_changes_committed_total{controller=\"instances\"}"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse::<f64>().ok())
        .unwrap_or_default();
    assert!(
        committed >= 5.0,
        "the 5 instances created before the first scrape are counted: {committed}\n{metrics}"
    );
}

#[test]
fn completions_cover_the_subcommands() {
    let out = cca(&["completions", "bash"]);
    assert!(out.status.success());
    let script = text(&out.stdout);
    for word in ["dev", "check", "fmt", "--until-converged", "--node-cpu"] {
        assert!(script.contains(word), "{word}");
    }
}

#[test]
fn dev_refuses_an_invalid_file_before_starting_anything() {
    let dir = tempfile::tempdir().expect("temp dir");
    let bad = write(
        dir.path(),
        "bad.cca",
        "service web {\n    instances -1\n}\n",
    );
    let out = cca(&["dev", bad.to_str().expect("utf-8"), "--until-converged"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("nothing was started"));
    assert!(
        !text(&out.stdout).contains("cca dev:"),
        "no cluster started"
    );
}

#[test]
fn dev_with_the_simulator_converges_and_exits_zero() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = write(
        dir.path(),
        "sim.cca",
        "service api {\n    image api:1\n    instances 12\n    placement {\n        zone spread\n    }\n}\n\n\
         service jobs {\n    image jobs:1\n    instances 4\n    resources {\n        cpu 500m\n    }\n}\n\n\
         service off {\n    image off:1\n    instances 0\n}\n",
    );
    let out = cca(&[
        "dev",
        file.to_str().expect("utf-8"),
        "--runtime",
        "sim",
        "--nodes",
        "4",
        "--zones",
        "a,b",
        "--labels",
        "disk=ssd",
        "--until-converged",
        "--timeout",
        "30s",
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("cca dev: 4 nodes (simulator runtime"),
        "{stdout}"
    );
    assert!(stdout.contains("final status:"), "{stdout}");
    assert!(stdout.contains("converged in"), "{stdout}");
    let row = |name: &str| {
        stdout
            .lines()
            .rev()
            .find(|l| l.starts_with(name))
            .map(|l| l.split_whitespace().skip(1).collect::<Vec<_>>().join(" "))
    };
    assert_eq!(row("api").as_deref(), Some("12 12 12 12"), "{stdout}");
    assert_eq!(row("jobs").as_deref(), Some("4 4 4 4"), "{stdout}");
    assert_eq!(row("off").as_deref(), Some("0 0 0 0"), "{stdout}");
}

#[test]
fn dev_times_out_with_the_status_and_the_reason() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = write(
        dir.path(),
        "pinned.cca",
        "service db {\n    image postgres:16\n    instances 2\n    placement {\n        \
         require disk = ssd\n    }\n}\n",
    );
    let started = Instant::now();
    let out = cca(&[
        "dev",
        file.to_str().expect("utf-8"),
        "--runtime",
        "sim",
        "--labels",
        "disk=hdd",
        "--until-converged",
        "--timeout",
        "2s",
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(2), "{stdout}\n{stderr}");
    assert!(started.elapsed() < Duration::from_secs(20));
    assert!(stderr.contains("not converged after 2s"), "{stderr}");
    assert!(stdout.contains("final status:"), "{stdout}");
    assert!(stdout.contains("! db: 2 unplaced:"), "{stdout}");
    assert!(
        stdout.contains("disk"),
        "the reason names the label: {stdout}"
    );
}

#[test]
fn dev_runs_the_example_with_real_processes_and_leaves_none_behind() {
    let state = tempfile::tempdir().expect("temp dir");
    let out = cca(&[
        "dev",
        hello().to_str().expect("utf-8"),
        "--until-converged",
        "--timeout",
        "60s",
        "--state-dir",
        state.path().to_str().expect("utf-8"),
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("web            3       3        3      3"),
        "{stdout}"
    );
    assert!(
        stdout.contains("worker         2       2        2      2"),
        "{stdout}"
    );
    assert!(stderr.contains("stopped 5 running instances"), "{stderr}");
    assert_eq!(processes_under(state.path()), Vec::<String>::new());
}

#[test]
fn dev_stops_every_workload_on_sigint_and_exits_zero() {
    let state = tempfile::tempdir().expect("temp dir");
    let mut child = Command::new(CCA)
        .args([
            "dev",
            hello().to_str().expect("utf-8"),
            "--state-dir",
            state.path().to_str().expect("utf-8"),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cca dev starts");
    // Should an assertion fail, the cluster is still stopped (with its workloads).
    let guard = Interrupt(child.id());
    let stdout = child.stdout.take().expect("piped");
    let mut seen = String::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("utf-8 output");
        seen.push_str(&line);
        seen.push('\n');
        if line.contains("] converged") || Instant::now() > deadline {
            break;
        }
    }
    assert!(seen.contains("] converged (3 nodes)"), "{seen}");
    let running = processes_under(state.path());
    // Five instances: three web servers, two worker shells (with their `sleep` children).
    assert!(running.len() >= 5, "{running:?}");
    assert_eq!(
        running.iter().filter(|c| c.contains("http.server")).count(),
        3,
        "{running:?}"
    );
    drop(guard);
    let out = child.wait_with_output().expect("cca dev ends");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("stopped 5 running instances"));
    assert_eq!(processes_under(state.path()), Vec::<String>::new());
}

/// Sends SIGINT to a `cca dev` process when dropped.
struct Interrupt(u32);

impl Drop for Interrupt {
    fn drop(&mut self) {
        let sent = Command::new("kill")
            .args(["-INT", &self.0.to_string()])
            .status();
        assert!(
            sent.is_ok_and(|s| s.success()) || std::thread::panicking(),
            "kill -INT {}",
            self.0
        );
    }
}
