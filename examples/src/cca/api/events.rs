//! `GET /api/events?object=X&limit=N`: what the controllers and the agents recorded (see
//! [`ccattler_core::event`]), oldest first.
//!
//! `object` keeps the events about that object: an instance's own, or a service's together with
//! those of its instances. `limit` keeps the newest N (default 100, at most 1,000). The answer
//! is `{"revision": R, "events": [{object, service, reason, message, source, at_ms, revision}]}`
//! where each `revision` is the store revision at which the event was written (the order), and
//! `R` the revision of the read: follow with `GET /changes?prefix=event/` from `R + 1`.

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use ccattler_core::schema;
use ccattler_core::{Event, Fact, FactStore};
use serde::Deserialize;
use serde_json::{Value as Json, json};

use super::ApiState;
use super::error::ApiError;

/// The default number of events answered.
pub const DEFAULT_LIMIT: usize = 100;
/// The most events answered.
pub const MAX_LIMIT: usize = 1_000;

/// The query of `GET /api/events`.
#[derive(Debug, Default, Deserialize)]
pub struct EventsQuery {
    /// An instance id or a service name.
    pub object: Option<String>,
    /// How many of the newest to answer.
    pub limit: Option<usize>,
}

/// Whether `event` is about `object`: its own, or, for a service, its instances'.
pub fn concerns(event: &Event, object: &str) -> bool {
    event.object == object || event.service.as_deref() == Some(object)
}

/// The event a fact holds with the revision it was written at; `None` for anything else.
pub fn decode(fact: &Fact) -> Option<(u64, Event)> {
    let event = serde_json::from_slice::<Event>(&fact.value).ok()?;
    Some((fact.mod_revision.get(), event))
}

/// An event as the API shows it.
pub fn event_json(revision: u64, event: &Event) -> Json {
    let mut value = serde_json::to_value(event).unwrap_or(Json::Null);
    if let Some(object) = value.as_object_mut() {
        object.insert("revision".into(), json!(revision));
    }
    value
}

/// `GET /api/events`.
pub async fn get_events<S: FactStore + Clone>(
    State(api): State<ApiState<S>>,
    Query(query): Query<EventsQuery>,
) -> Result<Response, ApiError> {
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT).min(MAX_LIMIT);
    let scan = api.store.scan(schema::EVENTS).await?;
    let mut events: Vec<(u64, Event)> = scan
        .facts
        .iter()
        .filter_map(decode)
        .filter(|(_, e)| query.object.as_deref().is_none_or(|o| concerns(e, o)))
        .collect();
    events.sort_by_key(|(revision, _)| *revision);
    let skip = events.len().saturating_sub(limit);
    let events: Vec<Json> = events[skip..]
        .iter()
        .map(|(revision, event)| event_json(*revision, event))
        .collect();
    Ok(axum::Json(json!({ "revision": scan.revision.get(), "events": events })).into_response())
}
