//! EtcdStore on a three-member etcd cluster on loopback: one member is killed mid-stream, and
//! reads, writes and watches go on with no event lost and none repeated.
//!
//! The test starts its own cluster (and kills it at the end, also on panic). Without an `etcd`
//! binary it fails when `CI=true` and says it was skipped otherwise.

use std::time::{Duration, Instant};

use ccattler_core::{FactStore, Key, Revision, StoreError};
use ccattler_store::etcd::EtcdStore;
use ccattler_store::etcd::server::{EtcdCluster, skip_or_fail};
use ccattler_testkit::conformance::support::{next_events, open_watch};

const WRITES: usize = 200;
const KILL_AT: usize = 80;

fn key(i: usize) -> Key {
    Key::new(format!("c/{i:04}")).expect("valid key")
}

/// Puts until it lands, retrying what is retryable (the put is idempotent, so a retry of a put
/// that did land writes nothing more).
async fn put_until_done(store: &EtcdStore, i: usize) -> Revision {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match store.put(&key(i), i.to_string().into()).await {
            Ok(revision) => return revision,
            Err(e) if e.is_retryable() && Instant::now() < deadline => {
                eprintln!("write {i}: {e}; retrying");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("write {i} failed for good: {e:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_dies_and_nothing_is_lost() {
    const CHECK: &str = "a_member_dies_and_nothing_is_lost";
    let mut cluster = match EtcdCluster::start(3).await {
        Ok(cluster) => cluster,
        Err(why) => {
            skip_or_fail(CHECK, why);
            return;
        }
    };
    let config = cluster.config().request_timeout(Duration::from_secs(2));
    let store = EtcdStore::connect(config)
        .await
        .expect("connect to the cluster");
    // Several watches, so that some of them most likely run over the member that dies.
    let mut watches = Vec::new();
    for _ in 0..3 {
        watches.push(open_watch(&store, "c/", Revision::ZERO, CHECK).await);
    }

    let mut revisions = Vec::with_capacity(WRITES);
    for i in 0..WRITES {
        if i == KILL_AT {
            // The leader: the harder case (a new election, and watches on the others see the
            // cluster without a leader for a moment).
            let leader = cluster.leader().await.unwrap_or(0);
            cluster.kill(leader);
            eprintln!("{CHECK}: leader m{leader} killed after {i} writes");
        }
        revisions.push(put_until_done(&store, i).await);
    }
    assert!(
        revisions.windows(2).all(|w| w[0] < w[1]),
        "every write landed once"
    );

    // Reads go on.
    let scan = loop {
        match store.scan("c/").await {
            Ok(scan) => break scan,
            Err(StoreError::Unavailable { .. } | StoreError::Timeout(_)) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("scan failed: {e:?}"),
        }
    };
    assert_eq!(scan.facts.len(), WRITES);
    let last = store
        .get(&key(WRITES - 1))
        .await
        .expect("get after the kill");
    assert_eq!(last.map(|f| f.mod_revision), revisions.last().copied());

    // Every watch saw every write, in order, once.
    for (n, watch) in watches.iter_mut().enumerate() {
        let events = next_events(watch, WRITES, CHECK, &format!("watch {n}")).await;
        for (i, event) in events.iter().enumerate() {
            assert_eq!(
                (event.key(), event.revision()),
                (&key(i), revisions[i]),
                "watch {n}, event {i}"
            );
        }
        ccattler_testkit::conformance::support::assert_no_event(watch, CHECK, "no repeats").await;
    }
}
