//! `POST /api/voice/realtime/{session,tools,turn-policy,turn,end}`: the
//! voice channel's routes, behind the same token, Host/Origin and rate
//! limits as chat. Each calls the voice channel (`opencouch_voice::Voice`),
//! which calls the service API only. A caller over the rate limit still
//! reaches the crisis gate on `turn-policy` and `turn` (a crisis answer,
//! unsaved; anything else 429), as chat does. Errors are `{code, message}`:
//! a caller error keeps the service's code (4xx); anything else is
//! `voice_realtime_session_failed`, `voice_realtime_tool_failed`,
//! `voice_realtime_turn_policy_failed`, `voice_realtime_turn_record_failed`
//! or `voice_realtime_end_failed`, never upstream or internal text.
//!
//! Each handler is one span (`voice_session`, `voice_tool`,
//! `voice_turn_policy`, `voice_turn`, `voice_end`, inside the request's
//! `http_request` span) whose fields are opaque ids, counts and fixed
//! vocabulary only (the thread as `opaque_id`, the memory mode, the route,
//! the crisis level, a registered tool's name): never the person's words,
//! a transcript or a tool's arguments. A crisis answer marks the span with
//! `opencouch.crisis`, so the exporter keeps its trace.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use opencouch_core::MemoryMode;
use opencouch_core::telemetry::{CRISIS_ATTRIBUTE, opaque_id};
use opencouch_runtime::service::{Feedback, VoiceCrisis, VoiceToolCall, VoiceTurn};
use opencouch_voice::{SessionRequest, VoiceError};
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::{Value, json};
use tracing::Span;
use tracing::field::Empty;

use crate::AppState;
use crate::chat::{Caller, Owner};
use crate::error::{ApiError, parse_json, parse_required};
use crate::extract::Body;

/// The voice operations, for their error codes.
#[derive(Debug, Clone, Copy)]
enum Op {
    Session,
    Tool,
    Policy,
    Record,
    End,
}

impl Op {
    fn code(self) -> &'static str {
        match self {
            Op::Session => "voice_realtime_session_failed",
            Op::Tool => "voice_realtime_tool_failed",
            Op::Policy => "voice_realtime_turn_policy_failed",
            Op::Record => "voice_realtime_turn_record_failed",
            Op::End => "voice_realtime_end_failed",
        }
    }

    fn words(self) -> &'static str {
        match self {
            Op::Session => "the voice session could not be started",
            Op::Tool => "the voice tool could not run",
            Op::Policy => "the voice turn policy could not be decided",
            Op::Record => "the voice turn could not be recorded",
            Op::End => "the voice session could not be ended",
        }
    }
}

/// The HTTP form of a voice error.
fn api_error(state: &AppState, op: Op, e: VoiceError) -> ApiError {
    let err = match e {
        VoiceError::NotConfigured => ApiError::unavailable(op.code(), e.to_string()),
        VoiceError::Invalid(message) => {
            ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_input", message)
        }
        VoiceError::Service(se) => {
            let api = ApiError::from(se);
            if api.status.is_client_error() {
                api
            } else {
                ApiError::new(api.status, op.code(), op.words())
            }
        }
        VoiceError::Upstream(m) => {
            let words = if m.is_auth() {
                "the Realtime endpoint refused the server's key; check api_key"
            } else {
                "the Realtime endpoint failed; try again shortly"
            };
            ApiError::new(StatusCode::BAD_GATEWAY, op.code(), words)
        }
    };
    state.metrics().rejected(err.code);
    err
}

fn voice(state: &AppState, op: Op) -> Result<&opencouch_voice::Voice, ApiError> {
    state
        .voice()
        .ok_or_else(|| api_error(state, op, VoiceError::NotConfigured))
}

/// 429 with `Retry-After` (whole seconds, at least 1), as chat answers it.
fn rate_limited(state: &AppState, wait: std::time::Duration) -> Response {
    state.metrics().rejected("rate_limited");
    let mut resp = ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        "rate_limited",
        "too many requests; try again shortly",
    )
    .into_response();
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    resp.headers_mut().insert(
        axum::http::header::RETRY_AFTER,
        axum::http::HeaderValue::from(secs.max(1)),
    );
    resp
}

fn crisis_json(c: &VoiceCrisis) -> Value {
    json!({"level": c.level, "reply": c.reply, "resources": c.resources, "own_plan": c.own_plan})
}

/// Records the request's owner and thread (as opaque tags, the thread in
/// its stored `OWNER:ID` form as the runtime's turn spans tag it) and the
/// memory mode on the handler's span.
fn span_thread(owner: Option<&str>, thread: &str, mode: MemoryMode) {
    let span = Span::current();
    match owner {
        Some(o) => {
            span.record("opencouch.owner", opaque_id(o).as_str());
            span.record(
                "opencouch.thread",
                opaque_id(&format!("{o}:{thread}")).as_str(),
            );
        }
        None => {
            span.record("opencouch.thread", opaque_id(thread).as_str());
        }
    }
    span.record("opencouch.memory_mode", mode.as_str());
}

/// The verified owner of a request that may reach the gate without one.
fn owner_of(caller: &Caller) -> Option<&str> {
    match caller {
        Caller::Owner(o) => Some(o.0.as_str()),
        Caller::Unverified | Caller::Limited(_) => None,
    }
}

/// Marks the handler's span as a crisis answer (kept by the exporter).
fn span_crisis(level: u8) {
    let span = Span::current();
    span.record(CRISIS_ATTRIBUTE, true);
    span.record("opencouch.crisis_level", i64::from(level));
}

fn bad(state: &AppState, e: ApiError) -> ApiError {
    state.metrics().rejected(e.code);
    e
}

/// `POST /api/voice/realtime/session` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionBody {
    pub thread_id: String,
    /// Incognito (the default) or persistent.
    #[serde(default)]
    pub memory_mode: Option<MemoryMode>,
    /// One of the ten voices (the configured one when absent).
    #[serde(default)]
    pub assistant_voice: Option<String>,
}

#[tracing::instrument(
    name = "voice_session",
    skip_all,
    fields(
        opencouch.owner = Empty,
        opencouch.thread = Empty,
        opencouch.memory_mode = Empty,
        voice.tool_count = Empty,
    )
)]
pub(crate) async fn session(
    State(state): State<AppState>,
    owner: Owner,
    Body(body): Body,
) -> Result<Response, ApiError> {
    let req: SessionBody = parse_required(&body).map_err(|e| bad(&state, e))?;
    let v = voice(&state, Op::Session)?;
    let mode = req.memory_mode.unwrap_or(MemoryMode::Incognito);
    span_thread(Some(&owner.0), &req.thread_id, mode);
    let minted = v
        .session(
            &owner.caller(),
            SessionRequest {
                thread_id: req.thread_id,
                memory_mode: mode,
                assistant_voice: req.assistant_voice,
            },
        )
        .await
        .map_err(|e| api_error(&state, Op::Session, e))?;
    let tool_count = minted.session_config["tools"]
        .as_array()
        .map_or(0, Vec::len);
    Span::current().record("voice.tool_count", tool_count);
    let calls_url = v
        .realtime_base()
        .map(|b| format!("{b}/realtime/calls"))
        .unwrap_or_default();
    Ok(Json(json!({
        "client_secret": minted.client_secret,
        "expires_at": minted.expires_at,
        "thread_id": minted.thread_id,
        "memory_mode": minted.memory_mode,
        "calls_url": calls_url,
        "session_config": minted.session_config,
    }))
    .into_response())
}

/// `POST /api/voice/realtime/tools` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolBody {
    pub thread_id: String,
    /// The person's words the call answers.
    #[serde(default)]
    pub current_user_message: String,
    /// Accepted for compatibility; the service reads the stored transcript.
    #[serde(default, rename = "transcript")]
    _transcript: Option<IgnoredAny>,
    #[serde(default)]
    pub memory_mode: Option<MemoryMode>,
    pub tool_name: String,
    /// The call's arguments: an object, or the JSON text of one (as the
    /// data channel delivers them).
    #[serde(default)]
    pub arguments: Value,
}

#[tracing::instrument(
    name = "voice_tool",
    skip_all,
    fields(
        opencouch.owner = Empty,
        opencouch.thread = Empty,
        opencouch.memory_mode = Empty,
        gen_ai.tool.name = Empty,
        voice.tool_ok = Empty,
    )
)]
pub(crate) async fn tools(
    State(state): State<AppState>,
    owner: Owner,
    Body(body): Body,
) -> Result<Response, ApiError> {
    let req: ToolBody = parse_required(&body).map_err(|e| bad(&state, e))?;
    let v = voice(&state, Op::Tool)?;
    let mode = req.memory_mode.unwrap_or(MemoryMode::Incognito);
    span_thread(Some(&owner.0), &req.thread_id, mode);
    let tool_name = req.tool_name.clone();
    let arguments = match req.arguments {
        Value::String(s) if s.trim().is_empty() => Value::Null,
        Value::String(s) => serde_json::from_str(&s).map_err(|_| {
            bad(
                &state,
                ApiError::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "invalid_input",
                    "arguments must be a JSON object",
                ),
            )
        })?,
        other => other,
    };
    let output = v
        .tool(
            &owner.caller(),
            VoiceToolCall {
                thread_id: req.thread_id,
                memory_mode: mode,
                current_user_message: req.current_user_message,
                tool_name: req.tool_name,
                arguments,
            },
        )
        .await
        .map_err(|e| api_error(&state, Op::Tool, e))?;
    // Only a name the service ran (an unknown one is refused above).
    let span = Span::current();
    span.record(
        opencouch_core::telemetry::genai::TOOL_NAME,
        tool_name.as_str(),
    );
    span.record("voice.tool_ok", output["ok"] != json!(false));
    Ok(Json(json!({"output": output})).into_response())
}

/// `POST /api/voice/realtime/turn-policy` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyBody {
    pub thread_id: String,
    #[serde(default)]
    pub memory_mode: Option<MemoryMode>,
    pub user_text: String,
    /// Accepted for compatibility; the gate reads the stored transcript.
    #[serde(default, rename = "transcript")]
    _transcript: Option<IgnoredAny>,
}

#[tracing::instrument(
    name = "voice_turn_policy",
    skip_all,
    fields(
        opencouch.owner = Empty,
        opencouch.thread = Empty,
        opencouch.memory_mode = Empty,
        opencouch.route = Empty,
        opencouch.crisis = Empty,
        opencouch.crisis_level = Empty,
        voice.audit_notice = Empty,
    )
)]
pub(crate) async fn turn_policy(
    State(state): State<AppState>,
    caller: Caller,
    Body(body): Body,
) -> Result<Response, ApiError> {
    let req: PolicyBody = parse_required(&body).map_err(|e| bad(&state, e))?;
    let v = voice(&state, Op::Policy)?;
    let mode = req.memory_mode.unwrap_or(MemoryMode::Incognito);
    span_thread(owner_of(&caller), &req.thread_id, mode);
    let answer = v
        .policy(
            &caller.service_caller(),
            &req.thread_id,
            mode,
            &req.user_text,
        )
        .await
        .map_err(|e| api_error(&state, Op::Policy, e))?;
    let p = &answer.policy;
    let span = Span::current();
    span.record("opencouch.route", p.route.as_str());
    span.record("voice.audit_notice", answer.audit_notice.is_some());
    if let Some(c) = p.crisis.as_ref().or(answer.audit_notice.as_ref()) {
        span_crisis(c.level);
    }
    if let Caller::Limited(wait) = caller
        && p.crisis.is_none()
    {
        return Ok(rate_limited(&state, wait));
    }
    let crisis = p.crisis.as_ref().or(answer.audit_notice.as_ref());
    Ok(Json(json!({
        "thread_id": req.thread_id,
        "route": p.route,
        "response_style": p.style,
        "required_tool_name": p.required_tool,
        "instructions": p.instructions,
        "crisis": crisis.map(crisis_json),
        "audit_notice": answer.audit_notice.is_some(),
    }))
    .into_response())
}

/// One call of a recorded exchange.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordedCall {
    pub tool_name: String,
    /// `started`, `completed` or `failed`.
    pub status: String,
    /// Accepted, not stored.
    #[serde(default, rename = "output")]
    _output: Option<IgnoredAny>,
    /// Accepted, not stored.
    #[serde(default, rename = "error")]
    _error: Option<IgnoredAny>,
}

/// `POST /api/voice/realtime/turn` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TurnBody {
    pub thread_id: String,
    #[serde(default)]
    pub memory_mode: Option<MemoryMode>,
    pub user_text: String,
    #[serde(default)]
    pub assistant_text: String,
    #[serde(default)]
    pub tool_calls: Vec<RecordedCall>,
    /// Accepted for compatibility; route and style are inferred.
    #[serde(default, rename = "route")]
    _route: Option<IgnoredAny>,
    /// Accepted for compatibility; route and style are inferred.
    #[serde(default, rename = "response_style")]
    _response_style: Option<IgnoredAny>,
}

#[tracing::instrument(
    name = "voice_turn",
    skip_all,
    fields(
        opencouch.owner = Empty,
        opencouch.thread = Empty,
        opencouch.memory_mode = Empty,
        opencouch.route = Empty,
        opencouch.crisis = Empty,
        opencouch.crisis_level = Empty,
        voice.tool_calls = Empty,
        voice.recorded = Empty,
        voice.missed_crisis = Empty,
        voice.message_count = Empty,
        voice.audit_notice = Empty,
    )
)]
pub(crate) async fn turn(
    State(state): State<AppState>,
    caller: Caller,
    Body(body): Body,
) -> Result<Response, ApiError> {
    let req: TurnBody = parse_required(&body).map_err(|e| bad(&state, e))?;
    let v = voice(&state, Op::Record)?;
    let mode = req.memory_mode.unwrap_or(MemoryMode::Incognito);
    span_thread(owner_of(&caller), &req.thread_id, mode);
    Span::current().record("voice.tool_calls", req.tool_calls.len());
    let calls = opencouch_voice::parse_calls(
        req.tool_calls
            .iter()
            .map(|c| (c.tool_name.as_str(), c.status.as_str())),
    )
    .map_err(|e| api_error(&state, Op::Record, e))?;
    let thread_id = req.thread_id.clone();
    let answer = v
        .record(
            &caller.service_caller(),
            VoiceTurn {
                thread_id: req.thread_id,
                memory_mode: mode,
                user_text: req.user_text,
                assistant_text: req.assistant_text,
                tool_calls: calls,
            },
        )
        .await
        .map_err(|e| api_error(&state, Op::Record, e))?;
    let r = &answer.recorded;
    let span = Span::current();
    span.record("opencouch.route", r.route.as_str());
    span.record("voice.recorded", r.recorded);
    span.record("voice.missed_crisis", r.missed_crisis);
    span.record("voice.message_count", r.message_count);
    span.record("voice.audit_notice", answer.audit_notice.is_some());
    span.record("opencouch.crisis_level", i64::from(r.level));
    if let Some(c) = r.crisis.as_ref().or(answer.audit_notice.as_ref()) {
        span_crisis(c.level);
    }
    if let Caller::Limited(wait) = caller
        && r.crisis.is_none()
    {
        return Ok(rate_limited(&state, wait));
    }
    let crisis = r.crisis.as_ref().or(answer.audit_notice.as_ref());
    Ok(Json(json!({
        "recorded": r.recorded,
        "thread_id": thread_id,
        "message_count": r.message_count,
        "route": r.route,
        "crisis_level": r.level,
        "missed_crisis": r.missed_crisis,
        "crisis": crisis.map(crisis_json),
        "audit_notice": answer.audit_notice.is_some(),
    }))
    .into_response())
}

/// `POST /api/voice/realtime/end` body.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndBody {
    pub thread_id: String,
    #[serde(default)]
    pub memory_mode: Option<MemoryMode>,
    #[serde(default)]
    pub feedback: Option<Feedback>,
}

#[tracing::instrument(
    name = "voice_end",
    skip_all,
    fields(
        opencouch.owner = Empty,
        opencouch.thread = Empty,
        opencouch.memory_mode = Empty,
        voice.feedback = Empty,
        voice.finalized = Empty,
    )
)]
pub(crate) async fn end(
    State(state): State<AppState>,
    owner: Owner,
    Body(body): Body,
) -> Result<Response, ApiError> {
    let req: EndBody = parse_json(&body, false).map_err(|e| bad(&state, e))?;
    let v = voice(&state, Op::End)?;
    let mode = req.memory_mode.unwrap_or(MemoryMode::Incognito);
    span_thread(Some(&owner.0), &req.thread_id, mode);
    Span::current().record("voice.feedback", req.feedback.is_some());
    let caller = owner.caller();
    if state
        .service()
        .thread(&caller, mode, &req.thread_id)
        .await
        .map_err(|e| api_error(&state, Op::End, e.into()))?
        .is_none()
    {
        return Err(bad(&state, ApiError::not_found("thread")));
    }
    let outcome = v
        .end(&caller, &req.thread_id, mode, req.feedback)
        .await
        .map_err(|e| api_error(&state, Op::End, e))?;
    Span::current().record("voice.finalized", outcome.finalized);
    let summary = outcome.summary.as_ref();
    Ok(Json(json!({
        "finalized": outcome.finalized,
        "thread_id": req.thread_id,
        "summary": summary.map(|s| s.summary.clone()),
        "themes": summary.map(|s| s.themes.clone()),
        "mood_opened": summary.map(|s| s.mood_opened.clone()),
        "mood_closed": summary.map(|s| s.mood_closed.clone()),
        "turn_count": summary.map(|s| s.turn_count),
        "detail": outcome.detail,
        "feedback_recorded": outcome.feedback_recorded,
    }))
    .into_response())
}
