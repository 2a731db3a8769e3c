//! [`EtcdWatch`]: etcd's watch bridged to a [`Stream`] of [`WatchEvent`]s that resumes where it
//! left off when the connection drops.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use ccattler_core::{EventKind, Revision, StoreError, WatchEvent};
use etcd_client::{Event, EventType, WatchClient, WatchOptions, WatchStream};
use futures_core::Stream;
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;
use tokio::task::JoinHandle;

use super::EtcdStore;
use super::convert::{Prefix, revision};
use super::error::timed;

/// Events buffered between the bridge task and the reader. When the reader falls this far
/// behind, the bridge lets etcd's stream go and opens it again, from the next revision, once the
/// reader has read half of them: etcd replays the rest from its history. Nothing is skipped,
/// writers never wait, and an unread stream never holds the connection it shares with every
/// other request of the store (see [`Flow::Behind`]).
const BUFFER: usize = 1024;

/// Longest pause between two attempts to re-open a dropped watch.
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// Everything needed to (re)open one watch.
#[derive(Clone)]
pub(super) struct WatchSource {
    client: WatchClient,
    prefix: Prefix,
    range: (Vec<u8>, Vec<u8>),
    timeout: Duration,
}

impl EtcdStore {
    pub(super) fn watch_source(&self, prefix: &str) -> WatchSource {
        WatchSource {
            client: self.shared.watch.clone(),
            prefix: self.prefix.clone(),
            range: self.prefix.range(prefix),
            timeout: self.timeout(),
        }
    }

    /// etcd's compact revision + 1: the earliest revision a watch may start at (1 when etcd never
    /// compacted). Found by asking for a watch from revision 1, which etcd cancels, naming its
    /// compact revision, when history was compacted.
    pub(super) async fn earliest_revision(&self) -> Result<Revision, StoreError> {
        let source = WatchSource {
            range: (vec![0], vec![1]),
            ..self.watch_source("")
        };
        let mut bridge = Bridge {
            source,
            next: Revision(1),
        };
        match bridge.connect().await? {
            Opened::Compacted(earliest) => Ok(earliest),
            Opened::Stream(mut stream) => {
                let wait = tokio::time::timeout(Duration::from_secs(1), stream.message()).await;
                match wait {
                    Ok(Ok(Some(resp))) if resp.compact_revision() > 0 => {
                        Ok(revision(resp.compact_revision()).next())
                    }
                    _ => Ok(Revision(1)),
                }
            }
        }
    }
}

/// The stream [`EtcdStore::watch`](ccattler_core::FactStore::watch) returns.
///
/// # Guarantees
///
/// Events come in revision order, the events of one revision in the order of the operations
/// that wrote them, each with its previous value. When the connection to etcd drops (a member
/// dies, the network fails, the member loses its leader and `require_leader` is set), a task
/// re-opens the watch from the revision after the last one delivered, retrying with backoff,
/// so the reader sees no gap and no duplicate. The stream ends with [`StoreError::Compacted`]
/// only when that revision was compacted meanwhile; the reader then lists again.
///
/// A reader that stops reading costs a bounded buffer (1,024 events) and nothing else: past
/// it, the etcd watch is let go and opened again from where it stopped once the reader has
/// caught up, so that it never holds back the store's other requests and watches, which share
/// its connection to etcd.
///
/// Dropping the stream cancels the watch.
#[derive(Debug)]
pub struct EtcdWatch {
    events: mpsc::Receiver<Result<WatchEvent, StoreError>>,
    task: JoinHandle<()>,
}

impl EtcdWatch {
    /// Opens the watch (so that an unreachable etcd fails here) and starts the bridge task.
    pub(super) async fn open(source: WatchSource, start: Revision) -> Result<Self, StoreError> {
        let mut bridge = Bridge {
            source,
            next: start,
        };
        let opened = bridge.connect().await?;
        let (tx, events) = mpsc::channel(BUFFER);
        let task = tokio::spawn(bridge.run(opened, tx));
        Ok(EtcdWatch { events, task })
    }
}

impl Drop for EtcdWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Stream for EtcdWatch {
    type Item = Result<WatchEvent, StoreError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().events.poll_recv(cx)
    }
}

/// A freshly opened etcd watch.
enum Opened {
    /// Open and created; events follow.
    Stream(Box<WatchStream>),
    /// Refused: the start revision was compacted; the earliest revision is given.
    Compacted(Revision),
}

/// Why forwarding from one etcd watch stream stopped.
enum Flow {
    ReceiverGone,
    Compacted(Revision),
    Dropped(String),
    /// The reader is a whole buffer behind: the stream is let go rather than left unread. All
    /// the store's requests share one HTTP/2 connection, and data received but unread on one
    /// stream keeps its share of the connection's flow-control window (5 MiB for all): a few
    /// unread watches would stall every other request until it timed out. Holds the events of
    /// the revision under way that are still to deliver (when some of it was delivered
    /// already), so that the watch resumes after that revision.
    Behind(Vec<WatchEvent>),
}

/// The bridge task's state: where to resume.
struct Bridge {
    source: WatchSource,
    /// The revision of the next event to deliver (`ZERO` until the first watch is created).
    next: Revision,
}

impl Bridge {
    /// Opens an etcd watch from `next` and waits for etcd to create it.
    ///
    /// The previous value of an event at revision r is read at r - 1, so the etcd watch starts
    /// one revision early: etcd then refuses it exactly when a previous value would be missing.
    /// The extra revision's events are dropped in [`forward`](Self::forward).
    async fn connect(&mut self) -> Result<Opened, StoreError> {
        let (start, end) = &self.source.range;
        let mut options = WatchOptions::new().with_range(end.clone()).with_prev_key();
        if self.next.0 > 0 {
            let from = self.next.0.saturating_sub(1).max(1);
            options = options.with_start_revision(i64::try_from(from).unwrap_or(i64::MAX));
        }
        let t = self.source.timeout;
        let mut client = self.source.client.clone();
        let mut stream = timed(t, "watch", client.watch(start.clone(), Some(options))).await?;
        let created = timed(t, "watch", stream.message()).await?;
        let Some(created) = created else {
            return Err(StoreError::unavailable(
                "etcd closed the watch before creating it",
            ));
        };
        if created.compact_revision() > 0 {
            return Ok(Opened::Compacted(
                revision(created.compact_revision()).next(),
            ));
        }
        if created.canceled() {
            return Err(StoreError::unavailable(format!(
                "etcd refused the watch: {}",
                created.cancel_reason()
            )));
        }
        if self.next == Revision::ZERO {
            let now = created.header().map_or(0, |h| h.revision());
            self.next = revision(now).next();
        }
        Ok(Opened::Stream(Box::new(stream)))
    }

    /// Forwards events until the reader leaves or resuming is impossible; re-opens dropped
    /// watches.
    async fn run(mut self, mut opened: Opened, tx: mpsc::Sender<Result<WatchEvent, StoreError>>) {
        loop {
            let flow = match opened {
                Opened::Compacted(earliest) => Flow::Compacted(earliest),
                Opened::Stream(mut stream) => self.forward(&mut stream, &tx).await,
            };
            match flow {
                Flow::ReceiverGone => return,
                Flow::Compacted(earliest) => {
                    let requested = self.next;
                    let _ = tx
                        .send(Err(StoreError::Compacted {
                            requested,
                            earliest,
                        }))
                        .await;
                    return;
                }
                Flow::Dropped(reason) => {
                    tracing::warn!(%reason, next = %self.next, "etcd watch dropped; resuming");
                }
                Flow::Behind(held) => {
                    for event in held {
                        if tx.send(Ok(event)).await.is_err() {
                            return;
                        }
                    }
                    // Once there is room for half a buffer, not at the first free slot.
                    match tx.reserve_many(BUFFER / 2).await {
                        Ok(room) => drop(room),
                        Err(_) => return,
                    }
                    tracing::debug!(next = %self.next, "the watch's reader caught up; resuming");
                }
            }
            let mut backoff = Duration::from_millis(50);
            opened = loop {
                if tx.is_closed() {
                    return;
                }
                match self.connect().await {
                    Ok(opened) => break opened,
                    Err(e) => {
                        tracing::debug!(error = %e, "re-opening the etcd watch failed");
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(MAX_BACKOFF);
                    }
                }
            };
        }
    }

    async fn forward(
        &mut self,
        stream: &mut WatchStream,
        tx: &mpsc::Sender<Result<WatchEvent, StoreError>>,
    ) -> Flow {
        // Only events before the revision this connection resumes at are repeats.
        let resume_at = self.next;
        loop {
            let message = tokio::select! {
                message = stream.message() => message,
                () = tx.closed() => return Flow::ReceiverGone,
            };
            let response = match message {
                Ok(Some(response)) => response,
                Ok(None) => return Flow::Dropped("etcd closed the watch stream".into()),
                Err(e) => return Flow::Dropped(e.to_string()),
            };
            if response.compact_revision() > 0 {
                return Flow::Compacted(revision(response.compact_revision()).next());
            }
            if response.canceled() {
                return Flow::Dropped(format!(
                    "etcd canceled the watch: {}",
                    response.cancel_reason()
                ));
            }
            let events = response.events();
            for (at, event) in events.iter().enumerate() {
                let Some(rev) = event.kv().map(|kv| revision(kv.mod_revision())) else {
                    continue;
                };
                if rev < resume_at {
                    continue;
                }
                if let Some(event) = self.source.event(event) {
                    match tx.try_send(Ok(event)) {
                        Ok(()) => {}
                        Err(TrySendError::Closed(_)) => return Flow::ReceiverGone,
                        Err(TrySendError::Full(event)) => {
                            return self.behind(rev, event, &events[at + 1..]);
                        }
                    }
                }
                self.next = self.next.max(rev.next());
            }
        }
    }

    /// The reader is a buffer behind at `event` of revision `rev`, `rest` following it in the
    /// same answer: what is held back (see [`Flow::Behind`]), and where to resume.
    fn behind(
        &mut self,
        rev: Revision,
        event: Result<WatchEvent, StoreError>,
        rest: &[Event],
    ) -> Flow {
        if self.next <= rev {
            // Nothing of this revision delivered: resume at it.
            self.next = rev;
            return Flow::Behind(Vec::new());
        }
        let same_revision = rest
            .iter()
            .take_while(|e| e.kv().is_some_and(|kv| revision(kv.mod_revision()) == rev))
            .filter_map(|e| self.source.event(e));
        Flow::Behind(event.into_iter().chain(same_revision).collect())
    }
}

impl WatchSource {
    /// One etcd event as a [`WatchEvent`]; `None` for a key that is not a valid [`Key`]
    /// (written by another program under our prefix).
    ///
    /// [`Key`]: ccattler_core::Key
    fn event(&self, event: &Event) -> Option<WatchEvent> {
        let fact = self.prefix.fact(event.kv()?)?;
        let kind = match event.event_type() {
            EventType::Put => EventKind::Put,
            EventType::Delete => EventKind::Delete,
        };
        let prev = event.prev_kv().and_then(|kv| self.prefix.fact(kv));
        Some(WatchEvent { kind, fact, prev })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    use ccattler_core::{FactStore, Key};

    use super::super::server::shared_store_or_skip;

    /// Watches whose readers stop reading must not stall the store's other requests: all
    /// share one HTTP/2 connection to etcd, whose flow-control window an unread gRPC stream
    /// holds. Four watches are left unread while more is written than their buffers hold;
    /// then a get must still answer.
    #[tokio::test]
    async fn unread_watches_do_not_stall_other_requests() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let prefix = format!("watch-flow-{nanos}/");
        let Some(store) = shared_store_or_skip("unread_watches_do_not_stall_other_requests", |c| {
            c.prefix(prefix).request_timeout(Duration::from_secs(3))
        })
        .await
        else {
            return;
        };
        let mut unread = Vec::new();
        for _ in 0..4 {
            unread.push(store.watch("flow/", Revision::ZERO).await.expect("watch"));
        }
        // More than a watch's buffer of events, and more than the connection's window of
        // bytes (5 MiB) in all: 1,500 values of 8 KiB, each event carrying its previous value.
        let value = vec![b'x'; 8 << 10];
        for i in 0..1_500 {
            let key = Key::new(format!("flow/k{}", i % 50)).expect("key");
            let mut v = value.clone();
            v[..8].copy_from_slice(&(i as u64).to_be_bytes());
            store
                .put(&key, v.into())
                .await
                .expect("put while watches go unread");
        }
        let asked = Instant::now();
        let got = store.get(&Key::new("flow/k0").expect("key")).await;
        assert!(
            got.is_ok(),
            "a get behind unread watches: {got:?} after {:?}",
            asked.elapsed()
        );
        // The watches still deliver every event, in order, once read.
        let mut first = unread.remove(0);
        let mut seen = 0u64;
        while seen < 1_500 {
            let next = std::future::poll_fn(|cx| Pin::new(&mut first).poll_next(cx));
            let event = tokio::time::timeout(Duration::from_secs(10), next)
                .await
                .expect("the unread watch delivers")
                .expect("not ended")
                .expect("no error");
            let index = u64::from_be_bytes(event.fact.value[..8].try_into().expect("8 bytes"));
            assert_eq!(index, seen, "events in order, none lost, none repeated");
            seen += 1;
        }
    }
}
