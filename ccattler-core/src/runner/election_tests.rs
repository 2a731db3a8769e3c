//! Deterministic tests of [`ElectionLoop`], stepped on virtual time. A small model of a store's
//! leader key and leases stands in for the store where two replicas meet.

use std::collections::BTreeMap;
use std::time::Duration;

use super::*;
use crate::{
    CmpOp, Compare, CompareTarget, EventKind, Fact, Key, Lease, LeaseId, Revision, StoreError,
    WatchEvent,
};

const TTL: Duration = Duration::from_secs(3);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn key() -> Key {
    Key::new("app/leader").unwrap()
}

fn machine(identity: &str) -> ElectionLoop {
    ElectionLoop::new(LeaseElectionConfig::new(key(), identity).ttl(TTL))
}

fn lease(id: i64) -> Lease {
    Lease {
        id: LeaseId(id),
        ttl: TTL,
    }
}

fn won(id: i64, revision: u64) -> Result<CampaignAnswer, StoreError> {
    Ok(CampaignAnswer::Won {
        lease: lease(id),
        revision: Revision(revision),
    })
}

fn leader_fact(value: &str, create: u64) -> Fact {
    Fact::created(key(), value.to_owned().into(), Revision(create))
}

fn event(kind: EventKind, create: u64, revision: u64) -> WatchEvent {
    let mut fact = leader_fact("other", create);
    fact.mod_revision = Revision(revision);
    WatchEvent {
        kind,
        fact,
        prev: None,
    }
}

/// Every action the machine has at `now`.
fn drain(m: &mut ElectionLoop, now: Duration) -> Vec<ElectionAction> {
    m.tick(now);
    std::iter::from_fn(|| m.next_action()).collect()
}

fn expect_campaign(m: &mut ElectionLoop, now: Duration) {
    let actions = drain(m, now);
    assert!(
        matches!(actions.as_slice(), [ElectionAction::Campaign { key: k, identity, ttl }]
            if *k == key() && identity == "a" && *ttl == TTL),
        "{actions:?}"
    );
}

/// A machine that campaigned at 0 and won term 5 under lease 1 at 2 ms.
fn leader() -> ElectionLoop {
    let mut m = machine("a");
    expect_campaign(&mut m, Duration::ZERO);
    m.tick(ms(2));
    m.campaigned(won(1, 5));
    let actions = drain(&mut m, ms(2));
    match actions.as_slice() {
        [
            ElectionAction::Won { term, lease, fence },
            ElectionAction::Watch { key: k, from },
        ] => {
            assert_eq!((*term, *lease), (Revision(5), LeaseId(1)));
            let expected = Compare::new(
                key(),
                CmpOp::Equal,
                CompareTarget::CreateRevision(Revision(5)),
            );
            assert_eq!(*fence, expected);
            assert_eq!((k, *from), (&key(), Revision(6)));
        }
        other => panic!("expected won and watch, got {other:?}"),
    }
    m
}

fn is_lost(actions: &[ElectionAction], resigns: bool) -> bool {
    match actions {
        [
            ElectionAction::Lost { term, .. },
            ElectionAction::Resign { lease },
            rest @ ..,
        ] => resigns && *term == Revision(5) && *lease == LeaseId(1) && campaigns(rest),
        [ElectionAction::Lost { term, .. }, rest @ ..] => {
            !resigns && *term == Revision(5) && campaigns(rest)
        }
        _ => false,
    }
}

fn campaigns(actions: &[ElectionAction]) -> bool {
    matches!(actions, [ElectionAction::Campaign { .. }])
}

#[test]
fn the_only_candidate_wins_and_holds_the_fence() {
    let m = leader();
    assert_eq!(m.term(), Some(Revision(5)));
    assert_eq!(m.lease(), Some(LeaseId(1)));
    assert_eq!(m.lease_deadline(), Some(TTL), "campaign sent at 0, TTL 3 s");
    assert_eq!(m.deadline(), Some(ms(2) + TTL / 3), "the first renewal");
}

#[test]
fn a_candidate_that_loses_follows_until_the_key_is_deleted() {
    let mut m = machine("a");
    expect_campaign(&mut m, Duration::ZERO);
    m.campaigned(Ok(CampaignAnswer::Taken {
        revision: Revision(7),
    }));
    let actions = drain(&mut m, ms(3));
    assert!(
        matches!(actions.as_slice(), [ElectionAction::Watch { from, .. }] if *from == Revision(8)),
        "{actions:?}"
    );
    assert_eq!(m.term(), None);
    m.event(event(EventKind::Put, 9, 9)); // a new leader's term: keep waiting
    m.event(event(EventKind::Delete, 7, 6)); // older than what the campaign saw
    assert!(drain(&mut m, ms(500)).is_empty());
    m.event(event(EventKind::Delete, 9, 12));
    expect_campaign(&mut m, ms(501));
}

#[test]
fn a_follower_campaigns_again_after_one_ttl_or_a_failed_watch() {
    let mut m = machine("a");
    expect_campaign(&mut m, Duration::ZERO);
    m.campaigned(Ok(CampaignAnswer::Taken {
        revision: Revision(7),
    }));
    drain(&mut m, Duration::ZERO);
    assert_eq!(m.deadline(), Some(TTL));
    assert!(drain(&mut m, TTL - ms(1)).is_empty());
    expect_campaign(&mut m, TTL);

    m.campaigned(Ok(CampaignAnswer::Taken {
        revision: Revision(8),
    }));
    drain(&mut m, TTL);
    m.watch_failed(StoreError::unavailable("connection lost"));
    let actions = drain(&mut m, TTL);
    assert!(
        matches!(actions.as_slice(),
            [ElectionAction::Failed { retry_in, .. }] if *retry_in == ms(500)),
        "{actions:?}"
    );
    assert!(drain(&mut m, TTL + ms(499)).is_empty());
    expect_campaign(&mut m, TTL + ms(500));
}

#[test]
fn the_leader_renews_every_third_of_the_ttl() {
    let mut m = leader();
    assert!(drain(&mut m, ms(1_001)).is_empty());
    let actions = drain(&mut m, ms(1_002));
    assert!(
        matches!(actions.as_slice(), [ElectionAction::Renew { lease }] if *lease == LeaseId(1)),
        "{actions:?}"
    );
    m.tick(ms(1_010));
    m.renewed(Ok(TTL));
    assert_eq!(
        m.lease_deadline(),
        Some(ms(1_002) + TTL),
        "from when it was sent"
    );
    assert!(drain(&mut m, ms(2_009)).is_empty());
    assert!(matches!(
        drain(&mut m, ms(2_010)).as_slice(),
        [ElectionAction::Renew { .. }]
    ));
    assert_eq!(m.term(), Some(Revision(5)));
}

#[test]
fn a_lease_found_gone_steps_down_at_once() {
    let mut m = leader();
    drain(&mut m, ms(1_002));
    m.renewed(Err(StoreError::LeaseNotFound(LeaseId(1))));
    let actions = drain(&mut m, ms(1_005));
    assert!(is_lost(&actions, false), "{actions:?}");
    assert_eq!(m.term(), None);
}

#[test]
fn retryable_renewal_errors_keep_leading_until_the_lease_could_have_expired() {
    let mut m = leader();
    let mut now = ms(1_002);
    drain(&mut m, now);
    // Renewals fail from then on: retried every 500 ms, leading until 0 + TTL.
    while now < TTL {
        m.tick(now + ms(5));
        m.renewed(Err(StoreError::unavailable("unreachable")));
        let actions = drain(&mut m, now + ms(5));
        assert!(
            matches!(actions.as_slice(), [ElectionAction::Failed { .. }]),
            "{actions:?}"
        );
        assert_eq!(m.term(), Some(Revision(5)), "still leading at {now:?}");
        now += ms(505);
        if now < TTL {
            assert!(matches!(
                drain(&mut m, now).as_slice(),
                [ElectionAction::Renew { .. }]
            ));
        }
    }
    assert!(drain(&mut m, TTL - ms(1)).is_empty());
    let actions = drain(&mut m, TTL);
    assert!(is_lost(&actions, true), "{actions:?}");
}

#[test]
fn a_renewal_in_flight_at_the_deadline_does_not_save_the_term() {
    let mut m = leader();
    drain(&mut m, ms(1_002));
    m.renewed(Err(StoreError::unavailable("slow")));
    drain(&mut m, ms(1_002));
    assert!(matches!(
        drain(&mut m, ms(2_900)).as_slice(),
        [ElectionAction::Renew { .. }]
    ));
    let actions = drain(&mut m, TTL);
    assert!(is_lost(&actions, true), "{actions:?}");
    m.renewed(Ok(TTL)); // too late: ignored
    assert_eq!(m.term(), None);
}

#[test]
fn a_deleted_or_recreated_key_ends_the_term() {
    let mut m = leader();
    m.event(event(EventKind::Put, 5, 5)); // its own creation, replayed: nothing
    m.event(event(EventKind::Put, 5, 6)); // the same term
    assert!(drain(&mut m, ms(10)).is_empty());
    m.event(event(EventKind::Put, 8, 8));
    let actions = drain(&mut m, ms(11));
    assert!(is_lost(&actions, true), "{actions:?}");

    let mut m = leader();
    m.event(event(EventKind::Delete, 5, 9));
    let actions = drain(&mut m, ms(11));
    assert!(is_lost(&actions, true), "{actions:?}");
}

#[test]
fn a_leader_whose_watch_fails_reads_its_key_and_watches_again() {
    let mut m = leader();
    m.watch_failed(StoreError::unavailable("connection lost"));
    let actions = drain(&mut m, ms(10));
    assert!(
        matches!(actions.as_slice(), [ElectionAction::Check { key: k }] if *k == key()),
        "{actions:?}"
    );
    m.checked(Err(StoreError::unavailable("still down")));
    assert!(matches!(
        drain(&mut m, ms(10)).as_slice(),
        [ElectionAction::Failed { .. }]
    ));
    assert!(matches!(
        drain(&mut m, ms(510)).as_slice(),
        [ElectionAction::Check { .. }]
    ));
    m.checked(Ok((Revision(20), Some(leader_fact("a", 5)))));
    let actions = drain(&mut m, ms(511));
    assert!(
        matches!(actions.as_slice(), [ElectionAction::Watch { from, .. }] if *from == Revision(21)),
        "{actions:?}"
    );

    m.watch_failed(StoreError::unavailable("again"));
    drain(&mut m, ms(600));
    m.checked(Ok((Revision(30), Some(leader_fact("b", 25)))));
    assert!(is_lost(&drain(&mut m, ms(601)), true));
}

#[test]
fn store_errors_retry_the_campaign_and_fatal_ones_stop() {
    let mut m = machine("a");
    expect_campaign(&mut m, Duration::ZERO);
    m.tick(ms(4));
    m.campaigned(Err(StoreError::unavailable("unreachable")));
    let actions = drain(&mut m, ms(4));
    assert!(
        matches!(actions.as_slice(),
            [ElectionAction::Failed { retry_in, .. }] if *retry_in == ms(500)),
        "{actions:?}"
    );
    assert_eq!(m.deadline(), Some(ms(504)));
    assert!(drain(&mut m, ms(503)).is_empty());
    expect_campaign(&mut m, ms(504));

    m.campaigned(Err(StoreError::InvalidTtl(TTL)));
    let actions = drain(&mut m, ms(505));
    assert!(
        matches!(
            actions.as_slice(),
            [ElectionAction::Fatal {
                error: StoreError::InvalidTtl(_)
            }]
        ),
        "{actions:?}"
    );
    assert!(m.is_stopped());
    assert!(drain(&mut m, TTL * 10).is_empty());
}

#[test]
fn a_win_answered_after_the_lease_could_have_expired_is_given_up() {
    let mut m = machine("a");
    expect_campaign(&mut m, Duration::ZERO);
    m.tick(TTL + ms(1)); // the answer comes back late (a pause, a slow network)
    m.campaigned(won(1, 5));
    let actions = drain(&mut m, TTL + ms(1));
    assert!(
        matches!(actions.as_slice(),
            [ElectionAction::Resign { lease }, ElectionAction::Campaign { .. }]
                if *lease == LeaseId(1)),
        "{actions:?}"
    );
    assert_eq!(m.term(), None);
}

#[test]
fn resigning_revokes_the_lease_and_any_lease_won_later() {
    let mut m = leader();
    m.resign();
    let actions = drain(&mut m, ms(10));
    assert!(
        matches!(actions.as_slice(), [ElectionAction::Resign { lease }] if *lease == LeaseId(1)),
        "{actions:?}"
    );
    assert!(m.is_stopped() && m.term().is_none());

    let mut m = machine("a");
    expect_campaign(&mut m, Duration::ZERO);
    m.resign();
    m.campaigned(won(2, 9));
    let actions = drain(&mut m, ms(10));
    assert!(
        matches!(actions.as_slice(), [ElectionAction::Resign { lease }] if *lease == LeaseId(2)),
        "{actions:?}"
    );
}

/// A model of the store's side: the leader key and leases expiring on virtual time.
#[derive(Default)]
struct Model {
    revision: u64,
    leases_granted: i64,
    key: Option<(Fact, LeaseId)>,
    leases: BTreeMap<LeaseId, Duration>,
}

impl Model {
    fn expire(&mut self, now: Duration) {
        self.leases.retain(|_, expires| *expires > now);
        if let Some((_, lease)) = &self.key
            && !self.leases.contains_key(lease)
        {
            self.revision += 1;
            self.key = None;
        }
    }

    fn campaign(&mut self, identity: &str, now: Duration) -> Result<CampaignAnswer, StoreError> {
        self.expire(now);
        self.leases_granted += 1;
        let id = LeaseId(self.leases_granted);
        if self.key.is_some() {
            return Ok(CampaignAnswer::Taken {
                revision: Revision(self.revision),
            });
        }
        self.leases.insert(id, now + TTL);
        self.revision += 1;
        let fact = leader_fact(identity, self.revision);
        self.key = Some((fact, id));
        Ok(CampaignAnswer::Won {
            lease: Lease { id, ttl: TTL },
            revision: Revision(self.revision),
        })
    }

    fn holds(&self, fence: &Compare) -> bool {
        let stored = self
            .key
            .as_ref()
            .map_or(Revision::ZERO, |(f, _)| f.create_revision);
        match &fence.target {
            CompareTarget::CreateRevision(given) => fence.op.holds(&stored, given),
            other => panic!("not a fence: {other:?}"),
        }
    }
}

#[test]
fn a_leader_paused_past_its_ttl_wakes_deposed_and_its_fence_no_longer_holds() {
    let mut store = Model::default();
    let mut a = machine("a");
    expect_campaign(&mut a, Duration::ZERO);
    a.campaigned(store.campaign("a", Duration::ZERO));
    drain(&mut a, ms(1));
    let old_fence = a.fence().expect("a leads");
    assert!(store.holds(&old_fence));

    // b loses while a leads, then a pauses: no tick, no renewal, for twice the TTL.
    let mut b = machine("b");
    b.tick(ms(10));
    assert!(matches!(
        b.next_action(),
        Some(ElectionAction::Campaign { .. })
    ));
    b.campaigned(store.campaign("b", ms(10)));
    assert!(b.term().is_none());
    let mut now = ms(10);
    while b.term().is_none() {
        now = b.deadline().expect("a follower has a deadline");
        for action in drain(&mut b, now) {
            if let ElectionAction::Campaign { .. } = action {
                b.campaigned(store.campaign("b", now));
            }
        }
    }
    assert!(now <= TTL * 2, "b leads once a's lease expired: {now:?}");
    let new_fence = b.fence().expect("b leads");
    assert!(store.holds(&new_fence));
    assert!(!store.holds(&old_fence), "the old term's fence fails");

    // a wakes up: it steps down at its first tick, whatever is in flight.
    let actions = drain(&mut a, TTL * 2);
    assert!(
        matches!(actions.first(), Some(ElectionAction::Lost { term, .. })
            if CompareTarget::CreateRevision(*term) == old_fence.target),
        "{actions:?}"
    );
    assert_eq!(a.term(), None);
}
