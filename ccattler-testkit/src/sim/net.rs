//! Watches in the simulation: store watch streams polled only when the store wakes them, so a
//! write costs the watchers it concerns, not every watcher of the cluster.

use std::collections::BTreeSet;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use ccattler_core::{StoreError, WatchEvent};
use ccattler_store::MemoryWatch;
use futures_util::Stream;

/// Marks its subscription ready when the store has something for it.
struct Ready {
    id: usize,
    set: Arc<Mutex<BTreeSet<usize>>>,
}

impl Wake for Ready {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if let Ok(mut set) = self.set.lock() {
            set.insert(self.id);
        }
    }
}

/// One open watch of one actor.
struct Sub {
    actor: usize,
    /// The actor's watch generation it belongs to: events of an older one are dropped.
    generation: u64,
    stream: MemoryWatch,
    waker: Waker,
    /// When its last event is delivered: later events are never delivered before it.
    last_delivery: Duration,
}

/// What a subscription yielded.
pub(crate) struct Item {
    pub actor: usize,
    pub generation: u64,
    pub sub: usize,
    pub item: Option<Result<WatchEvent, StoreError>>,
}

/// Every open watch of the simulation.
pub(crate) struct Subs {
    subs: Vec<Option<Sub>>,
    ready: Arc<Mutex<BTreeSet<usize>>>,
}

impl Subs {
    pub(crate) fn new() -> Self {
        Subs {
            subs: Vec::new(),
            ready: Arc::new(Mutex::new(BTreeSet::new())),
        }
    }

    /// Opens a subscription; it is polled at the next [`poll_ready`](Self::poll_ready).
    pub(crate) fn open(&mut self, actor: usize, generation: u64, stream: MemoryWatch) -> usize {
        let id = self
            .subs
            .iter()
            .position(Option::is_none)
            .unwrap_or(self.subs.len());
        let waker = Waker::from(Arc::new(Ready {
            id,
            set: Arc::clone(&self.ready),
        }));
        let sub = Sub {
            actor,
            generation,
            stream,
            waker,
            last_delivery: Duration::ZERO,
        };
        if id == self.subs.len() {
            self.subs.push(Some(sub));
        } else {
            self.subs[id] = Some(sub);
        }
        if let Ok(mut set) = self.ready.lock() {
            set.insert(id);
        }
        id
    }

    /// Closes every subscription of `actor`.
    pub(crate) fn close_actor(&mut self, actor: usize) {
        for slot in &mut self.subs {
            if slot.as_ref().is_some_and(|s| s.actor == actor) {
                *slot = None;
            }
        }
    }

    /// Closes one subscription.
    pub(crate) fn close(&mut self, sub: usize) {
        if let Some(slot) = self.subs.get_mut(sub) {
            *slot = None;
        }
    }

    /// The delivery time of an event of `sub` sent at `at`: no earlier than the one before it.
    pub(crate) fn delivery_time(&mut self, sub: usize, at: Duration) -> Duration {
        match self.subs.get_mut(sub).and_then(Option::as_mut) {
            Some(s) => {
                s.last_delivery = s.last_delivery.max(at);
                s.last_delivery
            }
            None => at,
        }
    }

    /// Everything the woken subscriptions have, in subscription order. A subscription that ended
    /// (`None` or an error) is closed.
    pub(crate) fn poll_ready(&mut self) -> Vec<Item> {
        let mut items = Vec::new();
        loop {
            let ready: Vec<usize> = match self.ready.lock() {
                Ok(mut set) => std::mem::take(&mut *set).into_iter().collect(),
                Err(_) => return items,
            };
            if ready.is_empty() {
                return items;
            }
            for id in ready {
                let Some(sub) = self.subs.get_mut(id).and_then(Option::as_mut) else {
                    continue;
                };
                let mut cx = Context::from_waker(&sub.waker);
                loop {
                    match Pin::new(&mut sub.stream).poll_next(&mut cx) {
                        Poll::Ready(Some(Ok(event))) => items.push(Item {
                            actor: sub.actor,
                            generation: sub.generation,
                            sub: id,
                            item: Some(Ok(event)),
                        }),
                        Poll::Ready(end) => {
                            items.push(Item {
                                actor: sub.actor,
                                generation: sub.generation,
                                sub: id,
                                item: end,
                            });
                            self.subs[id] = None;
                            break;
                        }
                        Poll::Pending => break,
                    }
                }
            }
        }
    }
}
