//! Rewriting the files of a running instance ([`Runtime::update_files`]).

use ccattler_core::{FileSpec, Runtime, RuntimeError};

use super::RuntimeHarness;
use super::support::{err, find, ok, start, teardown, wait_running};

fn conf(content: &str) -> FileSpec {
    FileSpec {
        path: "/etc/app.conf".to_owned(),
        content: content.as_bytes().to_vec(),
        mode: 0o600,
    }
}

/// A file of a running instance is rewritten in place: the instance reads the new content and
/// is not restarted; a path it did not start with is refused, and an unknown id is not found.
/// A runtime that does not offer it ([`RuntimeError::Unsupported`], the agent then restarts the
/// instance) passes with a note.
pub async fn files_are_rewritten_in_place<H: RuntimeHarness>(h: &H) {
    const CHECK: &str = "files_are_rewritten_in_place";
    let rt = h.fresh().await;
    let mut spec = h.long_running("conf-1");
    spec.files.push(conf("v1"));
    start(&rt, &spec, CHECK).await;
    let before = wait_running(&rt, "conf-1", CHECK).await;
    match rt.update_files("conf-1", &[conf("v2")]).await {
        Err(RuntimeError::Unsupported { what }) => {
            eprintln!("{CHECK}: not offered by this runtime ({what}); the agent restarts instead");
            teardown(&rt, CHECK).await;
            return;
        }
        result => ok(result, CHECK, "update_files(conf-1, /etc/app.conf)"),
    }
    if let Some(command) = h.read_file_command("/etc/app.conf") {
        let timeout = std::time::Duration::from_secs(10);
        let out = ok(
            rt.exec("conf-1", &command, timeout).await,
            CHECK,
            "exec cat",
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim_end(),
            "v2",
            "{CHECK}: the instance reads {out:?}"
        );
    }
    let after = find(&rt, "conf-1", CHECK).await;
    assert_eq!(
        after.map(|o| (o.state, o.restarts)),
        Some((before.state, before.restarts)),
        "{CHECK}: the instance was restarted"
    );
    let mut other = conf("x");
    other.path = "/etc/not-there.conf".to_owned();
    let refused = err(
        rt.update_files("conf-1", &[other]).await,
        CHECK,
        "a new path",
    );
    assert!(
        matches!(refused, RuntimeError::StartFailed { .. }),
        "{CHECK}: a path it did not start with: {refused:?}"
    );
    let unknown = err(
        rt.update_files("nope", &[conf("v3")]).await,
        CHECK,
        "an unknown id",
    );
    assert!(
        matches!(unknown, RuntimeError::NotFound(_)),
        "{CHECK}: an unknown id: {unknown:?}"
    );
    teardown(&rt, CHECK).await;
}
