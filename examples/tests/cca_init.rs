//! Init steps through `cca server` (memory store) and one simulator agent: a step that keeps
//! failing shows in `GET /api/status` and `cca status` (the step, the failures, the reason and
//! the last line it printed) while the instances are tried again in place, never replaced; a
//! fixed step rolls out and the init lines go.

mod processes;

use std::collections::BTreeSet;
use std::time::Duration;

use hyper::Method;
use processes::{
    Children, admin_token, api_client, apply, cca, enrollment_token, start_agent, start_server,
    wait_for,
};
use serde_json::Value as Json;

const AGENT_FLAGS: [&str; 6] = ["--runtime", "sim", "--cpu", "4", "--memory", "4Gi"];

fn web(step: &str) -> String {
    format!(
        "service web {{\n    image app:1\n    instances 2\n    resources {{\n        cpu 100m\n        \
         memory 64Mi\n    }}\n    init {{\n        exec \"./prepare\"\n    }}\n    init {{\n        \
         exec \"{step}\"\n    }}\n}}\n"
    )
}

fn status_text(url: &str, admin: &str) -> String {
    let out = cca()
        .args(["status", "--server", url, "--token", admin])
        .output()
        .expect("cca status runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_init_step_is_shown_and_retried_in_place() {
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
    let client = api_client(&url, Some(&admin));

    apply(&dir, &url, &admin, &web("exit 4"), &[]);
    let row = |answer: &Json| -> Option<Json> {
        answer["services"]
            .as_array()?
            .iter()
            .find(|s| s["name"] == "web")
            .cloned()
    };
    let (init, _) = wait_for(
        "both instances failed twice",
        Duration::from_secs(60),
        async || {
            let answer = client
                .json(Method::GET, "/api/status", "")
                .await
                .ok()?
                .ok()?;
            let init = row(&answer)?["init"].clone();
            let twice = init["instances"]
                .as_array()?
                .iter()
                .filter(|i| i["phase"] == "failed" && i["failures"].as_u64() >= Some(2))
                .count();
            (init["failed"] == 2 && twice == 2).then_some(init)
        },
    )
    .await;
    assert_eq!(init["steps"], 2, "{init}");
    let first = &init["instances"][0];
    assert_eq!(
        (first["step"].as_u64(), first["of"].as_u64()),
        (Some(2), Some(2))
    );
    assert_eq!(first["output"], "exit 4: exit status 4", "{init}");

    let printed = status_text(&url, &admin);
    assert!(
        printed.contains("web: init (2 steps): 0 done, 0 running, 2 failed, 0 waiting"),
        "{printed}"
    );
    assert!(
        printed.contains(": init step 2 of 2 failed")
            && printed.contains("exited with 4; next attempt in")
            && printed.contains("(last output: exit 4: exit status 4)"),
        "{printed}"
    );
    let ids = |answer: &Json| -> BTreeSet<String> {
        answer["facts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|f| f["key"].as_str().map(str::to_owned))
            .collect()
    };
    let instances = "/state?prefix=desired/instance/";
    let before = ids(&client
        .json(Method::GET, instances, "")
        .await
        .expect("answer")
        .expect("ok"));
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = ids(&client
        .json(Method::GET, instances, "")
        .await
        .expect("answer")
        .expect("ok"));
    assert_eq!(before, after, "retried in place, not replaced");
    assert_eq!(after.len(), 2);

    apply(&dir, &url, &admin, &web("./migrate --all"), &[]);
    wait_for(
        "the fixed version through its init",
        Duration::from_secs(60),
        async || {
            let answer = client
                .json(Method::GET, "/api/status", "")
                .await
                .ok()?
                .ok()?;
            let web = row(&answer)?;
            (web["init"]["done"] == 2 && web["ready"] == 2).then_some(())
        },
    )
    .await;
    let printed = status_text(&url, &admin);
    assert!(!printed.contains("web: init"), "{printed}");
}
