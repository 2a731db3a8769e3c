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
    let before = h.revision().await;
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
    let before = h.revision().await;
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
