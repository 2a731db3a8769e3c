//! The web page of `cca server` ([`ccattler_examples::cca::api::ui`]).
//!
//! - In process: `/` and its script and style sheet are served with their content types and
//!   the strict Content-Security-Policy, without a token, while every route the page reads
//!   still answers 401 without one.
//! - In headless Chromium (Debian's `chromium`), against `cca server` and a `cca agent` as
//!   separate processes: the page, given the token in its URL fragment, first shows a service
//!   of 3 instances that cannot be placed (no node yet: not converged, the scheduler's reason);
//!   then, kept open while an agent joins, shows it converge live from `/changes` (3 running,
//!   3 ready, every instance running, the node alive). Its stream then breaks (a proxy
//!   in front of the server cuts it) while a new version rolls out: it says it is reconnecting, resumes with
//!   `Last-Event-ID` and shows the new version's instances only. Without a token it shows only
//!   the sign-in form. The converged page is kept as a
//!   screenshot in `target/test-artifacts/ui.png` (the directory is created).
//!
//! Without chromium the browser test fails under `CI=true` and prints "SKIPPED ..." when run
//! by hand (`scripts/test` installs it). Run it alone with
//! `cargo test -p ccattler-examples --test cca_ui`.

mod browser;
mod common;
mod processes;

use std::path::{Path, PathBuf};
use std::time::Duration;

use axum::body::Bytes;
use browser::Browser;
use browser::proxy::Proxy;
use ccattler_examples::cca::api::ui::CONTENT_SECURITY_POLICY;
use ccattler_examples::cca::client::{ApiClient, ClientArgs};
use common::{Harness, call};
use http_body_util::BodyExt;
use hyper::{Method, StatusCode};
use processes::{
    Children, admin_token, apply, enrollment_token, running, start_agent, start_server, wait_for,
};

#[tokio::test]
async fn the_page_is_static_with_a_strict_policy_and_the_api_it_reads_needs_a_token() {
    let h = Harness::start().await;
    let anonymous = h.as_token(None);
    for (path, content_type, marker) in [
        ("/", "text/html", "<title>CCattler cluster</title>"),
        (
            "/index.html",
            "text/html",
            "<title>CCattler cluster</title>",
        ),
        ("/ui/app.js", "text/javascript", "Last-Event-ID"),
        ("/ui/app.css", "text/css", "[hidden]"),
    ] {
        let response = anonymous
            .send(Method::GET, path, Bytes::new(), &[])
            .await
            .expect("the server answers");
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned()
        };
        assert!(header("content-type").starts_with(content_type), "{path}");
        assert_eq!(header("content-security-policy"), CONTENT_SECURITY_POLICY);
        assert_eq!(header("x-content-type-options"), "nosniff");
        let body = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        let body = String::from_utf8_lossy(&body);
        assert!(body.contains(marker), "{path}: {body}");
        // Static: nothing of the cluster's, and no token.
        assert!(!body.contains("cca_"), "{path} carries a token");
    }
    for policy in [
        "default-src 'none'",
        "script-src 'self'",
        "connect-src 'self'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    ] {
        assert!(CONTENT_SECURITY_POLICY.contains(policy));
    }
    assert!(!CONTENT_SECURITY_POLICY.contains("unsafe-inline"));

    for path in [
        "/api/status",
        "/api/nodes",
        "/api/events?limit=50",
        "/state?prefix=observed/instance/",
        "/state?prefix=desired/instance/",
        "/state?prefix=effective/service/",
        "/changes",
    ] {
        let (status, body) = call(&anonymous, "GET", path, Bytes::new()).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}: {body}");
        let wrong = h.as_token(Some("cca_wrong"));
        assert_eq!(
            call(&wrong, "GET", path, Bytes::new()).await.0,
            StatusCode::UNAUTHORIZED,
            "{path}"
        );
    }
    // With the token the page's reads work.
    for path in [
        "/api/status",
        "/api/nodes",
        "/state?prefix=observed/instance/",
    ] {
        assert_eq!(
            call(&h.admin, "GET", path, Bytes::new()).await.0,
            StatusCode::OK
        );
    }
    h.stop().await;
}

const TEST: &str = "the_page_shows_a_service_converge_live_in_headless_chromium";

fn service(command: &str) -> String {
    format!(
        "service web {{\n    image busybox\n    command \"{command}\"\n    instances 3\n    \
         resources {{\n        cpu 100m\n        memory 16Mi\n    }}\n    \
         scale {{\n        horizontal {{\n            min 3\n            max 6\n            \
         target queue.depth = 5\n        }}\n    }}\n}}\n"
    )
}

/// `target/test-artifacts/`, created: beside the directory of the `cca` binary under test.
fn artifacts() -> PathBuf {
    let bin = Path::new(env!("CARGO_BIN_EXE_cca"));
    let target = bin
        .parent()
        .and_then(Path::parent)
        .map_or_else(|| PathBuf::from("target"), Path::to_owned);
    let dir = target.join("test-artifacts");
    std::fs::create_dir_all(&dir).expect("create target/test-artifacts");
    dir
}

const ROW: &str = "document.querySelector('tr[data-service=\"web\"]')";

#[test]
fn the_page_shows_a_service_converge_live_in_headless_chromium() {
    match browser::version() {
        Ok(version) => eprintln!("{version}"),
        Err(why) => {
            browser::skip_or_fail(TEST, &why);
            return;
        }
    }
    let tempdir = tempfile::tempdir().expect("tempdir");
    let dir = tempdir.path().to_owned();
    let mut children = Children::default();
    let (server, url) = start_server(&dir, "127.0.0.1:0", &["--store", "memory"], 1);
    children.0.push(server);
    let admin = admin_token(&dir);
    apply(&dir, &url, &admin, &service("sleep 1000"), &[]);
    // The browser goes through a proxy, to break its stream later.
    let proxy = Proxy::start(url.trim_start_matches("http://"));
    let page = format!("{}/#token={admin}", proxy.url());

    // Without a token: the sign-in form and nothing of the cluster.
    let dom = browser::dump_dom(&format!("{}/", proxy.url()), Duration::from_secs(3));
    assert!(dom.contains(r#"data-phase="login""#), "{dom}");
    assert!(!dom.contains("data-service="), "{dom}");

    // No node yet: the service is shown, not converged, with the scheduler's reason.
    let dom = browser::dump_dom(&page, Duration::from_secs(3));
    let row = dom
        .split("<tr ")
        .find(|tr| tr.starts_with(r#"data-service="web""#))
        .unwrap_or_else(|| panic!("no row of service web in:\n{dom}"));
    for attr in [
        r#"data-desired="3""#,
        r#"data-running="0""#,
        r#"data-converged="false""#,
    ] {
        assert!(row.contains(attr), "{attr} in {row}");
    }
    assert!(dom.contains(r#"data-unplaced="web""#), "{dom}");
    assert!(dom.contains(r#"data-phase="live""#), "{dom}");

    // The page kept open: it follows /changes while an agent joins and the service converges.
    let mut chrome = Browser::open(&page, &dir.join("chromium.log"));
    chrome.wait_until(
        "web shown unplaced",
        &format!("{ROW} !== null && {ROW}.dataset.converged === 'false'"),
        Duration::from_secs(20),
    );
    assert_eq!(
        chrome.eval("location.hash"),
        "",
        "the token leaves the address bar"
    );
    let changes_before = chrome.eval("Number(document.body.dataset.changes || 0)");
    let enroll = enrollment_token(&url, &admin);
    children.0.push(start_agent(
        &dir,
        &url,
        "n1",
        &enroll,
        &["--runtime", "sim", "--cpu", "4", "--memory", "4Gi"],
    ));
    chrome.wait_until(
        "web converged: 3 running, 3 ready",
        &format!(
            "{ROW}.dataset.running === '3' && {ROW}.dataset.ready === '3' \
             && {ROW}.dataset.converged === 'true'"
        ),
        Duration::from_secs(60),
    );
    chrome.wait_until(
        "3 instances running, node n1 alive",
        "document.querySelectorAll('tr[data-instance][data-state=\"running\"]').length === 3 \
         && document.querySelector('tr[data-node=\"n1\"]')?.dataset.alive === 'true' \
         && document.body.dataset.phase === 'live' \
         && document.getElementById('unplaced').children.length === 0",
        Duration::from_secs(20),
    );
    // The autoscaler's word on web (its metric has no reading yet: it holds the count).
    chrome.wait_until(
        "web's autoscaler recommendation shown",
        "document.querySelector('li[data-autoscaled=\"web\"]')?.dataset.recommended === '3' \
         && document.getElementById('no-autoscaling').hidden",
        Duration::from_secs(20),
    );
    let changes = chrome.eval("Number(document.body.dataset.changes || 0)");
    assert!(
        changes.as_u64() > changes_before.as_u64(),
        "the page applied changes from the stream: {changes_before} → {changes}"
    );
    let rollout = chrome.eval(&format!("{ROW}.dataset.rollout"));
    assert_eq!(rollout, "done", "one version");

    // Events, when the server records them (`GET /api/events`), show on the page.
    chrome.wait_until(
        "the events panel: events, or saying there are none",
        "document.querySelectorAll('tr[data-event]').length > 0 \
         || !document.getElementById('no-events').hidden",
        Duration::from_secs(10),
    );
    let events = chrome.eval("document.querySelectorAll('tr[data-event]').length");
    eprintln!("the page shows {events} events");

    let shot = artifacts().join("ui.png");
    chrome.screenshot(&shot);
    eprintln!("screenshot: {}", shot.display());

    // The stream breaks (the proxy cuts it and refuses to connect) while a new version rolls
    // out: the page
    // says it is reconnecting, then resumes with Last-Event-ID and catches up. The instances
    // are only updated from the stream, so no old instance left on the page means the changes
    // made while it was offline came through.
    let old_ids = chrome.eval(INSTANCE_IDS);
    let before = chrome.eval(&format!("{ROW}.children[6].textContent"));
    proxy.cut();
    chrome.wait_until(
        "reconnecting once the stream is cut",
        "document.body.dataset.phase === 'reconnecting'",
        Duration::from_secs(20),
    );
    apply(&dir, &url, &admin, &service("sleep 2000"), &[]);
    // The rollout completes while the page is cut off, so it learns of it from the resumed
    // stream alone.
    let old: Vec<String> = serde_json::from_value(old_ids.clone()).expect("instance ids");
    rolled_out(&url, &admin, &old);
    proxy.restore();
    chrome.wait_until(
        "the rollout done at a new version, on a resumed stream",
        &format!(
            "{ROW}.dataset.rollout === 'done' && {ROW}.dataset.converged === 'true' \
             && {ROW}.children[6].textContent !== {before} \
             && Number(document.body.dataset.streams) >= 2 \
             && document.body.dataset.phase === 'live' \
             && {INSTANCE_IDS}.length === 3 \
             && {INSTANCE_IDS}.every((id) => !{old_ids}.includes(id)) \
             && document.querySelectorAll('tr[data-instance][data-state=\"running\"]').length === 3"
        ),
        Duration::from_secs(60),
    );

    // How a rollout in progress reads, from the page's own function over made-up records.
    let text = chrome.eval(
        "cluster.effective.set('effective/service/x', {instances: 4, version: 'v2'}); \
         for (const [id, version] of [['a', 'v2'], ['b', 'v2'], ['c', 'v1'], ['d', 'v1']]) \
           cluster.desired.set('desired/instance/' + id, {service: 'x', version}); \
         rollout('x').text",
    );
    assert_eq!(text, "rolling out: 2 of 4 at new version (version v2)");
    drop(chrome);

    // Signing in by hand: a wrong token is refused and the form says so; the right one shows
    // the cluster.
    let mut chrome = Browser::open(&format!("{}/", proxy.url()), &dir.join("chromium-2.log"));
    chrome.wait_until(
        "the sign-in form",
        "document.body.dataset.phase === 'login' && !document.getElementById('login').hidden",
        Duration::from_secs(20),
    );
    chrome.eval(&sign_in("cca_wrong"));
    chrome.wait_until(
        "the wrong token refused",
        "document.body.dataset.phase === 'login' \
         && document.getElementById('login-error').textContent.includes('refused')",
        Duration::from_secs(20),
    );
    chrome.eval(&sign_in(&admin));
    chrome.wait_until(
        "signed in: web converged",
        &format!(
            "document.body.dataset.phase === 'live' && {ROW} !== null \
             && {ROW}.dataset.converged === 'true'"
        ),
        Duration::from_secs(20),
    );
    assert_eq!(
        chrome.eval("sessionStorage.getItem('ccattler.token')"),
        admin.as_str()
    );
    chrome.eval("document.getElementById('sign-out').click()");
    chrome.wait_until(
        "signed out: the form, no data kept",
        "document.body.dataset.phase === 'login' \
         && sessionStorage.getItem('ccattler.token') === null",
        Duration::from_secs(20),
    );
}

/// A script filling the sign-in form with `token` and submitting it.
fn sign_in(token: &str) -> String {
    format!(
        "document.getElementById('token').value = {}; \
         document.getElementById('login').requestSubmit(); true",
        serde_json::Value::from(token)
    )
}

/// Waits (through the API) until 3 instances run, none of them one of `old`.
fn rolled_out(url: &str, admin: &str, old: &[String]) {
    let client = ApiClient::new(&ClientArgs {
        server: url.to_owned(),
        token: Some(admin.to_owned()),
    });
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(wait_for(
        "3 new instances running",
        Duration::from_secs(60),
        async || {
            let by_node = running(&client).await;
            let ids: Vec<&String> = by_node.values().flat_map(|m| m.keys()).collect();
            (ids.len() == 3 && ids.iter().all(|id| !old.contains(id))).then_some(())
        },
    ));
}

/// The ids of the instances the page shows.
const INSTANCE_IDS: &str =
    "[...document.querySelectorAll('tr[data-instance]')].map((tr) => tr.dataset.instance)";
