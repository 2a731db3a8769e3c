//! [`IntentResolver`]: decides how many instances of which spec version are in force.

use ccattler_core::schema::{
    self, EffectiveService, RecordKey, Rollout, RolloutPhase, ScaleIntent, ServiceSpec,
};
use ccattler_core::{Change, Controller, FactView, ReconcileContext, ReconcileError};

/// Writes `effective/service/{svc}` from the desired spec and the autoscaler's intent.
///
/// The count in force is the spec's `instances`, or, when the service has `scale` bounds and the
/// autoscaler left a recommendation, that recommendation; either way clamped to the bounds. The
/// version is the one the rollout controller put in force (`rollout/service/{svc}`), paused
/// when it paused the rollout; without a rollout record (a platform that runs no rollout
/// controller), [`ServiceSpec::version`]. A service that is no longer desired loses its
/// effective record, which tells the instance controller to stop its instances.
#[derive(Debug, Clone, Copy, Default)]
pub struct IntentResolver;

impl IntentResolver {
    /// The effective record of `spec` as `facts` hold its autoscaler intent and rollout.
    pub fn read(facts: &FactView, spec: &ServiceSpec) -> EffectiveService {
        let record = |key: Result<ccattler_core::Key, ccattler_core::KeyError>| {
            key.ok().and_then(|key| facts.get(key.as_str()).cloned())
        };
        let intent = record(schema::keys::scale_intent(&spec.name))
            .and_then(|fact| schema::decode::<ScaleIntent>(&fact).ok());
        let rollout = record(schema::keys::rollout(&spec.name))
            .and_then(|fact| schema::decode::<Rollout>(&fact).ok());
        Self::resolve(spec, intent.as_ref(), rollout.as_ref())
    }

    /// The effective record for a spec, an optional autoscaler intent and an optional rollout.
    pub fn resolve(
        spec: &ServiceSpec,
        intent: Option<&ScaleIntent>,
        rollout: Option<&Rollout>,
    ) -> EffectiveService {
        let instances = match &spec.scale {
            Some(scale) => intent
                .map_or(spec.instances, |i| i.instances)
                .clamp(scale.min, scale.max.max(scale.min)),
            None => spec.instances,
        };
        EffectiveService {
            instances,
            version: rollout.map_or_else(|| spec.version(), |r| r.version.clone()),
            paused: rollout.is_some_and(|r| r.phase == RolloutPhase::Paused),
        }
    }
}

impl Controller for IntentResolver {
    fn name(&self) -> &str {
        "intent-resolver"
    }

    fn watches(&self) -> Vec<String> {
        vec![
            schema::DESIRED_SERVICES.into(),
            schema::AUTOSCALER_INTENTS.into(),
            schema::ROLLOUTS.into(),
        ]
    }

    fn write_domain(&self) -> Vec<String> {
        vec![schema::EFFECTIVE_SERVICES.into()]
    }

    fn reconcile(
        &self,
        facts: &FactView,
        _ctx: &mut ReconcileContext<'_>,
    ) -> Result<Vec<Change>, ReconcileError> {
        let mut changes = Vec::new();
        let mut services = std::collections::BTreeSet::new();
        for fact in facts.scan(schema::DESIRED_SERVICES) {
            let Ok(spec) = schema::decode::<ServiceSpec>(fact) else {
                continue;
            };
            let effective = Self::read(facts, &spec);
            let key = schema::keys::effective(&spec.name)?;
            changes.push(Change::put(key, schema::encode(&effective)));
            services.insert(spec.name);
        }
        for fact in facts.scan(schema::EFFECTIVE_SERVICES) {
            let name = match RecordKey::parse(&fact.key) {
                Some(RecordKey::Effective(name)) => name,
                _ => "",
            };
            if !services.contains(name) {
                changes.push(Change::delete(fact.key.clone()));
            }
        }
        Ok(changes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ccattler_core::schema::HorizontalScale;

    #[test]
    fn clamps_the_autoscaler_to_the_bounds() {
        let mut spec = ServiceSpec {
            name: "web".into(),
            image: "nginx".into(),
            instances: 3,
            ..ServiceSpec::default()
        };
        assert_eq!(IntentResolver::resolve(&spec, None, None).instances, 3);
        assert_eq!(
            IntentResolver::resolve(
                &spec,
                Some(&ScaleIntent {
                    instances: 50,
                    ..ScaleIntent::default()
                }),
                None,
            )
            .instances,
            3,
            "no scale block: the autoscaler has no say"
        );
        spec.scale = Some(HorizontalScale::new(2, 10));
        let resolve = |n| {
            IntentResolver::resolve(
                &spec,
                Some(&ScaleIntent {
                    instances: n,
                    ..ScaleIntent::default()
                }),
                None,
            )
            .instances
        };
        assert_eq!((resolve(50), resolve(0), resolve(7)), (10, 2, 7));
        assert_eq!(IntentResolver::resolve(&spec, None, None).instances, 3);
    }
}
