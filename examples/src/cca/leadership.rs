//! Leadership changes as an operator reads them: every `cca server` on etcd follows the
//! leader key ([`super::replica::LEADER_KEY`]) and logs each change, this replica's own won or
//! lost lead included. The changes are computed by a pure [`LeaderView`]; [`follow`] is its
//! driver (a read, then a watch, started again after a store error).
//!
//! The log lines are `tracing` events of this module, at info (a replica took the lead) and
//! warn (the lead was lost or is vacant); `cca` shows both by default (see
//! [`super::DEFAULT_LOG_FILTER`]).

use std::fmt;
use std::future::Future;
use std::time::Duration;

use ccattler_core::{EventKind, FactStore, Key, Revision, StoreError};
use futures_util::StreamExt;

/// A change of leadership, seen from replica `me`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaderChange {
    /// This replica took the lead.
    Won {
        /// This replica.
        me: String,
    },
    /// This replica lost the lead; `to` leads now (`None`: nobody yet).
    Lost {
        /// This replica.
        me: String,
        /// The new leader, if any yet.
        to: Option<String>,
    },
    /// Another replica took the lead.
    Other {
        /// The new leader.
        leader: String,
    },
    /// The leader stopped leading (it resigned, or its lease expired) and nobody leads yet.
    Vacant {
        /// The former leader.
        was: String,
    },
}

impl LeaderChange {
    /// Whether an operator should notice it (a lost or vacant lead): logged at warn.
    pub fn is_warning(&self) -> bool {
        matches!(
            self,
            LeaderChange::Lost { .. } | LeaderChange::Vacant { .. }
        )
    }
}

impl fmt::Display for LeaderChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LeaderChange::Won { me } => write!(f, "this replica ({me}) now leads the controllers"),
            LeaderChange::Lost { me, to: Some(to) } => {
                write!(
                    f,
                    "this replica ({me}) lost the lead; replica {to} leads now"
                )
            }
            LeaderChange::Lost { me, to: None } => write!(
                f,
                "this replica ({me}) lost the lead; the controllers wait for an election"
            ),
            LeaderChange::Other { leader } => write!(f, "replica {leader} leads the controllers"),
            LeaderChange::Vacant { was } => write!(
                f,
                "replica {was} stopped leading (resigned, or its lease expired); the \
                 controllers wait for an election"
            ),
        }
    }
}

/// Who leads, as far as replica `me` has seen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderView {
    me: String,
    leader: Option<String>,
}

impl LeaderView {
    /// The view of replica `me`, before it has seen anything.
    pub fn new(me: impl Into<String>) -> Self {
        LeaderView {
            me: me.into(),
            leader: None,
        }
    }

    /// The leader last seen.
    pub fn leader(&self) -> Option<&str> {
        self.leader.as_deref()
    }

    /// The leader key now holds `leader` (`None`: it is absent): the change, if it is one.
    pub fn observe(&mut self, leader: Option<String>) -> Option<LeaderChange> {
        if leader == self.leader {
            return None;
        }
        let was = std::mem::replace(&mut self.leader, leader.clone());
        let me = self.me.clone();
        Some(match (was, leader) {
            (Some(was), to) if was == me => LeaderChange::Lost { me, to },
            (_, Some(now)) if now == me => LeaderChange::Won { me },
            (_, Some(leader)) => LeaderChange::Other { leader },
            (Some(was), None) => LeaderChange::Vacant { was },
            (None, None) => return None,
        })
    }
}

/// Follows `key` in `store` as replica `me` until `shutdown` completes, logging every change.
pub async fn follow<S: FactStore>(
    store: S,
    key: Key,
    me: String,
    shutdown: impl Future<Output = ()>,
) {
    let mut view = LeaderView::new(me);
    tokio::select! {
        () = shutdown => {}
        () = async {
            loop {
                if let Err(err) = follow_once(&store, &key, &mut view).await {
                    tracing::warn!("following the leader key {key}: {err}; again in 1 s");
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        } => {}
    }
}

/// One read of the key, then its watch until it fails.
async fn follow_once<S: FactStore>(
    store: &S,
    key: &Key,
    view: &mut LeaderView,
) -> Result<(), StoreError> {
    let scan = store.scan(key.as_str()).await?;
    let now = scan
        .facts
        .iter()
        .find(|fact| fact.key == *key)
        .map(|fact| String::from_utf8_lossy(&fact.value).into_owned());
    log(view.observe(now));
    let mut watch = store
        .watch(key.as_str(), Revision(scan.revision.get() + 1))
        .await?;
    while let Some(event) = watch.next().await {
        let event = event?;
        if event.key() != key {
            continue;
        }
        let leader = match event.kind {
            EventKind::Put => Some(String::from_utf8_lossy(&event.fact.value).into_owned()),
            EventKind::Delete => None,
        };
        log(view.observe(leader));
    }
    Err(StoreError::unavailable("the watch ended"))
}

fn log(change: Option<LeaderChange>) {
    match change {
        Some(change) if change.is_warning() => tracing::warn!("{change}"),
        Some(change) => tracing::info!("{change}"),
        None => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_are_told_from_this_replica_s_side() {
        let mut view = LeaderView::new("a");
        assert_eq!(view.observe(None), None, "nothing to tell yet");
        assert_eq!(
            view.observe(Some("b".into())),
            Some(LeaderChange::Other { leader: "b".into() })
        );
        assert_eq!(view.observe(Some("b".into())), None, "no change");
        let vacant = view.observe(None).expect("a change");
        assert_eq!(vacant, LeaderChange::Vacant { was: "b".into() });
        assert!(vacant.is_warning());
        let won = view.observe(Some("a".into())).expect("a change");
        assert_eq!(
            won.to_string(),
            "this replica (a) now leads the controllers"
        );
        assert!(!won.is_warning());
        assert_eq!(
            view.observe(Some("c".into())),
            Some(LeaderChange::Lost {
                me: "a".into(),
                to: Some("c".into())
            })
        );
        assert_eq!(view.leader(), Some("c"));
    }
}
