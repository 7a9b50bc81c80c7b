//! What every chat transport shares (`POST /api/chat`, SSE and the
//! WebSocket): who the caller is ([`Owner`], [`Caller`]), the request
//! ([`ChatRequest`]) handed to the service's one check, and
//! [`turn_events`], a streamed turn in the channel kit's wire form.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use futures::{Stream, StreamExt};
use opencouch_core::{Channel, MemoryMode, ModelTier};
use opencouch_runtime::service::{self, GateOnly, PreparedTurn, TurnRequest, TurnStream, kit};
use serde::Deserialize;
use serde_json::Value;

use crate::AppState;
use crate::error::ApiError;

/// The owner of a request, set by the auth middleware from the token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner(pub String);

impl Owner {
    /// The service's view of this owner: an account.
    pub fn caller(&self) -> service::Caller {
        service::Caller::account(self.0.clone())
    }
}

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

impl Caller {
    /// The service's view of this caller.
    pub(crate) fn service_caller(&self) -> service::Caller {
        match self {
            Caller::Owner(owner) => service::Caller::account(owner.0.clone()),
            Caller::Unverified => service::Caller::GateOnly(GateOnly::Unverified),
            Caller::Limited(_) => service::Caller::GateOnly(GateOnly::RateLimited),
        }
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
    /// Skills installed for this conversation (response styles and guided
    /// exercise ids; empty or absent: all). An unknown name is a 422
    /// `invalid_input`.
    #[serde(default)]
    pub installed_skills: Vec<String>,
}

/// The longest client thread id accepted (the service API's one rule).
pub use opencouch_runtime::service::MAX_THREAD_ID_CHARS;

impl AppState {
    /// Checks a chat request of any caller at the service boundary (the
    /// one check: nothing is read or written before it passes) and decides
    /// its memory mode.
    pub(crate) fn prepare_turn(
        &self,
        caller: &Caller,
        req: ChatRequest,
    ) -> Result<PreparedTurn, ApiError> {
        let mut turn = TurnRequest::new(
            caller.service_caller(),
            req.thread_id,
            req.message,
            Channel::Web,
        );
        turn.memory_mode = Some(req.memory_mode.unwrap_or(self.limits().default_memory_mode));
        turn.response_model_tier = req.response_model_tier;
        turn.installed_skills = req.installed_skills;
        self.service().prepare(turn).map_err(ApiError::from)
    }
}

/// A streamed turn as client-facing JSON events, in the one wire form of
/// the channel kit; `done` or `error` is always last. The turn runs in the
/// runtime's task: when the client goes away (this stream is dropped) the
/// turn is told so, which cancels a turn below crisis level that has not
/// committed yet; a crisis turn runs to its end (a graceful stop waits for
/// it).
pub(crate) fn turn_events(stream: TurnStream) -> impl Stream<Item = Value> + Send + use<> {
    let ended = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = ended.clone();
    stream
        .map(move |ev| {
            if ev.is_terminal() {
                seen.store(true, std::sync::atomic::Ordering::SeqCst);
            }
            kit::wire_event(&ev)
        })
        .chain(futures::stream::iter(std::iter::from_fn(move || {
            (!ended.swap(true, std::sync::atomic::Ordering::SeqCst))
                .then(|| kit::wire_event(&kit::stopped_event()))
        })))
}
