//! Checking `expect` lines against a world. Each check returns a message saying what was
//! expected and what was found.

use std::collections::BTreeMap;

use ccattler_core::plan::value_text;
use ccattler_core::schema::{
    self, DesiredState, Endpoints, RecordKey, ServiceStatus, Unschedulable,
};

use super::command::Expectation;
use super::query::{Selector, describe};
use super::render;
use super::world::World;

/// Checks one expectation.
pub(crate) fn check(world: &World, expectation: &Expectation) -> Result<(), String> {
    match expectation {
        Expectation::Placements { service, counts } => placements(world, service, counts),
        Expectation::Unsatisfied {
            service,
            count,
            reason,
        } => unsatisfied(world, service, *count, reason.as_deref()),
        Expectation::Instances { service, counts } => instances(world, service, counts),
        Expectation::Observed { service, counts } => observed(world, service, counts),
        Expectation::Instance { selector, state } => instance(world, selector, state),
        Expectation::Status { service, fields } => status(world, service, fields.as_deref()),
        Expectation::Endpoints { service, count } => endpoints(world, service, *count),
        Expectation::Effective { service, instances } => {
            let found = world.effective(service).map(|e| e.instances);
            if found == Some(*instances) {
                Ok(())
            } else {
                Err(format!(
                    "expected effective {service} {instances}, found {}",
                    found.map_or("no effective record".to_owned(), |n| n.to_string())
                ))
            }
        }
        Expectation::NoChanges(controller) => no_changes(world, controller.as_deref()),
        Expectation::Fact { key, value } => fact(world, key.as_str(), value.as_deref()),
    }
}

/// The fact at `key` holds exactly `want` (`None`: is absent).
fn fact(world: &World, key: &str, want: Option<&str>) -> Result<(), String> {
    let found = world.get(key).map(|f| &f.value);
    match (want, found) {
        (None, None) => Ok(()),
        (Some(want), Some(value)) if value.as_ref() == want.as_bytes() => Ok(()),
        (want, found) => Err(format!(
            "expected fact {key} {}, found {}",
            want.unwrap_or("none"),
            found.map_or("none".to_owned(), |v| value_text(v).to_string())
        )),
    }
}

/// Placements of the service on live nodes, exactly (unlisted nodes hold none).
fn placements(world: &World, service: &str, expected: &[(String, usize)]) -> Result<(), String> {
    let mut live: BTreeMap<String, usize> = BTreeMap::new();
    let mut dead: BTreeMap<String, usize> = BTreeMap::new();
    for assignment in world.placements().into_values() {
        if assignment.service == service {
            let side = if world.alive(&assignment.node) {
                &mut live
            } else {
                &mut dead
            };
            *side.entry(assignment.node).or_default() += 1;
        }
    }
    let wanted: BTreeMap<String, usize> =
        expected.iter().filter(|(_, n)| *n > 0).cloned().collect();
    if live == wanted {
        return Ok(());
    }
    let show = |m: &BTreeMap<String, usize>| {
        if m.is_empty() {
            "none".to_owned()
        } else {
            m.iter()
                .map(|(node, n)| format!("{node}={n}"))
                .collect::<Vec<_>>()
                .join(" ")
        }
    };
    Err(format!(
        "expected placements of {service} on live nodes: {}, found {} (on dead nodes: {})",
        show(&wanted),
        show(&live),
        show(&dead)
    ))
}

fn unsatisfied(
    world: &World,
    service: &str,
    count: usize,
    reason: Option<&str>,
) -> Result<(), String> {
    let reasons: Vec<(String, String)> = world
        .scan(schema::UNSCHEDULABLE)
        .filter_map(|f| {
            let u = schema::decode::<Unschedulable>(f).ok()?;
            let id = RecordKey::parse(&f.key)?.instance()?.to_owned();
            (u.service == service).then_some((id, u.reason))
        })
        .collect();
    let listed = || {
        reasons
            .iter()
            .map(|(id, why)| format!("\n  {id}: {why}"))
            .collect::<String>()
    };
    if reasons.len() != count {
        return Err(format!(
            "expected {count} unsatisfied instances of {service}, found {}{}",
            reasons.len(),
            listed()
        ));
    }
    if let Some(text) = reason
        && reasons.iter().any(|(_, why)| !why.contains(text))
    {
        return Err(format!(
            "expected every unsatisfied reason of {service} to contain \"{text}\":{}",
            listed()
        ));
    }
    Ok(())
}

/// Desired instances by `running`, `stopped`, `current`, `outdated` (running ones of the
/// effective version or another) and `total`; only the keys listed are checked.
fn instances(world: &World, service: &str, expected: &[(String, usize)]) -> Result<(), String> {
    let rows = world.rows(service);
    let version = world.effective(service).map(|e| e.version);
    let running = |r: &&super::query::Row| r.desired.state == DesiredState::Running;
    for (key, want) in expected {
        let found = match key.as_str() {
            "running" => rows.iter().filter(running).count(),
            "stopped" => rows.iter().filter(|r| !running(r)).count(),
            "current" => rows
                .iter()
                .filter(running)
                .filter(|r| Some(&r.desired.version) == version.as_ref())
                .count(),
            "outdated" => rows
                .iter()
                .filter(running)
                .filter(|r| Some(&r.desired.version) != version.as_ref())
                .count(),
            "total" => rows.len(),
            other => {
                return Err(format!(
                    "unknown instance count `{other}`; expected running, stopped, current, \
                     outdated or total"
                ));
            }
        };
        if found != *want {
            return Err(format!(
                "expected {key}={want} instances of {service}, found {found}: {}",
                world.describe_instances(Some(service))
            ));
        }
    }
    Ok(())
}

/// Instances by observed state (`none`: nothing reported); only the keys listed are checked.
fn observed(world: &World, service: &str, expected: &[(String, usize)]) -> Result<(), String> {
    let rows = world.rows(service);
    for (key, want) in expected {
        let found = if key == "none" {
            rows.iter().filter(|r| r.state().is_none()).count()
        } else {
            let state = super::command::observed_state(key)?;
            rows.iter().filter(|r| r.state() == Some(state)).count()
        };
        if found != *want {
            return Err(format!(
                "expected {key}={want} observed instances of {service}, found {found}: {}",
                world.describe_instances(Some(service))
            ));
        }
    }
    Ok(())
}

fn instance(world: &World, selector: &Selector, state: &str) -> Result<(), String> {
    if state == "gone" {
        return match world.select(selector) {
            Err(_) => Ok(()),
            Ok(rows) => Err(format!(
                "expected {} gone, found {}",
                describe(selector),
                rows.iter()
                    .map(|r| r.id.as_str())
                    .collect::<Vec<_>>()
                    .join(" ")
            )),
        };
    }
    let want = if state == "running" {
        DesiredState::Running
    } else {
        DesiredState::Stopped
    };
    for row in world.select(selector)? {
        if row.desired.state != want {
            return Err(format!(
                "expected {} ({}) desired {state}, found {:?}",
                describe(selector),
                row.id,
                row.desired.state
            )
            .to_lowercase());
        }
    }
    Ok(())
}

fn status(world: &World, service: &str, fields: Option<&[(String, String)]>) -> Result<(), String> {
    let found = world
        .record(RecordKey::ServiceStatus(service))
        .and_then(|f| schema::decode::<ServiceStatus>(f).ok());
    let (Some(fields), Some(status)) = (fields, &found) else {
        return match (fields, found) {
            (None, None) => Ok(()),
            (None, Some(status)) => {
                Err(format!("expected no status of {service}, found {status:?}"))
            }
            _ => Err(format!("expected a status of {service}, found none")),
        };
    };
    for (field, want) in fields {
        let value = match field.as_str() {
            "desired" => status.desired.to_string(),
            "present" => status.present.to_string(),
            "running" => status.running.to_string(),
            "ready" => status.ready.to_string(),
            "deleting" => status.deleting.to_string(),
            other => {
                return Err(format!(
                    "unknown status field `{other}`; expected desired, present, running, ready \
                     or deleting"
                ));
            }
        };
        if &value != want {
            return Err(format!(
                "expected status of {service} {field}={want}, found {status:?}"
            ));
        }
    }
    Ok(())
}

fn endpoints(world: &World, service: &str, count: Option<usize>) -> Result<(), String> {
    let found = world
        .record(RecordKey::Endpoints(service))
        .and_then(|f| schema::decode::<Endpoints>(f).ok());
    match (count, found) {
        (None, None) => Ok(()),
        (Some(n), Some(e)) if e.endpoints.len() == n => Ok(()),
        (want, found) => Err(format!(
            "expected endpoints of {service}: {}, found {}",
            want.map_or("none".to_owned(), |n| format!("{n} addresses")),
            found.map_or("none".to_owned(), |e| format!("{:?}", e.addresses()))
        )),
    }
}

/// A full pass (or one controller) proposes nothing on the current facts.
fn no_changes(world: &World, controller: Option<&str>) -> Result<(), String> {
    let names: Vec<String> = match controller {
        Some(name) => vec![name.to_owned()],
        None => world
            .controller_names()
            .into_iter()
            .map(String::from)
            .collect(),
    };
    let mut proposed = String::new();
    for name in names {
        let plan = world.plan(&name).map_err(|e| e.to_string())?;
        for change in &plan {
            proposed.push_str(&format!("\n  {name}: {}", render::change(change)));
        }
    }
    if proposed.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "expected no changes, but controllers propose:{proposed}"
        ))
    }
}
