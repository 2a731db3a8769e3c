//! The web page of `cca server`: a small dashboard at `/` that watches the cluster live.
//!
//! It shows every service (desired, placed, present, running, ready, its rollout, how far its
//! instances are through their init steps while they are not, and why instances cannot be
//! placed), every node (alive, capacity, what its instances use), every instance (node, state,
//! readiness, restarts, reason) and the recent events, and keeps them current from the
//! `/changes` stream.
//!
//! # What is served
//!
//! | route | content |
//! |---|---|
//! | `GET /` (and `/index.html`) | [`INDEX_HTML`], `text/html` |
//! | `GET /ui/app.js` | [`APP_JS`], `text/javascript` |
//! | `GET /ui/app.css` | [`APP_CSS`], `text/css` |
//!
//! Three files, embedded in the binary (`examples/assets/ui/`), in plain JavaScript with no
//! dependency and no build step. Each answer carries a strict [`CONTENT_SECURITY_POLICY`]
//! (scripts and styles only from the server's own files, no inline script, fetches only to
//! the same origin, no form submission by the browser itself, no framing), `X-Content-Type-Options: nosniff`, `Referrer-Policy:
//! no-referrer` and `Cache-Control: no-cache`.
//!
//! # Authentication
//!
//! The three files are the same for everyone and contain no data about the cluster, so they
//! are served without a token. Everything the page shows it reads from the API, with the same
//! bearer token and the same 401 as any other client:
//!
//! - The page asks for a token in a form and keeps it in `sessionStorage` (the tab's storage,
//!   gone when the tab closes, never sent by the browser on its own). A link of the form
//!   `/#token=TOKEN` fills it in as well: the fragment is never sent to the server, and the
//!   page removes it from the address bar and the history entry at once. "Sign out" forgets
//!   the token.
//! - It reads `/api/status`, `/api/nodes`, `/api/events` and `/state?prefix=...` with `fetch`
//!   and `Authorization: Bearer TOKEN`.
//! - It follows `/changes` with `fetch` and a reader of the response's stream, not
//!   `EventSource`, which cannot send headers: the token stays in the header, never in a URL or
//!   a cookie. Because no cookie is involved, another site cannot make the browser call the
//!   API on the user's behalf.
//!
//! A token the API refuses (401) takes the page back to the form.
//!
//! # Live updates
//!
//! On load the page reads the instances, the desired instances and the effective services
//! (`GET /state`), then follows `/changes` from the oldest of those revisions and applies every
//! `put` and `delete` to them. Changes that move the counts (status, placements, nodes,
//! leases, replicas, events) re-read `/api/status`, `/api/nodes` and `/api/events`, at most
//! every 300 ms. A broken stream is resumed with `Last-Event-ID` after a pause (1 s, doubling
//! up to 10 s); an `error` event asking to relist reloads everything.
//!
//! # Elements tests look at
//!
//! Each service's row is `<tr data-service=NAME data-desired data-placed data-running
//! data-ready data-converged=true|false>`; each instance's `<tr data-instance=ID
//! data-state>`; each node's `<tr data-node=NAME data-alive>`. `<body data-phase>` is
//! `starting` until the script runs, then `login`, `loading`, `live` or `reconnecting`;
//! `<body data-streams>` counts the connections to `/changes` established and `data-changes`
//! the changes applied from them.

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// The page.
pub const INDEX_HTML: &str = include_str!("../../../assets/ui/index.html");
/// The page's script.
pub const APP_JS: &str = include_str!("../../../assets/ui/app.js");
/// The page's style sheet.
pub const APP_CSS: &str = include_str!("../../../assets/ui/app.css");

/// The `Content-Security-Policy` of every file of the page.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
    style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; \
    form-action 'none'; frame-ancestors 'none'";

/// The page's routes (no token needed: see the [module docs](self)), to merge into the API.
pub fn router() -> Router {
    Router::new()
        .route("/", get(index))
        .route("/index.html", get(index))
        .route("/ui/app.js", get(script))
        .route("/ui/app.css", get(style))
}

async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX_HTML)
}

async fn script() -> Response {
    asset("text/javascript; charset=utf-8", APP_JS)
}

async fn style() -> Response {
    asset("text/css; charset=utf-8", APP_CSS)
}

/// `body` with its content type and the page's security headers.
fn asset(content_type: &'static str, body: &'static str) -> Response {
    let headers = [
        (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
        (
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CONTENT_SECURITY_POLICY),
        ),
        (
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ),
        (
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        ),
        (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        (header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")),
    ];
    (headers, body).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_has_no_inline_script_or_style() {
        assert!(INDEX_HTML.contains(r#"<script src="/ui/app.js" defer></script>"#));
        assert_eq!(INDEX_HTML.matches("<script").count(), 1);
        assert!(!INDEX_HTML.contains("<style"));
        assert!(!INDEX_HTML.contains("style="));
        assert!(!INDEX_HTML.contains("onclick"));
    }
}
