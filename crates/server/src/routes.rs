//! The route table, shared by the router's docs and tests and the request
//! spans (which are named by route template).

/// Every route as (method, path), for docs and tests.
pub const ROUTES: &[(&str, &str)] = &[
    ("GET", "/api/health"),
    ("GET", "/api/openapi.json"),
    ("GET", "/metrics"),
    ("POST", "/api/chat"),
    ("POST", "/api/chat/stream"),
    ("GET", "/api/chat/ws"),
    ("GET", "/api/threads"),
    ("GET", "/api/threads/{id}/state"),
    ("GET", "/api/threads/{id}/history"),
    ("GET", "/api/threads/{id}/session-status"),
    ("POST", "/api/threads/{id}/end"),
    ("GET", "/api/memory/status"),
    ("PATCH", "/api/memory/recall"),
    ("GET", "/api/memory/progress"),
    ("GET", "/api/memory/{kind}"),
    ("DELETE", "/api/memory/{kind}/{n}"),
    ("GET", "/api/safety-plan"),
    ("PUT", "/api/safety-plan"),
    ("DELETE", "/api/safety-plan"),
    ("GET", "/api/sos"),
    ("GET", "/api/export"),
    ("POST", "/api/forget-me"),
    ("POST", "/api/forget-me/confirm"),
    ("POST", "/api/voice/realtime/session"),
    ("POST", "/api/voice/realtime/tools"),
    ("POST", "/api/voice/realtime/turn-policy"),
    ("POST", "/api/voice/realtime/turn"),
    ("POST", "/api/voice/realtime/end"),
];
