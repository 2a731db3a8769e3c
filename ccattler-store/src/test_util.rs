//! Helpers for the unit tests: a trivial executor and a waker that counts its wakes.

use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use ccattler_core::{Key, StoreError, WatchEvent};
use futures_core::Stream;

/// Runs a future that completes without waiting (every store future does).
pub(crate) fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    match future.as_mut().poll(&mut cx) {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("store future was not ready on first poll"),
    }
}

/// Counts how often it was woken.
#[derive(Default)]
pub(crate) struct CountingWaker(AtomicUsize);

impl CountingWaker {
    pub(crate) fn new() -> Arc<Self> {
        Arc::default()
    }

    pub(crate) fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Polls a stream once with `waker`.
pub(crate) fn poll_with<S>(stream: &mut S, waker: &Waker) -> Poll<Option<S::Item>>
where
    S: Stream + Unpin,
{
    Pin::new(stream).poll_next(&mut Context::from_waker(waker))
}

/// Polls a stream once with a no-op waker.
pub(crate) fn poll_once<S>(stream: &mut S) -> Poll<Option<S::Item>>
where
    S: Stream + Unpin,
{
    poll_with(stream, Waker::noop())
}

/// The next event of a watch, which must be ready.
pub(crate) fn next_event<S>(stream: &mut S) -> WatchEvent
where
    S: Stream<Item = Result<WatchEvent, StoreError>> + Unpin,
{
    match poll_once(stream) {
        Poll::Ready(Some(Ok(event))) => event,
        other => panic!("expected an event, got {other:?}"),
    }
}

/// Every event a watch has ready, until it would wait.
pub(crate) fn drain<S>(stream: &mut S) -> Vec<WatchEvent>
where
    S: Stream<Item = Result<WatchEvent, StoreError>> + Unpin,
{
    let mut events = Vec::new();
    loop {
        match poll_once(stream) {
            Poll::Ready(Some(Ok(event))) => events.push(event),
            Poll::Pending => return events,
            other => panic!("expected an event or pending, got {other:?}"),
        }
    }
}

/// A key from a literal.
pub(crate) fn key(path: &str) -> Key {
    Key::new(path).expect("valid test key")
}
