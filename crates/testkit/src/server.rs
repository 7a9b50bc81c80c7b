//! HTTP side of the fake server: request recording, rule dispatch and the
//! OpenAI wire formats (chat completion, chat.completion.chunk SSE,
//! embeddings list, realtime client secret).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::{Value, json};

use crate::script::{ReplyKind, ScriptedToolCall};
use crate::{Endpoint, RecordedRequest, Reply, Shared, hash_embedding};

/// Pause before aborting a cut body, so the part before the cut is flushed.
const CUT_GRACE: Duration = Duration::from_millis(20);

/// Builds the router; every path goes through one recording handler.
pub(crate) fn router(shared: Arc<Shared>) -> Router {
    Router::new().fallback(handle).with_state(shared)
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn error_json(status: u16, message: &str, kind: &str, retry_after: Option<u64>) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = json!({"error": {"message": message, "type": kind, "param": null, "code": null}});
    let mut resp = (code, axum::Json(body)).into_response();
    if let Some(secs) = retry_after {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    resp
}

fn with_type(status: StatusCode, content_type: &str, body: impl Into<Body>) -> Response {
    let mut resp = (status, body.into()).into_response();
    if let Ok(v) = HeaderValue::from_str(content_type) {
        resp.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    resp
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let req = RecordedRequest {
        method: method.to_string(),
        path: uri.path().to_owned(),
        headers: headers
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_owned(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
        raw_body: String::from_utf8_lossy(&body).into_owned(),
    };
    shared.record(req.clone());
    // Browsers post the SDP offer cross-origin: answer the preflight as
    // the real endpoint does.
    if method == Method::OPTIONS && uri.path() == Endpoint::RealtimeCalls.path() {
        let mut resp = StatusCode::NO_CONTENT.into_response();
        let h = resp.headers_mut();
        h.insert(
            header::ACCESS_CONTROL_ALLOW_ORIGIN,
            HeaderValue::from_static("*"),
        );
        h.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static("POST"),
        );
        h.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static("authorization, content-type"),
        );
        return resp;
    }
    let Some(endpoint) = Endpoint::from_path(uri.path()).filter(|_| method == Method::POST) else {
        return error_json(
            404,
            "unknown path in fake server",
            "invalid_request_error",
            None,
        );
    };
    if endpoint == Endpoint::RealtimeCalls {
        return realtime_call(&shared, &req);
    }
    if req.body.is_null() {
        return error_json(400, "body is not JSON", "invalid_request_error", None);
    }
    let reply = match (shared.pick(endpoint, &req), endpoint) {
        (Some(r), _) => r,
        (None, Endpoint::ChatCompletions) => shared.chat_default(),
        // Content-less marker: the endpoint renders its default body.
        (None, _) => Reply::text(""),
    };
    shared.sleep(reply.latency).await;
    if reply.held {
        shared.wait_released().await;
    }
    let kind = match reply.kind {
        ReplyKind::Hang(d) => {
            shared.sleep(d).await;
            ReplyKind::Text("late reply".to_owned())
        }
        other => other,
    };
    let stream = endpoint == Endpoint::ChatCompletions && req.is_stream();
    match kind {
        ReplyKind::Status {
            status,
            retry_after,
            message,
        } => {
            let kind = if status == 429 {
                "rate_limit_error"
            } else {
                "server_error"
            };
            error_json(status, &message, kind, retry_after)
        }
        ReplyKind::Raw {
            status,
            content_type,
            body,
        } => with_type(
            StatusCode::from_u16(status).unwrap_or(StatusCode::OK),
            &content_type,
            body,
        ),
        ReplyKind::Malformed if stream => with_type(
            StatusCode::OK,
            "text/event-stream",
            "data: {\"id\": \"chatcmpl-broken\", \"choices\": [\n\ndata: [DONE]\n\n",
        ),
        ReplyKind::Malformed => with_type(
            StatusCode::OK,
            "application/json",
            "{\"id\": \"broken\", \"choices\": [{\"message\": ",
        ),
        kind => match endpoint {
            Endpoint::ChatCompletions => chat(&shared, &req, kind, reply.chunk_delay),
            Endpoint::Embeddings => embeddings(&shared, &req, kind),
            Endpoint::ClientSecrets => client_secret(&shared, &req),
            // Answered before the JSON check.
            Endpoint::RealtimeCalls => realtime_call(&shared, &req),
        },
    }
}

/// An SSE body of `events`, optionally aborted (connection reset) after `cut_after` events.
/// `first_text` records when event 1 (the first text after the role event)
/// is handed to the connection.
fn sse_body(
    events: Vec<String>,
    cut_after: Option<usize>,
    delay: Duration,
    first_text: Option<Arc<Mutex<Vec<Instant>>>>,
) -> Response {
    let keep = cut_after.unwrap_or(events.len());
    let mut items: Vec<Result<Bytes, std::io::Error>> = events
        .into_iter()
        .take(keep)
        .map(|e| Ok(Bytes::from(e)))
        .collect();
    if cut_after.is_some() {
        items.push(Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionAborted,
            "stream cut by script",
        )));
    }
    let stream = futures::stream::iter(items.into_iter().enumerate()).then(move |(i, item)| {
        let first_text = first_text.clone();
        async move {
            // Let earlier chunks reach the client before a cut, so it sees a partial body.
            let wait = if item.is_err() {
                delay.max(CUT_GRACE)
            } else {
                delay
            };
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            if let Some(log) = first_text.filter(|_| i == 1 && item.is_ok()) {
                log.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push(Instant::now());
            }
            item
        }
    });
    let mut resp = Response::new(Body::from_stream(stream));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

/// Splits `s` into pieces of at most `n` characters (never inside a character).
fn char_chunks(s: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    chars.chunks(n.max(1)).map(|c| c.iter().collect()).collect()
}

fn rough_tokens(s: &str) -> u64 {
    (s.len() as u64).div_ceil(4)
}

fn chat(
    shared: &Shared,
    req: &RecordedRequest,
    kind: ReplyKind,
    chunk_delay: Duration,
) -> Response {
    let model = req.model().unwrap_or("fake-model").to_owned();
    let id = format!("chatcmpl-fake-{}", shared.next_id());
    let created = now_secs();
    let (text, calls, cut_after) = match kind {
        ReplyKind::Text(t) => (Some(t), Vec::new(), None),
        ReplyKind::ToolCalls { text, calls } => (text, calls, None),
        ReplyKind::CutStream { text, after_chunks } => (Some(text), Vec::new(), Some(after_chunks)),
        ReplyKind::Embeddings(_) => {
            return error_json(
                400,
                "embeddings reply scripted on the chat endpoint",
                "invalid_request_error",
                None,
            );
        }
        // Handled by the caller.
        ReplyKind::Status { .. }
        | ReplyKind::Hang(_)
        | ReplyKind::Malformed
        | ReplyKind::Raw { .. } => (Some(String::new()), Vec::new(), None),
    };
    let calls: Vec<(String, ScriptedToolCall)> = calls
        .into_iter()
        .map(|c| (format!("call_fake_{}", shared.next_id()), c))
        .collect();
    let finish = if calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    let prompt_tokens = rough_tokens(&req.raw_body);
    let completion_tokens = rough_tokens(text.as_deref().unwrap_or(""))
        + calls
            .iter()
            .map(|(_, c)| rough_tokens(&c.arguments.to_string()))
            .sum::<u64>();
    let usage = json!({
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    });

    if req.is_stream() {
        let chunk = |delta: Value, finish: Option<&str>| {
            let v = json!({
                "id": id, "object": "chat.completion.chunk", "created": created, "model": model,
                "system_fingerprint": "fp_fake",
                "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
            });
            format!("data: {v}\n\n")
        };
        let mut events = vec![chunk(json!({"role": "assistant", "content": ""}), None)];
        if let Some(t) = &text {
            events.extend(
                char_chunks(t, 4)
                    .into_iter()
                    .map(|piece| chunk(json!({"content": piece}), None)),
            );
        }
        for (index, (call_id, call)) in calls.iter().enumerate() {
            events.push(chunk(
                json!({"tool_calls": [{"index": index, "id": call_id, "type": "function",
                    "function": {"name": call.name, "arguments": ""}}]}),
                None,
            ));
            let args = call.arguments.to_string();
            let per = args.chars().count().div_ceil(3).max(1);
            for frag in char_chunks(&args, per) {
                events.push(chunk(
                    json!({"tool_calls": [{"index": index, "function": {"arguments": frag}}]}),
                    None,
                ));
            }
        }
        events.push(chunk(json!({}), Some(finish)));
        let include_usage = req
            .body
            .pointer("/stream_options/include_usage")
            .and_then(Value::as_bool)
            == Some(true);
        if include_usage {
            let v = json!({
                "id": id, "object": "chat.completion.chunk", "created": created, "model": model,
                "system_fingerprint": "fp_fake", "choices": [], "usage": usage,
            });
            events.push(format!("data: {v}\n\n"));
        }
        events.push("data: [DONE]\n\n".to_owned());
        let first_text = text
            .as_deref()
            .is_some_and(|t| !t.is_empty())
            .then(|| shared.first_text_sent.clone());
        return sse_body(events, cut_after, chunk_delay, first_text);
    }

    let mut message = json!({"role": "assistant", "content": text, "refusal": null});
    if !calls.is_empty() {
        message["tool_calls"] = Value::Array(
            calls
                .iter()
                .map(|(call_id, c)| {
                    json!({"id": call_id, "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments.to_string()}})
                })
                .collect(),
        );
    }
    let body = json!({
        "id": id, "object": "chat.completion", "created": created, "model": model,
        "system_fingerprint": "fp_fake",
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish}],
        "usage": usage,
    })
    .to_string();
    match cut_after {
        None => with_type(StatusCode::OK, "application/json", body),
        Some(_) => {
            // Send the first half of the body, then abort the connection.
            let half: String = body.chars().take(body.chars().count() / 2).collect();
            let items: Vec<Result<Bytes, std::io::Error>> = vec![
                Ok(Bytes::from(half)),
                Err(std::io::Error::new(
                    std::io::ErrorKind::ConnectionAborted,
                    "body cut by script",
                )),
            ];
            let stream = futures::stream::iter(items).then(|item| async move {
                if item.is_err() {
                    tokio::time::sleep(CUT_GRACE).await;
                }
                item
            });
            let mut resp = Response::new(Body::from_stream(stream));
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            resp
        }
    }
}

/// Input texts of an embeddings request (`input` string or array of strings).
fn embedding_inputs(body: &Value) -> Vec<String> {
    match body.get("input") {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
            .collect(),
        _ => Vec::new(),
    }
}

fn embeddings(shared: &Shared, req: &RecordedRequest, kind: ReplyKind) -> Response {
    let inputs = embedding_inputs(&req.body);
    if inputs.is_empty() {
        return error_json(
            400,
            "input must be a non-empty string or array",
            "invalid_request_error",
            None,
        );
    }
    let vectors = match kind {
        ReplyKind::Embeddings(v) => v,
        _ => {
            let dim = req
                .body
                .get("dimensions")
                .and_then(Value::as_u64)
                .and_then(|d| usize::try_from(d).ok())
                .unwrap_or_else(|| shared.embedding_dimension());
            inputs.iter().map(|t| hash_embedding(t, dim)).collect()
        }
    };
    let tokens: u64 = inputs.iter().map(|t| rough_tokens(t)).sum();
    let data: Vec<Value> = vectors
        .into_iter()
        .enumerate()
        .map(|(i, v)| json!({"object": "embedding", "index": i, "embedding": v}))
        .collect();
    let body = json!({
        "object": "list",
        "data": data,
        "model": req.model().unwrap_or("fake-embedding"),
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    });
    (StatusCode::OK, axum::Json(body)).into_response()
}

fn client_secret(shared: &Shared, req: &RecordedRequest) -> Response {
    let n = shared.next_id();
    let session = req
        .body
        .get("session")
        .cloned()
        .unwrap_or_else(|| json!({"type": "realtime", "model": "gpt-realtime"}));
    let value = format!("ek_fake_{n:016x}");
    let expires_at = now_secs() + shared.secret_ttl_secs();
    let body = match shared.secret_shape() {
        crate::SecretShape::Ga => json!({
            "value": value,
            "expires_at": expires_at,
            "session": session,
        }),
        crate::SecretShape::Beta => {
            let mut beta = session;
            if let Some(o) = beta.as_object_mut() {
                o.insert("id".into(), json!(format!("sess_fake_{n}")));
                o.insert(
                    "client_secret".into(),
                    json!({"value": value, "expires_at": expires_at}),
                );
            }
            beta
        }
    };
    (StatusCode::OK, axum::Json(body)).into_response()
}

/// `POST /v1/realtime/calls`: an SDP offer with `Authorization: Bearer
/// ek_…` and `Content-Type: application/sdp` gets a minimal SDP answer
/// (201, `Location: /v1/realtime/calls/rtc_fake_N`); anything else 400/401.
fn realtime_call(shared: &Shared, req: &RecordedRequest) -> Response {
    let bearer = req
        .header("authorization")
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    if !bearer.starts_with("ek_") {
        return error_json(
            401,
            "an ephemeral client secret (ek_) is required",
            "invalid_request_error",
            None,
        );
    }
    let sdp_type = req
        .header("content-type")
        .is_some_and(|v| v.starts_with("application/sdp"));
    if !sdp_type || !req.raw_body.starts_with("v=0") {
        return error_json(
            400,
            "the body must be an SDP offer (application/sdp)",
            "invalid_request_error",
            None,
        );
    }
    let n = shared.next_id();
    let answer = "v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\na=group:BUNDLE 0 1\r\n\
        m=audio 9 UDP/TLS/RTP/SAVPF 111\r\nc=IN IP4 0.0.0.0\r\na=mid:0\r\na=sendrecv\r\n\
        m=application 9 UDP/DTLS/SCTP webrtc-datachannel\r\nc=IN IP4 0.0.0.0\r\na=mid:1\r\n";
    let mut resp = with_type(StatusCode::CREATED, "application/sdp", answer);
    resp.headers_mut().insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    resp.headers_mut().insert(
        header::ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static("location"),
    );
    if let Ok(v) = HeaderValue::from_str(&format!("/v1/realtime/calls/rtc_fake_{n}")) {
        resp.headers_mut().insert(header::LOCATION, v);
    }
    resp
}
