//! The HTTP API in process: bearer tokens, enrollment and node credentials.

mod common;

use axum::body::Bytes;
use ccattler_core::FactStore;
use ccattler_examples::cca::api::auth::{self, Role, TokenRecord};
use common::{DOC, Harness, call};
use hyper::StatusCode;
use serde_json::json;

#[tokio::test]
async fn missing_or_wrong_tokens_get_401_and_write_nothing() {
    let h = Harness::start().await;
    let before = h.settled().await;
    for client in [h.as_token(None), h.as_token(Some("cca_wrong"))] {
        assert_eq!(
            call(&client, "POST", "/config", DOC).await.0,
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(
            call(&client, "PUT", "/state/app/x", "1").await.0,
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(
            call(&client, "GET", "/state", Bytes::new()).await.0,
            StatusCode::UNAUTHORIZED
        );
    }
    assert_eq!(h.revision().await, before);
    h.stop().await;
}

#[tokio::test]
async fn enrollment_tokens_are_single_use_and_expire_and_node_credentials_stay_in_their_prefixes() {
    let h = Harness::start().await;
    let (status, created) = call(&h.admin, "POST", "/api/tokens", r#"{"ttl": "10m"}"#).await;
    assert_eq!(status, StatusCode::OK, "{created}");
    let enrollment = created["token"].as_str().expect("token").to_owned();
    // An enrollment token is no bearer token.
    assert_eq!(
        call(
            &h.as_token(Some(&enrollment)),
            "GET",
            "/state",
            Bytes::new()
        )
        .await
        .0,
        StatusCode::UNAUTHORIZED
    );
    let body = json!({"token": enrollment, "node": "n1"}).to_string();
    let anonymous = h.as_token(None);
    let (status, enrolled) = call(&anonymous, "POST", "/api/enroll", body.clone()).await;
    assert_eq!(status, StatusCode::OK, "{enrolled}");
    let (status, _) = call(&anonymous, "POST", "/api/enroll", body).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "reused");

    let expired = auth::generate_token();
    let record = TokenRecord {
        role: Role::Enroll,
        expires_at: Some(auth::now_secs() - 10),
    };
    h.store
        .put(
            &auth::token_key(&expired),
            serde_json::to_vec(&record).expect("json").into(),
        )
        .await
        .expect("put");
    let body = json!({"token": expired, "node": "n2"}).to_string();
    assert_eq!(
        call(&anonymous, "POST", "/api/enroll", body).await.0,
        StatusCode::UNAUTHORIZED
    );

    let node = h.as_token(enrolled["token"].as_str());
    for own in [
        "lease/node/n1",
        "observed/node/n1",
        "observed/instance/n1/i-1",
    ] {
        let (status, answer) = call(&node, "PUT", &format!("/state/{own}"), "{}").await;
        assert_eq!(status, StatusCode::OK, "{own}: {answer}");
    }
    let before = h.settled().await;
    for other in [
        "observed/node/n2",
        "observed/instance/n2/i-1",
        "desired/service/x",
        "auth/token/x",
    ] {
        assert_eq!(
            call(&node, "PUT", &format!("/state/{other}"), "{}").await.0,
            StatusCode::FORBIDDEN,
            "{other}"
        );
        assert_eq!(
            call(&node, "DELETE", &format!("/state/{other}"), Bytes::new())
                .await
                .0,
            StatusCode::FORBIDDEN
        );
    }
    assert_eq!(
        call(&node, "POST", "/config", DOC).await.0,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        call(&node, "POST", "/api/tokens", "{}").await.0,
        StatusCode::FORBIDDEN
    );
    assert_eq!(h.revision().await, before);
    assert_eq!(
        call(&node, "GET", "/state?prefix=observed/", Bytes::new())
            .await
            .0,
        StatusCode::OK
    );
    let (_, nodes) = call(&node, "GET", "/api/nodes", Bytes::new()).await;
    assert_eq!(nodes["nodes"][0]["name"], "n1");
    assert_eq!(nodes["nodes"][0]["alive"], true);
    h.stop().await;
}

#[tokio::test]
async fn enrollment_attempts_are_rate_limited_per_address() {
    let h = Harness::start().await;
    let anonymous = h.as_token(None);
    let before = h.settled().await;
    let body = json!({"token": "cca_guess", "node": "n1"}).to_string();
    // The burst of 10 is refused for the bad token (401); the 11th for the rate (429).
    for attempt in 0..10 {
        let (status, answer) = call(&anonymous, "POST", "/api/enroll", body.clone()).await;
        assert_eq!(
            status,
            StatusCode::UNAUTHORIZED,
            "attempt {attempt}: {answer}"
        );
    }
    let response = anonymous
        .send(hyper::Method::POST, "/api/enroll", body, &[])
        .await
        .expect("answer");
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry_after: u64 = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .expect("a Retry-After header in seconds");
    assert!((1..=60).contains(&retry_after), "{retry_after}");
    assert_eq!(h.revision().await, before, "refusals write nothing");
    h.stop().await;
}

#[tokio::test]
async fn expired_enrollment_tokens_are_deleted_by_the_store() {
    use ccattler_core::ManualClock;
    use ccattler_store::{MemoryConfig, MemoryStore};
    use std::sync::Arc;
    use std::time::Duration;

    let clock = ManualClock::new();
    let store = MemoryStore::with_config(MemoryConfig::default().clock(Arc::new(clock.clone())));
    let token = auth::generate_token();
    auth::store_token(&store, &token, Role::Enroll, Some(Duration::from_secs(600)))
        .await
        .expect("token");
    let admin = auth::generate_token();
    auth::store_token(&store, &admin, Role::Admin, None)
        .await
        .expect("admin token");
    let stored = async |token: &str| {
        store
            .get(&auth::token_key(token))
            .await
            .expect("get")
            .is_some()
    };
    clock.advance(Duration::from_secs(599));
    store.expire_leases();
    assert!(stored(&token).await, "not expired yet");
    clock.advance(Duration::from_secs(2));
    store.expire_leases();
    assert!(
        !stored(&token).await,
        "an expired enrollment token is gone from the store"
    );
    assert!(stored(&admin).await, "tokens without expiry stay");
    // A ttl no lease can have is refused.
    assert!(
        auth::store_token(
            &store,
            &token,
            Role::Enroll,
            Some(Duration::from_secs(400 * 86_400))
        )
        .await
        .is_err()
    );
}
