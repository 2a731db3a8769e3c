//! The watch of [`HttpStore`]: one `/store/watch` event stream at a time, reopened on the next
//! endpoint when it breaks, from where it stopped ([`Resume`]).

use bytes::Bytes;
use ccattler_core::{Revision, StoreError, WatchEvent};
use futures_util::stream::{self, StreamExt};
use hyper::Method;

use super::failover::{Fault, Resume};
use super::sse::EventReader;
use super::transport::{self, Failed};
use super::{HttpStore, WATCH_IDLE_LIMIT, failed_attempt};
use crate::wire::{CHANGE_EVENT, ERROR_EVENT, Route, WatchParams, WireError, WireEvent};

/// A watch that follows its prefix across endpoints.
pub(super) struct Follow {
    store: HttpStore,
    prefix: String,
    resume: Resume,
    /// The open stream and the endpoint it comes from.
    reader: Option<(usize, EventReader)>,
    /// Streams that broke since the last event delivered; past one per endpoint, the watch
    /// ends.
    breaks: usize,
}

impl Follow {
    /// Opens a watch of `prefix` from `start` (not [`Revision::ZERO`]) on the first endpoint
    /// that serves it.
    ///
    /// # Errors
    ///
    /// The last endpoint's error when none serves it; a final answer (compacted, denied) at
    /// once.
    pub(super) async fn open(
        store: HttpStore,
        prefix: String,
        start: Revision,
    ) -> Result<super::BoxStream<'static, Result<WatchEvent, StoreError>>, StoreError> {
        let mut follow = Follow {
            store,
            prefix,
            resume: Resume::new(start),
            reader: None,
            breaks: 0,
        };
        follow.reader = Some(follow.connect().await?);
        Ok(stream::unfold(Some(follow), |follow| async move {
            let mut follow = follow?;
            match follow.next().await {
                Ok(event) => Some((Ok(event), Some(follow))),
                Err(err) => Some((Err(err), None)),
            }
        })
        .boxed())
    }

    /// The next new event; an error ends the watch.
    async fn next(&mut self) -> Result<WatchEvent, StoreError> {
        loop {
            let (at, reader) = match &mut self.reader {
                Some(open) => open,
                None => {
                    let open = self.connect().await?;
                    self.reader.insert(open)
                }
            };
            let at = *at;
            match read(reader).await {
                Ok(event) => {
                    if self.resume.admit(&event) {
                        self.breaks = 0;
                        return Ok(event);
                    }
                }
                Err((err, Fault::Final)) => return Err(err),
                Err((err, _)) => {
                    self.reader = None;
                    self.breaks += 1;
                    self.store.endpoints.failed(at, &err);
                    if self.breaks > self.store.endpoints.urls.len() {
                        return Err(err);
                    }
                }
            }
        }
    }

    /// Opens the stream on the endpoints in turn, from [`Resume::from`].
    async fn connect(&self) -> Result<(usize, EventReader), StoreError> {
        let params = WatchParams {
            prefix: self.prefix.clone(),
            from: self.resume.from().get(),
        };
        let path = format!("{}?{}", Route::Watch.path(), params.to_query());
        let mut last = None;
        for at in self.store.endpoints.order() {
            match self.attempt(at, &path).await {
                Ok(reader) => {
                    self.store.endpoints.answered(at);
                    return Ok((at, reader));
                }
                Err(failed) => {
                    if !failed_attempt(&self.store, at, &failed) {
                        return Err(failed.0);
                    }
                    last = Some(failed.0);
                }
            }
        }
        Err(self.store.none_answered(last))
    }

    async fn attempt(&self, at: usize, path: &str) -> Result<EventReader, Failed> {
        let url = self.store.endpoints.url(at);
        let timeout = self.store.timeout;
        let send = self
            .store
            .transport
            .send(url, Method::GET, path, Bytes::new());
        let response = tokio::time::timeout(timeout, send)
            .await
            .unwrap_or_else(|_| Err((StoreError::Timeout(timeout), Fault::Interrupted)))?;
        let status = response.status();
        if !status.is_success() {
            let body = transport::read_json(response.into_body())
                .await
                .map_err(|err| (err, Fault::Interrupted))?;
            return Err(transport::classify(
                status,
                transport::store_error(status, &body),
            ));
        }
        Ok(EventReader::new(response.into_body()))
    }
}

/// The next change of one stream: [`Fault::Final`] for an error every server would give
/// (compacted), another fault when this stream broke, fell silent or ended.
async fn read(reader: &mut EventReader) -> Result<WatchEvent, Failed> {
    loop {
        let event = match tokio::time::timeout(WATCH_IDLE_LIMIT, reader.next()).await {
            Err(_) => {
                let err = StoreError::unavailable(format!(
                    "the watch stream was silent for {WATCH_IDLE_LIMIT:?}; watch again"
                ));
                return Err((err, Fault::Interrupted));
            }
            Ok(Err(err)) => return Err((err, Fault::Interrupted)),
            Ok(Ok(None)) => {
                let err = StoreError::unavailable("the server ended the watch stream; watch again");
                return Err((err, Fault::Interrupted));
            }
            Ok(Ok(Some(event))) => event,
        };
        if event.event == CHANGE_EVENT {
            return serde_json::from_str::<WireEvent>(&event.data)
                .map_err(|err| StoreError::unavailable(format!("a malformed watch event: {err}")))
                .and_then(WireEvent::into_event)
                .map_err(|err| (err, Fault::Final));
        }
        if event.event == ERROR_EVENT {
            let err = serde_json::from_str::<WireError>(&event.data).map_or_else(
                |_| StoreError::unavailable(event.data.clone()),
                WireError::into_store_error,
            );
            let fault = if err.is_retryable() {
                Fault::Unavailable
            } else {
                Fault::Final
            };
            return Err((err, fault));
        }
    }
}
