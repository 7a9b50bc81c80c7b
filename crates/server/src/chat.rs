//! What every chat transport shares (`POST /api/chat`, SSE and the
//! WebSocket): who the caller is ([`Owner`], [`Caller`]), the request
//! ([`ChatRequest`]) and its validation into the service's input, the
//! client's view of outputs and events, and [`turn_events`], which runs a
//! streamed turn through the service API.

use std::time::Instant;

use axum::extract::FromRequestParts;
use axum::http::StatusCode;
use axum::http::request::Parts;
use futures::{Stream, StreamExt};
use opencouch_core::{AgentInput, AgentOutput, Channel, MemoryMode, ModelTier, StreamEvent};
use opencouch_runtime::service::{scoped_thread_id, valid_thread_id};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::AppState;
use crate::error::ApiError;

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

/// A chat request whose bearer token could not be checked because the user
/// store failed. It may only reach the crisis gate: a crisis reply never
/// depends on storage, so a level ≥ 2 message still gets the deterministic
/// crisis reply (`saved: false`); anything else gets 503 as before. It
/// reads and writes nothing and sees no one's data.
#[derive(Debug, Clone, Copy)]
pub struct Unverified;

/// A chat request over a rate limit (the owner's, or the per-address limit
/// for requests without a valid token). Limits never stand between a person
/// and a crisis reply: the message still reaches the crisis gate (it costs
/// microseconds), and a level ≥ 2 message gets the deterministic crisis reply
/// with verified resources (`saved: false`: nothing is read or written);
/// anything else gets 429 with `Retry-After` as before.
#[derive(Debug, Clone, Copy)]
pub struct Limited(pub std::time::Duration);

/// Who sends a chat request: a verified owner, or (only while the user
/// store is down) an [`Unverified`] caller, or a caller over a rate limit.
#[derive(Debug, Clone)]
pub enum Caller {
    /// A verified owner (or the local owner).
    Owner(Owner),
    /// A caller whose token could not be checked (user store down).
    Unverified,
    /// A caller over a rate limit: gate only (see [`Limited`]).
    Limited(std::time::Duration),
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        if let Some(owner) = parts.extensions.get::<Owner>() {
            return Ok(Caller::Owner(owner.clone()));
        }
        if parts.extensions.get::<Unverified>().is_some() {
            return Ok(Caller::Unverified);
        }
        if let Some(Limited(wait)) = parts.extensions.get::<Limited>() {
            return Ok(Caller::Limited(*wait));
        }
        Err(ApiError::unauthorized())
    }
}

/// The store error handed to the runtime for an [`Unverified`] caller (the
/// real one is logged where it happened).
pub(crate) fn user_store_down() -> opencouch_store::StoreError {
    opencouch_store::StoreError::Io(std::io::Error::other("the user store is unavailable"))
}

/// The store error handed to the runtime for a [`Limited`] caller: the turn
/// may not touch storage (a crisis reply goes out unsaved).
pub(crate) fn over_rate_limit() -> opencouch_store::StoreError {
    opencouch_store::StoreError::Io(std::io::Error::other("over the rate limit"))
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

/// The longest client thread id accepted (the service API's one rule).
pub use opencouch_runtime::service::MAX_THREAD_ID_CHARS;

/// The storage thread id of an owner's thread.
pub fn storage_thread_id(owner: &str, thread_id: &str) -> String {
    scoped_thread_id(owner, thread_id)
}

pub(crate) fn scoped_thread(owner: &Owner, id: &str) -> Result<String, ApiError> {
    if valid_thread_id(id) {
        Ok(storage_thread_id(&owner.0, id))
    } else {
        Err(ApiError::bad_request(
            "invalid_thread_id",
            opencouch_runtime::service::THREAD_ID_RULE,
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
        match opencouch_runtime::service::message_problem(&req.message) {
            Some(p @ opencouch_runtime::service::MessageProblem::Empty) => {
                return Err(ApiError::bad_request("invalid_input", p.describe()));
            }
            Some(p @ opencouch_runtime::service::MessageProblem::Nul) => {
                return Err(ApiError::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "invalid_input",
                    p.describe(),
                ));
            }
            None => {}
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

impl AppState {
    /// Validates a chat request of any caller. An unverified caller's input
    /// has no user id and a thread id that is never stored.
    pub(crate) fn caller_input(
        &self,
        caller: &Caller,
        req: ChatRequest,
    ) -> Result<(AgentInput, String), ApiError> {
        match caller {
            Caller::Owner(owner) => self.chat_input(owner, req),
            Caller::Unverified | Caller::Limited(_) => {
                let (mut input, client) = self.chat_input(&Owner("unverified".into()), req)?;
                input.user_id = None;
                Ok((input, client))
            }
        }
    }
}

/// An output as the client sees it: its own thread id.
pub(crate) fn public_output(output: &AgentOutput, client_thread: &str) -> Value {
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

/// Runs a streamed turn in its own task and yields client-facing events;
/// `done` or `error` is always last. When the client goes away (this stream
/// is dropped) the turn is told so, which cancels a turn below crisis level
/// that has not committed yet (see [`opencouch_runtime::TurnStream`]); the
/// task still reads the turn to its end, so graceful shutdown waits for it.
pub(crate) fn turn_events(
    state: &AppState,
    caller: &Caller,
    input: AgentInput,
    client_thread: String,
) -> impl Stream<Item = Value> + Send + use<> {
    let (tx, rx) = tokio::sync::mpsc::channel::<Value>(64);
    let svc = state.service(input.memory_mode);
    let guard = state.turn_guard();
    let state = state.clone();
    let verified = matches!(caller, Caller::Owner(_));
    tokio::spawn(async move {
        let _guard = guard;
        let started = Instant::now();
        let mut events = if verified {
            svc.stream_turn(input)
        } else {
            svc.stream_turn_without_storage(input, user_store_down())
        };
        let mut terminal = false;
        let mut client_gone = false;
        loop {
            let ev = tokio::select! {
                ev = events.next() => ev,
                () = tx.closed(), if !client_gone => {
                    client_gone = true;
                    events.cancel();
                    continue;
                }
            };
            let Some(ev) = ev else { break };
            let ev = match ev {
                StreamEvent::Done { output } => {
                    state.metrics().turn(&output, started.elapsed());
                    StreamEvent::Done { output }
                }
                StreamEvent::Error { code, message } => {
                    state.metrics().turn_error(&code);
                    // A cancelled turn is not a failure: its client left.
                    if code != "cancelled" {
                        tracing::error!(code = %code, error = %message, "streamed turn failed");
                    }
                    let message = stream_error_message(&code, message);
                    StreamEvent::Error { code, message }
                }
                other => other,
            };
            terminal = ev.is_terminal();
            if !client_gone {
                let _ = tx.send(public_event(&ev, &client_thread)).await;
            }
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
        "invalid_input" | "message_too_long" | "cancelled" => message,
        "storage_unavailable" => "storage is unavailable".to_owned(),
        _ => "the turn could not be completed".to_owned(),
    }
}
