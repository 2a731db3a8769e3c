//! The `volumes` of `GET /api/status`: each volume's attachment with the disk its data uses,
//! and persistent data nodes hold that no attachment names.

use std::collections::{BTreeMap, BTreeSet};

use ccattler_core::FactStore;
use ccattler_core::schema::{self, NodeTelemetry, RecordKey, VolumeAttachment};
use serde_json::{Value as Json, json};

use super::error::ApiError;

/// `{attached: [{volume, node, instance, size, persistent, used}], kept: [{volume, node,
/// used}]}`. `used` is in bytes, as the node's agent last measured it (its telemetry), `null`
/// when not measured (a node that is down, or a volume that is not persistent: its data is
/// its instance's). `kept` lists persistent data a live node reports that no attachment puts
/// there: data of a volume no longer declared, or of an attachment that moved on after its
/// node was lost. Nothing deletes such data on its own.
///
/// # Errors
///
/// The store's error.
pub async fn report<S: FactStore>(store: &S) -> Result<Json, ApiError> {
    let mut measured: BTreeMap<String, NodeTelemetry> = BTreeMap::new();
    for fact in store.scan(schema::TELEMETRY).await?.facts {
        if let (Some(RecordKey::Telemetry(node)), Ok(record)) = (
            RecordKey::parse(&fact.key),
            schema::decode::<NodeTelemetry>(&fact),
        ) {
            measured.insert(node.to_owned(), record);
        }
    }
    let mut attached = Vec::new();
    let mut named = BTreeSet::new();
    for fact in store.scan(schema::VOLUME_ATTACHMENTS).await?.facts {
        let Ok(a) = schema::decode::<VolumeAttachment>(&fact) else {
            continue;
        };
        let used = measured
            .get(&a.node)
            .and_then(|t| t.volumes.get(&a.volume))
            .filter(|_| a.persistent)
            .map(|m| m.bytes());
        named.insert((a.node.clone(), a.volume.clone()));
        attached.push(json!({
            "volume": a.volume,
            "node": a.node,
            "instance": a.instance,
            "size": a.size,
            "persistent": a.persistent,
            "used": used,
        }));
    }
    let kept: Vec<Json> = measured
        .iter()
        .flat_map(|(node, t)| {
            t.volumes
                .iter()
                .map(move |(volume, used)| (node, volume, used))
        })
        .filter(|(node, volume, _)| !named.contains(&((*node).clone(), (*volume).clone())))
        .map(|(node, volume, used)| json!({"volume": volume, "node": node, "used": used.bytes()}))
        .collect();
    Ok(json!({ "attached": attached, "kept": kept }))
}
