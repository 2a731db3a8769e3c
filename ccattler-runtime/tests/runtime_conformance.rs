//! The runtime conformance suite of `ccattler-testkit`, run against the simulator and against
//! real processes in temporary directories.

use std::sync::atomic::{AtomicUsize, Ordering};

use ccattler_core::InstanceSpec;
use ccattler_runtime::process::ProcessRuntime;
use ccattler_testkit::runtime_conformance::{
    RuntimeHarness, SimulatorHarness, run_runtime_conformance,
};
use parking_lot::Mutex;

/// Real processes under a temporary directory; kills whatever is left when dropped (also when a
/// check panics).
struct ProcessHarness {
    dir: tempfile::TempDir,
    next: AtomicUsize,
    made: Mutex<Vec<ProcessRuntime>>,
}

impl ProcessHarness {
    fn new() -> Self {
        ProcessHarness {
            dir: tempfile::tempdir().expect("temporary directory"),
            next: AtomicUsize::new(0),
            made: Mutex::new(Vec::new()),
        }
    }

    fn keep(&self, runtime: &ProcessRuntime) {
        self.made.lock().push(runtime.clone());
    }
}

impl Drop for ProcessHarness {
    fn drop(&mut self) {
        for runtime in self.made.lock().iter() {
            runtime.kill_all();
        }
    }
}

fn sh(script: &str) -> Vec<String> {
    vec!["sh".to_owned(), "-c".to_owned(), script.to_owned()]
}

impl RuntimeHarness for ProcessHarness {
    type Runtime = ProcessRuntime;

    async fn fresh(&self) -> ProcessRuntime {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let root = self.dir.path().join(format!("rt-{n}"));
        let runtime = ProcessRuntime::new(root).expect("process runtime");
        self.keep(&runtime);
        runtime
    }

    async fn reopen(&self, runtime: &ProcessRuntime) -> Option<ProcessRuntime> {
        let again = ProcessRuntime::new(runtime.root()).expect("reopened process runtime");
        self.keep(&again);
        Some(again)
    }

    fn takes_real_time(&self) -> bool {
        true
    }

    fn long_running(&self, id: &str) -> InstanceSpec {
        InstanceSpec::new(id, "").command(["sleep", "1000"])
    }

    fn exiting(&self, id: &str, code: i32) -> InstanceSpec {
        InstanceSpec::new(id, "").command(sh(&format!("exit {code}")))
    }

    fn printing(&self, id: &str, lines: &[&str]) -> InstanceSpec {
        let mut argv = sh(r#"for l in "$@"; do echo "$l"; done; exec sleep 1000"#);
        argv.push("sh".to_owned());
        argv.extend(lines.iter().map(|l| (*l).to_owned()));
        InstanceSpec::new(id, "").command(argv)
    }

    fn ignoring_term(&self, id: &str) -> InstanceSpec {
        InstanceSpec::new(id, "").command(sh("trap '' TERM; echo ready; exec sleep 1000"))
    }

    fn missing_command(&self, id: &str) -> InstanceSpec {
        InstanceSpec::new(id, "").command(["ccattler-no-such-command", "--flag"])
    }

    fn exec_command(&self, stdout: &str, code: i32) -> Vec<String> {
        sh(&format!("echo {stdout}; exit {code}"))
    }

    /// The process runtime puts a spec's files under the instance's working directory, where
    /// `exec` runs.
    fn read_file_command(&self, path: &str) -> Option<Vec<String>> {
        Some(sh(&format!("cat ./{}", path.trim_start_matches('/'))))
    }
}

#[tokio::test]
async fn simulator_conforms() {
    run_runtime_conformance(&SimulatorHarness::new()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_runtime_conforms() {
    let harness = ProcessHarness::new();
    run_runtime_conformance(&harness).await;
}
