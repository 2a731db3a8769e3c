//! `GET /state`, `QUERY /state` (`POST /state/query`), `PUT` and `DELETE /state/{key}`.
//!
//! # Query predicates
//!
//! A [`Query`] selects the facts under `prefix` whose value is JSON and satisfies every
//! predicate of `where`. A predicate names a `field` by its dotted path in the value
//! (`state`, `resources.cpu`, `labels.zone`; `key` and `mod_revision` are the fact's own), an
//! `op` and, except for `exists`, a `value`:
//!
//! | op | holds when the field |
//! |---|---|
//! | `==`, `!=` | equals (does not equal) `value`, as JSON |
//! | `<`, `<=`, `>`, `>=` | compares so with `value`: by value when either is a quantity, else both numbers or both strings |
//! | `exists` | is present (`value` `false`: is absent) |
//! | `prefix` | is a string starting with the string `value` |
//!
//! Quantities compare by value, the way records store them: a string with a CPU unit
//! (`"500m"`) is millicores, one with a memory unit (`"256Mi"`, `"1G"`) is bytes. The other side
//! may be the same kind of string (`"2"` is 2 cores against a CPU, 2 bytes against memory) or a
//! bare number in that base unit, so `cpu >= 200` holds for a stored `"500m"`, and
//! `memory < "1Gi"` for `"256Mi"`.

use axum::Extension;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Path, State};
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use ccattler_core::schema::{Cpu, Memory};
use ccattler_core::{Fact, FactStore, Key};
use serde::Deserialize;
use serde_json::{Map, Value as Json, json};

use super::auth::Principal;
use super::error::{ApiError, method_not_allowed};
use super::{ApiState, hidden, parse_json};

/// The query string of `GET /state`.
#[derive(Debug, Default, Deserialize)]
pub struct PrefixParam {
    /// Plain string prefix of the keys; everything when absent.
    #[serde(default)]
    pub prefix: String,
}

/// The body of `QUERY /state`; see the [module docs](self).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Query {
    /// Plain string prefix of the keys.
    #[serde(default)]
    pub prefix: String,
    /// Every predicate must hold.
    #[serde(default, rename = "where")]
    pub predicates: Vec<Predicate>,
}

/// One condition on a field of a fact's value.
#[derive(Clone, Debug, Deserialize)]
pub struct Predicate {
    /// Dotted path in the value.
    pub field: String,
    /// `==`, `!=`, `<`, `<=`, `>`, `>=`, `exists` or `prefix`.
    pub op: String,
    /// The operand.
    #[serde(default)]
    pub value: Json,
}

impl Predicate {
    fn check(&self) -> Result<(), ApiError> {
        match self.op.as_str() {
            "==" | "!=" | "<" | "<=" | ">" | ">=" | "exists" | "prefix" => Ok(()),
            other => Err(ApiError::bad_request(format!(
                "unknown op {other:?}; use ==, !=, <, <=, >, >=, exists or prefix"
            ))),
        }
    }

    fn holds(&self, fact: &Json) -> bool {
        let field = self
            .field
            .split('.')
            .try_fold(fact, |value, name| value.get(name));
        match (self.op.as_str(), field) {
            ("exists", field) => field.is_some() != (self.value == Json::Bool(false)),
            ("==", Some(field)) => field == &self.value,
            ("!=", field) => field != Some(&self.value),
            ("prefix", Some(Json::String(s))) => {
                self.value.as_str().is_some_and(|p| s.starts_with(p))
            }
            (op, Some(field)) => {
                let ordering = match (field, &self.value) {
                    (a, b) if Quantity::of(a).is_some() || Quantity::of(b).is_some() => {
                        Quantity::compare(a, b)
                    }
                    (Json::Number(a), Json::Number(b)) => a
                        .as_f64()
                        .zip(b.as_f64())
                        .and_then(|(a, b)| a.partial_cmp(&b)),
                    (Json::String(a), Json::String(b)) => Some(a.cmp(b)),
                    _ => None,
                };
                ordering.is_some_and(|o| match op {
                    "<" => o.is_lt(),
                    "<=" => o.is_le(),
                    ">" => o.is_gt(),
                    ">=" => o.is_ge(),
                    _ => false,
                })
            }
            _ => false,
        }
    }
}

/// A CPU or memory quantity written with its unit, in its base unit (millicores, bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Quantity {
    Cpu(u64),
    Memory(u64),
}

impl Quantity {
    /// The quantity a JSON string spells with a unit (`"500m"`, `"256Mi"`); `None` for
    /// anything else, plain numbers included.
    fn of(value: &Json) -> Option<Self> {
        let text = value.as_str()?;
        let unit = text.trim_start_matches(|c: char| c.is_ascii_digit() || c == '.');
        if unit.is_empty() || unit.len() == text.len() {
            return None;
        }
        if unit == "m" {
            return text.parse::<Cpu>().ok().map(|c| Quantity::Cpu(c.millis()));
        }
        text.parse::<Memory>()
            .ok()
            .map(|m| Quantity::Memory(m.bytes()))
    }

    /// `value` read as the same kind of quantity as `self`: a string in that kind's forms, or
    /// a number in its base unit.
    fn like(self, value: &Json) -> Option<u64> {
        match value {
            Json::Number(n) => n.as_u64(),
            Json::String(text) => match self {
                Quantity::Cpu(_) => text.parse::<Cpu>().ok().map(Cpu::millis),
                Quantity::Memory(_) => text.parse::<Memory>().ok().map(Memory::bytes),
            },
            _ => None,
        }
    }

    fn amount(self) -> u64 {
        match self {
            Quantity::Cpu(n) | Quantity::Memory(n) => n,
        }
    }

    /// How `field` compares with `operand` when at least one is a quantity with a unit.
    fn compare(field: &Json, operand: &Json) -> Option<std::cmp::Ordering> {
        match (Quantity::of(field), Quantity::of(operand)) {
            (Some(a), Some(b)) if std::mem::discriminant(&a) == std::mem::discriminant(&b) => {
                Some(a.amount().cmp(&b.amount()))
            }
            (Some(_), Some(_)) => None, // cpu against memory: incomparable
            (Some(a), None) => a.like(operand).map(|b| a.amount().cmp(&b)),
            (None, Some(b)) => b.like(field).map(|a| a.cmp(&b.amount())),
            (None, None) => None,
        }
    }
}

/// A fact as the API shows it; `value` is parsed JSON when the stored bytes are JSON.
pub fn fact_json(fact: &Fact) -> Json {
    let value = serde_json::from_slice::<Json>(&fact.value)
        .unwrap_or_else(|_| Json::String(String::from_utf8_lossy(&fact.value).into_owned()));
    fact_with_value(fact, value)
}

fn fact_with_value(fact: &Fact, value: Json) -> Json {
    let mut object = Map::with_capacity(5);
    object.insert("key".into(), Json::String(fact.key.as_str().to_owned()));
    object.insert("value".into(), value);
    object.insert("create_revision".into(), fact.create_revision.get().into());
    object.insert("mod_revision".into(), fact.mod_revision.get().into());
    object.insert("version".into(), fact.version.into());
    Json::Object(object)
}

/// Appends a fact as JSON to `out`, copying a JSON value's bytes as they are (no parse tree):
/// the same shape as [`fact_json`], written fast for large listings.
fn write_fact(out: &mut Vec<u8>, fact: &Fact) {
    out.extend_from_slice(b"{\"key\":");
    let _ = serde_json::to_writer(&mut *out, fact.key.as_str());
    out.extend_from_slice(b",\"value\":");
    if serde_json::from_slice::<serde::de::IgnoredAny>(&fact.value).is_ok() {
        out.extend_from_slice(&fact.value);
    } else {
        let _ = serde_json::to_writer(&mut *out, &String::from_utf8_lossy(&fact.value));
    }
    let tail = format!(
        ",\"create_revision\":{},\"mod_revision\":{},\"version\":{}}}",
        fact.create_revision.get(),
        fact.mod_revision.get(),
        fact.version
    );
    out.extend_from_slice(tail.as_bytes());
}

/// Scans and filters; `{revision, facts}`.
async fn select<S: FactStore>(store: &S, query: &Query) -> Result<Response, ApiError> {
    for predicate in &query.predicates {
        predicate.check()?;
    }
    ccattler_core::key::validate_prefix(&query.prefix)
        .map_err(|err| ApiError::bad_request(format!("`prefix`: {err}")))?;
    let scan = store.scan(&query.prefix).await?;
    let mut body =
        Vec::with_capacity(64 + scan.facts.iter().map(|f| f.value.len() + 96).sum::<usize>());
    body.extend_from_slice(
        format!("{{\"revision\":{},\"facts\":[", scan.revision.get()).as_bytes(),
    );
    let mut first = true;
    for fact in scan.facts.iter().filter(|f| !hidden(f.key.as_str())) {
        if !query.predicates.is_empty() {
            let Ok(mut subject) = serde_json::from_slice::<Json>(&fact.value) else {
                continue;
            };
            if let Json::Object(map) = &mut subject {
                map.entry("key")
                    .or_insert_with(|| Json::String(fact.key.as_str().to_owned()));
                map.entry("mod_revision")
                    .or_insert_with(|| fact.mod_revision.get().into());
            }
            if !query.predicates.iter().all(|p| p.holds(&subject)) {
                continue;
            }
        }
        if !first {
            body.push(b',');
        }
        first = false;
        write_fact(&mut body, fact);
    }
    body.extend_from_slice(b"]}");
    Ok((
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response())
}

/// `GET /state?prefix=`.
pub async fn get_state<S: FactStore + Clone>(
    State(api): State<ApiState<S>>,
    params: Result<axum::extract::Query<PrefixParam>, QueryRejection>,
) -> Result<Response, ApiError> {
    let axum::extract::Query(params) = params?;
    select(
        &api.store,
        &Query {
            prefix: params.prefix,
            predicates: Vec::new(),
        },
    )
    .await
}

/// `POST /state/query`.
pub async fn post_query<S: FactStore + Clone>(
    State(api): State<ApiState<S>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let query: Query = parse_json(&body?)?;
    select(&api.store, &query).await
}

/// Other methods on `/state`: `QUERY` is served, the rest get 405.
pub async fn custom_method<S: FactStore + Clone>(
    method: Method,
    State(api): State<ApiState<S>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    if method.as_str() != "QUERY" {
        return Err(method_not_allowed(&method, "GET or QUERY"));
    }
    let query: Query = parse_json(&body?)?;
    select(&api.store, &query).await
}

fn writable(principal: &Principal, key: &str) -> Result<Key, ApiError> {
    let key = Key::new(key).map_err(|err| ApiError::bad_request(format!("key: {err}")))?;
    if let Some(why) = principal.write_refusal(key.as_str()) {
        return Err(ApiError::forbidden(why));
    }
    Ok(key)
}

/// `PUT /state/{key}`: the body is the value.
pub async fn put_key<S: FactStore + Clone>(
    State(api): State<ApiState<S>>,
    Extension(principal): Extension<Principal>,
    Path(key): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let key = writable(&principal, &key)?;
    let body = body?;
    let revision = api.store.put(&key, body).await?;
    Ok(axum::Json(json!({ "key": key.as_str(), "revision": revision.get() })).into_response())
}

/// `DELETE /state/{key}`.
pub async fn delete_key<S: FactStore + Clone>(
    State(api): State<ApiState<S>>,
    Extension(principal): Extension<Principal>,
    Path(key): Path<String>,
) -> Result<Response, ApiError> {
    let key = writable(&principal, &key)?;
    let deleted = api.store.delete(&key).await?;
    let revision = api.store.revision().await?;
    Ok(axum::Json(json!({
        "key": key.as_str(),
        "deleted": deleted.is_some(),
        "revision": revision.get(),
    }))
    .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn predicate(field: &str, op: &str, value: Json) -> Predicate {
        Predicate {
            field: field.to_owned(),
            op: op.to_owned(),
            value,
        }
    }

    #[test]
    fn predicates_compare_fields_by_path() {
        let fact = json!({"state": "running", "resources": {"cpu": 500}, "name": "web-1"});
        assert!(predicate("state", "==", json!("running")).holds(&fact));
        assert!(predicate("state", "!=", json!("exited")).holds(&fact));
        assert!(predicate("resources.cpu", ">", json!(100)).holds(&fact));
        assert!(!predicate("resources.cpu", "<", json!(100)).holds(&fact));
        assert!(predicate("name", "prefix", json!("web")).holds(&fact));
        assert!(predicate("zone", "exists", json!(false)).holds(&fact));
        assert!(!predicate("zone", "exists", Json::Null).holds(&fact));
        assert!(!predicate("state", "<", json!(3)).holds(&fact));
    }

    #[test]
    fn quantities_compare_by_value() {
        let fact = json!({"cpu": "500m", "memory": "256Mi", "name": "2m-web"});
        assert!(
            predicate("cpu", ">=", json!(200)).holds(&fact),
            "200 millicores"
        );
        assert!(!predicate("cpu", ">=", json!(600)).holds(&fact));
        assert!(predicate("cpu", "<", json!("1")).holds(&fact), "1 core");
        assert!(predicate("cpu", ">", json!("0.25")).holds(&fact));
        assert!(predicate("memory", "<", json!("1Gi")).holds(&fact));
        assert!(
            predicate("memory", ">", json!(1_000_000)).holds(&fact),
            "bytes"
        );
        assert!(!predicate("memory", ">", json!("1G")).holds(&fact));
        assert!(
            !predicate("cpu", "<", json!("1Gi")).holds(&fact),
            "cpu vs memory"
        );
        // Stored as numbers, compared with a quantity: the number is in the base unit.
        let numbers = json!({"cpu": 500});
        assert!(predicate("cpu", ">", json!("200m")).holds(&numbers));
        // Not quantities: plain string order, as before.
        assert!(predicate("name", ">", json!("1")).holds(&fact));
    }
}
