//! `cca chaos` end to end: seeds run and are summed up, failing seeds come with a replay
//! command, and bad input is refused before anything is simulated.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const CCA: &str = env!("CARGO_BIN_EXE_cca");

fn chaos_file() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("chaos.cca")
}

fn cca(args: &[&str]) -> Output {
    Command::new(CCA).args(args).output().expect("cca runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn path(p: &Path) -> &str {
    p.to_str().expect("a utf-8 path")
}

#[test]
fn seeds_run_under_every_fault_and_are_summed_up() {
    let file = chaos_file();
    let out = cca(&[
        "chaos",
        path(&file),
        "--nodes",
        "5",
        "--seeds",
        "20",
        "--duration",
        "30s",
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(
        stdout.contains("20 seeds x 30s of virtual time, 5 nodes"),
        "{stdout}"
    );
    assert!(stdout.contains("20 passed, 0 failed"), "{stdout}");
    for kind in [
        "node-crash",
        "process-crash",
        "slow-storage",
        "lost-messages",
    ] {
        assert!(stdout.contains(kind), "{kind} is counted: {stdout}");
    }
    assert!(
        stdout.contains("time to converge after the last fault: p50 "),
        "{stdout}"
    );
    assert!(
        text(&out.stderr).contains("20/20 seeds"),
        "progress is shown"
    );
}

#[test]
fn a_file_that_cannot_converge_is_named_before_anything_is_simulated() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("gpu.cca");
    std::fs::write(
        &file,
        "service trainer {\n  image t:1\n  instances 2\n  placement {\n    require gpu = yes\n  }\n}\n",
    )
    .expect("write");
    let out = cca(&["chaos", path(&file), "--seeds", "2"]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("cannot converge on 3 nodes"), "{stdout}");
    assert!(stdout.contains("nothing simulated"), "{stdout}");
    assert!(
        stdout.contains("service trainer: 2 of its 2 instances cannot be placed")
            && stdout.contains("lack label gpu=yes"),
        "names the service and why: {stdout}"
    );
}

#[test]
fn a_failing_seed_comes_with_a_replay_command() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("crashing.cca");
    // Placeable, but it exits at once, again and again: never ready, never converged.
    std::fs::write(
        &file,
        "service crasher {\n  image c:1\n  command \"exit 1\"\n  instances 2\n}\n",
    )
    .expect("write");
    let out = cca(&[
        "chaos",
        path(&file),
        "--seeds",
        "2",
        "--duration",
        "5s",
        "--settle",
        "20s",
    ]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("0 passed, 2 failed"), "{stdout}");
    assert!(stdout.contains("not converged"), "{stdout}");
    assert!(stdout.contains("crasher"), "names the service: {stdout}");
    let replay = stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("replay: cca "))
        .expect("a replay command");
    assert!(replay.contains("--seed 0"), "{replay}");

    // The replay command runs the same seed again, with the same verdict.
    let args: Vec<&str> = replay.split_whitespace().collect();
    let again = cca(&args);
    assert_eq!(again.status.code(), Some(1));
    assert!(
        text(&again.stdout).contains("1 seeds x 5s"),
        "{}",
        text(&again.stdout)
    );
}

#[test]
fn generated_workloads_run_print_and_shrink() {
    let out = cca(&["chaos", "--generate", "--seeds", "5", "--duration", "20s"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(
        stdout.contains("5 seeds x 20s of virtual time, generated workloads and clusters"),
        "{stdout}"
    );
    let printed = cca(&["chaos", "--generate", "--seed", "7", "--print-workload"]);
    let stdout = text(&printed.stdout);
    assert!(stdout.contains("# workload of seed 7:"), "{stdout}");
    assert!(stdout.contains("service "), "the documents: {stdout}");
    // A file and --generate are one or the other.
    let both = cca(&["chaos", path(&chaos_file()), "--generate"]);
    assert_eq!(both.status.code(), Some(2), "{}", text(&both.stderr));
}

#[test]
fn the_same_seed_writes_the_same_trace() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = chaos_file();
    let (a, b) = (dir.path().join("a.txt"), dir.path().join("b.txt"));
    for trace in [&a, &b] {
        let out = cca(&[
            "chaos",
            path(&file),
            "--seed",
            "9",
            "--duration",
            "20s",
            "--trace",
            path(trace),
        ]);
        assert!(out.status.success(), "{}", text(&out.stdout));
    }
    let (a, b) = (
        std::fs::read(&a).expect("trace"),
        std::fs::read(&b).expect("trace"),
    );
    assert!(a.len() > 10_000, "a whole trace");
    assert_eq!(a, b);
}

#[test]
fn bad_input_is_refused_before_anything_is_simulated() {
    let dir = tempfile::tempdir().expect("temp dir");
    let bad = dir.path().join("bad.cca");
    std::fs::write(&bad, "service web {\n  instances many\n}\n").expect("write");
    let out = cca(&["chaos", path(&bad)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("nothing was simulated"),
        "{}",
        text(&out.stderr)
    );
    assert!(
        text(&out.stdout).is_empty(),
        "no report: {}",
        text(&out.stdout)
    );

    let file = chaos_file();
    let out = cca(&["chaos", path(&file), "--faults", "node-crash,earthquake"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("unknown fault kind `earthquake`"),
        "{stderr}"
    );
    assert!(
        stderr.contains("stale-observation"),
        "names the kinds: {stderr}"
    );

    let out = cca(&["chaos", path(&file), "--faults", "process-crash=2"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("from 0 to 1"),
        "{}",
        text(&out.stderr)
    );
}
