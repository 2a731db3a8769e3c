//! `WATCH /changes` (`GET /changes`): the store's changes as server-sent events.
//!
//! # Events
//!
//! | event | id | data |
//! |---|---|---|
//! | `ready` | — | `{"revision": R}`: the watch is established; changes after R follow |
//! | `put` | revision | `{"kind": "put", "revision", "key", "value", "create_revision", "mod_revision", "version"}` |
//! | `delete` | revision | `{"kind": "delete", "revision", "key", ...}` |
//! | `error` | — | `{"error": "...", "relist": true}` when the resume point was compacted (list with `GET /state` and watch from its revision), then the stream ends |
//!
//! A client that reconnects with `Last-Event-ID: R` (or `?after=R`) gets every change after R,
//! with no gap and no duplicate. Without it, changes after the current revision follow.
//! Changes under `secret/` and `auth/` are never sent.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, Method};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use ccattler_core::{EventKind, FactStore, Revision, StoreError, WatchEvent};
use futures_util::stream::{self, BoxStream, StreamExt};
use serde::Deserialize;
use serde_json::json;

use super::error::{ApiError, method_not_allowed};
use super::state::fact_json;
use super::{ApiState, hidden};

/// The query string of `/changes`.
#[derive(Debug, Default, Deserialize)]
pub struct ChangesParams {
    /// Plain string prefix of the keys followed; everything when absent.
    #[serde(default)]
    pub prefix: String,
    /// Resume after this revision (like `Last-Event-ID`, which wins when both are given).
    #[serde(default)]
    pub after: Option<u64>,
}

/// `GET /changes?prefix=`.
pub async fn get_changes<S: FactStore + Clone>(
    State(api): State<ApiState<S>>,
    headers: HeaderMap,
    params: Result<Query<ChangesParams>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(params) = params?;
    changes(&api.store, &headers, params).await
}

/// Other methods on `/changes`: `WATCH` is served, the rest get 405.
pub async fn custom_method<S: FactStore + Clone>(
    method: Method,
    State(api): State<ApiState<S>>,
    headers: HeaderMap,
    params: Result<Query<ChangesParams>, QueryRejection>,
) -> Result<Response, ApiError> {
    if method.as_str() != "WATCH" {
        return Err(method_not_allowed(&method, "GET or WATCH"));
    }
    let Query(params) = params?;
    changes(&api.store, &headers, params).await
}

async fn changes<S: FactStore>(
    store: &S,
    headers: &HeaderMap,
    params: ChangesParams,
) -> Result<Response, ApiError> {
    ccattler_core::key::validate_prefix(&params.prefix)
        .map_err(|err| ApiError::bad_request(format!("`prefix`: {err}")))?;
    let last_id = match headers.get("last-event-id") {
        Some(value) => Some(
            value
                .to_str()
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
                .ok_or_else(|| {
                    ApiError::bad_request("Last-Event-ID must be a revision (a number)")
                })?,
        ),
        None => params.after,
    };
    let after = match last_id {
        Some(revision) => Revision(revision),
        None => store.revision().await?,
    };
    let ready = stream::once(async move {
        Ok::<_, Infallible>(
            Event::default()
                .event("ready")
                .data(json!({ "revision": after.get() }).to_string()),
        )
    });
    let events: BoxStream<'static, Result<Event, Infallible>> =
        match store.watch(&params.prefix, after.next()).await {
            Ok(watch) => ready
                .chain(
                    watch
                        .filter_map(|item| async move {
                            match item {
                                Ok(event) if hidden(event.key().as_str()) => None,
                                Ok(event) => Some(Ok(change_event(&event))),
                                Err(err) => Some(Err(err)),
                            }
                        })
                        // An error ends the watch: send it as one `error` event, then stop.
                        .scan(false, |ended, item| {
                            let out = if *ended {
                                None
                            } else {
                                *ended = item.is_err();
                                Some(item.unwrap_or_else(|err| error_event(&err)))
                            };
                            async move { out }
                        })
                        .map(Ok),
                )
                .boxed(),
            Err(err) => stream::once(async move { Ok(error_event(&err)) }).boxed(),
        };
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response())
}

fn change_event(event: &WatchEvent) -> Event {
    let kind = match event.kind {
        EventKind::Put => "put",
        EventKind::Delete => "delete",
    };
    let mut data = fact_json(&event.fact);
    if let Some(map) = data.as_object_mut() {
        map.insert("kind".into(), kind.into());
        map.insert("revision".into(), event.revision().get().into());
        if event.kind == EventKind::Delete {
            map.remove("value");
        }
    }
    Event::default()
        .event(kind)
        .id(event.revision().get().to_string())
        .data(data.to_string())
}

fn error_event(err: &StoreError) -> Event {
    Event::default().event("error").data(
        json!({
            "error": err.to_string(),
            "relist": matches!(err, StoreError::Compacted { .. }),
        })
        .to_string(),
    )
}
