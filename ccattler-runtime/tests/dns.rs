//! The DNS server over a real socket: questions encoded by the DNS library, sent over UDP and
//! TCP, answered from a store that changes under it.

#![cfg(feature = "dns")]

use std::net::SocketAddr;
use std::str::FromStr;
use std::time::{Duration, Instant};

use ccattler_core::FactStore;
use ccattler_core::schema::{self, Endpoint, Endpoints, keys};
use ccattler_runtime::dns::{DnsConfig, DnsServer};
use ccattler_store::MemoryStore;
use hickory_server::proto::op::{Message, Query, ResponseCode};
use hickory_server::proto::rr::{Name, RData, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

async fn set(store: &MemoryStore, service: &str, list: &[(&str, &str)]) {
    let endpoints = Endpoints {
        endpoints: list
            .iter()
            .map(|(address, instance)| Endpoint {
                address: (*address).to_owned(),
                instance: (*instance).to_owned(),
                node: "n1".to_owned(),
            })
            .collect(),
    };
    store
        .put(
            &keys::endpoints(service).expect("key"),
            schema::encode(&endpoints),
        )
        .await
        .expect("put");
}

fn question(name: &str, kind: RecordType) -> Vec<u8> {
    let mut message = Message::query();
    message.add_query(Query::query(Name::from_str(name).expect("name"), kind));
    message.to_vec().expect("encode")
}

async fn ask_udp(server: SocketAddr, name: &str, kind: RecordType) -> Message {
    let socket = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
    socket
        .send_to(&question(name, kind), server)
        .await
        .expect("send");
    let mut buffer = vec![0; 4096];
    let read = tokio::time::timeout(Duration::from_secs(5), socket.recv(&mut buffer))
        .await
        .expect("an answer within 5 s")
        .expect("recv");
    Message::from_vec(&buffer[..read]).expect("decode")
}

async fn ask_tcp(server: SocketAddr, name: &str, kind: RecordType) -> Message {
    let mut stream = TcpStream::connect(server).await.expect("connect");
    let bytes = question(name, kind);
    let length = u16::try_from(bytes.len()).expect("short");
    stream
        .write_all(&length.to_be_bytes())
        .await
        .expect("write");
    stream.write_all(&bytes).await.expect("write");
    let mut length = [0u8; 2];
    stream.read_exact(&mut length).await.expect("read");
    let mut buffer = vec![0; usize::from(u16::from_be_bytes(length))];
    stream.read_exact(&mut buffer).await.expect("read");
    Message::from_vec(&buffer).expect("decode")
}

fn shown(message: &Message) -> Vec<String> {
    message
        .answers
        .iter()
        .map(|r| match &r.data {
            RData::SRV(srv) => format!("{} {}", srv.port, srv.target),
            data => data.to_string(),
        })
        .collect()
}

async fn start(store: &MemoryStore) -> DnsServer {
    DnsServer::start(
        store.clone(),
        DnsConfig::new("127.0.0.1:0".parse().expect("addr")),
    )
    .await
    .expect("the DNS server starts")
}

#[tokio::test]
async fn answers_a_and_srv_over_udp_and_tcp() {
    let store = MemoryStore::new();
    set(
        &store,
        "web",
        &[("127.0.0.1:20000", "web-a"), ("127.0.0.2:20001", "web-b")],
    )
    .await;
    let server = start(&store).await;
    let at = server.local_addr();

    let a = ask_udp(at, "web.service.cca.", RecordType::A).await;
    assert_eq!(a.metadata.response_code, ResponseCode::NoError);
    assert!(a.metadata.authoritative);
    assert_eq!(shown(&a), ["127.0.0.1", "127.0.0.2"]);
    assert!(a.answers.iter().all(|r| r.ttl == 5), "{a:?}");

    let srv = ask_tcp(at, "web.service.cca.", RecordType::SRV).await;
    assert_eq!(
        shown(&srv),
        [
            "20000 web-a.web.service.cca.",
            "20001 web-b.web.service.cca."
        ]
    );
    assert_eq!(srv.additionals.len(), 2, "the targets' addresses: {srv:?}");

    let unknown = ask_udp(at, "api.service.cca.", RecordType::A).await;
    assert_eq!(unknown.metadata.response_code, ResponseCode::NXDomain);
    let foreign = ask_udp(at, "example.com.", RecordType::A).await;
    assert_eq!(foreign.metadata.response_code, ResponseCode::Refused);
    server.shutdown().await;
}

#[tokio::test]
async fn follows_the_store_within_a_second() {
    let store = MemoryStore::new();
    set(
        &store,
        "web",
        &[("127.0.0.1:20000", "web-a"), ("127.0.0.2:20001", "web-b")],
    )
    .await;
    let server = start(&store).await;
    let at = server.local_addr();

    // web-b stops being ready: the endpoint controller rewrites the record without it.
    set(&store, "web", &[("127.0.0.1:20000", "web-a")]).await;
    let changed = Instant::now();
    loop {
        let srv = ask_udp(at, "web.service.cca.", RecordType::SRV).await;
        if shown(&srv) == ["20000 web-a.web.service.cca."] {
            break;
        }
        assert!(changed.elapsed() < Duration::from_secs(1), "still {srv:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // A new service appears; a deleted one is NXDOMAIN.
    set(&store, "api", &[("127.0.0.3:20002", "api-a")]).await;
    store
        .delete(&keys::endpoints("web").expect("key"))
        .await
        .expect("delete");
    let changed = Instant::now();
    loop {
        let api = ask_udp(at, "api.service.cca.", RecordType::A).await;
        let web = ask_udp(at, "web.service.cca.", RecordType::A).await;
        if shown(&api) == ["127.0.0.3"] && web.metadata.response_code == ResponseCode::NXDomain {
            break;
        }
        assert!(
            changed.elapsed() < Duration::from_secs(1),
            "{api:?} {web:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    server.shutdown().await;
}

#[tokio::test]
async fn a_bad_domain_or_a_taken_port_is_a_clear_error() {
    let store = MemoryStore::new();
    let mut config = DnsConfig::new("127.0.0.1:0".parse().expect("addr"));
    config.domain = "a..b".to_owned();
    let error = DnsServer::start(store.clone(), config)
        .await
        .expect_err("an invalid domain");
    assert!(
        error.to_string().contains("not a valid DNS name"),
        "{error}"
    );

    let server = start(&store).await;
    let taken = DnsConfig::new(server.local_addr());
    let error = DnsServer::start(store.clone(), taken)
        .await
        .expect_err("the port is taken");
    assert!(
        error.to_string().contains("cannot listen for DNS"),
        "{error}"
    );
}
