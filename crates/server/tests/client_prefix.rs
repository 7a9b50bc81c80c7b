//! Per-client limits key an IPv6 client by its /64 (issue 31, item 5): the
//! many addresses of one /64 share the unauthenticated rate limit, through
//! the real middleware.
#![allow(clippy::unwrap_used)]

mod common;

use std::net::{IpAddr, SocketAddr};

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, StatusCode};
use opencouch_server::Limits;
use tower::ServiceExt;

async fn from(app: &Router, ip: &str) -> StatusCode {
    let ip: IpAddr = ip.parse().unwrap();
    let mut req = Request::get("/api/threads")
        .header("authorization", "Bearer not-a-token")
        .body(Body::empty())
        .unwrap();
    req.extensions_mut()
        .insert(ConnectInfo(SocketAddr::new(ip, 40_000)));
    app.clone().oneshot(req).await.unwrap().status()
}

#[tokio::test]
async fn addresses_of_one_slash_64_share_the_unauthenticated_limit() {
    let f = common::fixture_with(Limits {
        unauthenticated_rate_per_minute: 5,
        ..common::limits()
    })
    .await;
    let mut statuses = Vec::new();
    // 40 different addresses of 2001:db8:7:1::/64, one bad request each.
    for i in 1..=40u16 {
        statuses.push(from(&f.app, &format!("2001:db8:7:1:{i:x}:{i:x}::{i:x}")).await);
    }
    let refused = statuses
        .iter()
        .filter(|s| **s == StatusCode::TOO_MANY_REQUESTS)
        .count();
    assert_eq!(statuses[..5], [StatusCode::UNAUTHORIZED; 5], "{statuses:?}");
    assert_eq!(refused, 35, "{statuses:?}");
    // The neighbouring /64 and an IPv4 client have their own budgets.
    assert_eq!(
        from(&f.app, "2001:db8:7:2::1").await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(from(&f.app, "192.0.2.1").await, StatusCode::UNAUTHORIZED);
    // An IPv4-mapped address is the IPv4 client.
    for _ in 0..4 {
        assert_eq!(from(&f.app, "192.0.2.1").await, StatusCode::UNAUTHORIZED);
    }
    assert_eq!(
        from(&f.app, "::ffff:192.0.2.1").await,
        StatusCode::TOO_MANY_REQUESTS
    );
}

async fn via_proxy(app: &Router, forwarded_for: &str) -> StatusCode {
    let mut req = Request::get("/api/threads")
        .header("authorization", "Bearer not-a-token")
        .header("x-forwarded-for", forwarded_for)
        .body(Body::empty())
        .unwrap();
    req.extensions_mut()
        .insert(ConnectInfo(SocketAddr::new([127, 0, 0, 1].into(), 40_000)));
    app.clone().oneshot(req).await.unwrap().status()
}

/// Behind a trusted reverse proxy (`OPENCOUCH_TRUSTED_PROXIES`), every
/// client arrives from the proxy's address: the per-address limit keys each
/// by `X-Forwarded-For` instead, so one noisy client does not exhaust
/// everyone's budget. Without the setting the header is ignored.
#[tokio::test]
async fn behind_a_trusted_proxy_each_forwarded_client_has_its_own_budget() {
    let trusted = common::fixture_with(Limits {
        unauthenticated_rate_per_minute: 2,
        trusted_proxies: vec![("127.0.0.1".parse().unwrap(), 32)],
        ..common::limits()
    })
    .await;
    for _ in 0..2 {
        assert_eq!(
            via_proxy(&trusted.app, "203.0.113.1").await,
            StatusCode::UNAUTHORIZED
        );
    }
    assert_eq!(
        via_proxy(&trusted.app, "203.0.113.1").await,
        StatusCode::TOO_MANY_REQUESTS
    );
    // Another client behind the same proxy, and a forged left-most entry.
    assert_eq!(
        via_proxy(&trusted.app, "203.0.113.2").await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        via_proxy(&trusted.app, "198.51.100.9, 203.0.113.1").await,
        StatusCode::TOO_MANY_REQUESTS
    );

    let untrusted = common::fixture_with(Limits {
        unauthenticated_rate_per_minute: 2,
        ..common::limits()
    })
    .await;
    for _ in 0..2 {
        assert_eq!(
            via_proxy(&untrusted.app, "203.0.113.1").await,
            StatusCode::UNAUTHORIZED
        );
    }
    assert_eq!(
        via_proxy(&untrusted.app, "203.0.113.2").await,
        StatusCode::TOO_MANY_REQUESTS
    );
}
