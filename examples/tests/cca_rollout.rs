//! `cca rollout` and the rollout routes, as separate processes: `cca server` (memory store) and
//! one simulator agent. A version whose instances crash is rolled back by itself, and `cca
//! status` and `cca rollout status` say why; an undo to a version that is not kept is refused
//! with the kept list; `resume` tries the applied version again; `pause` holds a new apply.

mod processes;

use std::process::Output;
use std::time::Duration;

use processes::{
    Children, admin_token, apply, cca, enrollment_token, start_agent, start_server, wait_for,
};
use serde_json::Value as Json;

const AGENT_FLAGS: [&str; 6] = ["--runtime", "sim", "--cpu", "4", "--memory", "4Gi"];

fn web(image: &str, extra: &str) -> String {
    format!(
        "service web {{\n    image {image}\n    instances 2\n    resources {{\n        cpu 100m\n        \
         memory 64Mi\n    }}\n    {extra}\n}}\n"
    )
}

fn rollout(url: &str, admin: &str, args: &[&str]) -> Output {
    cca()
        .arg("rollout")
        .args(args)
        .args(["--server", url, "--token", admin])
        .output()
        .expect("cca rollout runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `cca rollout status web --json`, once it answers.
fn status(url: &str, admin: &str) -> Option<Json> {
    let out = rollout(url, admin, &["status", "web", "--json"]);
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).ok())
        .flatten()
}

/// How many `RolledBack` events `cca events web` lists.
fn rolled_back_events(url: &str, admin: &str) -> usize {
    let out = cca()
        .args(["events", "web", "--server", url, "--token", admin])
        .output()
        .expect("cca events runs");
    text(&out.stdout)
        .lines()
        .filter(|line| line.contains("RolledBack"))
        .count()
}

async fn wait_for_phase(url: &str, admin: &str, phase: &str, version: Option<&str>) -> Json {
    let (answer, _) = wait_for(
        &format!("the rollout {phase}"),
        Duration::from_secs(60),
        async || {
            let answer = status(url, admin)?;
            let at = answer["version"].as_str().unwrap_or_default().to_owned();
            (answer["phase"] == phase && version.is_none_or(|v| v == at)).then_some(answer)
        },
    )
    .await;
    answer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashing_version_is_rolled_back_and_the_cli_says_why() {
    let tempdir = tempfile::tempdir().expect("tempdir");
    let dir = tempdir.path().to_owned();
    let mut children = Children::default();
    let (server, url) = start_server(&dir, "127.0.0.1:0", &["--store", "memory"], 1);
    children.0.push(server);
    let admin = admin_token(&dir);
    let token = enrollment_token(&url, &admin);
    children
        .0
        .push(start_agent(&dir, &url, "n1", &token, &AGENT_FLAGS));

    apply(&dir, &url, &admin, &web("app:1", ""), &[]);
    let good = wait_for_phase(&url, &admin, "complete", None).await;
    let v1 = good["version"].as_str().expect("a version").to_owned();

    apply(&dir, &url, &admin, &web("app:2", "command \"exit 1\""), &[]);
    let back = wait_for_phase(&url, &admin, "rolled back", Some(&v1)).await;
    let v2 = back["rolled_back_from"].as_str().expect("from").to_owned();
    assert_eq!(back["desired"], v2.as_str());
    let out = rollout(&url, &admin, &["status", "web"]);
    let printed = text(&out.stdout);
    assert!(printed.starts_with("web: rolled back ("), "{printed}");
    assert!(printed.contains("(threshold 3)"), "{printed}");
    assert!(
        printed.contains(&format!("rolled back from {v2}")),
        "{printed}"
    );
    let summary = cca()
        .args(["status", "--server", &url, "--token", &admin])
        .output()
        .expect("cca status runs");
    let printed = text(&summary.stdout);
    assert!(
        printed.contains("web: rollout rolled back: version"),
        "{printed}"
    );

    // An undo to a version that is not kept: refused, with the kept ones.
    let out = rollout(&url, &admin, &["undo", "web", "--to-version", "ffffffff"]);
    assert!(!out.status.success());
    let said = text(&out.stderr);
    assert!(
        said.contains("version ffffffff is not kept for web"),
        "{said}"
    );
    assert!(said.contains(&v1) && said.contains(&v2), "{said}");

    // Resume tries the applied version again; it fails again and goes back again: a second
    // RolledBack event.
    let out = rollout(&url, &admin, &["resume", "web"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    wait_for("a second rollback", Duration::from_secs(60), async || {
        (rolled_back_events(&url, &admin) == 2).then_some(())
    })
    .await;
    wait_for_phase(&url, &admin, "rolled back", Some(&v1)).await;

    // Paused, a new apply waits.
    let out = rollout(&url, &admin, &["pause", "web"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    wait_for_phase(&url, &admin, "paused", Some(&v1)).await;
    apply(&dir, &url, &admin, &web("app:3", ""), &[]);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let held = status(&url, &admin).expect("an answer");
    assert_eq!(held["phase"], "paused");
    assert_eq!(held["version"], v1.as_str(), "the new version waits");
    let out = rollout(&url, &admin, &["resume", "web"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let done = wait_for_phase(&url, &admin, "complete", None).await;
    assert_eq!(done["desired"], done["version"], "{done}");
    assert_eq!(done["updated"], 2);
    assert_eq!(done["ready"], 2);
}
