//! [`IntentResolver`]: decides how many instances of which spec version are in force.

use ccattler_core::schema::{self, EffectiveService, RecordKey, ScaleIntent, ServiceSpec};
use ccattler_core::{Change, Controller, FactView, ReconcileContext, ReconcileError};

/// Writes `effective/service/{svc}` from the desired spec and the autoscaler's intent.
///
/// The count in force is the spec's `instances`, or, when the service has `scale` bounds and the
/// autoscaler left a recommendation, that recommendation; either way clamped to the bounds. The
/// version is [`ServiceSpec::version`]. A service that is no longer desired loses its effective
/// record, which tells the instance controller to stop its instances.
#[derive(Debug, Clone, Copy, Default)]
pub struct IntentResolver;

impl IntentResolver {
    /// The effective record for a spec and an optional autoscaler intent.
    pub fn resolve(spec: &ServiceSpec, intent: Option<&ScaleIntent>) -> EffectiveService {
        let instances = match &spec.scale {
            Some(scale) => intent
                .map_or(spec.instances, |i| i.instances)
                .clamp(scale.min, scale.max.max(scale.min)),
            None => spec.instances,
        };
        EffectiveService {
            instances,
            version: spec.version(),
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
            let intent = schema::keys::scale_intent(&spec.name)
                .ok()
                .and_then(|key| facts.get(key.as_str()))
                .and_then(|fact| schema::decode::<ScaleIntent>(fact).ok());
            let effective = Self::resolve(&spec, intent.as_ref());
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
        assert_eq!(IntentResolver::resolve(&spec, None).instances, 3);
        assert_eq!(
            IntentResolver::resolve(
                &spec,
                Some(&ScaleIntent {
                    instances: 50,
                    ..ScaleIntent::default()
                })
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
            )
            .instances
        };
        assert_eq!((resolve(50), resolve(0), resolve(7)), (10, 2, 7));
        assert_eq!(IntentResolver::resolve(&spec, None).instances, 3);
    }
}
