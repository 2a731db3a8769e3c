//! Who may do what through the store protocol (`/store/...`), driven through `HttpStore` as
//! `cca agent` drives it: node credentials write only their own keys, use only their own
//! leases, and read a secret only when a service placed on them declares it.

use std::net::SocketAddr;
use std::time::Duration;

use ccattler_core::schema::{self, Assignment};
use ccattler_core::{FactStore, Key, Op, StoreError, Txn};
use ccattler_examples::cca::api::auth::{self, Role};
use ccattler_examples::cca::api::{ApiConfig, ServerHandle};
use ccattler_store::MemoryStore;
use ccattler_store::http::HttpStore;

const DOC: &str = "service web {\n    image web:1\n    secret db-pass\n}\n";

struct Setup {
    store: MemoryStore,
    server: ServerHandle,
}

impl Setup {
    async fn start() -> Setup {
        let store = MemoryStore::new();
        let addr: SocketAddr = "127.0.0.1:0".parse().expect("addr");
        let server = ServerHandle::start(store.clone(), ApiConfig::default(), addr)
            .await
            .expect("server starts");
        Setup { store, server }
    }

    /// An `HttpStore` with a new token of `role`.
    async fn client(&self, role: Role) -> HttpStore {
        let token = auth::generate_token();
        auth::store_token(&self.store, &token, role, None)
            .await
            .expect("token");
        HttpStore::new(self.server.url(), token)
    }

    async fn node(&self, name: &str) -> HttpStore {
        self.client(Role::Node {
            node: name.to_owned(),
        })
        .await
    }
}

fn key(text: &str) -> Key {
    Key::new(text).expect("key")
}

fn assert_denied<T: std::fmt::Debug>(result: Result<T, StoreError>, what: &str) {
    assert!(
        matches!(result, Err(StoreError::Denied(_))),
        "{what}: expected a refusal, got {result:?}"
    );
}

#[tokio::test]
async fn nodes_write_only_their_own_keys_and_nothing_is_written_on_refusal() {
    let setup = Setup::start().await;
    let (n1, admin) = (setup.node("n1").await, setup.client(Role::Admin).await);
    n1.put(&key("observed/node/n1"), "{}".into())
        .await
        .expect("own key");
    let before = setup.store.revision().await.expect("revision");
    assert_denied(
        n1.put(&key("observed/node/n2"), "{}".into()).await,
        "another node's key",
    );
    assert_denied(
        n1.delete(&key("desired/service/web")).await,
        "desired state",
    );
    let mixed = Txn::new()
        .then(Op::put(key("observed/instance/n1/i-1"), "{}"))
        .then(Op::put(key("desired/service/web"), "{}"));
    assert_denied(n1.txn(mixed).await, "a txn with one foreign write");
    let hidden_compare = Txn::new()
        .when(ccattler_core::Compare::value_equals(
            key("secret/db-pass"),
            "guess",
        ))
        .then(Op::put(key("observed/node/n1"), "{}"));
    assert_denied(n1.txn(hidden_compare).await, "a compare on a secret");
    assert_denied(
        admin.put(&key("auth/token/x"), "{}".into()).await,
        "an admin writing auth/",
    );
    assert_eq!(setup.store.revision().await.expect("revision"), before);

    let wrong = HttpStore::new(setup.server.url(), "cca_wrong");
    assert_denied(wrong.revision().await, "a wrong token");
    setup.server.shutdown().await;
}

#[tokio::test]
async fn a_nodes_lease_is_its_own() {
    let setup = Setup::start().await;
    let (n1, n2) = (setup.node("n1").await, setup.node("n2").await);
    let lease = n1
        .grant_lease(Duration::from_secs(30))
        .await
        .expect("grant");
    n1.keep_alive(lease.id).await.expect("own lease");
    n1.put_with_lease(&key("lease/node/n1"), "n1".into(), lease.id)
        .await
        .expect("own key on own lease");
    assert_denied(n2.keep_alive(lease.id).await, "keep-alive of n1's lease");
    assert_denied(n2.revoke_lease(lease.id).await, "revoke of n1's lease");
    assert_denied(
        n2.put_with_lease(&key("lease/node/n2"), "n2".into(), lease.id)
            .await,
        "n2's key on n1's lease",
    );
    // The lease lives on; its owner ends it.
    n1.revoke_lease(lease.id).await.expect("revoke");
    assert!(
        setup
            .store
            .get(&key("lease/node/n1"))
            .await
            .expect("get")
            .is_none()
    );
    assert!(matches!(
        n1.keep_alive(lease.id).await,
        Err(StoreError::LeaseNotFound(_))
    ));
    setup.server.shutdown().await;
}

#[tokio::test]
async fn secrets_reach_only_the_nodes_that_run_them() {
    let setup = Setup::start().await;
    let admin = setup.client(Role::Admin).await;
    let file = ccattler_controllers::lang::SourceFile::new("app.cca", DOC);
    let compiled = ccattler_controllers::lang::check(&file).expect("a valid file");
    for (fact_key, value) in compiled.to_facts() {
        admin.put(&fact_key, value).await.expect("desired state");
    }
    let secret = key("secret/db-pass");
    admin
        .put(&secret, "hunter2".into())
        .await
        .expect("an admin writes secrets");
    let (n1, n2) = (setup.node("n1").await, setup.node("n2").await);
    assert_denied(admin.get(&secret).await, "an admin reading a secret");
    assert_denied(n1.get(&secret).await, "a node running nothing");

    let assignment = Assignment {
        instance: "web-1".to_owned(),
        service: "web".to_owned(),
        node: "n1".to_owned(),
        version: String::new(),
        state: Default::default(),
        ports: Vec::new(),
        volumes: Vec::new(),
    };
    setup
        .store
        .put(
            &key(&format!("{}n1/web-1", schema::PLACEMENTS)),
            schema::encode(&assignment),
        )
        .await
        .expect("placement");
    let read = n1.get(&secret).await.expect("n1 runs web");
    assert_eq!(read.expect("present").value, "hunter2");
    assert_denied(n2.get(&secret).await, "n2 runs nothing of web");
    // Scans and watches never show secrets or tokens, whoever asks.
    for store in [&admin, &n1] {
        let scan = store.scan("").await.expect("scan");
        assert!(
            scan.facts
                .iter()
                .all(|f| !f.key.as_str().starts_with("secret/")
                    && !f.key.as_str().starts_with("auth/")),
            "{:?}",
            scan.facts
        );
    }
    setup.server.shutdown().await;
}

#[tokio::test]
async fn malformed_store_requests_get_a_4xx_and_write_nothing() {
    use ccattler_examples::cca::client::{ApiClient, ClientArgs};
    let setup = Setup::start().await;
    let token = auth::generate_token();
    auth::store_token(&setup.store, &token, Role::Admin, None)
        .await
        .expect("token");
    let client = ApiClient::new(&ClientArgs {
        server: setup.server.url(),
        token: Some(token),
    });
    let before = setup.store.revision().await.expect("revision");
    for (path, body) in [
        ("/store/get", "not json"),
        ("/store/get", r#"{"key": "/bad//key"}"#),
        ("/store/put", r#"{"key": "a", "value": "%%% not base64"}"#),
        ("/store/put", r#"{"key": "a"}"#),
        ("/store/txn", r#"{"then": [{"op": "explode", "key": "a"}]}"#),
        (
            "/store/txn",
            r#"{"compare": [{"key": "a", "op": "~", "version": 1}]}"#,
        ),
        ("/store/lease/grant", r#"{"ttl_ms": 0}"#),
        ("/store/lease/keep-alive", r#"{"id": "seven"}"#),
        ("/store/compact", r#"{"revision": 99999}"#),
    ] {
        let answer = client
            .json(hyper::Method::POST, path, body)
            .await
            .expect("the server answers");
        let failure = answer.expect_err(path);
        assert!(
            failure.status.is_client_error(),
            "{path} {body}: {} {}",
            failure.status,
            failure.body
        );
        assert!(failure.body["error"].is_string(), "{}", failure.body);
    }
    let watch = client
        .send(hyper::Method::GET, "/store/watch?from=x", "", &[])
        .await
        .expect("answer");
    assert!(watch.status().is_client_error());
    assert_eq!(setup.store.revision().await.expect("revision"), before);
    setup.server.shutdown().await;
}
