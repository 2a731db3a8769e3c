//! `Nftables` and `FirewallKeeper` against the real `nft`, each test in a network namespace of
//! its own (so the machine's own rules are never touched).
//!
//! Needs root, `ip` and `nft`: without them the tests fail under CI (`CI=true`) and say they
//! were skipped when run by hand.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ccattler_core::FactStore;
use ccattler_core::schema::{self, NetworkReport, NodeRules, PortGuard, keys};
use ccattler_runtime::firewall::{Firewall, FirewallError, FirewallKeeper, Nftables};
use ccattler_store::MemoryStore;

/// A network namespace, deleted on drop, and scripts that run `nft` in it.
struct Namespace {
    name: String,
    dir: tempfile::TempDir,
}

impl Namespace {
    fn new(test: &str) -> Option<Namespace> {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = format!("cca-fw-{}-{n}", std::process::id());
        let made = Command::new("ip")
            .args(["netns", "add", &name])
            .output()
            .is_ok_and(|o| o.status.success());
        let has_nft = Command::new("nft").arg("--version").output().is_ok();
        if !made || !has_nft {
            if made {
                let _ = Command::new("ip").args(["netns", "del", &name]).output();
            }
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "{test} needs root, `ip` and `nft` (scripts/test installs nftables)"
            );
            eprintln!("SKIPPED {test}: needs root, `ip` and `nft`");
            return None;
        }
        Some(Namespace {
            name,
            dir: tempfile::tempdir().expect("tempdir"),
        })
    }

    /// A script named `name` that runs `body` (with `$NS` the namespace).
    ///
    /// Written by a shell, not by this process: a file this process held open for writing
    /// would be inherited by a child that another test's thread forks meanwhile, and running
    /// the script would then fail with "Text file busy" until that child execs.
    fn script(&self, name: &str, body: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        let text = format!("#!/bin/sh\nNS={}\n{body}\n", self.name);
        let written = Command::new("sh")
            .args([
                "-c",
                "printf '%s' \"$2\" > \"$1\" && chmod 755 \"$1\"",
                "sh",
            ])
            .arg(&path)
            .arg(&text)
            .status()
            .expect("sh runs");
        assert!(written.success(), "writing the script {}", path.display());
        path
    }

    /// `nft` in the namespace.
    fn nft(&self) -> PathBuf {
        self.script("nft", "exec ip netns exec $NS nft \"$@\"")
    }

    /// The namespace's whole ruleset.
    fn ruleset(&self) -> String {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.name, "nft", "list", "ruleset"])
            .output()
            .expect("nft runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn run(&self, script: &str) {
        let path = self.dir.path().join("extra.nft");
        std::fs::write(&path, script).expect("write");
        let out = Command::new("ip")
            .args(["netns", "exec", &self.name, "nft", "-f"])
            .arg(&path)
            .output()
            .expect("nft runs");
        assert!(out.status.success(), "{out:?}");
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

fn rules(ports: &[u16], allow: &[&str]) -> NodeRules {
    NodeRules {
        sets: vec![allow.iter().map(|a| (*a).to_owned()).collect()],
        guards: ports
            .iter()
            .map(|&port| PortGuard {
                port,
                instance: format!("db-{port}"),
                service: "db".into(),
                declared: 5432,
                allow: 0,
            })
            .collect(),
    }
}

#[tokio::test]
async fn the_table_is_replaced_and_removed_leaving_other_tables_alone() {
    let Some(ns) = Namespace::new("the_table_is_replaced_and_removed") else {
        return;
    };
    ns.run("table inet someone_else {\n\tchain input {\n\t\ttype filter hook input priority 0; policy accept;\n\t}\n}\n");
    let nft = Nftables::new("n1").program(ns.nft());
    assert_eq!(nft.table(), "ccattler_n1");

    nft.apply(&rules(&[20000], &["10.0.0.2"]))
        .await
        .expect("applied");
    let ruleset = ns.ruleset();
    assert!(ruleset.contains("table inet ccattler_n1"), "{ruleset}");
    assert!(ruleset.contains("20000 . 10.0.0.2"), "{ruleset}");
    assert!(ruleset.contains("table inet someone_else"), "{ruleset}");

    nft.apply(&rules(&[20001, 20002], &["10.0.0.3", "fd00::3"]))
        .await
        .expect("replaced");
    let ruleset = ns.ruleset();
    assert!(!ruleset.contains("10.0.0.2"), "{ruleset}");
    assert!(ruleset.contains("20002 . 10.0.0.3"), "{ruleset}");
    assert!(ruleset.contains("20001 . fd00::3"), "{ruleset}");

    nft.remove().await.expect("removed");
    nft.remove().await.expect("removing twice is fine");
    let ruleset = ns.ruleset();
    assert!(!ruleset.contains("ccattler_n1"), "{ruleset}");
    assert!(ruleset.contains("table inet someone_else"), "{ruleset}");
}

#[tokio::test]
async fn a_refused_rule_set_leaves_the_previous_one_whole() {
    let Some(ns) = Namespace::new("a_refused_rule_set_leaves_the_previous_one_whole") else {
        return;
    };
    let nft = Nftables::new("n1").program(ns.nft());
    nft.apply(&rules(&[20000], &["10.0.0.2"]))
        .await
        .expect("applied");
    let before = ns.ruleset();
    // The same transaction with one line the kernel's parser refuses at its end: nft applies
    // all of it or nothing.
    let broken = ns.script(
        "broken-nft",
        "{ cat; echo 'add rule inet ccattler_n1 input bogus nonsense'; } | ip netns exec $NS nft \"$@\"",
    );
    let err = Nftables::new("n1")
        .program(&broken)
        .apply(&rules(&[20005], &["10.0.0.9"]))
        .await
        .expect_err("refused");
    assert!(matches!(err, FirewallError::Refused { .. }), "{err}");
    assert!(err.to_string().contains("previous rules stay"), "{err}");
    assert_eq!(
        ns.ruleset(),
        before,
        "the refused rule set changed the table"
    );
}

#[tokio::test]
async fn a_missing_nft_says_what_to_install() {
    let err = Nftables::new("n1")
        .program("/nonexistent/nft")
        .apply(&NodeRules::default())
        .await
        .expect_err("no such program");
    assert!(
        matches!(err, FirewallError::Missing { .. }) && err.to_string().contains("nftables"),
        "{err}"
    );
}

#[tokio::test]
async fn the_keeper_applies_reports_and_removes_with_the_store() {
    let Some(ns) = Namespace::new("the_keeper_applies_reports_and_removes") else {
        return;
    };
    let store = MemoryStore::new();
    let keeper = FirewallKeeper::new(store.clone(), "n1", Nftables::new("n1").program(ns.nft()))
        .expect("a keeper");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let keeping = tokio::spawn(keeper.run(async {
        let _ = stopped.await;
    }));
    let report = async || -> Option<NetworkReport> {
        let fact = store
            .get(&keys::network_report("n1").unwrap())
            .await
            .ok()??;
        schema::decode(&fact).ok()
    };
    let until = async |what: &str, check: &dyn Fn(&NetworkReport) -> bool| {
        for _ in 0..200 {
            if report().await.is_some_and(|r| check(&r)) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("{what}: not within 5 s (report: {:?})", report().await);
    };

    // No rules: nothing applied, and the report says so.
    until("an empty report", &|r| r.revision == 0 && r.error.is_none()).await;
    // A neighbour's rules (n10 shares the prefix) are not this node's.
    store
        .put(
            &keys::node_rules("n10").unwrap(),
            schema::encode(&rules(&[20009], &["10.0.0.9"])),
        )
        .await
        .unwrap();
    let revision = store
        .put(
            &keys::node_rules("n1").unwrap(),
            schema::encode(&rules(&[20000], &["10.0.0.2"])),
        )
        .await
        .unwrap();
    until("the rules applied", &|r| {
        r.revision == revision.0 && r.guarded == 1
    })
    .await;
    let ruleset = ns.ruleset();
    assert!(ruleset.contains("20000 . 10.0.0.2"), "{ruleset}");
    assert!(!ruleset.contains("20009"), "{ruleset}");

    // A rule set that does not decode: reported, the previous one kept.
    store
        .put(
            &keys::node_rules("n1").unwrap(),
            b"{not json".to_vec().into(),
        )
        .await
        .unwrap();
    until("the bad rule set reported", &|r| {
        r.revision == revision.0 && r.error.is_some()
    })
    .await;
    assert!(ns.ruleset().contains("20000 . 10.0.0.2"));

    // The rules gone from the store: the table goes.
    store
        .delete(&keys::node_rules("n1").unwrap())
        .await
        .unwrap();
    until("the table removed", &|r| {
        r.revision == 0 && r.error.is_none()
    })
    .await;
    assert!(!ns.ruleset().contains("ccattler_n1"));

    // Stopping the keeper leaves a table in place.
    let revision = store
        .put(
            &keys::node_rules("n1").unwrap(),
            schema::encode(&rules(&[20003], &["10.0.0.4"])),
        )
        .await
        .unwrap();
    until("the new rules applied", &|r| r.revision == revision.0).await;
    let _ = stop.send(());
    keeping.await.expect("the keeper stops");
    assert!(ns.ruleset().contains("20003 . 10.0.0.4"));
}
