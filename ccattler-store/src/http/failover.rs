//! The failover policy of [`HttpStore`](super::HttpStore), as pure decisions: which endpoint a
//! request goes to first ([`Ring`]), whether a failed attempt is sent again to the next
//! endpoint ([`try_next`]), and where a broken watch resumes ([`Resume`]). The transport
//! performs them; nothing here does I/O, except [`resolve_endpoints`].

use std::net::IpAddr;

use ccattler_core::{Key, Revision, WatchEvent};

/// How one attempt at one endpoint failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// The request never reached a server (connection refused, connect timeout, no such host):
    /// it had no effect, so any operation may be sent elsewhere.
    Unreached,
    /// The request was sent but no answer came (the connection dropped, the attempt timed
    /// out): it may or may not have taken effect.
    Interrupted,
    /// The server answered that it, or its store, is unavailable (a 5xx answer, a retryable
    /// store error): it may or may not have taken effect on the shared store.
    Unavailable,
    /// An answer every server would give (denied, lease not found, compacted, a bad request):
    /// no other endpoint is tried.
    Final,
}

/// Whether an operation may take effect twice without changing its outcome for the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Repeat {
    /// Reads, puts of a fixed value, lease renewals: sent again after any non-final fault.
    Safe,
    /// Deletes, transactions, lease grants and revocations, compactions: sent again only when
    /// the first attempt never reached a server; otherwise the caller gets the error (as with
    /// one server) and its retry goes to the next endpoint.
    Once,
}

/// Whether an attempt that failed with `fault` is sent at once to the next endpoint.
pub(crate) fn try_next(fault: Fault, repeat: Repeat) -> bool {
    match fault {
        Fault::Unreached => true,
        Fault::Interrupted | Fault::Unavailable => repeat == Repeat::Safe,
        Fault::Final => false,
    }
}

/// Which of `len` endpoints is preferred: requests go to it first, then to the others in the
/// order given. The preference sticks to the endpoint that last answered and moves on from one
/// that failed, so a client keeps one server until it fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Ring {
    len: usize,
    preferred: usize,
}

impl Ring {
    /// A ring of `len` endpoints (at least one) preferring the first.
    pub(crate) fn new(len: usize) -> Self {
        Ring {
            len: len.max(1),
            preferred: 0,
        }
    }

    /// The preferred endpoint.
    pub(crate) fn preferred(&self) -> usize {
        self.preferred
    }

    /// Every endpoint once, the preferred first.
    pub(crate) fn order(&self) -> Vec<usize> {
        (0..self.len)
            .map(|i| (self.preferred + i) % self.len)
            .collect()
    }

    /// Endpoint `at` answered: prefer it. Returns whether the preference changed.
    pub(crate) fn answered(&mut self, at: usize) -> bool {
        let changed = self.preferred != at;
        self.preferred = at % self.len;
        changed
    }

    /// Endpoint `at` failed: if it is preferred, prefer the next one. A failure of an endpoint
    /// already left behind (a late answer of an older request) changes nothing.
    pub(crate) fn failed(&mut self, at: usize) {
        if self.preferred == at {
            self.preferred = (at + 1) % self.len;
        }
    }
}

/// Where a watch resumes on another endpoint: from the revision of the last event delivered,
/// skipping the events of that revision already delivered (one revision may change several
/// keys, and the connection may break between them). The resumed stream is thus gap-free and
/// without duplicates, as one unbroken stream would be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Resume {
    start: Revision,
    last: Option<Revision>,
    seen: Vec<Key>,
}

impl Resume {
    /// A watch from `start` (not [`Revision::ZERO`]: resolve "from the next write" to the
    /// current revision + 1 first, or a resumed watch would miss the writes of the gap).
    pub(crate) fn new(start: Revision) -> Self {
        Resume {
            start,
            last: None,
            seen: Vec::new(),
        }
    }

    /// The revision to (re)open the watch from.
    pub(crate) fn from(&self) -> Revision {
        self.last.unwrap_or(self.start)
    }

    /// Whether `event` is new (then it is recorded as delivered) or a replay to skip.
    pub(crate) fn admit(&mut self, event: &WatchEvent) -> bool {
        let revision = event.revision();
        match self.last {
            Some(last) if revision < last => false,
            Some(last) if revision == last => {
                if self.seen.contains(event.key()) {
                    return false;
                }
                self.seen.push(event.key().clone());
                true
            }
            _ => {
                self.last = Some(revision);
                self.seen.clear();
                self.seen.push(event.key().clone());
                true
            }
        }
    }
}

/// The endpoints `urls` stand for: a URL whose host is a name resolving to several addresses
/// becomes one URL per address (`http://10.0.0.1:7420`, ...); a URL of one address, an IP
/// literal, or a name that does not resolve now is kept as given (its connection resolves it
/// again). Duplicates are dropped; the order is kept.
///
/// Names are resolved once, here: a client built from the result does not see a name's
/// addresses change until it is built again.
pub async fn resolve_endpoints(urls: &[String]) -> Vec<String> {
    let mut endpoints: Vec<String> = Vec::new();
    for url in urls {
        for endpoint in resolve_one(url.trim().trim_end_matches('/')).await {
            if !endpoints.contains(&endpoint) {
                endpoints.push(endpoint);
            }
        }
    }
    endpoints
}

async fn resolve_one(url: &str) -> Vec<String> {
    let keep = vec![url.to_owned()];
    let Ok(uri) = url.parse::<hyper::Uri>() else {
        return keep;
    };
    let (Some(host), Some(scheme)) = (uri.host(), uri.scheme_str()) else {
        return keep;
    };
    if host.trim_matches(['[', ']']).parse::<IpAddr>().is_ok() {
        return keep;
    }
    let port = uri
        .port_u16()
        .unwrap_or(if scheme == "https" { 443 } else { 80 });
    let path = uri.path().trim_end_matches('/');
    match tokio::net::lookup_host((host, port)).await {
        Ok(addrs) => {
            let mut found: Vec<String> = Vec::new();
            for addr in addrs {
                let endpoint = format!("{scheme}://{addr}{path}");
                if !found.contains(&endpoint) {
                    found.push(endpoint);
                }
            }
            if found.len() > 1 { found } else { keep }
        }
        Err(_) => keep,
    }
}

#[cfg(test)]
#[path = "failover_tests.rs"]
mod tests;
