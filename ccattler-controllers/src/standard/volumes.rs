//! The scheduler controller's volumes: where each volume's data is, which instance holds it,
//! what an instance that mounts volumes needs of a node, and the attachment records that go
//! with placements.
//!
//! # Rules
//!
//! - A volume is attached to one instance at a time. An instance that mounts a volume held by
//!   another instance (one whose desired record or placement is still there) waits, unplaced,
//!   with a reason that names the holder; but a volume that is not persistent is let go of by
//!   an instance on a node that lost its lease (its data goes with that instance anyway).
//! - The attachment (`volume/attachment/{vol}`) is written in the pass that places the instance,
//!   before its placement in the pass's changes: a placement is never committed without the
//!   attachment that names its node. Every change of who holds a volume is a write of that one
//!   key, guarded by the revision the pass read, so two passes cannot both take a volume.
//! - Once its instance is gone (no desired record, no placement), a persistent volume stays
//!   attached to its node with no instance; any other volume's attachment is deleted (its data
//!   goes with its instance). The attachment of a volume no longer declared is deleted once no
//!   instance holds it.
//! - The sizes of the volumes attached to a node count against the storage it reports.
//! - A persistent volume attached to a node with no instance (or one whose desired record
//!   went), whose owner is expected back (an instance of a declared service that mounts it,
//!   within the service's count, that has no desired record now: between a replacement's stop
//!   and its start, for one), holds its owner's cpu and memory on that node while a pass places
//!   others ([`hold_for_absent`](Volumes::hold_for_absent)). Data never moves, so an instance
//!   that could go anywhere must not take the room the volume's owner can only find there.
//! - Each instance of a stateful service has a volume of its own for each volume it mounts,
//!   `{volume}@{ordinal}` ([`volume_claim`]): the rules above hold for each of those.

use std::collections::{BTreeMap, BTreeSet};

use ccattler_core::schema::RecordKey;
use ccattler_core::schema::{
    self, Memory, ServiceSpec, VolumeAttachment, VolumeSpec, claimed_volume, volume_claim,
};
use ccattler_core::{Change, Fact, FactView, Key, ReconcileError};

use super::cluster::{Cluster, Instance};
use super::room::Held;
use crate::scheduler::{LiveIndex, VolumeNeed};

/// The volumes of one view: declarations and attachments, by the names their keys give. Kept
/// by the scheduler's cache and patched with the view's changes, so a pass decodes only the
/// volume records that changed.
#[derive(Debug, Default)]
pub(crate) struct Volumes {
    declared: BTreeMap<String, VolumeSpec>,
    attached: BTreeMap<String, (Key, VolumeAttachment)>,
}

impl Volumes {
    /// Reads `desired/volume/` and `volume/attachment/` of `facts` (see [`apply`](Self::apply)).
    pub(crate) fn read(facts: &FactView) -> Self {
        let mut volumes = Volumes::default();
        let records = facts.scan(schema::DESIRED_VOLUMES);
        for fact in records.chain(facts.scan(schema::VOLUME_ATTACHMENTS)) {
            volumes.apply(&fact.key, Some(fact));
        }
        volumes
    }

    /// Takes in one changed fact (`None`: deleted); keys of other records are ignored. A record
    /// that does not decode is left out: a declaration so, or one whose name is not a valid
    /// volume name, is not declared, and an attachment so is rewritten when an instance mounts
    /// its volume.
    pub(crate) fn apply(&mut self, key: &Key, fact: Option<&Fact>) {
        let text = key.as_str();
        if !text.starts_with(schema::DESIRED_VOLUMES)
            && !text.starts_with(schema::VOLUME_ATTACHMENTS)
        {
            return;
        }
        match RecordKey::parse(key) {
            Some(RecordKey::Volume(name)) => {
                let spec = fact
                    .and_then(|f| schema::decode::<VolumeSpec>(f).ok())
                    .filter(|_| schema::keys::volume(name).is_ok());
                match spec {
                    Some(spec) => self.declared.insert(name.to_owned(), spec),
                    None => self.declared.remove(name),
                };
            }
            Some(RecordKey::VolumeAttachment(name)) => {
                match fact.and_then(|f| schema::decode::<VolumeAttachment>(f).ok()) {
                    Some(attachment) => {
                        self.attached
                            .insert(name.to_owned(), (key.clone(), attachment));
                    }
                    None => {
                        self.attached.remove(name);
                    }
                }
            }
            _ => {}
        }
    }

    /// What the attached volumes reserve of each node's storage.
    pub(super) fn reserved(&self) -> BTreeMap<&str, Memory> {
        let mut used: BTreeMap<&str, Memory> = BTreeMap::new();
        for (_, attachment) in self.attached.values() {
            let sum = used.entry(attachment.node.as_str()).or_default();
            *sum = sum
                .checked_add(attachment.size)
                .unwrap_or(Memory::from_bytes(u64::MAX));
        }
        used
    }

    /// The names of the volumes `instance` of `spec` mounts, in the order of its mounts.
    pub(super) fn names(instance: &Instance, spec: &ServiceSpec) -> Vec<String> {
        spec.volumes
            .iter()
            .map(|mount| volume_claim(&mount.volume, instance.desired.ordinal))
            .collect()
    }

    /// What `instance` of `spec` needs of a node for its volumes (`names`: theirs for it, from
    /// [`names`](Self::names)), or why it must wait. `claimed` holds which request of this pass
    /// mounts each volume (a volume goes to one).
    pub(super) fn needs<'v>(
        &'v self,
        cluster: &Cluster,
        instance: &Instance,
        (spec, names): (&ServiceSpec, &'v [String]),
        claimed: &mut BTreeMap<String, String>,
    ) -> Result<Vec<VolumeNeed<'v>>, String> {
        let id = instance.id.as_str();
        let mut needs: Vec<VolumeNeed<'v>> = Vec::with_capacity(spec.volumes.len());
        for (mount, name) in spec.volumes.iter().zip(names) {
            let name = name.as_str();
            let Some(declared) = self.declared.get(&mount.volume) else {
                return Err(format!(
                    "volume {} is not declared: declare it (`volume {} {{ size ... }}`) or \
                     remove the mount",
                    mount.volume, mount.volume
                ));
            };
            if needs.iter().any(|n| n.name == name) {
                continue; // mounted at two paths: one volume all the same
            }
            if let Some(other) = claimed.get(name).filter(|o| *o != id) {
                return Err(format!(
                    "volume {name} is wanted by instance {other} too: a volume is attached to \
                     one instance at a time"
                ));
            }
            let mut attachment = self.attached.get(name).map(|(_, a)| a);
            if let Some(a) = attachment
                && let Some(holder) = a.instance.as_deref()
                && holder != id
                && holds(cluster, holder, a)
            {
                return Err(format!(
                    "volume {name} is attached to instance {holder} on node {}: a volume is \
                     attached to one instance at a time, so this one waits until that one is gone",
                    a.node
                ));
            }
            // What is left of a volume that is not persistent says nothing of where it goes.
            if attachment.is_some_and(|a| !a.persistent && a.instance.as_deref() != Some(id)) {
                attachment = None;
            }
            needs.push(VolumeNeed {
                name,
                size: attachment.map_or(declared.size, |a| a.size),
                node: attachment.map(|a| a.node.as_str()),
            });
        }
        for need in &needs {
            claimed.insert(need.name.to_owned(), id.to_owned());
        }
        Ok(needs)
    }

    /// The attachments `instance` of `spec`, placed on `node`, holds (to put before its
    /// placement), and the declarations its placement carries, each under its name for the
    /// instance.
    pub(super) fn attach(
        &self,
        instance: &Instance,
        node: &str,
        spec: &ServiceSpec,
        changes: &mut Vec<Change>,
    ) -> Result<Vec<VolumeSpec>, ReconcileError> {
        let mut carried: Vec<VolumeSpec> = Vec::with_capacity(spec.volumes.len());
        for mount in &spec.volumes {
            let Some(declared) = self.declared.get(&mount.volume) else {
                continue; // not requested so: the placement was not made
            };
            let name = volume_claim(&mount.volume, instance.desired.ordinal);
            if carried.iter().any(|v| v.name == name) {
                continue;
            }
            let held = self.attached.get(&name).map(|(_, a)| a);
            // What is left of a volume that is not persistent, and not this instance's, is
            // attached anew from its declaration.
            let before = held
                .filter(|a| a.persistent || a.instance.as_deref() == Some(instance.id.as_str()));
            let attachment = VolumeAttachment {
                volume: name.clone(),
                node: node.to_owned(),
                instance: Some(instance.id.clone()),
                size: before.map_or(declared.size, |a| a.size),
                persistent: before.map_or(declared.persistent, |a| a.persistent),
            };
            carried.push(VolumeSpec {
                name: attachment.volume.clone(),
                size: attachment.size,
                persistent: attachment.persistent,
            });
            if held != Some(&attachment) {
                changes.push(Change::put(
                    schema::keys::volume_attachment(&name)?,
                    schema::encode(&attachment),
                ));
            }
        }
        Ok(carried)
    }

    /// Holds, on its node, the cpu and memory of the owner of each persistent volume attached
    /// there that no request of this pass mounts (`claimed`), when that owner is away and
    /// expected back: an instance of a declared service mounting the volume (for a stateful
    /// service, the one of the volume's ordinal, below the service's effective count), none of
    /// whose desired records is there now (the attachment may still name the instance that
    /// went: this pass releases it). Give the room back with
    /// [`room::release`](super::room::release) once the pass has placed its requests.
    pub(super) fn hold_for_absent<'v>(
        &'v self,
        cluster: &Cluster,
        index: &mut LiveIndex,
        claimed: &BTreeMap<String, String>,
    ) -> Held<'v> {
        let mut held = Vec::new();
        for (name, (_, attachment)) in &self.attached {
            // An instance named by the attachment that still has its desired record is there
            // (placed, or a request of this pass): nothing to hold. One without it is gone,
            // though the attachment names it until this pass releases the volume, and the
            // index no longer counts it: its owner's room is held like any other's.
            let holder = attachment.instance.as_deref();
            if !attachment.persistent
                || claimed.contains_key(name)
                || holder.is_some_and(|id| cluster.instances.contains_key(id))
            {
                continue;
            }
            let Some(owner) = absent_owner(cluster, name) else {
                continue;
            };
            let node = attachment.node.as_str();
            if let Some(before) = index.hold(node, &owner.placement, owner.resources) {
                held.push((node, before));
            }
        }
        held
    }

    /// The attachments whose instance is gone, of the volumes this pass did not attach again
    /// (`attached`): kept without an instance for a persistent volume still declared, deleted
    /// otherwise.
    pub(super) fn release(
        &self,
        cluster: &Cluster,
        attached: &BTreeSet<String>,
        changes: &mut Vec<Change>,
    ) {
        for (volume, (key, attachment)) in &self.attached {
            if attached.contains(volume) {
                continue;
            }
            let holder = attachment.instance.as_deref();
            if holder.is_some_and(|h| holds(cluster, h, attachment)) {
                continue;
            }
            let declared = self.declared.contains_key(claimed_volume(volume));
            if attachment.persistent && declared {
                if holder.is_some() {
                    let kept = VolumeAttachment {
                        instance: None,
                        ..attachment.clone()
                    };
                    changes.push(Change::put(key.clone(), schema::encode(&kept)));
                }
            } else {
                changes.push(Change::delete(key.clone()));
            }
        }
    }
}

/// The service whose instance owns the volume `name` (a name of [`volume_claim`]) and is
/// expected back without a desired record now, if any.
fn absent_owner<'c>(cluster: &'c Cluster, name: &str) -> Option<&'c ServiceSpec> {
    let volume = claimed_volume(name);
    let ordinal = match name.split_once('@') {
        Some((_, ordinal)) => Some(ordinal.parse::<u32>().ok()?),
        None => None,
    };
    cluster.services.values().find(|spec| {
        let count = cluster
            .effective
            .get(&spec.name)
            .map_or(spec.instances, |e| e.instances);
        let expected = match ordinal {
            Some(ordinal) => spec.stateful && ordinal < count,
            None => !spec.stateful && count > 0,
        };
        expected
            && spec.volumes.iter().any(|m| m.volume == volume)
            && cluster
                .instances_of(&spec.name)
                .all(|i| i.desired.ordinal != ordinal)
    })
}

/// Whether instance `id` still holds the volume of `attachment`: its desired record or a
/// placement is there. A volume that is not persistent is let go of by an instance on a node
/// that lost its lease: its data is on that node only and goes with the instance, so the
/// replacement starts afresh elsewhere instead of waiting for a node that may never return.
fn holds(cluster: &Cluster, id: &str, attachment: &VolumeAttachment) -> bool {
    let present = cluster.instances.contains_key(id) || cluster.placement(id).is_some();
    present && (attachment.persistent || cluster.alive.contains(&attachment.node))
}
