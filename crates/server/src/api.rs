//! Routes and handlers.

use std::convert::Infallible;
use std::time::Instant;

use axum::extract::{Path, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, patch, post};
use axum::{Json, Router};
use futures::StreamExt;
use opencouch_core::MemoryMode;
use opencouch_runtime::service::{self, EndedVia, Feedback, ItemKind, kit};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::AppState;
use crate::auth::{AuthMode, LOCAL_OWNER, bearer_token};
use crate::chat::{Caller, turn_events};
pub use crate::chat::{ChatRequest, Limited, MAX_THREAD_ID_CHARS, Owner, Unverified};
use crate::error::{ApiError, parse_json, parse_required};

/// The OpenAPI document, maintained by hand and checked by a test.
pub const OPENAPI_JSON: &str = include_str!("../assets/openapi.json");

pub use crate::routes::ROUTES;

/// The full application router. `/metrics` is not on it: see
/// [`metrics_router`].
pub fn router(state: AppState) -> Router {
    let protected = Router::new()
        .route("/api/chat", post(chat))
        .route("/api/chat/stream", post(chat_stream))
        .route("/api/chat/ws", get(crate::ws::chat_ws))
        .route("/api/threads", get(list_threads))
        .route("/api/threads/{id}/state", get(thread_state))
        .route("/api/threads/{id}/history", get(thread_history))
        .route("/api/threads/{id}/session-status", get(session_status))
        .route("/api/threads/{id}/end", post(end_thread))
        .route("/api/memory/status", get(memory_status))
        .route("/api/memory/recall", patch(memory_recall))
        .route("/api/memory/progress", get(memory_progress))
        .route("/api/memory/{kind}", get(memory_list))
        .route("/api/memory/{kind}/{n}", delete(memory_delete))
        .route(
            "/api/safety-plan",
            get(crate::safety_plan::get_plan)
                .put(crate::safety_plan::put_plan)
                .delete(crate::safety_plan::delete_plan),
        )
        .route("/api/export", get(crate::owner_data::export))
        .route("/api/forget-me", post(crate::owner_data::forget_me_prepare))
        .route(
            "/api/forget-me/confirm",
            post(crate::owner_data::forget_me_confirm),
        )
        .route("/api/voice/realtime/session", post(crate::voice::session))
        .route("/api/voice/realtime/tools", post(crate::voice::tools))
        .route(
            "/api/voice/realtime/turn-policy",
            post(crate::voice::turn_policy),
        )
        .route("/api/voice/realtime/turn", post(crate::voice::turn))
        .route("/api/voice/realtime/end", post(crate::voice::end))
        .route_layer(middleware::from_fn_with_state(state.clone(), require_owner))
        // Transcripts and memory: never cached (errors included).
        .route_layer(middleware::map_response(crate::guard::no_store));
    let body_limit = state.limits().body_limit_bytes;
    Router::new()
        .route("/", get(crate::web::index))
        .route("/assets/app.js", get(crate::web::app_js))
        .route("/assets/app.css", get(crate::web::app_css))
        .route("/api/docs", get(crate::web::docs))
        .route("/api/docs/init.js", get(crate::web::docs_init))
        .route(
            "/api/docs/assets/{version}/{file}",
            get(crate::web::swagger_asset),
        )
        .route("/api/health", get(health))
        // Outside the token guard: the verified lines for anyone, the plan
        // for a caller whose token checks out (see `safety_plan.rs`).
        .route(
            "/api/sos",
            get(crate::safety_plan::sos).layer(middleware::map_response(crate::guard::no_store)),
        )
        .route("/api/openapi.json", get(openapi))
        .merge(protected)
        .fallback(not_found_route)
        .layer(axum::extract::DefaultBodyLimit::max(body_limit))
        .layer(middleware::from_fn_with_state(state.clone(), timeout))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            crate::guard::check_request,
        ))
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(
            panic_response,
        ))
        // Outermost, so every answer (timeouts, panics, routing errors)
        // is JSON with `nosniff`.
        .layer(middleware::map_response(crate::guard::json_errors))
        .layer(middleware::map_response(crate::guard::nosniff))
        .layer(middleware::from_fn_with_state(state.clone(), count_status))
        .layer(crate::trace::layer())
        .with_state(state)
}

/// A channel's extra routes (a webhook) with what every application route
/// gets from [`router`] that needs no guard: the HTTP request span (named
/// by its fixed path) and the status count of `/metrics`.
pub(crate) fn observed(routes: Router, state: &AppState) -> Router {
    routes
        .route_layer(middleware::from_fn_with_state(state.clone(), count_status))
        .route_layer(crate::trace::extra_layer())
}

/// The router of the separate metrics address (`metrics_listen`): only
/// `GET /metrics`, no token. Metrics are server-wide (crisis turns of every
/// user), so they are never served on the API address.
pub fn metrics_router(state: AppState) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .fallback(not_found_route)
        .layer(middleware::map_response(crate::guard::json_errors))
        .layer(middleware::map_response(crate::guard::nosniff))
        .with_state(state)
}

fn panic_response(_err: Box<dyn std::any::Any + Send + 'static>) -> Response {
    tracing::error!("a request handler panicked");
    ApiError::internal().into_response()
}

async fn not_found_route() -> ApiError {
    ApiError::not_found("route")
}

async fn timeout(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    req.extensions_mut()
        .insert(crate::extract::BodyTimeout(state.limits().body_timeout));
    match tokio::time::timeout(state.limits().request_timeout, next.run(req)).await {
        Ok(resp) => resp,
        Err(_) => {
            state.metrics().rejected("timeout");
            ApiError::unavailable("timeout", "the request took too long").into_response()
        }
    }
}

/// The routes an [`Unverified`] caller may reach.
fn is_chat_route(path: &str) -> bool {
    matches!(
        path,
        "/api/chat"
            | "/api/chat/stream"
            | "/api/chat/ws"
            | "/api/voice/realtime/turn-policy"
            | "/api/voice/realtime/turn"
    )
}

/// The routes a caller over a rate limit may still reach, gate only (the
/// WebSocket runs one turn too: a crisis message gets its reply, anything
/// else a `rate_limited` error event).
fn is_single_turn_route(path: &str) -> bool {
    matches!(
        path,
        "/api/chat"
            | "/api/chat/stream"
            | "/api/chat/ws"
            | "/api/voice/realtime/turn-policy"
            | "/api/voice/realtime/turn"
    )
}

/// Over a limit: a single chat turn still reaches the crisis gate
/// ([`Limited`]); any other request gets 429.
async fn over_limit(
    state: &AppState,
    mut req: Request,
    next: Next,
    wait: std::time::Duration,
) -> Response {
    if is_single_turn_route(req.uri().path()) {
        req.extensions_mut().insert(Limited(wait));
        return next.run(req).await;
    }
    rate_limited(state, wait)
}

/// 429 with `Retry-After` (whole seconds, at least 1).
fn rate_limited(state: &AppState, wait: std::time::Duration) -> Response {
    state.metrics().rejected("rate_limited");
    let mut resp = ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        "rate_limited",
        "too many requests; try again shortly",
    )
    .into_response();
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    resp.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(secs.max(1)));
    resp
}

async fn require_owner(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    let now = Instant::now();
    let owner = match state.auth() {
        AuthMode::Local => LOCAL_OWNER.to_owned(),
        AuthMode::Tokens(users) => {
            // Requests without a valid token are limited per client address
            // before any token lookup.
            // A token that checked out recently is not held back by this
            // limit (an anonymous client at the same address, or behind the
            // same proxy, must not lock a valid user out); it is still
            // verified below.
            let client = crate::conn::client_key(&req, &state.limits().trusted_proxies);
            let token = bearer_token(req.headers()).map(str::to_owned);
            let known = token
                .as_deref()
                .is_some_and(|t| state.tokens().known_good(t, now));
            if !known && let Err(wait) = state.unauthenticated().check(&client, now) {
                return over_limit(&state, req, next, wait).await;
            }
            let verified = match token.as_deref() {
                Some(t) => state.tokens().verify(users, t, now).await,
                None => Ok(None),
            };
            match verified {
                Ok(Some(owner)) => owner,
                Ok(None) => {
                    let _ = state.unauthenticated().take(&client, now);
                    state.metrics().rejected("unauthorized");
                    return ApiError::unauthorized().into_response();
                }
                Err(e) if token.is_some() && is_chat_route(req.uri().path()) => {
                    tracing::error!(error = %e, "user store unavailable; chat runs gate-only");
                    let key = format!(
                        "unverified:{}",
                        crate::auth::hash_token(token.as_deref().unwrap_or(""))
                    );
                    if let Err(wait) = state.rate().take(&key, now) {
                        return rate_limited(&state, wait);
                    }
                    req.extensions_mut().insert(Unverified);
                    return next.run(req).await;
                }
                Err(e) => {
                    state.metrics().rejected("storage_unavailable");
                    return ApiError::from(e).into_response();
                }
            }
        }
    };
    if let Err(wait) = state.rate().take(&owner, now) {
        return over_limit(&state, req, next, wait).await;
    }
    req.extensions_mut().insert(Owner(owner));
    next.run(req).await
}

pub use crate::extract::{Body, Params};

fn reject(state: &AppState, e: ApiError) -> ApiError {
    state.metrics().rejected(e.code);
    e
}

async fn openapi() -> Response {
    (
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        OPENAPI_JSON,
    )
        .into_response()
}

async fn health(State(state): State<AppState>) -> Response {
    let svc = state.service();
    let store_ok = state.store_ok().await;
    let body = json!({
        "status": if store_ok { "ok" } else { "degraded" },
        "store": {"backend": svc.storage_label(MemoryMode::Persistent), "ok": store_ok},
        "model": {"mode": svc.mode().as_str()},
        "auth": if matches!(state.auth(), AuthMode::Local) { "local" } else { "token" },
        "crisis_gate": {
            "semantic_signal": svc.semantic_signal(),
            "semantic_model": svc.semantic_status().map_or("off", |s| s.label()),
        },
        "trace_export": svc.trace_export(),
    });
    let status = if store_ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body)).into_response()
}

async fn metrics(State(state): State<AppState>) -> Response {
    use std::fmt::Write as _;
    let svc = state.service();
    let mut body = state.metrics().render();
    let _ = writeln!(
        body,
        "# HELP opencouch_turns_running Turns running now (their tasks, whether or not a client listens).\n# TYPE opencouch_turns_running gauge\nopencouch_turns_running {}",
        svc.running_turns()
    );
    let _ = writeln!(
        body,
        "# HELP opencouch_info The server's mode.\n# TYPE opencouch_info gauge\nopencouch_info{{mode=\"{}\",semantic_signal=\"{}\"}} 1",
        svc.mode().as_str(),
        svc.semantic_signal()
    );
    render_background(&mut body, &state).await;
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        body,
    )
        .into_response()
}

/// The gauges read at scrape time: open sessions (a count in the store;
/// left out when the store does not answer) and the background queues.
async fn render_background(body: &mut String, state: &AppState) {
    use std::fmt::Write as _;
    let svc = state.service();
    let _ = writeln!(
        body,
        "# HELP opencouch_sessions_active Open sessions by memory mode (with PostgreSQL, every instance's).\n# TYPE opencouch_sessions_active gauge"
    );
    for mode in [MemoryMode::Persistent, MemoryMode::Incognito] {
        match svc.open_sessions(mode).await {
            Ok(n) => {
                let _ = writeln!(
                    body,
                    "opencouch_sessions_active{{memory_mode=\"{}\"}} {n}",
                    mode.as_str()
                );
            }
            Err(e) => tracing::debug!(code = e.code().as_str(), "open sessions not counted"),
        }
    }
    let q = svc.queue_depths();
    let _ = writeln!(
        body,
        "# HELP opencouch_queue_depth Background work waiting or running: memory extraction jobs not yet applied, crisis-log appends in progress, voice safety audits queued or running.\n# TYPE opencouch_queue_depth gauge"
    );
    let _ = writeln!(
        body,
        "opencouch_queue_depth{{queue=\"memory_extraction\"}} {}",
        q.memory_extraction
    );
    let _ = writeln!(
        body,
        "opencouch_queue_depth{{queue=\"crisis_log\"}} {}",
        q.crisis_log
    );
    if let Some(voice) = state.voice() {
        // The auditor's counters: accepted minus finished (completed or
        // timed out) is what waits or runs.
        let a = voice.audit_stats();
        let _ = writeln!(
            body,
            "opencouch_queue_depth{{queue=\"voice_audit\"}} {}",
            a.submitted
                .saturating_sub(a.completed.saturating_add(a.timed_out))
        );
        let _ = writeln!(
            body,
            "# HELP opencouch_queue_dropped_total Background work dropped: voice safety audits refused by a full queue or left undone at shutdown.\n# TYPE opencouch_queue_dropped_total counter\nopencouch_queue_dropped_total{{queue=\"voice_audit\"}} {}",
            a.dropped
        );
    }
}

/// Counts every response of the application router by status code.
async fn count_status(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let res = next.run(req).await;
    state.metrics().http(res.status().as_u16());
    res
}

async fn chat(
    State(state): State<AppState>,
    caller: Caller,
    Body(body): Body,
) -> Result<Response, ApiError> {
    let req: ChatRequest = parse_required(&body).map_err(|e| reject(&state, e))?;
    let turn = state
        .prepare_turn(&caller, req)
        .map_err(|e| reject(&state, e))?;
    // The turn runs in the runtime's task: a request dropped before the
    // commit cancels a turn below crisis level (nothing is written); a
    // crisis turn always runs to its end.
    match turn.run().await {
        Ok(output) => Ok(Json(output).into_response()),
        // Over a limit and not a crisis: the 429 it would have had.
        Err(_) if matches!(caller, Caller::Limited(_)) => {
            let Caller::Limited(wait) = caller else {
                return Err(ApiError::internal());
            };
            Ok(rate_limited(&state, wait))
        }
        Err(e) => Err(e.into()),
    }
}

async fn chat_stream(
    State(state): State<AppState>,
    caller: Caller,
    Body(body): Body,
) -> Result<Response, ApiError> {
    let req: ChatRequest = parse_required(&body).map_err(|e| reject(&state, e))?;
    let turn = state
        .prepare_turn(&caller, req)
        .map_err(|e| reject(&state, e))?;
    // Over a limit: the gate decides before any stream starts, so a
    // non-crisis message still gets a plain 429.
    if let Caller::Limited(wait) = caller {
        return match turn.run().await {
            Ok(output) => {
                let output = Box::new(output);
                let events = futures::stream::iter([
                    opencouch_core::StreamEvent::ResponseReady {
                        output: output.clone(),
                    },
                    opencouch_core::StreamEvent::Done { output },
                ])
                .map(|ev| {
                    Ok::<_, Infallible>(
                        Event::default()
                            .event(ev.name())
                            .data(kit::wire_event(&ev).to_string()),
                    )
                });
                Ok(Sse::new(events.boxed())
                    .keep_alive(KeepAlive::default())
                    .into_response())
            }
            Err(_) => Ok(rate_limited(&state, wait)),
        };
    }
    let events = turn_events(turn.stream()).map(|v| {
        let name = v
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("error")
            .to_owned();
        Ok::<_, Infallible>(Event::default().event(name).data(v.to_string()))
    });
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// `GET /api/threads` query.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Maximum rows (default 20, at most 100).
    pub limit: Option<usize>,
    /// Where to continue: the `cursor` of the previous page's
    /// `Link: <…>; rel="next"` header (opaque).
    pub cursor: Option<String>,
}

/// `GET /api/threads/{id}/history` query.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistoryQuery {
    /// Maximum rows (default 50, at most 500).
    pub limit: Option<usize>,
    /// Only messages whose index is below this: the first index of the
    /// page already read (its `Link: <…>; rel="next"` header says so).
    pub before: Option<u64>,
}

/// A path segment with everything but unreserved characters
/// percent-encoded (RFC 3986).
fn path_segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A JSON array response, with `Link: <next>; rel="next"` when another
/// page follows.
fn page_response(items: Vec<Value>, next: Option<String>) -> Result<Response, ApiError> {
    let mut resp = Json(Value::Array(items)).into_response();
    if let Some(next) = next {
        let link = axum::http::HeaderValue::from_str(&format!("<{next}>; rel=\"next\""))
            .map_err(|_| ApiError::internal())?;
        resp.headers_mut().insert(header::LINK, link);
    }
    Ok(resp)
}

/// One page of the caller's threads, most recently updated first, read by
/// owner from an index (nothing other owners store can hide or push out a
/// thread); `Link: rel="next"` names the next page.
async fn list_threads(
    State(state): State<AppState>,
    owner: Owner,
    Params(q): Params<ListQuery>,
) -> Result<Response, ApiError> {
    let limit = q.limit.unwrap_or(20).clamp(1, 100);
    let page = state
        .service()
        .threads(&owner.caller(), limit, q.cursor.as_deref())
        .await?;
    let list: Vec<Value> = page
        .threads
        .into_iter()
        .map(|t| json!({"thread_id": t.thread_id, "turn_count": t.turn_count, "message_count": t.message_count, "updated_at": t.updated_at}))
        .collect();
    // The cursor is hex: safe in a query string as it is.
    let next = page
        .next
        .map(|c| format!("/api/threads?limit={limit}&cursor={c}"));
    page_response(list, next)
}

async fn thread_state(
    State(state): State<AppState>,
    owner: Owner,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let thread = state
        .service()
        .thread(&owner.caller(), MemoryMode::Persistent, &id)
        .await?
        .ok_or_else(|| ApiError::not_found("thread"))?;
    Ok(Json(
        serde_json::to_value(&thread).map_err(|_| ApiError::internal())?,
    ))
}

async fn thread_history(
    State(state): State<AppState>,
    owner: Owner,
    Path(id): Path<String>,
    Params(q): Params<HistoryQuery>,
) -> Result<Response, ApiError> {
    let limit = q.limit.unwrap_or(50).clamp(1, 500);
    let rows = state
        .service()
        .history(&owner.caller(), &id, limit, q.before)
        .await?;
    // Older messages remain when this page does not start at index 0.
    let next = rows
        .first()
        .map(|e| e.index)
        .filter(|first| *first > 0)
        .map(|first| {
            format!(
                "/api/threads/{}/history?limit={limit}&before={first}",
                path_segment(&id)
            )
        });
    let list: Vec<Value> = rows
        .into_iter()
        .map(|e| {
            json!({
                "index": e.index,
                "role": e.message.role,
                "content": e.message.content,
                "response_style": e.message.response_style,
                "at": e.message.at,
            })
        })
        .collect();
    page_response(list, next)
}

async fn session_status(
    State(state): State<AppState>,
    owner: Owner,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let status = state.service().session_state(&owner.caller(), &id).await?;
    let has = status != service::SessionState::Absent;
    Ok(Json(
        json!({"has_active_session": has, "status": status.as_str()}),
    ))
}

/// `POST /api/threads/{id}/end` body (optional).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndRequest {
    /// positive, negative or skip.
    #[serde(default)]
    pub feedback: Option<Feedback>,
    /// Which runtime holds the thread (default persistent).
    #[serde(default)]
    pub memory_mode: Option<MemoryMode>,
}

async fn end_thread(
    State(state): State<AppState>,
    owner: Owner,
    Path(id): Path<String>,
    Body(body): Body,
) -> Result<Json<Value>, ApiError> {
    let req: EndRequest = parse_json(&body, true).map_err(|e| reject(&state, e))?;
    let mode = req.memory_mode.unwrap_or(MemoryMode::Persistent);
    let svc = state.service();
    if svc.thread(&owner.caller(), mode, &id).await?.is_none() {
        return Err(ApiError::not_found("thread"));
    }
    let outcome = svc
        .end_session(&owner.caller(), &id, mode, req.feedback, EndedVia::Api)
        .await?;
    Ok(Json(match outcome.summary {
        Some(s) => json!({
            "finalized": outcome.finalized,
            "summary": s.summary,
            "themes": s.themes,
            "mood_opened": s.mood_opened,
            "mood_closed": s.mood_closed,
            "turn_count": s.turn_count,
            "open_loops": s.open_loops,
            "resolved_threads": s.resolved_threads,
            "detail": outcome.detail,
            "feedback_recorded": outcome.feedback_recorded,
        }),
        None => json!({
            "finalized": outcome.finalized,
            "summary": null,
            "detail": outcome.detail,
            "feedback_recorded": outcome.feedback_recorded,
        }),
    }))
}

async fn memory_status(
    State(state): State<AppState>,
    owner: Owner,
) -> Result<Json<Value>, ApiError> {
    let status = state.service().memory_status(&owner.0).await?;
    Ok(Json(json!({
        "memory_mode": "persistent",
        "owner_id": owner.0,
        "counts": {"semantic": status.facts, "episodic": status.sessions, "procedural": status.rules},
        "proactive_recall_enabled": status.proactive_recall,
    })))
}

/// `PATCH /api/memory/recall` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecallRequest {
    /// Whether proactive recall is on.
    pub enabled: bool,
}

async fn memory_recall(
    State(state): State<AppState>,
    owner: Owner,
    Body(body): Body,
) -> Result<Json<Value>, ApiError> {
    let req: RecallRequest = parse_required(&body).map_err(|e| reject(&state, e))?;
    let svc = state.service();
    let out = svc.set_recall(&owner.0, req.enabled).await?;
    let status = svc.memory_status(&owner.0).await?;
    Ok(Json(
        json!({"owner_id": owner.0, "proactive_recall_enabled": status.proactive_recall, "detail": out.reply}),
    ))
}

fn target_kind(kind: &str) -> Option<ItemKind> {
    match kind {
        "facts" => Some(ItemKind::Fact),
        "sessions" => Some(ItemKind::Session),
        "rules" => Some(ItemKind::Rule),
        _ => None,
    }
}

async fn memory_list(
    State(state): State<AppState>,
    owner: Owner,
    Path(kind): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let kind = target_kind(&kind).ok_or_else(|| ApiError::not_found("memory list"))?;
    let rows = state.service().memory_list(&owner.0, kind).await?;
    let list: Vec<Value> = rows
        .into_iter()
        .enumerate()
        .map(|(i, preview)| json!({"index": i + 1, "text": preview}))
        .collect();
    Ok(Json(Value::Array(list)))
}

/// `DELETE /api/memory/{kind}/{n}`: the request is the confirmation, so
/// the prepared deletion is confirmed at once (the page asked first).
async fn memory_delete(
    State(state): State<AppState>,
    owner: Owner,
    Path((kind, n)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let kind = target_kind(&kind).ok_or_else(|| ApiError::not_found("memory list"))?;
    let index: usize = n
        .parse()
        .ok()
        .filter(|i| *i >= 1)
        .ok_or_else(|| ApiError::not_found("memory item"))?;
    let svc = state.service();
    let prepared = svc.forget_prepare(&owner.0, kind, index).await?;
    let Some(pending) = prepared.pending else {
        return Err(ApiError::not_found("memory item"));
    };
    let done = svc.forget_confirm(&owner.0, &pending).await?;
    Ok(Json(json!({"deleted": done.changed, "detail": done.reply})))
}

async fn memory_progress(
    State(state): State<AppState>,
    owner: Owner,
) -> Result<Json<Value>, ApiError> {
    let progress = state.service().progress(&owner.0).await?;
    let sessions: Vec<Value> = progress
        .sessions
        .iter()
        .map(|a| {
            json!({
                "started_at": a.started_at,
                "ended_at": a.ended_at,
                "turn_count": a.turn_count,
                "mood_opened": a.mood_opened,
                "mood_closed": a.mood_closed,
                "score_opened": crate::progress::mood_score(&a.mood_opened),
                "score_closed": crate::progress::mood_score(&a.mood_closed),
            })
        })
        .collect();
    let exercises: Vec<Value> = progress
        .exercises_completed
        .into_iter()
        .map(|(id, count)| json!({"id": id, "name": crate::progress::exercise_name(&id), "count": count}))
        .collect();
    Ok(Json(json!({
        "sessions": sessions,
        "exercises_completed": exercises,
        "mood_scale": {"min": crate::progress::MOOD_MIN, "max": crate::progress::MOOD_MAX},
    })))
}
