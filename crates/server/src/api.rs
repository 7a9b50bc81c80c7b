//! Routes and handlers.

use std::collections::HashMap;
use std::convert::Infallible;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::ws::{Message as WsMessage, WebSocket, WebSocketUpgrade};
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request, State};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, patch, post};
use axum::{Json, Router};
use futures::{SinkExt, Stream, StreamExt};
use opencouch_core::{AgentInput, AgentOutput, Channel, MemoryMode, ModelTier, StreamEvent};
use opencouch_memory::control::{
    ControlContext, ControlError, MemoryAction, PendingChange, TargetKind,
};
use opencouch_store::FeedbackLabel;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::AppState;
use crate::auth::{AuthMode, LOCAL_OWNER};
use crate::error::{ApiError, parse_json, parse_required};

/// The OpenAPI document, maintained by hand and checked by a test.
pub const OPENAPI_JSON: &str = include_str!("../assets/openapi.json");

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
];

/// The full application router.
pub fn router(state: AppState) -> Router {
    let protected = Router::new()
        .route("/metrics", get(metrics))
        .route("/api/chat", post(chat))
        .route("/api/chat/stream", post(chat_stream))
        .route("/api/chat/ws", get(chat_ws))
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
        .route_layer(middleware::from_fn_with_state(state.clone(), require_owner));
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
        .route("/api/openapi.json", get(openapi))
        .merge(protected)
        .fallback(not_found_route)
        .layer(middleware::map_response(nosniff))
        .layer(middleware::from_fn_with_state(state.clone(), timeout))
        .layer(axum::extract::DefaultBodyLimit::max(body_limit))
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(
            panic_response,
        ))
        .with_state(state)
}

/// Every response: the browser must not guess content types.
async fn nosniff(mut resp: Response) -> Response {
    resp.headers_mut()
        .entry(header::X_CONTENT_TYPE_OPTIONS)
        .or_insert(axum::http::HeaderValue::from_static("nosniff"));
    resp
}

fn panic_response(_err: Box<dyn std::any::Any + Send + 'static>) -> Response {
    tracing::error!("a request handler panicked");
    ApiError::internal().into_response()
}

async fn not_found_route() -> ApiError {
    ApiError::not_found("route")
}

async fn timeout(State(state): State<AppState>, req: Request, next: Next) -> Response {
    match tokio::time::timeout(state.limits().request_timeout, next.run(req)).await {
        Ok(resp) => resp,
        Err(_) => {
            state.metrics().rejected("timeout");
            ApiError::unavailable("timeout", "the request took too long").into_response()
        }
    }
}

/// The owner of a request, set by the auth middleware from the token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner(pub String);

impl<S: Send + Sync> FromRequestParts<S> for Owner {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<Owner>()
            .cloned()
            .ok_or_else(ApiError::unauthorized)
    }
}

async fn require_owner(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    let owner = match state.auth() {
        AuthMode::Local => LOCAL_OWNER.to_owned(),
        AuthMode::Tokens(users) => {
            let token = req
                .headers()
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .map(str::trim)
                .filter(|t| !t.is_empty());
            let verified = match token {
                Some(t) => users.verify(t).await,
                None => Ok(None),
            };
            match verified {
                Ok(Some(owner)) => owner,
                Ok(None) => {
                    state.metrics().rejected("unauthorized");
                    return ApiError::unauthorized().into_response();
                }
                Err(e) => {
                    state.metrics().rejected("storage_unavailable");
                    return ApiError::from(e).into_response();
                }
            }
        }
    };
    if !state.rate().allow(&owner, Instant::now()) {
        state.metrics().rejected("rate_limited");
        return ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limited",
            "too many requests; try again shortly",
        )
        .into_response();
    }
    req.extensions_mut().insert(Owner(owner));
    next.run(req).await
}

/// A raw request body (size-limited); parsed by the handler.
pub struct Body(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for Body {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        Bytes::from_request(req, state)
            .await
            .map(Body)
            .map_err(|rej| {
                if rej.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    ApiError::new(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        "body_too_large",
                        "the request body is too large",
                    )
                } else {
                    ApiError::bad_request("bad_body", "the request body could not be read")
                }
            })
    }
}

/// Query parameters with `{code, message}` errors.
pub struct Params<T>(pub T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> FromRequestParts<S> for Params<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(q)| Params(q))
            .map_err(|_| {
                ApiError::bad_request("invalid_query", "the query parameters are not valid")
            })
    }
}

/// `POST /api/chat` and the WebSocket's first message.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatRequest {
    /// The user's message.
    pub message: String,
    /// The client's thread id (namespaced per owner in storage).
    pub thread_id: String,
    /// Incognito or persistent (default from the settings).
    #[serde(default)]
    pub memory_mode: Option<MemoryMode>,
    /// fast (default) or quality.
    #[serde(default)]
    pub response_model_tier: Option<ModelTier>,
}

/// The longest client thread id accepted.
pub const MAX_THREAD_ID_CHARS: usize = 128;

fn valid_thread_id(id: &str) -> bool {
    let n = id.chars().count();
    (1..=MAX_THREAD_ID_CHARS).contains(&n) && !id.chars().any(char::is_control) && id.trim() == id
}

/// The storage thread id of an owner's thread.
pub fn storage_thread_id(owner: &str, thread_id: &str) -> String {
    format!("{owner}:{thread_id}")
}

fn scoped_thread(owner: &Owner, id: &str) -> Result<String, ApiError> {
    if valid_thread_id(id) {
        Ok(storage_thread_id(&owner.0, id))
    } else {
        Err(ApiError::bad_request(
            "invalid_thread_id",
            "thread ids are 1-128 characters without control characters or surrounding spaces",
        ))
    }
}

impl AppState {
    /// Validates a chat request (nothing is written before this passes).
    fn chat_input(
        &self,
        owner: &Owner,
        req: ChatRequest,
    ) -> Result<(AgentInput, String), ApiError> {
        let thread = scoped_thread(owner, &req.thread_id)?;
        if req.message.trim().is_empty() {
            return Err(ApiError::bad_request(
                "invalid_input",
                "message must not be empty",
            ));
        }
        let max = self.limits().max_message_chars;
        if req.message.chars().count() > max {
            return Err(ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "message_too_long",
                format!("message is longer than {max} characters"),
            ));
        }
        if req.response_model_tier == Some(ModelTier::Control) {
            return Err(ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_body",
                "response_model_tier must be fast or quality",
            ));
        }
        let mut input = AgentInput::new(thread, req.message);
        input.user_id = Some(owner.0.clone());
        input.channel = Channel::Web;
        input.memory_mode = req.memory_mode.unwrap_or(self.limits().default_memory_mode);
        input.response_model_tier = req.response_model_tier.unwrap_or(ModelTier::Fast);
        Ok((input, req.thread_id))
    }
}

fn reject(state: &AppState, e: ApiError) -> ApiError {
    state.metrics().rejected(e.code);
    e
}

/// An output as the client sees it: its own thread id.
fn public_output(output: &AgentOutput, client_thread: &str) -> Value {
    let mut v = serde_json::to_value(output).unwrap_or(Value::Null);
    if let Some(obj) = v.as_object_mut() {
        obj.insert("thread_id".into(), Value::String(client_thread.to_owned()));
    }
    v
}

/// A stream event as the client sees it (`{type, ...}`).
fn public_event(ev: &StreamEvent, client_thread: &str) -> Value {
    match ev {
        StreamEvent::ResponseReady { output } => {
            json!({"type": "response_ready", "output": public_output(output, client_thread)})
        }
        StreamEvent::Done { output } => {
            json!({"type": "done", "output": public_output(output, client_thread)})
        }
        other => serde_json::to_value(other).unwrap_or(Value::Null),
    }
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
    let rt = state.runtime(MemoryMode::Persistent);
    let store_ok = rt.stores().threads.list_threads(1).await.is_ok();
    let body = json!({
        "status": if store_ok { "ok" } else { "degraded" },
        "store": {"backend": rt.storage_label(), "ok": store_ok},
        "model": {"mode": rt.mode().as_str()},
        "auth": if matches!(state.auth(), AuthMode::Local) { "local" } else { "token" },
    });
    let status = if store_ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body)).into_response()
}

async fn metrics(State(state): State<AppState>, _owner: Owner) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics().render(),
    )
        .into_response()
}

async fn chat(
    State(state): State<AppState>,
    owner: Owner,
    Body(body): Body,
) -> Result<Json<Value>, ApiError> {
    let req: ChatRequest = parse_required(&body).map_err(|e| reject(&state, e))?;
    let (input, client_thread) = state
        .chat_input(&owner, req)
        .map_err(|e| reject(&state, e))?;
    let rt = state.runtime(input.memory_mode).clone();
    let guard = state.turn_guard();
    let started = Instant::now();
    // The turn runs in its own task: a timed-out or dropped request never
    // leaves a turn half-written.
    let handle = tokio::spawn(async move {
        let _guard = guard;
        rt.run_turn(input).await
    });
    match handle.await {
        Ok(Ok(output)) => {
            state.metrics().turn(&output, started.elapsed());
            Ok(Json(public_output(&output, &client_thread)))
        }
        Ok(Err(e)) => {
            state.metrics().turn_error(e.code());
            Err(e.into())
        }
        Err(_) => {
            state.metrics().turn_error("internal");
            Err(ApiError::internal())
        }
    }
}

/// Runs a streamed turn in its own task (drained even if the client goes
/// away) and yields client-facing events; `done` or `error` is always last.
fn turn_events(
    state: &AppState,
    input: AgentInput,
    client_thread: String,
) -> impl Stream<Item = Value> + Send + use<> {
    let (tx, rx) = tokio::sync::mpsc::channel::<Value>(64);
    let rt = state.runtime(input.memory_mode).clone();
    let guard = state.turn_guard();
    let state = state.clone();
    tokio::spawn(async move {
        let _guard = guard;
        let started = Instant::now();
        let mut events = std::pin::pin!(rt.run_turn_stream(input));
        let mut terminal = false;
        while let Some(ev) = events.next().await {
            let ev = match ev {
                StreamEvent::Done { output } => {
                    state.metrics().turn(&output, started.elapsed());
                    StreamEvent::Done { output }
                }
                StreamEvent::Error { code, message } => {
                    state.metrics().turn_error(&code);
                    tracing::error!(code = %code, error = %message, "streamed turn failed");
                    let message = stream_error_message(&code, message);
                    StreamEvent::Error { code, message }
                }
                other => other,
            };
            terminal = ev.is_terminal();
            let _ = tx.send(public_event(&ev, &client_thread)).await;
            if terminal {
                break;
            }
        }
        if !terminal {
            state.metrics().turn_error("internal");
            let _ = tx.send(json!({"type": "error", "code": "internal", "message": "the turn stopped unexpectedly"})).await;
        }
    });
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|v| (v, rx)) })
}

/// The client-facing message of a stream `error` event: the runtime's own
/// wording for input errors, a generic one otherwise (details go to the log).
fn stream_error_message(code: &str, message: String) -> String {
    match code {
        "invalid_input" | "message_too_long" => message,
        "storage_unavailable" => "storage is unavailable".to_owned(),
        _ => "the turn could not be completed".to_owned(),
    }
}

async fn chat_stream(
    State(state): State<AppState>,
    owner: Owner,
    Body(body): Body,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let req: ChatRequest = parse_required(&body).map_err(|e| reject(&state, e))?;
    let (input, client_thread) = state
        .chat_input(&owner, req)
        .map_err(|e| reject(&state, e))?;
    let events = turn_events(&state, input, client_thread).map(|v| {
        let name = v
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("error")
            .to_owned();
        Ok(Event::default().event(name).data(v.to_string()))
    });
    Ok(Sse::new(events).keep_alive(KeepAlive::default()))
}

async fn chat_ws(State(state): State<AppState>, owner: Owner, ws: WebSocketUpgrade) -> Response {
    let limit = state.limits().body_limit_bytes;
    ws.max_message_size(limit)
        .on_upgrade(move |socket| ws_session(state, owner, socket))
}

async fn ws_send(socket: &mut WebSocket, v: &Value) -> bool {
    socket
        .send(WsMessage::Text(v.to_string().into()))
        .await
        .is_ok()
}

async fn ws_session(state: AppState, owner: Owner, mut socket: WebSocket) {
    let first = tokio::time::timeout(state.limits().request_timeout, socket.recv()).await;
    let text = match first {
        Ok(Some(Ok(WsMessage::Text(t)))) => t,
        Ok(Some(Ok(_))) => {
            let e = ApiError::bad_request(
                "bad_message",
                "send one JSON chat request as a text message",
            );
            let _ = ws_send(&mut socket, &ws_error(&e)).await;
            let _ = socket.close().await;
            return;
        }
        _ => return,
    };
    let parsed = parse_required::<ChatRequest>(text.as_bytes())
        .and_then(|req| state.chat_input(&owner, req));
    let (input, client_thread) = match parsed {
        Ok(v) => v,
        Err(e) => {
            state.metrics().rejected(e.code);
            let _ = ws_send(&mut socket, &ws_error(&e)).await;
            let _ = socket.close().await;
            return;
        }
    };
    let mut events = std::pin::pin!(turn_events(&state, input, client_thread));
    while let Some(v) = events.next().await {
        if !ws_send(&mut socket, &v).await {
            return;
        }
    }
    let _ = socket.close().await;
}

fn ws_error(e: &ApiError) -> Value {
    json!({"type": "error", "code": e.code, "message": e.message})
}

/// `GET /api/threads` query.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Maximum rows (default 20, at most 100 for threads, 500 for history).
    pub limit: Option<usize>,
}

/// How many storage rows the thread list scans to find an owner's threads.
const THREAD_SCAN: usize = 10_000;
/// How many of an owner's most recent threads the progress view reads.
const PROGRESS_THREADS: usize = 100;

async fn list_threads(
    State(state): State<AppState>,
    owner: Owner,
    Params(q): Params<ListQuery>,
) -> Result<Json<Value>, ApiError> {
    let limit = q.limit.unwrap_or(20).clamp(1, 100);
    let prefix = storage_thread_id(&owner.0, "");
    let rows = state
        .runtime(MemoryMode::Persistent)
        .stores()
        .threads
        .list_threads(THREAD_SCAN)
        .await?;
    let list: Vec<Value> = rows
        .into_iter()
        .filter_map(|t| {
            let id = t.thread_id.strip_prefix(&prefix)?.to_owned();
            Some(json!({"thread_id": id, "turn_count": t.turn_count, "message_count": t.message_count, "updated_at": t.updated_at}))
        })
        .take(limit)
        .collect();
    Ok(Json(Value::Array(list)))
}

async fn load_owned(
    state: &AppState,
    owner: &Owner,
    id: &str,
) -> Result<(String, opencouch_store::ThreadSnapshot), ApiError> {
    let thread = scoped_thread(owner, id)?;
    let snap = state
        .runtime(MemoryMode::Persistent)
        .stores()
        .threads
        .load(&thread, 0)
        .await?;
    snap.map(|s| (thread, s))
        .ok_or_else(|| ApiError::not_found("thread"))
}

async fn thread_state(
    State(state): State<AppState>,
    owner: Owner,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let (_, snap) = load_owned(&state, &owner, &id).await?;
    let mut v = serde_json::to_value(&snap.state).map_err(|_| ApiError::internal())?;
    if let Some(obj) = v.as_object_mut() {
        obj.insert("thread_id".into(), Value::String(id));
    }
    Ok(Json(v))
}

async fn thread_history(
    State(state): State<AppState>,
    owner: Owner,
    Path(id): Path<String>,
    Params(q): Params<ListQuery>,
) -> Result<Json<Value>, ApiError> {
    let (thread, _) = load_owned(&state, &owner, &id).await?;
    let limit = q.limit.unwrap_or(50).clamp(1, 500);
    let rows = state
        .runtime(MemoryMode::Persistent)
        .stores()
        .threads
        .history(&thread, limit, None)
        .await?;
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
    Ok(Json(Value::Array(list)))
}

async fn session_status(
    State(state): State<AppState>,
    owner: Owner,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let (thread, _) = load_owned(&state, &owner, &id).await?;
    let rt = state.runtime(MemoryMode::Persistent);
    let status = rt
        .stores()
        .sessions
        .status(&thread, chrono::Utc::now(), rt.options().session_timeout)
        .await?;
    use opencouch_store::SessionStatus as St;
    let name = match status {
        St::Absent => "absent",
        St::Active => "active",
        St::ExpiredUnfinalized => "expired_unfinalized",
        St::Interrupted => "interrupted",
        St::RotationRequired => "rotation_required",
    };
    let has = !matches!(status, St::Absent);
    Ok(Json(json!({"has_active_session": has, "status": name})))
}

/// `POST /api/threads/{id}/end` body (optional).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndRequest {
    /// positive, negative or skip.
    #[serde(default)]
    pub feedback: Option<FeedbackLabel>,
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
    let rt = state
        .runtime(req.memory_mode.unwrap_or(MemoryMode::Persistent))
        .clone();
    let thread = scoped_thread(&owner, &id)?;
    if rt.stores().threads.load(&thread, 0).await?.is_none() {
        return Err(ApiError::not_found("thread"));
    }
    let guard = state.turn_guard();
    let owner_id = owner.0.clone();
    let handle = tokio::spawn(async move {
        let _guard = guard;
        rt.end_session(
            &thread,
            Some(&owner_id),
            req.feedback,
            opencouch_runtime::FeedbackSource::ApiEnd,
        )
        .await
    });
    let outcome = handle.await.map_err(|_| ApiError::internal())??;
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

fn control_error(e: ControlError) -> ApiError {
    match e {
        ControlError::IndexOutOfRange { .. } => ApiError::not_found("memory item"),
        ControlError::Backend(_) => {
            tracing::error!(error = %e, "memory backend error");
            ApiError::unavailable("storage_unavailable", "storage is unavailable")
        }
        other => ApiError::bad_request("invalid_memory_action", other.to_string()),
    }
}

fn control_ctx(owner: &Owner) -> ControlContext<'_> {
    ControlContext {
        owner_id: Some(&owner.0),
        memory_mode: MemoryMode::Persistent,
        now: chrono::Utc::now(),
    }
}

async fn memory_status(
    State(state): State<AppState>,
    owner: Owner,
) -> Result<Json<Value>, ApiError> {
    let svc = opencouch_runtime::memory::control_service(state.runtime(MemoryMode::Persistent));
    let snap = svc.snapshot(&owner.0).await.map_err(control_error)?;
    Ok(Json(json!({
        "memory_mode": "persistent",
        "owner_id": owner.0,
        "counts": {"semantic": snap.facts.len(), "episodic": snap.sessions.len(), "procedural": snap.rules.len()},
        "proactive_recall_enabled": snap.proactive_recall_enabled,
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
    let svc = opencouch_runtime::memory::control_service(state.runtime(MemoryMode::Persistent));
    let out = svc
        .handle(
            &control_ctx(&owner),
            MemoryAction::SetRecall {
                enabled: req.enabled,
            },
            None,
        )
        .await
        .map_err(control_error)?;
    let snap = svc.snapshot(&owner.0).await.map_err(control_error)?;
    Ok(Json(
        json!({"owner_id": owner.0, "proactive_recall_enabled": snap.proactive_recall_enabled, "detail": out.reply}),
    ))
}

fn target_kind(kind: &str) -> Option<TargetKind> {
    match kind {
        "facts" => Some(TargetKind::Fact),
        "sessions" => Some(TargetKind::Session),
        "rules" => Some(TargetKind::Rule),
        _ => None,
    }
}

async fn memory_list(
    State(state): State<AppState>,
    owner: Owner,
    Path(kind): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let kind = target_kind(&kind).ok_or_else(|| ApiError::not_found("memory list"))?;
    let svc = opencouch_runtime::memory::control_service(state.runtime(MemoryMode::Persistent));
    let snap = svc.snapshot(&owner.0).await.map_err(control_error)?;
    let rows = match kind {
        TargetKind::Fact => snap.facts,
        TargetKind::Session => snap.sessions,
        TargetKind::Rule => snap.rules,
    };
    let list: Vec<Value> = rows
        .into_iter()
        .enumerate()
        .map(|(i, (_, preview))| json!({"index": i + 1, "text": preview}))
        .collect();
    Ok(Json(Value::Array(list)))
}

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
    let svc = opencouch_runtime::memory::control_service(state.runtime(MemoryMode::Persistent));
    let ctx = control_ctx(&owner);
    let prepared = svc
        .handle(
            &ctx,
            MemoryAction::ForgetByIndex {
                target_kind: kind,
                target_index: index,
            },
            None,
        )
        .await
        .map_err(control_error)?;
    let PendingChange::Set(pending) = prepared.pending else {
        return Err(ApiError::not_found("memory item"));
    };
    let done = svc
        .handle(&ctx, MemoryAction::ConfirmPending, Some(&pending))
        .await
        .map_err(control_error)?;
    Ok(Json(
        json!({"deleted": done.side_effect, "detail": done.reply}),
    ))
}

async fn memory_progress(
    State(state): State<AppState>,
    owner: Owner,
) -> Result<Json<Value>, ApiError> {
    let rt = state.runtime(MemoryMode::Persistent);
    let backend = opencouch_runtime::memory::backend(rt);
    let mut arcs = opencouch_memory::backend::visible_arcs(&backend, &owner.0)
        .await
        .map_err(|e| control_error(ControlError::Backend(e)))?;
    arcs.sort_by_key(|a| a.started_at);
    let sessions: Vec<Value> = arcs
        .iter()
        .map(|a| {
            json!({
                "started_at": a.started_at,
                "ended_at": a.ended_at,
                "turn_count": a.turn_count,
                "mood_opened": a.mood_arc.opened,
                "mood_closed": a.mood_arc.closed,
                "score_opened": crate::progress::mood_score(&a.mood_arc.opened),
                "score_closed": crate::progress::mood_score(&a.mood_arc.closed),
            })
        })
        .collect();
    // Exercises: those of ended sessions are kept on their arcs; those of
    // sessions still open are in the threads' live progress.
    let mut counts: HashMap<String, u64> = HashMap::new();
    for ex in arcs.iter().flat_map(|a| &a.exercises_completed) {
        *counts.entry(ex.clone()).or_default() += 1;
    }
    let prefix = storage_thread_id(&owner.0, "");
    let threads = rt.stores().threads.list_threads(THREAD_SCAN).await?;
    for t in threads
        .iter()
        .filter(|t| t.thread_id.starts_with(&prefix))
        .take(PROGRESS_THREADS)
    {
        if let Some(snap) = rt.stores().threads.load(&t.thread_id, 0).await? {
            for ex in &snap.state.session_progress.exercises_completed {
                *counts.entry(ex.clone()).or_default() += 1;
            }
        }
    }
    let mut exercises: Vec<(String, u64)> = counts.into_iter().collect();
    exercises.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let exercises: Vec<Value> = exercises
        .into_iter()
        .map(|(id, count)| json!({"id": id, "name": crate::progress::exercise_name(&id), "count": count}))
        .collect();
    Ok(Json(json!({
        "sessions": sessions,
        "exercises_completed": exercises,
        "mood_scale": {"min": crate::progress::MOOD_MIN, "max": crate::progress::MOOD_MAX},
    })))
}
