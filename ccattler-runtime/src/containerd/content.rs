//! Writing a blob into containerd's content store as it arrives from a registry. The commit names
//! the expected digest, so containerd verifies it; we verify it too before asking for the commit,
//! and a blob that does not match (or whose download breaks off) is aborted: never committed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use containerd_client::services::v1::{
    AbortRequest, InfoRequest, WriteAction, WriteContentRequest,
};
use containerd_client::tonic::{Code, Status};
use containerd_client::types::Descriptor;
use futures_core::Stream;
use futures_util::StreamExt;
use sha2::{Digest, Sha256};

use super::client::{Conn, Lease, unique};
use super::image::set_label;
use super::registry::chain;

/// Bytes sent to containerd in one write request, at most (a little more: whole network chunks).
const CHUNK: usize = 1 << 20;

/// Checks data against a descriptor's `sha256:` digest and size as it goes by.
#[derive(Debug, Default)]
pub(crate) struct DigestCheck {
    hasher: Sha256,
    size: u64,
}

impl DigestCheck {
    /// Takes in the next piece of the data.
    pub(crate) fn update(&mut self, data: &[u8]) {
        self.hasher.update(data);
        self.size += data.len() as u64;
    }

    /// `Ok` when the data seen has digest `expected` and `size` bytes; otherwise what differs.
    pub(crate) fn verify(self, expected: &str, size: u64) -> Result<(), String> {
        if !expected.starts_with("sha256:") {
            return Err(format!(
                "digest {expected} is not sha256, the only algorithm supported"
            ));
        }
        let actual = format!("sha256:{:x}", self.hasher.finalize());
        if actual != expected {
            return Err(format!("blob {expected} arrived with digest {actual}"));
        }
        if self.size != size {
            return Err(format!(
                "blob {expected} has {} bytes, its descriptor says {size}",
                self.size
            ));
        }
        Ok(())
    }
}

/// Why a blob is not in the store.
#[derive(Debug)]
pub(crate) enum WriteFailure {
    /// The download broke off.
    Download(String),
    /// The data does not match its digest (or size).
    Mismatch(String),
    /// containerd refused or failed.
    Containerd(Status),
}

/// Whether the store has the blob `digest` already.
pub(crate) async fn has_blob(conn: &Conn, digest: &str) -> Result<bool, Status> {
    let request = conn.req(InfoRequest {
        digest: digest.to_owned(),
    });
    match conn.content().info(request).await {
        Ok(_) => Ok(true),
        Err(s) if s.code() == Code::NotFound => Ok(false),
        Err(s) => Err(s),
    }
}

/// Streams `requests` to containerd's content write under `lease` and reads its answers to the
/// end: `Ok` once the write (and its commit, when asked) is done.
pub(crate) async fn send_write<R>(conn: &Conn, lease: &Lease, requests: R) -> Result<(), Status>
where
    R: Stream<Item = WriteContentRequest> + Send + 'static,
{
    let mut responses = conn
        .content()
        .write(conn.leased(requests, Some(lease)))
        .await?
        .into_inner();
    while responses.message().await?.is_some() {}
    Ok(())
}

/// Writes the blob `blob` from `body` into the store under `lease`, with `labels`, adding the
/// bytes sent to `progress`. A blob already present only gets its labels.
pub(crate) async fn write_stream<S>(
    conn: &Conn,
    lease: &Lease,
    blob: &Descriptor,
    labels: HashMap<String, String>,
    body: S,
    progress: Arc<AtomicU64>,
) -> Result<(), WriteFailure>
where
    S: Stream<Item = Result<Bytes, std::io::Error>> + Send + Unpin + 'static,
{
    let reference = format!("ccattler-pull-{}-{}", unique(), blob.digest);
    let failure = Arc::new(Mutex::new(None));
    let state = Feed {
        body,
        check: Some(DigestCheck::default()),
        offset: 0,
        ended: false,
        reference: reference.clone(),
        blob: blob.clone(),
        labels: labels.clone(),
        failure: Arc::clone(&failure),
        progress,
    };
    let requests = futures_util::stream::unfold(state, Feed::next);
    let outcome = send_write(conn, lease, requests).await;
    let failed = failure.lock().unwrap_or_else(|e| e.into_inner()).take();
    match (failed, outcome) {
        (None, Ok(())) => Ok(()),
        (None, Err(s)) if s.code() == Code::AlreadyExists => {
            for (key, value) in &labels {
                set_label(conn, lease, &blob.digest, (key, value))
                    .await
                    .map_err(WriteFailure::Containerd)?;
            }
            Ok(())
        }
        (failed, outcome) => {
            // Whatever was written of it goes: the ingest is dropped, nothing is committed.
            let abort = conn.leased(AbortRequest { r#ref: reference }, Some(lease));
            match conn.content().abort(abort).await {
                Ok(_) => {}
                Err(s) if s.code() == Code::NotFound => {}
                Err(s) => {
                    tracing::warn!(digest = %blob.digest, "cannot abort a failed content write: {s}")
                }
            }
            Err(match (failed, outcome) {
                (Some(failure), _) => failure,
                (None, Err(s)) => WriteFailure::Containerd(s),
                (None, Ok(())) => {
                    WriteFailure::Download("the write ended without a commit".to_owned())
                }
            })
        }
    }
}

/// The state of the request stream: the body, the digest so far, and where a failure goes.
struct Feed<S> {
    body: S,
    check: Option<DigestCheck>,
    offset: i64,
    ended: bool,
    reference: String,
    blob: Descriptor,
    labels: HashMap<String, String>,
    failure: Arc<Mutex<Option<WriteFailure>>>,
    progress: Arc<AtomicU64>,
}

impl<S> Feed<S>
where
    S: Stream<Item = Result<Bytes, std::io::Error>> + Unpin,
{
    /// The next request: a write of the next chunk, then the commit once the data checks out.
    /// A failure ends the stream without a commit.
    async fn next(mut self) -> Option<(WriteContentRequest, Feed<S>)> {
        let mut check = self.check.take()?;
        if !self.ended {
            let mut data = Vec::new();
            while data.len() < CHUNK {
                match self.body.next().await {
                    Some(Ok(bytes)) => data.extend_from_slice(&bytes),
                    Some(Err(e)) => {
                        self.fail(download_failure(&e));
                        return None;
                    }
                    None => {
                        self.ended = true;
                        break;
                    }
                }
            }
            if !data.is_empty() {
                check.update(&data);
                self.check = Some(check);
                let len = data.len();
                let request = WriteContentRequest {
                    action: WriteAction::Write as i32,
                    r#ref: self.reference.clone(),
                    offset: self.offset,
                    data,
                    ..WriteContentRequest::default()
                };
                self.offset += len as i64;
                self.progress.fetch_add(len as u64, Ordering::Relaxed);
                return Some((request, self));
            }
        }
        let size = u64::try_from(self.blob.size).unwrap_or(u64::MAX);
        if let Err(why) = check.verify(&self.blob.digest, size) {
            self.fail(WriteFailure::Mismatch(why));
            return None;
        }
        let commit = WriteContentRequest {
            action: WriteAction::Commit as i32,
            r#ref: self.reference.clone(),
            offset: self.offset,
            total: self.offset,
            expected: self.blob.digest.clone(),
            labels: std::mem::take(&mut self.labels),
            data: Vec::new(),
        };
        Some((commit, self))
    }

    fn fail(&self, failure: WriteFailure) {
        *self.failure.lock().unwrap_or_else(|e| e.into_inner()) = Some(failure);
    }
}

/// A broken download, or the registry client's own digest check failing at its end.
fn download_failure(error: &std::io::Error) -> WriteFailure {
    let digest = error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<oci_client::errors::DigestError>());
    match digest {
        Some(e) => WriteFailure::Mismatch(e.to_string()),
        None => WriteFailure::Download(chain(error)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::containerd::image::sha256_digest;

    #[test]
    fn the_right_data_checks_out_in_pieces() {
        let data = b"hello, registry";
        let mut check = DigestCheck::default();
        check.update(&data[..5]);
        check.update(&data[5..]);
        assert_eq!(
            check.verify(&sha256_digest(data), data.len() as u64),
            Ok(())
        );
    }

    #[test]
    fn other_data_or_size_or_algorithm_is_refused() {
        let expected = sha256_digest(b"hello");
        let mut tampered = DigestCheck::default();
        tampered.update(b"hellO");
        assert!(
            tampered
                .verify(&expected, 5)
                .is_err_and(|e| e.contains("arrived with"))
        );
        let mut short = DigestCheck::default();
        short.update(b"hello");
        assert!(short.verify(&expected, 6).is_err_and(|e| e.contains("6")));
        let other = DigestCheck::default().verify("sha512:abc", 0);
        assert!(other.is_err_and(|e| e.contains("not sha256")));
    }
}
