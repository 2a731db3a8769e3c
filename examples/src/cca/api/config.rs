//! `APPLY /config` (`POST /config`), `GET /api/status` and `GET /api/nodes`.

use std::collections::BTreeMap;

use axum::Extension;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Query, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use ccattler_controllers::apply::{ApplyError, ApplyOptions, apply_file};
use ccattler_controllers::lang::{Diagnostics, Severity, SourceFile};
use ccattler_core::FactStore;
use ccattler_core::schema::{self, RecordKey, ServiceStatus};
use serde::Deserialize;
use serde_json::{Value as Json, json};

use super::auth::Principal;
use super::error::{ApiError, method_not_allowed};
use super::state::fact_json;
use super::{ApiState, hidden};
use crate::cca::progress::ClusterStatus;

/// The query string of `/config`.
#[derive(Debug, Default, Deserialize)]
pub struct ApplyParams {
    /// Compute the plan, write nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// Also remove desired objects the document no longer declares.
    #[serde(default)]
    pub prune: bool,
    /// The document's name in diagnostics (`request.cca` by default).
    #[serde(default)]
    pub name: Option<String>,
}

/// `POST /config`.
pub async fn post_config<S: FactStore + Clone>(
    State(api): State<ApiState<S>>,
    Extension(principal): Extension<Principal>,
    params: Result<Query<ApplyParams>, QueryRejection>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    apply(&api.store, &principal, params, body).await
}

/// Other methods on `/config`: `APPLY` is served, the rest get 405.
pub async fn custom_method<S: FactStore + Clone>(
    method: Method,
    State(api): State<ApiState<S>>,
    Extension(principal): Extension<Principal>,
    params: Result<Query<ApplyParams>, QueryRejection>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    if method.as_str() != "APPLY" {
        return Err(method_not_allowed(&method, "APPLY or POST"));
    }
    apply(&api.store, &principal, params, body).await
}

async fn apply<S: FactStore>(
    store: &S,
    principal: &Principal,
    params: Result<Query<ApplyParams>, QueryRejection>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    principal.require_admin()?;
    let Query(params) = params?;
    let body = body?;
    let text = std::str::from_utf8(&body)
        .map_err(|_| ApiError::bad_request("the document is not UTF-8 text"))?;
    let name = params.name.unwrap_or_else(|| "request.cca".to_owned());
    let file = SourceFile::new(name, text);
    let options = ApplyOptions::default()
        .dry_run(params.dry_run)
        .prune(params.prune);
    match apply_file(store, &file, options).await {
        Ok(report) => {
            let keys = |keys: &[ccattler_core::Key]| {
                keys.iter()
                    .map(|k| k.as_str().to_owned())
                    .collect::<Vec<_>>()
            };
            // Where a change's trail starts: the controllers' reconcile and commit spans and
            // the agents' spans follow from this revision.
            if let Some(revision) = report.revision {
                tracing::info!(
                    revision = revision.get(),
                    added = ?keys(&report.plan.added),
                    changed = ?keys(&report.plan.changed),
                    removed = ?keys(&report.plan.removed),
                    "applied"
                );
            }
            Ok(axum::Json(json!({
                "dry_run": params.dry_run,
                "prune": params.prune,
                "revision": report.revision.map(|r| r.get()),
                "added": keys(&report.plan.added),
                "changed": keys(&report.plan.changed),
                "removed": keys(&report.plan.removed),
                "unchanged": report.plan.unchanged,
                "plan": report.plan.to_string(),
            }))
            .into_response())
        }
        Err(ApplyError::Invalid(diagnostics)) => Err(ApiError::bad_request(
            "the document has errors; nothing was applied",
        )
        .with(json!({
            "diagnostics": diagnostics_json(&diagnostics),
            "rendered": diagnostics.to_string(),
        }))),
        Err(ApplyError::Store(err)) => Err(err.into()),
        Err(err @ ApplyError::Conflict(_)) => {
            Err(ApiError::new(StatusCode::CONFLICT, err.to_string()))
        }
        Err(err) => Err(ApiError::bad_request(err.to_string())),
    }
}

/// Every diagnostic as JSON: severity, code, message, line and column, label, help.
pub fn diagnostics_json(diagnostics: &Diagnostics) -> Vec<Json> {
    diagnostics
        .iter()
        .map(|d| {
            let (line, column) = diagnostics.source().line_col(d.span.start);
            json!({
                "severity": match d.severity {
                    Severity::Error => "error",
                    Severity::Warning => "warning",
                },
                "code": d.code,
                "message": d.message,
                "line": line,
                "column": column,
                "label": d.label,
                "help": d.help,
            })
        })
        .collect()
}

/// `GET /api/status`: one row per service, the number of live nodes, the volumes
/// ([`volumes::report`](super::volumes::report)) and the control plane ([`control_plane`]).
pub async fn status<S: FactStore + Clone>(
    State(api): State<ApiState<S>>,
) -> Result<Response, ApiError> {
    let status = ClusterStatus::read(&api.store).await?;
    let mut present = BTreeMap::new();
    for fact in api.store.scan(schema::SERVICE_STATUSES).await?.facts {
        if let (Some(RecordKey::ServiceStatus(name)), Ok(s)) = (
            RecordKey::parse(&fact.key),
            schema::decode::<ServiceStatus>(&fact),
        ) {
            present.insert(name.to_owned(), s.present);
        }
    }
    let troubled = troubled_instances(&api.store).await?;
    let mut rollouts = BTreeMap::new();
    for fact in api.store.scan(schema::ROLLOUTS).await?.facts {
        if let (Some(RecordKey::Rollout(name)), Ok(r)) = (
            RecordKey::parse(&fact.key),
            schema::decode::<schema::Rollout>(&fact),
        ) {
            rollouts.insert(name.to_owned(), super::rollout::summary(&r));
        }
    }
    let mut inits = BTreeMap::new();
    for fact in api.store.scan(schema::INIT_STATUSES).await?.facts {
        if let (Some(RecordKey::InitStatus(name)), Ok(init)) = (
            RecordKey::parse(&fact.key),
            schema::decode::<schema::InitStatus>(&fact),
        ) {
            inits.insert(name.to_owned(), init);
        }
    }
    let services: Vec<Json> = status
        .services
        .iter()
        .map(|row| {
            json!({
                "name": row.name,
                "desired": row.desired,
                "placed": row.placed,
                "present": present.get(&row.name).copied().unwrap_or(0),
                "running": row.running,
                "ready": row.ready,
                "unplaced": row.unplaced,
                "reasons": row.reasons,
                "troubled": troubled.get(&row.name).cloned().unwrap_or_default(),
                "converged": row.converged,
                "autoscaler": row.autoscaler.as_ref().map(|a| json!({
                    "instances": a.instances,
                    "reason": a.reason,
                })),
                "rollout": rollouts.get(&row.name).cloned(),
                "init": inits.get(&row.name),
            })
        })
        .collect();
    Ok(axum::Json(json!({
        "nodes": status.nodes,
        "converged": status.is_converged(),
        "services": services,
        "volumes": super::volumes::report(&api.store).await?,
        "control_plane": control_plane(&api.store).await?,
    }))
    .into_response())
}

/// Per service, its instances that report a problem: `failed`, or `pending` with a reason (a
/// missing secret, a spec not fetched yet): `[{instance, node, state, reason}]`.
async fn troubled_instances<S: FactStore>(
    store: &S,
) -> Result<BTreeMap<String, Vec<Json>>, ApiError> {
    let mut troubled: BTreeMap<String, Vec<Json>> = BTreeMap::new();
    for fact in store.scan(schema::OBSERVED_INSTANCES).await?.facts {
        let (Some(RecordKey::ObservedInstance { node, instance }), Ok(seen)) = (
            RecordKey::parse(&fact.key),
            schema::decode::<schema::InstanceObservation>(&fact),
        ) else {
            continue;
        };
        let problem = match seen.state {
            schema::ObservedState::Failed => true,
            schema::ObservedState::Pending => seen.reason.is_some(),
            _ => false,
        };
        if problem {
            troubled
                .entry(seen.service.clone())
                .or_default()
                .push(json!({
                    "instance": instance,
                    "node": node,
                    "state": seen.state,
                    "reason": seen.reason,
                }));
        }
    }
    Ok(troubled)
}

/// The control plane as the store records it: `{up, replicas: [{id, url, elected, started}],
/// elected, leader}`. `elected` says whether the replicas run the controllers under leader
/// election (etcd); `leader` is the id in the leader key, `null` while nobody leads (or
/// without election).
///
/// # Errors
///
/// The store's error.
pub async fn control_plane<S: FactStore>(store: &S) -> Result<Json, ApiError> {
    let replicas = crate::cca::replica::replicas(store).await?;
    let key = ccattler_core::Key::new(crate::cca::replica::LEADER_KEY)
        .map_err(|err| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, err.to_string()))?;
    let leader = store
        .get(&key)
        .await?
        .map(|fact| String::from_utf8_lossy(&fact.value).into_owned());
    Ok(json!({
        "up": replicas.len(),
        "elected": replicas.iter().any(|r| r.elected),
        "leader": leader,
        "replicas": replicas,
    }))
}

/// `GET /api/nodes`: every node that reported a status or holds a lease, with what its
/// firewall reports of the network rules in force (`network`, null when it reported nothing).
pub async fn nodes<S: FactStore + Clone>(
    State(api): State<ApiState<S>>,
) -> Result<Response, ApiError> {
    let mut nodes: BTreeMap<String, (bool, Json, Json)> = BTreeMap::new();
    let absent = || (false, Json::Null, Json::Null);
    for fact in api.store.scan(schema::NODE_LEASES).await?.facts {
        if let Some(RecordKey::NodeLease(name)) = RecordKey::parse(&fact.key) {
            nodes.entry(name.to_owned()).or_insert_with(absent).0 = true;
        }
    }
    for fact in api.store.scan(schema::NETWORK_REPORTS).await?.facts {
        if let Some(RecordKey::NetworkReport(name)) = RecordKey::parse(&fact.key) {
            let value = fact_json(&fact).get("value").cloned().unwrap_or(Json::Null);
            nodes.entry(name.to_owned()).or_insert_with(absent).2 = value;
        }
    }
    for fact in api.store.scan(schema::OBSERVED_NODES).await?.facts {
        if hidden(fact.key.as_str()) {
            continue;
        }
        if let Some(RecordKey::Node(name)) = RecordKey::parse(&fact.key) {
            let value = fact_json(&fact).get("value").cloned().unwrap_or(Json::Null);
            nodes.entry(name.to_owned()).or_insert_with(absent).1 = value;
        }
    }
    let nodes: Vec<Json> = nodes
        .into_iter()
        .map(|(name, (alive, status, network))| {
            json!({ "name": name, "alive": alive, "status": status, "network": network })
        })
        .collect();
    Ok(axum::Json(json!({ "nodes": nodes })).into_response())
}
