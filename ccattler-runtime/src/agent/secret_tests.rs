//! Step tests of the agent's secrets on virtual time: a missing secret holds the instance back
//! (reported, never an empty value), and a changed one reaches the running instance.

use std::time::Duration;

use ccattler_core::schema::{self, DesiredState, ObservedState, SecretRef, ServiceSpec};
use ccattler_core::{FactStore, InstanceState, Value};
use futures_util::FutureExt;

use super::machine_tests::{Step, running, service};

fn set_secret(step: &Step, name: &str, value: &str) {
    step.store
        .put(
            &schema::keys::secret(name).expect("key"),
            Value::from(value.to_owned()),
        )
        .now_or_never()
        .expect("ready")
        .expect("put");
}

/// A service reading `db-pass` from a file and `api-token` from its environment.
fn with_secrets() -> ServiceSpec {
    let mut spec = service("app", &[]);
    spec.secrets = vec![
        SecretRef {
            name: "db-pass".into(),
            mount: Some("/run/secrets/db".into()),
        },
        SecretRef {
            name: "api-token".into(),
            mount: None,
        },
    ];
    spec
}

fn file(step: &Step, id: &str, path: &str) -> Option<String> {
    let spec = step.sim.spec(id)?;
    let file = spec.files.into_iter().find(|f| f.path == path)?;
    Some(String::from_utf8_lossy(&file.content).into_owned())
}

fn env(step: &Step, id: &str, name: &str) -> Option<String> {
    step.sim.spec(id)?.env.get(name).cloned()
}

#[test]
fn a_missing_secret_holds_the_instance_back_with_a_reason_then_it_starts_with_the_value() {
    let mut step = Step::new();
    set_secret(&step, "db-pass", "hunter2");
    step.place("a", &with_secrets(), DesiredState::Running);
    step.advance(Duration::from_secs(1));
    assert_eq!(step.state("a"), None, "never started with a value missing");
    let seen = step.observation("a").expect("reported");
    assert_eq!(
        seen.state,
        ObservedState::Pending,
        "pending, so it is not replaced"
    );
    let reason = seen.reason.unwrap_or_default();
    assert!(reason.contains("missing secret api-token"), "{reason}");

    set_secret(&step, "api-token", "t0k3n");
    step.advance_until("started once the secret exists", |s| running(s, "a"));
    assert_eq!(
        file(&step, "a", "/run/secrets/db").as_deref(),
        Some("hunter2")
    );
    assert_eq!(env(&step, "a", "API_TOKEN").as_deref(), Some("t0k3n"));
    assert_eq!(step.observation("a").expect("reported").reason, None);
}

#[test]
fn a_changed_file_secret_is_rewritten_in_the_running_instance_without_a_restart() {
    let mut step = Step::new();
    set_secret(&step, "db-pass", "old");
    set_secret(&step, "api-token", "t");
    step.place("a", &with_secrets(), DesiredState::Running);
    step.advance_until("running", |s| running(s, "a"));

    set_secret(&step, "db-pass", "new");
    step.advance_until("the file holds the new value", |s| {
        file(s, "a", "/run/secrets/db").as_deref() == Some("new")
    });
    assert_eq!(step.count("update_files a"), 1);
    assert_eq!(step.count("ensure_stopped a"), 0, "not restarted");
    assert_eq!(step.observation("a").expect("reported").restarts, 0);
}

#[test]
fn a_changed_env_secret_restarts_the_instance_with_the_new_value_and_it_is_never_reported_stopped()
{
    let mut step = Step::new();
    set_secret(&step, "db-pass", "p");
    set_secret(&step, "api-token", "v1");
    step.place("a", &with_secrets(), DesiredState::Running);
    step.advance_until("running", |s| running(s, "a"));
    let mut reports = step
        .store
        .watch(schema::OBSERVED_INSTANCES, ccattler_core::Revision::ZERO)
        .now_or_never()
        .expect("ready")
        .expect("watch");

    set_secret(&step, "api-token", "v2");
    step.advance_until("restarted with the new value", |s| {
        env(s, "a", "API_TOKEN").as_deref() == Some("v2") && running(s, "a")
    });
    assert_eq!(step.count("ensure_stopped a (secret changed)"), 1);
    assert_eq!(step.state("a"), Some(InstanceState::Running));
    use futures_util::StreamExt;
    while let Some(Some(Ok(event))) = reports.next().now_or_never() {
        let seen: schema::InstanceObservation = schema::decode(&event.fact).expect("decode");
        assert!(
            seen.state.is_active(),
            "a report showed it {:?}: the instance controller would replace it",
            seen.state
        );
    }
}

#[test]
fn a_deleted_secret_leaves_the_running_instance_as_it_is() {
    let mut step = Step::new();
    set_secret(&step, "db-pass", "p");
    set_secret(&step, "api-token", "t");
    step.place("a", &with_secrets(), DesiredState::Running);
    step.advance_until("running", |s| running(s, "a"));
    step.store
        .delete(&schema::keys::secret("api-token").expect("key"))
        .now_or_never()
        .expect("ready")
        .expect("delete");
    step.advance(Duration::from_secs(2));
    assert!(running(&step, "a"), "still running");
    assert_eq!(step.count("ensure_stopped a"), 0);
    assert_eq!(env(&step, "a", "API_TOKEN").as_deref(), Some("t"));
}
