//! One span per HTTP request (tower-http's `TraceLayer`), named after the
//! route template (`POST /api/chat`, `GET /api/threads/{id}/history`), never
//! the raw path: thread ids and query strings stay out of traces. A turn
//! started by a request is its own trace (see the runtime's spans).

use std::time::Duration;

use axum::extract::Request;
use axum::response::Response;
use tower_http::classify::{ServerErrorsAsFailures, SharedClassifier};
use tower_http::trace::TraceLayer;
use tracing::Span;
use tracing::field::Empty;

use crate::routes::ROUTES;

/// The route template `path` matches, or `"other"`.
pub fn route_template(method: &str, path: &str) -> &'static str {
    let want: Vec<&str> = path.trim_end_matches('/').split('/').collect();
    ROUTES
        .iter()
        .filter(|(m, _)| *m == method)
        .map(|(_, template)| *template)
        .find(|template| {
            let have: Vec<&str> = template.split('/').collect();
            have.len() == want.len()
                && have
                    .iter()
                    .zip(&want)
                    .all(|(t, w)| (t.starts_with('{') && !w.is_empty()) || t == w)
        })
        .unwrap_or(match path {
            "/" => "/",
            p if p.starts_with("/assets/") => "/assets/{file}",
            p if p.starts_with("/api/docs") => "/api/docs",
            _ => "other",
        })
}

fn make_span(req: &Request) -> Span {
    let method = req.method().as_str();
    let route = route_template(method, req.uri().path());
    span_for(method, route)
}

/// A channel's extra routes are fixed paths (the Telegram webhook), and
/// this layer only sees requests that matched one: the path is the route.
fn make_extra_span(req: &Request) -> Span {
    span_for(req.method().as_str(), req.uri().path())
}

fn span_for(method: &str, route: &str) -> Span {
    tracing::info_span!(
        "http_request",
        "otel.name" = %format_args!("{method} {route}"),
        "otel.kind" = "server",
        "http.request.method" = method,
        "http.route" = route,
        "http.response.status_code" = Empty,
        "otel.status_code" = Empty,
    )
}

fn on_response(res: &Response, _latency: Duration, span: &Span) {
    let status = res.status();
    span.record("http.response.status_code", i64::from(status.as_u16()));
    if status.is_server_error() {
        span.record("otel.status_code", "ERROR");
    }
}

/// The request-span layer's type (plain function pointers, no callbacks
/// but the span and the status).
pub type HttpTraceLayer = TraceLayer<
    SharedClassifier<ServerErrorsAsFailures>,
    fn(&Request) -> Span,
    (),
    fn(&Response, Duration, &Span),
    (),
    (),
    (),
>;

/// The layer for the application router.
pub fn layer() -> HttpTraceLayer {
    with_spans(make_span)
}

/// The route layer for a channel's extra routes (fixed paths only: the
/// span is named by the matched request's path).
pub fn extra_layer() -> HttpTraceLayer {
    with_spans(make_extra_span)
}

fn with_spans(make: fn(&Request) -> Span) -> HttpTraceLayer {
    TraceLayer::new_for_http()
        .make_span_with(make)
        .on_request(())
        .on_response(on_response as fn(&Response, Duration, &Span))
        .on_body_chunk(())
        .on_eos(())
        .on_failure(())
}

#[cfg(test)]
mod tests {
    use super::route_template;

    #[test]
    fn routes_are_named_by_template() {
        let cases = [
            ("POST", "/api/chat", "/api/chat"),
            (
                "GET",
                "/api/threads/abc-123/history",
                "/api/threads/{id}/history",
            ),
            ("DELETE", "/api/memory/facts/3", "/api/memory/{kind}/{n}"),
            ("GET", "/api/memory/status", "/api/memory/status"),
            ("GET", "/assets/app.js", "/assets/{file}"),
            ("GET", "/secret/path/of/someone", "other"),
            ("POST", "/api/threads", "other"),
        ];
        for (method, path, want) in cases {
            assert_eq!(route_template(method, path), want, "{method} {path}");
        }
    }
}
