//! [`DnsServer`]: a [`Zone`] served over UDP and TCP, kept current from the store.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use hickory_server::net::runtime::Time;
use hickory_server::proto::op::{Header, HeaderCounts, MessageType, Metadata, ResponseCode};
use hickory_server::proto::rr::{Name, Record, RecordType};
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo, Server};
use hickory_server::zone_handler::MessageResponseBuilder;
use parking_lot::RwLock;
use tokio::net::{TcpListener, UdpSocket};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use ccattler_core::schema::{self, Endpoints, RecordKey};
use ccattler_core::{FactStore, Revision, StoreError};

use super::zone::{Answer, Zone};

/// How long a TCP client may stay silent before its connection is closed.
const TCP_IDLE: Duration = Duration::from_secs(10);

/// How long to wait before following the store again after a scan or watch failed.
const RETRY: Duration = Duration::from_secs(1);

/// Where and what a [`DnsServer`] answers.
#[derive(Clone, Debug)]
pub struct DnsConfig {
    /// The UDP and TCP address to listen on (port 0: any free port, see
    /// [`DnsServer::local_addr`]).
    pub listen: SocketAddr,
    /// The domain the services' names sit under: `web.service.{domain}`. Default `cca`.
    pub domain: String,
    /// Seconds a resolver may cache an answer. Short, so that clients move off an endpoint
    /// that stopped being ready soon after it did. Default 5.
    pub ttl: u32,
}

impl DnsConfig {
    /// Listens on `listen` for the domain `cca`, with a TTL of 5 s.
    pub fn new(listen: SocketAddr) -> Self {
        DnsConfig {
            listen,
            domain: "cca".to_owned(),
            ttl: 5,
        }
    }
}

/// What went wrong starting a [`DnsServer`].
#[derive(Debug, thiserror::Error)]
pub enum DnsError {
    /// The domain is not a valid DNS name.
    #[error("the DNS domain {domain:?} is not a valid DNS name ({reason}); pick one such as `cca`")]
    Domain {
        /// The domain given.
        domain: String,
        /// Why it is not valid.
        reason: String,
    },
    /// A socket could not be bound.
    #[error("cannot listen for DNS on {address}: {source}; pick a free address or port")]
    Bind {
        /// The address.
        address: SocketAddr,
        /// The error.
        source: std::io::Error,
    },
    /// The first scan of the endpoints failed.
    #[error("reading the services' endpoints failed: {0}")]
    Store(#[from] StoreError),
}

/// A DNS server for the services' ready endpoints (see [`Zone`] for the names it answers).
///
/// It scans `endpoint/service/` once before it answers, then follows the store's watch, so an
/// endpoint that becomes ready or stops being so is answered within the watch's delay (well
/// under a second on a memory store or a healthy etcd). When the watch fails or falls behind
/// the store's history, it scans again after a second; meanwhile it keeps answering from what it
/// last read. Names outside the domain are refused (it is not a resolver).
///
/// Dropping the server stops it; [`shutdown`](Self::shutdown) waits for it.
#[derive(Debug)]
pub struct DnsServer {
    local: SocketAddr,
    zone: Arc<RwLock<Zone>>,
    feed: JoinHandle<()>,
    serve: JoinHandle<()>,
    stop: CancellationToken,
}

/// How many ports an ephemeral listen address (port 0) tries before giving up: the port the
/// UDP socket gets may already be someone's TCP port.
const EPHEMERAL_TRIES: usize = 16;

/// Binds UDP and TCP on one port. For port 0 the system picks the UDP port and TCP follows it;
/// when that port is taken for TCP by another socket, another one is picked.
async fn bind_both(listen: SocketAddr) -> std::io::Result<(UdpSocket, TcpListener, SocketAddr)> {
    let mut tries = 0;
    loop {
        tries += 1;
        let udp = UdpSocket::bind(listen).await?;
        let local = udp.local_addr()?;
        match TcpListener::bind(local).await {
            Ok(tcp) => return Ok((udp, tcp, local)),
            Err(e)
                if listen.port() == 0
                    && e.kind() == std::io::ErrorKind::AddrInUse
                    && tries < EPHEMERAL_TRIES => {}
            Err(e) => return Err(e),
        }
    }
}

impl DnsServer {
    /// Binds `config.listen` (UDP and TCP), reads the endpoints and starts answering.
    ///
    /// # Errors
    ///
    /// [`DnsError`] when the domain is invalid, a socket cannot be bound, or the first scan of
    /// the endpoints fails.
    pub async fn start<S: FactStore + Clone + Send + Sync + 'static>(
        store: S,
        config: DnsConfig,
    ) -> Result<Self, DnsError> {
        let mut zone = Zone::new(&config.domain, config.ttl).map_err(|e| DnsError::Domain {
            domain: config.domain.clone(),
            reason: e.to_string(),
        })?;
        let revision = scan(&store, &mut zone).await?;
        let zone = Arc::new(RwLock::new(zone));
        let bind = |source| DnsError::Bind {
            address: config.listen,
            source,
        };
        let (udp, tcp, local) = bind_both(config.listen).await.map_err(bind)?;
        let mut server = Server::new(Handler {
            zone: Arc::clone(&zone),
        });
        server.register_socket(udp);
        server.register_listener(tcp, TCP_IDLE, 64);
        let stop = server.shutdown_token().clone();
        let serve = tokio::spawn(async move {
            if let Err(error) = server.block_until_done().await {
                tracing::error!(%error, "the DNS server stopped");
            }
        });
        let feed = tokio::spawn(follow(store, Arc::clone(&zone), revision));
        Ok(DnsServer {
            local,
            zone,
            feed,
            serve,
            stop,
        })
    }

    /// The address it answers at (UDP and TCP).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// What it would answer for `name` and `kind` now (for tests and diagnostics).
    pub fn answer(&self, name: &Name, kind: RecordType) -> Answer {
        self.zone.read().answer(name, kind)
    }

    /// Stops answering and following the store, and waits until the sockets are closed.
    pub async fn shutdown(mut self) {
        self.stop.cancel();
        self.feed.abort();
        let _ = (&mut self.serve).await;
    }
}

impl Drop for DnsServer {
    fn drop(&mut self) {
        self.stop.cancel();
        self.feed.abort();
    }
}

/// Reads every endpoints record into `zone`; returns the revision read at.
async fn scan<S: FactStore>(store: &S, zone: &mut Zone) -> Result<Revision, StoreError> {
    let scan = store.scan(schema::SERVICE_ENDPOINTS).await?;
    let mut fresh = zone.emptied();
    for fact in &scan.facts {
        if let Some(RecordKey::Endpoints(service)) = RecordKey::parse(&fact.key) {
            fresh.set(service, schema::decode::<Endpoints>(fact).ok().as_ref());
        }
    }
    *zone = fresh;
    Ok(scan.revision)
}

/// Follows `endpoint/service/` from `revision` on, for as long as the server runs.
async fn follow<S: FactStore>(store: S, zone: Arc<RwLock<Zone>>, mut revision: Revision) {
    loop {
        match store
            .watch(schema::SERVICE_ENDPOINTS, revision.next())
            .await
        {
            Ok(mut watch) => {
                while let Some(event) = watch.next().await {
                    match event {
                        Ok(event) => {
                            let Some(RecordKey::Endpoints(service)) =
                                RecordKey::parse(&event.fact.key)
                            else {
                                continue;
                            };
                            let endpoints = match event.kind {
                                ccattler_core::EventKind::Delete => None,
                                _ => schema::decode::<Endpoints>(&event.fact).ok(),
                            };
                            zone.write().set(service, endpoints.as_ref());
                        }
                        Err(error) => {
                            tracing::warn!(%error, "the DNS server's watch of the endpoints failed");
                            break;
                        }
                    }
                }
            }
            Err(error) => tracing::warn!(%error, "the DNS server cannot watch the endpoints"),
        }
        // Scanned anew: a watch that fell behind the history cannot resume where it was.
        loop {
            tokio::time::sleep(RETRY).await;
            let mut fresh = zone.read().clone();
            match scan(&store, &mut fresh).await {
                Ok(read_at) => {
                    *zone.write() = fresh;
                    revision = read_at;
                    break;
                }
                Err(error) => tracing::warn!(%error, "the DNS server cannot read the endpoints"),
            }
        }
    }
}

/// Answers each question from the zone.
struct Handler {
    zone: Arc<RwLock<Zone>>,
}

#[async_trait::async_trait]
impl RequestHandler for Handler {
    async fn handle_request<R: ResponseHandler, T: Time>(
        &self,
        request: &Request,
        mut response: R,
    ) -> ResponseInfo {
        let mut metadata = Metadata::response_from_request(&request.metadata);
        metadata.authoritative = true;
        metadata.recursion_available = false;
        let (answers, additional): (Vec<Record>, Vec<Record>) = match request.request_info() {
            Err(_) => {
                metadata.response_code = ResponseCode::FormErr;
                (Vec::new(), Vec::new())
            }
            Ok(info) => {
                let name = Name::from(info.query.name());
                match self.zone.read().answer(&name, info.query.query_type()) {
                    Answer::Records {
                        answers,
                        additional,
                    } => (answers, additional),
                    Answer::NoSuchName => {
                        metadata.response_code = ResponseCode::NXDomain;
                        (Vec::new(), Vec::new())
                    }
                    Answer::NotOurs => {
                        metadata.authoritative = false;
                        metadata.response_code = ResponseCode::Refused;
                        (Vec::new(), Vec::new())
                    }
                }
            }
        };
        let builder = MessageResponseBuilder::from_message_request(request);
        let message = builder.build(metadata, &answers, [], [], &additional);
        match response.send_response(message).await {
            Ok(info) => info,
            Err(error) => {
                tracing::debug!(%error, "sending a DNS answer failed");
                let mut failed = Metadata::new(
                    request.metadata.id,
                    MessageType::Response,
                    request.metadata.op_code,
                );
                failed.response_code = ResponseCode::ServFail;
                ResponseInfo::from(Header {
                    metadata: failed,
                    counts: HeaderCounts::default(),
                })
            }
        }
    }
}
