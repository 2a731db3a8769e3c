//! Executing parsed commands on a [`World`].

use ccattler_core::schema::{
    self, Health, InstanceObservation, NodeStatus, ObservedState, RecordKey, ScaleIntent,
    ServiceSpec,
};
use ccattler_core::{Change, Key, Value};

use super::attrs::{apply_node, apply_service, new_node, new_service};
use super::command::{Command, SnapshotOf};
use super::world::World;
use super::{Snapshot, expect, render};

/// A scenario being executed: its world and the snapshots taken so far.
#[derive(Debug)]
pub(crate) struct Exec {
    pub world: World,
    pub snapshots: Vec<Snapshot>,
}

impl Exec {
    /// Executes commands on `world`.
    pub(super) fn new(world: World) -> Self {
        Exec {
            world,
            snapshots: Vec::new(),
        }
    }

    /// Executes one command; `line` and `source` label snapshots.
    pub(super) fn execute(
        &mut self,
        command: &Command,
        line: usize,
        source: &str,
    ) -> Result<(), String> {
        let world = &mut self.world;
        match command {
            Command::Separator => {}
            Command::Node { name, attrs } => {
                let mut node = world
                    .record(RecordKey::Node(name))
                    .and_then(|f| schema::decode::<NodeStatus>(f).ok())
                    .unwrap_or_else(|| new_node(name));
                for attr in attrs {
                    apply_node(&mut node, attr);
                }
                let node_key = key(schema::keys::node(name))?;
                let lease_key = key(schema::keys::node_lease(name))?;
                world
                    .commit(vec![
                        Change::put(node_key, schema::encode(&node)),
                        Change::put(lease_key, Value::from(name.clone())),
                    ])
                    .map_err(|e| e.to_string())?;
            }
            Command::Liveness { name, alive } => {
                if world.record(RecordKey::Node(name)).is_none() {
                    return Err(format!(
                        "no node `{name}`; declare it with `node {name} cpu=...`"
                    ));
                }
                let lease = key(schema::keys::node_lease(name))?;
                let change = if *alive {
                    Change::put(lease, Value::from(name.clone()))
                } else {
                    Change::delete(lease)
                };
                world.commit(vec![change]).map_err(|e| e.to_string())?;
            }
            Command::Service { name, attrs } => {
                let mut spec = world
                    .record(RecordKey::Service(name))
                    .and_then(|f| schema::decode::<ServiceSpec>(f).ok())
                    .unwrap_or_else(|| new_service(name));
                for attr in attrs {
                    apply_service(&mut spec, attr);
                }
                let change = Change::put(key(schema::keys::service(name))?, schema::encode(&spec));
                world.commit(vec![change]).map_err(|e| e.to_string())?;
            }
            Command::DeleteService { name } => {
                let service = key(schema::keys::service(name))?;
                if world.get(service.as_str()).is_none() {
                    return Err(format!("no service `{name}` to delete"));
                }
                world
                    .commit(vec![Change::delete(service)])
                    .map_err(|e| e.to_string())?;
            }
            Command::FactPut { key, value } => {
                let change = Change::put(key.clone(), value.clone());
                world.commit(vec![change]).map_err(|e| e.to_string())?;
            }
            Command::FactDelete { key } => {
                if world.get(key.as_str()).is_none() {
                    return Err(format!(
                        "no fact {key} to delete; `snapshot facts PREFIX` shows the facts there are"
                    ));
                }
                world
                    .commit(vec![Change::delete(key.clone())])
                    .map_err(|e| e.to_string())?;
            }
            Command::Intent { service, instances } => {
                let intent = ScaleIntent {
                    instances: *instances,
                    ..ScaleIntent::default()
                };
                let change = Change::put(
                    key(schema::keys::scale_intent(service))?,
                    schema::encode(&intent),
                );
                world.commit(vec![change]).map_err(|e| e.to_string())?;
            }
            Command::Observe {
                selector,
                state,
                ready,
                health,
            } => {
                let mut changes = Vec::new();
                for row in world.select(selector)? {
                    let Some(node) = row.node.clone() else {
                        return Err(format!(
                            "instance {} is not placed; only a node's agent observes an instance",
                            row.id
                        ));
                    };
                    let running = *state == ObservedState::Running;
                    let base = row.observed.clone().unwrap_or_else(|| InstanceObservation {
                        node: node.clone(),
                        service: row.desired.service.clone(),
                        ..InstanceObservation::default()
                    });
                    let observation = InstanceObservation {
                        state: *state,
                        address: running.then(|| world.address(&node, &row.id)),
                        ready: ready.unwrap_or(running),
                        health: health.unwrap_or(if running {
                            Health::Healthy
                        } else {
                            Health::Unknown
                        }),
                        exit_code: match state {
                            ObservedState::Exited => Some(0),
                            ObservedState::Failed => Some(1),
                            _ => None,
                        },
                        ..base
                    };
                    world.held.insert(row.id.clone());
                    let key = key(schema::keys::observed_instance(&node, &row.id))?;
                    changes.push(Change::put(key, schema::encode(&observation)));
                }
                world.commit(changes).map_err(|e| e.to_string())?;
            }
            Command::Run => {
                world.run().map_err(|e| e.to_string())?;
            }
            Command::Round(n) => {
                for _ in 0..*n {
                    world.round().map_err(|e| e.to_string())?;
                }
            }
            Command::Step(controller) => {
                world.step(controller).map_err(|e| e.to_string())?;
            }
            Command::Agents => {
                world.agents_pass().map_err(|e| e.to_string())?;
            }
            Command::AgentsSwitch(on) => world.agents_on = *on,
            Command::RestartControllers => world.restart_controllers(),
            Command::Snapshot { what, name } => {
                let (default, text) = match what {
                    SnapshotOf::Plan(controller) => (
                        format!("plan-{controller}"),
                        render::plan(&world.plan(controller).map_err(|e| e.to_string())?),
                    ),
                    SnapshotOf::Facts(prefix) => {
                        ("facts".to_owned(), render::facts(world.scan(prefix)))
                    }
                };
                let index = self.snapshots.len() + 1;
                let name = format!("{index:02}-{}", name.clone().unwrap_or(default));
                self.snapshots.push(Snapshot {
                    name,
                    line,
                    source: source.to_owned(),
                    text,
                });
            }
            Command::Expect(expectation) => expect::check(world, expectation)?,
        }
        Ok(())
    }
}

fn key(result: Result<Key, ccattler_core::KeyError>) -> Result<Key, String> {
    result.map_err(|e| e.to_string())
}
