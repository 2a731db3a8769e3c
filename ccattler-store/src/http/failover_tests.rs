use ccattler_core::{EventKind, Fact};

use super::*;

fn event(key: &str, revision: u64) -> WatchEvent {
    WatchEvent {
        kind: EventKind::Put,
        fact: Fact {
            key: Key::new(key).expect("a valid key"),
            value: "v".into(),
            create_revision: Revision(revision),
            mod_revision: Revision(revision),
            version: 1,
            lease: None,
        },
        prev: None,
    }
}

#[test]
fn only_unreached_attempts_of_one_shot_operations_go_elsewhere() {
    for fault in [Fault::Unreached, Fault::Interrupted, Fault::Unavailable] {
        assert!(try_next(fault, Repeat::Safe), "{fault:?}");
    }
    assert!(!try_next(Fault::Final, Repeat::Safe));
    assert!(try_next(Fault::Unreached, Repeat::Once));
    assert!(!try_next(Fault::Interrupted, Repeat::Once));
    assert!(!try_next(Fault::Unavailable, Repeat::Once));
    assert!(!try_next(Fault::Final, Repeat::Once));
}

#[test]
fn the_preference_moves_on_from_a_failure_and_sticks_to_an_answer() {
    let mut ring = Ring::new(3);
    assert_eq!(ring.order(), [0, 1, 2]);
    ring.failed(0);
    assert_eq!(ring.order(), [1, 2, 0]);
    // A late failure of an endpoint already left behind changes nothing.
    ring.failed(0);
    assert_eq!(ring.preferred(), 1);
    ring.failed(1);
    assert!(ring.answered(0));
    assert!(!ring.answered(0));
    assert_eq!(ring.order(), [0, 1, 2]);
    ring.failed(0);
    ring.failed(1);
    ring.failed(2);
    assert_eq!(ring.preferred(), 0, "wraps around");
    assert_eq!(Ring::new(0).order(), [0], "never empty");
}

#[test]
fn a_resumed_watch_skips_what_it_delivered_and_nothing_else() {
    let mut resume = Resume::new(Revision(5));
    assert_eq!(resume.from(), Revision(5));
    assert!(resume.admit(&event("a", 5)));
    assert!(resume.admit(&event("b", 7)));
    // The connection broke inside revision 7, after `b`: resume from 7.
    assert_eq!(resume.from(), Revision(7));
    assert!(!resume.admit(&event("b", 7)), "b at 7 was delivered");
    assert!(resume.admit(&event("c", 7)), "c at 7 was not");
    assert!(!resume.admit(&event("a", 5)), "older than the last");
    assert!(resume.admit(&event("a", 8)));
    assert_eq!(resume.from(), Revision(8));
}

#[tokio::test]
async fn endpoints_resolve_names_and_keep_literals() {
    let given = [
        "http://127.0.0.1:7420/".to_owned(),
        "http://127.0.0.1:7420".to_owned(),
        "http://[::1]:7421".to_owned(),
        "not a url".to_owned(),
    ];
    assert_eq!(
        resolve_endpoints(&given).await,
        ["http://127.0.0.1:7420", "http://[::1]:7421", "not a url"]
    );
    // `localhost` resolves to one or two loopback addresses; each becomes an endpoint.
    let local = resolve_endpoints(&["http://localhost:7420".to_owned()]).await;
    assert!(!local.is_empty());
    assert!(
        local.iter().all(|e| e == "http://localhost:7420"
            || e == "http://127.0.0.1:7420"
            || e == "http://[::1]:7420"),
        "{local:?}"
    );
}
