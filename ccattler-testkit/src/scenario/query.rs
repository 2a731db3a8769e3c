//! Instance selectors (`web#0`, `web:running`, ...) and typed readings of a world's facts for them
//! and for expectations.
//!
//! Deliberately independent of the controllers' own reading (`standard::Cluster`): the harness
//! checks the controllers, so it does not reuse their code to look at the result.

use std::collections::BTreeMap;

use ccattler_core::Revision;
use ccattler_core::schema::{
    self, Assignment, DesiredInstance, EffectiveService, InstanceObservation, ObservedState,
    RecordKey,
};

use super::agents::decode_observation;
use super::command::{number, observed_state};
use super::world::World;

/// Which instances a selector names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Selector {
    /// `web-i3`: exactly this id.
    Id(String),
    /// `web#0`: the n-th instance of the service in creation order.
    Nth(String, usize),
    /// `web:running`: instances of the service whose observed state is this (`pending` includes
    /// instances with no observation).
    State(String, ObservedState),
    /// `web@n1`: instances of the service placed on this node.
    OnNode(String, String),
}

/// A desired instance joined with its placement and observation.
#[derive(Clone, Debug)]
pub(crate) struct Row {
    pub id: String,
    pub desired: DesiredInstance,
    pub created: Revision,
    pub node: Option<String>,
    pub observed: Option<InstanceObservation>,
}

impl Row {
    /// The observed state, `None` when nothing was reported.
    pub(crate) fn state(&self) -> Option<ObservedState> {
        self.observed.as_ref().map(|o| o.state)
    }
}

impl World {
    /// Every placement: instance id to (node, assignment).
    pub(crate) fn placements(&self) -> BTreeMap<String, Assignment> {
        self.scan(schema::PLACEMENTS)
            .filter_map(|f| schema::decode::<Assignment>(f).ok())
            .map(|a| (a.instance.clone(), a))
            .collect()
    }

    /// Whether a node holds its lease.
    pub(crate) fn alive(&self, node: &str) -> bool {
        self.record(RecordKey::NodeLease(node)).is_some()
    }

    /// The effective record of a service.
    pub(crate) fn effective(&self, service: &str) -> Option<EffectiveService> {
        self.record(RecordKey::Effective(service))
            .and_then(|f| schema::decode(f).ok())
    }

    /// The instances of a service in creation order (revision, then id with shorter ids first,
    /// so `web-i9` comes before `web-i10`).
    pub(crate) fn rows(&self, service: &str) -> Vec<Row> {
        let placements = self.placements();
        let mut rows: Vec<Row> = self
            .scan(schema::DESIRED_INSTANCES)
            .filter_map(|fact| {
                let desired = schema::decode::<DesiredInstance>(fact).ok()?;
                if desired.service != service {
                    return None;
                }
                let id = RecordKey::parse(&fact.key)?.instance()?.to_owned();
                let node = placements.get(&id).map(|a| a.node.clone());
                let observed = node.as_ref().and_then(|node| {
                    self.record(RecordKey::ObservedInstance {
                        node,
                        instance: &id,
                    })
                    .and_then(decode_observation)
                });
                Some(Row {
                    id,
                    desired,
                    created: fact.create_revision,
                    node,
                    observed,
                })
            })
            .collect();
        rows.sort_by(|a, b| (a.created, a.id.len(), &a.id).cmp(&(b.created, b.id.len(), &b.id)));
        rows
    }

    /// The instances a selector names; an error when it names none.
    pub(crate) fn select(&self, selector: &Selector) -> Result<Vec<Row>, String> {
        let found: Vec<Row> = match selector {
            Selector::Id(id) => {
                let service = self
                    .record(RecordKey::Instance(id))
                    .and_then(|f| schema::decode::<DesiredInstance>(f).ok())
                    .map(|d| d.service)
                    .ok_or_else(|| format!("no instance `{id}`"))?;
                self.rows(&service)
                    .into_iter()
                    .filter(|r| &r.id == id)
                    .collect()
            }
            Selector::Nth(service, n) => self.rows(service).into_iter().skip(*n).take(1).collect(),
            Selector::State(service, state) => self
                .rows(service)
                .into_iter()
                .filter(|r| r.state().unwrap_or_default() == *state)
                .collect(),
            Selector::OnNode(service, node) => self
                .rows(service)
                .into_iter()
                .filter(|r| r.node.as_deref() == Some(node.as_str()))
                .collect(),
        };
        if found.is_empty() {
            return Err(format!(
                "selector {} names no instance; the instances are: {}",
                describe(selector),
                self.describe_instances(selector_service(selector))
            ));
        }
        Ok(found)
    }

    /// `id(desired state, node, observed state)` for each instance of the service, for messages.
    pub(crate) fn describe_instances(&self, service: Option<&str>) -> String {
        let Some(service) = service else {
            return "(unknown service)".to_owned();
        };
        let rows = self.rows(service);
        if rows.is_empty() {
            return format!("none of {service}");
        }
        rows.iter()
            .map(|r| {
                format!(
                    "{}({:?}, {}, {})",
                    r.id,
                    r.desired.state,
                    r.node.as_deref().unwrap_or("unplaced"),
                    r.state()
                        .map_or("unobserved".to_owned(), |s| format!("{s:?}"))
                )
                .to_lowercase()
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

fn selector_service(selector: &Selector) -> Option<&str> {
    match selector {
        Selector::Id(_) => None,
        Selector::Nth(s, _) | Selector::State(s, _) | Selector::OnNode(s, _) => Some(s),
    }
}

/// The selector as written.
pub(crate) fn describe(selector: &Selector) -> String {
    match selector {
        Selector::Id(id) => id.clone(),
        Selector::Nth(s, n) => format!("{s}#{n}"),
        Selector::State(s, state) => format!("{s}:{state:?}").to_lowercase(),
        Selector::OnNode(s, node) => format!("{s}@{node}"),
    }
}

/// `web-i3`, `web#0`, `web:running` or `web@n1`.
pub(crate) fn parse_selector(word: &str) -> Result<Selector, String> {
    if let Some((service, n)) = word.split_once('#') {
        return Ok(Selector::Nth(service.to_owned(), number(n)?));
    }
    if let Some((service, state)) = word.split_once(':') {
        return Ok(Selector::State(service.to_owned(), observed_state(state)?));
    }
    if let Some((service, node)) = word.split_once('@') {
        return Ok(Selector::OnNode(service.to_owned(), node.to_owned()));
    }
    Ok(Selector::Id(word.to_owned()))
}
