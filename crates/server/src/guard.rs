//! Which requests the server answers at all: `Host` and `Origin` checks,
//! the JSON content type, and the response headers every answer carries.
//!
//! * **Host (local mode).** A local-mode server has no sign-in, so a web
//!   page must not be able to reach it under another name (DNS rebinding:
//!   `attacker.example` resolving to 127.0.0.1). Only `Host` values naming
//!   the loopback address the server listens on are answered — `localhost`,
//!   `127.0.0.1`, `[::1]` or the listening address itself, with its port —
//!   plus the hosts of `OPENCOUCH_ALLOWED_ORIGINS`. A request without
//!   `Host` (not a browser) is answered.
//! * **Origin (every mode).** Browsers send `Origin` on cross-site
//!   requests. An API request (`/api/…`, `/metrics`) or any state-changing
//!   request whose `Origin` is neither this server's own (same host and
//!   port as `Host`) nor in `OPENCOUCH_ALLOWED_ORIGINS` is refused with 403,
//!   WebSocket upgrades included. Requests without `Origin` (curl, scripts)
//!   pass.
//! * **Content type.** A request body on a JSON route must be sent as
//!   `application/json` (415 otherwise), so an HTML form or a `text/plain`
//!   "simple request" can never be parsed as an API call.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::AppState;
use crate::auth::AuthMode;
use crate::error::{ApiError, ErrorBody};

/// Host names that always mean "this machine" in local mode.
const LOOPBACK_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "[::1]"];

/// Checks `Host` (local mode) and `Origin` before anything else runs.
pub(crate) async fn check_request(
    State(state): State<AppState>,
    req: Request,
    next: Next,
) -> Response {
    let host = req
        .headers()
        .get(header::HOST)
        .map(|h| h.to_str().unwrap_or("\u{0}"));
    if matches!(state.auth(), AuthMode::Local)
        && let Some(host) = host
        && !local_host_ok(host, &state)
    {
        state.metrics().rejected("misdirected_host");
        return ApiError::new(
            StatusCode::MISDIRECTED_REQUEST,
            "misdirected_host",
            "this server answers only on its loopback address (e.g. http://127.0.0.1:PORT/)",
        )
        .into_response();
    }
    let path = req.uri().path();
    let api = path == "/metrics" || path == "/api" || path.starts_with("/api/");
    let safe = matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    if (api || !safe)
        && let Some(origin) = req.headers().get(header::ORIGIN)
        && !origin_ok(origin, host, &state.limits().allowed_origins)
    {
        state.metrics().rejected("forbidden_origin");
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden_origin",
            "requests from other web sites are not accepted (see OPENCOUCH_ALLOWED_ORIGINS)",
        )
        .into_response();
    }
    next.run(req).await
}

/// Splits `host[:port]` (IPv6 literals in brackets).
fn split_host(authority: &str) -> (&str, Option<&str>) {
    match authority.rsplit_once(':') {
        Some((h, p)) if !p.contains(']') => (h, Some(p)),
        _ => (authority, None),
    }
}

/// Whether a `Host` value names this local-mode server.
fn local_host_ok(host: &str, state: &AppState) -> bool {
    let host = host.trim().to_ascii_lowercase();
    let allowed = &state.limits().allowed_origins;
    if allowed.iter().any(|o| authority_matches(o, &host)) {
        return true;
    }
    let (name, port) = split_host(&host);
    let listen = state.listen_addr();
    let own = listen.map(|a| match a.ip() {
        std::net::IpAddr::V4(ip) => ip.to_string(),
        std::net::IpAddr::V6(ip) => format!("[{ip}]"),
    });
    let name_ok = LOOPBACK_NAMES.contains(&name) || own.as_deref() == Some(name);
    let port_ok = match (listen, port) {
        (None, _) => true,
        (Some(a), Some(p)) => p.parse::<u16>().is_ok_and(|p| p == a.port()),
        (Some(a), None) => a.port() == 80,
    };
    name_ok && port_ok
}

/// Whether a normalized origin (`scheme://host[:port]`, default port
/// dropped) has the authority `host` (a `Host` header value, lower case).
fn authority_matches(origin: &str, host: &str) -> bool {
    let Some((scheme, authority)) = origin.split_once("://") else {
        return false;
    };
    let default = if scheme == "https" { ":443" } else { ":80" };
    authority == host.strip_suffix(default).unwrap_or(host)
}

/// Whether `Origin` is this server's own or an allowed one.
fn origin_ok(origin: &HeaderValue, host: Option<&str>, allowed: &[String]) -> bool {
    let Some(origin) = origin
        .to_str()
        .ok()
        .and_then(opencouch_config::normalize_origin)
    else {
        // `null` (sandboxed frames, file:// pages) and anything malformed.
        return false;
    };
    if allowed.contains(&origin) {
        return true;
    }
    host.is_some_and(|h| authority_matches(&origin, &h.trim().to_ascii_lowercase()))
}

/// Checks the content type of a JSON route's body: `application/json`
/// (any parameters, e.g. `charset=utf-8`); no content type only with an
/// empty body.
///
/// # Errors
/// 415 `unsupported_media_type`.
pub(crate) fn require_json(headers: &HeaderMap, body_empty: bool) -> Result<(), ApiError> {
    let ok = match headers.get(header::CONTENT_TYPE) {
        None => body_empty,
        Some(v) => v.to_str().is_ok_and(|ct| {
            ct.split(';')
                .next()
                .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
        }),
    };
    if ok {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "send the request body as JSON with Content-Type: application/json",
        ))
    }
}

/// Every response: the browser must not guess content types.
pub(crate) async fn nosniff(mut resp: Response) -> Response {
    resp.headers_mut()
        .entry(header::X_CONTENT_TYPE_OPTIONS)
        .or_insert(HeaderValue::from_static("nosniff"));
    resp
}

/// Responses that may carry transcripts or memory: never stored by a
/// browser or a proxy.
pub(crate) async fn no_store(mut resp: Response) -> Response {
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

/// Every error is JSON: an error response produced outside our handlers
/// (405 from routing, a path segment that is not UTF-8, a refused WebSocket
/// upgrade) gets a `{code, message}` body; its status and other headers
/// (`Allow`, `Retry-After`) are kept.
pub(crate) async fn json_errors(resp: Response) -> Response {
    let status = resp.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return resp;
    }
    let is_json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/json"));
    if is_json {
        return resp;
    }
    let (code, message) = match status {
        StatusCode::BAD_REQUEST => ("bad_request", "the request is not valid"),
        StatusCode::NOT_FOUND => ("not_found", "route not found"),
        StatusCode::METHOD_NOT_ALLOWED => (
            "method_not_allowed",
            "this method is not allowed on this route",
        ),
        StatusCode::PAYLOAD_TOO_LARGE => ("body_too_large", "the request body is too large"),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => (
            "unsupported_media_type",
            "send the request body as JSON with Content-Type: application/json",
        ),
        StatusCode::UPGRADE_REQUIRED => {
            ("upgrade_required", "this route needs a WebSocket upgrade")
        }
        StatusCode::TOO_MANY_REQUESTS => ("rate_limited", "too many requests; try again shortly"),
        s if s.is_server_error() => ("internal", "internal error"),
        _ => ("bad_request", "the request could not be handled"),
    };
    let (mut parts, _) = resp.into_parts();
    let body = serde_json::to_vec(&ErrorBody { code, message }).unwrap_or_default();
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authorities_match_with_default_ports() {
        assert!(authority_matches("http://127.0.0.1:8080", "127.0.0.1:8080"));
        assert!(!authority_matches(
            "http://127.0.0.1:8080",
            "127.0.0.1:8081"
        ));
        assert!(authority_matches("https://couch.example", "couch.example"));
        assert!(authority_matches(
            "https://couch.example",
            "couch.example:443"
        ));
        assert!(!authority_matches(
            "https://couch.example",
            "couch.example:80"
        ));
        assert!(authority_matches("http://[::1]:8080", "[::1]:8080"));
        assert!(!authority_matches("http://evil.example", "127.0.0.1:8080"));
    }

    #[test]
    fn origins_are_same_origin_allowed_or_refused() {
        let h = |s: &'static str| HeaderValue::from_static(s);
        let allowed = vec!["http://localhost:3000".to_owned()];
        let host = Some("127.0.0.1:8080");
        assert!(origin_ok(&h("http://127.0.0.1:8080"), host, &allowed));
        assert!(origin_ok(&h("HTTP://127.0.0.1:8080"), host, &allowed));
        assert!(origin_ok(&h("http://localhost:3000"), host, &allowed));
        assert!(!origin_ok(&h("http://evil.example"), host, &allowed));
        assert!(!origin_ok(&h("http://127.0.0.1:9999"), host, &allowed));
        assert!(!origin_ok(&h("null"), host, &allowed));
        assert!(!origin_ok(&h("http://127.0.0.1:8080"), None, &[]));
    }

    #[test]
    fn json_content_type_is_required_for_a_body() {
        let with = |ct: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
            h
        };
        assert!(require_json(&with("application/json"), false).is_ok());
        assert!(require_json(&with("Application/JSON; charset=utf-8"), false).is_ok());
        assert!(require_json(&HeaderMap::new(), true).is_ok());
        for ct in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/jsonp",
        ] {
            let e = require_json(&with(ct), false).unwrap_err();
            assert_eq!(e.status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{ct}");
        }
        assert!(require_json(&with("text/plain"), true).is_err());
        assert!(require_json(&HeaderMap::new(), false).is_err());
    }
}
