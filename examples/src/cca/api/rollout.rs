//! `GET /api/rollout/{service}` and `POST /api/rollout/{service}`: a service's rollout, and the
//! user's requests of it (pause, resume, undo).

use axum::Extension;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use ccattler_core::schema::{
    self, DesiredInstance, DesiredState, InstanceObservation, RecordKey, Rollout, RolloutAction,
    RolloutRequest, ServiceSpec,
};
use ccattler_core::{Compare, FactStore, Key, Op, Txn};
use serde::Deserialize;
use serde_json::{Value as Json, json};

use super::ApiState;
use super::auth::{Principal, now_secs};
use super::error::ApiError;

/// The body of `POST /api/rollout/{service}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RolloutBody {
    /// `pause`, `resume` or `undo`.
    pub action: String,
    /// For `undo`: the version to return to (its full 16 digits, or a unique prefix of 4 or
    /// more); the version before the one in force when absent.
    #[serde(default)]
    pub to_version: Option<String>,
}

/// `GET /api/rollout/{service}`: the rollout record with the instance counts of the version in
/// force (`updated`: running or to run, `ready`) and of the others (`old`).
pub async fn get_rollout<S: FactStore + Clone>(
    State(api): State<ApiState<S>>,
    Path(service): Path<String>,
) -> Result<Response, ApiError> {
    let (spec, rollout) = read(&api.store, &service).await?;
    let Some(rollout) = rollout else {
        return Err(match spec {
            Some(_) => ApiError::not_found(format!(
                "service {service} has no rollout record yet: is the rollout controller running?"
            )),
            None => ApiError::not_found(format!("no service {service} is declared")),
        });
    };
    let counts = counts(&api.store, &service, &rollout.version).await?;
    Ok(axum::Json(json!({
        "service": service,
        "phase": rollout.phase.label(),
        "reason": rollout.reason,
        "version": rollout.version,
        "desired": rollout.desired,
        "stable": rollout.stable,
        "rolled_back_from": rollout.rolled_back_from,
        "kept": rollout.kept,
        "failures": rollout.failure_count(),
        "instances": counts.0,
        "updated": counts.1,
        "ready": counts.2,
        "old": counts.3,
        "policy": spec.map(|s| json!({
            "progress_deadline": schema::format_duration(s.update.progress_deadline),
            "min_ready": schema::format_duration(s.update.min_ready),
            "failure_threshold": s.update.failure_threshold,
        })),
    }))
    .into_response())
}

/// `POST /api/rollout/{service}` (admin): writes the request for the rollout controller, which
/// acts on it once. 202 with the request's id; 404 for a service not declared; 400 for an
/// unknown action or an undo to a version the rollout does not keep; 409 while the previous
/// request is not handled yet.
pub async fn post_rollout<S: FactStore + Clone>(
    State(api): State<ApiState<S>>,
    Extension(principal): Extension<Principal>,
    Path(service): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    principal.require_admin()?;
    let body: RolloutBody = super::parse_json(&body?)?;
    let (spec, rollout) = read(&api.store, &service).await?;
    if spec.is_none() {
        return Err(ApiError::not_found(format!(
            "no service {service} is declared"
        )));
    }
    let kept = rollout.as_ref().map(|r| r.kept.as_slice()).unwrap_or(&[]);
    let action = match body.action.as_str() {
        "pause" => RolloutAction::Pause,
        "resume" => RolloutAction::Resume,
        "undo" => RolloutAction::Undo {
            to_version: match &body.to_version {
                Some(v) => Some(resolve_version(&service, v, kept)?),
                None => None,
            },
        },
        other => {
            return Err(ApiError::bad_request(format!(
                "unknown action {other:?}; use pause, resume or undo"
            )));
        }
    };
    let key = schema::keys::rollout_request(&service)
        .map_err(|err| ApiError::bad_request(format!("service name: {err}")))?;
    let held = api.store.get(&key).await?;
    let last = held
        .as_ref()
        .and_then(|f| schema::decode::<RolloutRequest>(f).ok())
        .map(|r| r.id);
    let handled = rollout.as_ref().map_or(0, |r| r.handled);
    if let Some(last) = last.filter(|id| *id != handled) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!(
                "request {last} of {service}'s rollout is not handled yet; retry in a few \
                 seconds (is the rollout controller running?)"
            ),
        ));
    }
    let id = (now_secs().saturating_mul(1_000)).max(last.unwrap_or(0) + 1);
    let request = RolloutRequest { id, action };
    // Guarded: a request written meanwhile by someone else is not overwritten.
    let guard = match &held {
        Some(fact) => Compare::mod_revision(key.clone(), fact.mod_revision),
        None => Compare::absent(key.clone()),
    };
    let txn = Txn::new()
        .when(guard)
        .then(Op::put(key, schema::encode(&request)));
    if !api.store.txn(txn).await?.succeeded {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!("another request of {service}'s rollout was just made; look and retry"),
        ));
    }
    Ok((
        StatusCode::ACCEPTED,
        axum::Json(json!({ "service": service, "request": id, "action": body.action })),
    )
        .into_response())
}

/// The desired spec and the rollout record of `service`.
async fn read<S: FactStore>(
    store: &S,
    service: &str,
) -> Result<(Option<ServiceSpec>, Option<Rollout>), ApiError> {
    let key = |k: Result<Key, _>| {
        k.map_err(|err: ccattler_core::KeyError| {
            ApiError::bad_request(format!("service name: {err}"))
        })
    };
    let spec = store.get(&key(schema::keys::service(service))?).await?;
    let rollout = store.get(&key(schema::keys::rollout(service))?).await?;
    Ok((
        spec.and_then(|f| schema::decode(&f).ok()),
        rollout.and_then(|f| schema::decode(&f).ok()),
    ))
}

/// The full kept version `text` names: itself, or the one kept version it is a prefix of.
fn resolve_version(service: &str, text: &str, kept: &[String]) -> Result<String, ApiError> {
    let matching: Vec<&String> = kept
        .iter()
        .filter(|v| text.len() >= 4 && v.starts_with(text))
        .collect();
    match matching.as_slice() {
        [one] => Ok((*one).clone()),
        [] => Err(ApiError::bad_request(format!(
            "version {text} is not kept for {service}; kept (oldest first): {}",
            if kept.is_empty() {
                "none".to_owned()
            } else {
                kept.join(", ")
            }
        ))),
        _ => Err(ApiError::bad_request(format!(
            "version {text} names several kept versions of {service}; give more digits"
        ))),
    }
}

/// Of `service`'s instances: how many the rollout targets (its effective count), how many of
/// `version` run or will run, how many of those are ready, and how many of other versions
/// are left.
async fn counts<S: FactStore>(
    store: &S,
    service: &str,
    version: &str,
) -> Result<(u32, u32, u32, u32), ApiError> {
    let effective = match schema::keys::effective(service) {
        Ok(key) => store.get(&key).await?,
        Err(_) => None,
    };
    let target = effective
        .and_then(|f| schema::decode::<schema::EffectiveService>(&f).ok())
        .map_or(0, |e| e.instances);
    let mut updated = std::collections::BTreeSet::new();
    let mut old = 0;
    for fact in store.scan(schema::DESIRED_INSTANCES).await?.facts {
        let Ok(instance) = schema::decode::<DesiredInstance>(&fact) else {
            continue;
        };
        if instance.service != service {
            continue;
        }
        let Some(RecordKey::Instance(id)) = RecordKey::parse(&fact.key) else {
            continue;
        };
        if instance.version != version {
            old += 1;
        } else if instance.state == DesiredState::Running {
            updated.insert(id.to_owned());
        }
    }
    let mut ready = 0;
    for fact in store.scan(schema::OBSERVED_INSTANCES).await?.facts {
        let id = RecordKey::parse(&fact.key).and_then(|k| k.instance().map(str::to_owned));
        let observed = schema::decode::<InstanceObservation>(&fact).ok();
        if let (Some(id), Some(o)) = (id, observed)
            && updated.contains(&id)
            && o.ready
        {
            ready += 1;
        }
    }
    Ok((target, updated.len() as u32, ready, old))
}

/// The JSON of a rollout's one-line summary, as `GET /api/status` gives it per service.
pub fn summary(rollout: &Rollout) -> Json {
    json!({
        "phase": rollout.phase.label(),
        "version": rollout.version,
        "desired": rollout.desired,
        "reason": rollout.reason,
    })
}
