//! `GET /api/chat/ws`: one turn over a WebSocket.
//!
//! Protocol: the client sends one `ChatRequest` as a text message; the
//! server sends the turn's events as JSON text messages (`done` or `error`
//! last), then closes with 1000 and waits briefly for the client's close.
//!
//! * Pings are answered (also before the first message); pongs ignored.
//! * A further message while the turn runs is not processed: the server
//!   answers it with a `refused` event (`code: turn_in_progress`) and the
//!   turn's own events continue, `done` still last. One connection, one
//!   turn: open a new connection for the next message.
//! * Protocol violations end the connection with a close frame carrying
//!   the RFC 6455 code: invalid UTF-8 in a text message 1007, a message
//!   above the body limit 1009, an unmasked frame, a reserved opcode or
//!   reserved bits 1002. A binary first message gets a `bad_message` error
//!   event, then 1003.
//!
//! The turn runs in its own task: a client that goes away mid-turn does not
//! stop it, and it commits completely or not at all.

use std::time::Duration;

use axum::extract::State;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade, close_code};
use axum::response::Response;
use axum::{Error as AxumError, Extension};
use futures::stream::{SplitSink, SplitStream};
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};

use crate::AppState;
use crate::chat::{Caller, ChatRequest, turn_events};
use crate::conn::ConnSlot;
use crate::error::{ApiError, parse_required};

/// How long the server waits for the client's close frame after its own.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// `GET /api/chat/ws`.
pub(crate) async fn chat_ws(
    State(state): State<AppState>,
    caller: Caller,
    slot: Option<Extension<ConnSlot>>,
    headers: axum::http::HeaderMap,
    ws: WebSocketUpgrade,
) -> Response {
    let limit = state.limits().body_limit_bytes;
    // Kept to check again when the request arrives: a token revoked while
    // the connection sat open must not run a turn.
    let token = crate::auth::bearer_token(&headers).map(str::to_owned);
    ws.max_message_size(limit)
        .on_upgrade(move |socket| async move {
            // The upgraded connection keeps its place under the connection caps.
            let _slot = slot;
            session(state, caller, token, socket).await;
        })
}

/// Whether a verified caller's token was revoked since the upgrade. A store
/// failure does not count as revoked (the turn then runs as before; a crisis
/// reply never waits on the user store).
async fn revoked_since_upgrade(state: &AppState, caller: &Caller, token: Option<&str>) -> bool {
    let (crate::auth::AuthMode::Tokens(users), Caller::Owner(_), Some(token)) =
        (state.auth(), caller, token)
    else {
        return false;
    };
    matches!(
        state
            .tokens()
            .verify(users, token, std::time::Instant::now())
            .await,
        Ok(None)
    )
}

type Tx = SplitSink<WebSocket, Message>;
type Rx = SplitStream<WebSocket>;

async fn send(tx: &mut Tx, v: &Value) -> bool {
    tx.send(Message::Text(v.to_string().into())).await.is_ok()
}

fn error_event(e: &ApiError) -> Value {
    json!({"type": "error", "code": e.code, "message": e.message})
}

/// Sends a close frame, then reads (and drops) whatever the client still
/// sends until it closes too or [`CLOSE_GRACE`] passes, so the connection
/// ends with a clean close handshake and no unread data.
async fn close(tx: &mut Tx, rx: &mut Rx, code: u16, reason: &'static str) {
    let frame = CloseFrame {
        code,
        reason: reason.into(),
    };
    if tx.send(Message::Close(Some(frame))).await.is_err() {
        return;
    }
    let _ = tokio::time::timeout(CLOSE_GRACE, async {
        while let Some(Ok(_)) = rx.next().await {}
    })
    .await;
}

/// The close code for a read error: a protocol violation by the client
/// (1002), text that is not UTF-8 (1007), a message over the limit (1009);
/// `None` when the connection itself failed (nothing can be sent).
fn close_code_for(e: AxumError) -> Option<(u16, &'static str)> {
    use tokio_tungstenite::tungstenite::Error as WsError;
    use tokio_tungstenite::tungstenite::error::CapacityError;
    let inner = e.into_inner();
    let Some(e) = inner.downcast_ref::<WsError>() else {
        return Some((close_code::ERROR, "internal error"));
    };
    match e {
        WsError::Utf8(_) => Some((close_code::INVALID, "text is not valid UTF-8")),
        WsError::Capacity(CapacityError::MessageTooLong { .. }) => {
            Some((close_code::SIZE, "message too large"))
        }
        WsError::Capacity(_) => Some((close_code::SIZE, "message too large")),
        WsError::Protocol(_) => Some((close_code::PROTOCOL, "protocol error")),
        WsError::ConnectionClosed | WsError::AlreadyClosed | WsError::Io(_) => None,
        _ => Some((close_code::PROTOCOL, "protocol error")),
    }
}

/// Ends the connection after a read error (see [`close_code_for`]).
async fn fail(tx: &mut Tx, e: AxumError) {
    if let Some((code, reason)) = close_code_for(e) {
        let frame = CloseFrame {
            code,
            reason: reason.into(),
        };
        // The stream is unusable after the error: send the close frame
        // and end; there is nothing more to read.
        let _ = tx.send(Message::Close(Some(frame))).await;
    }
}

async fn session(state: AppState, caller: Caller, token: Option<String>, socket: WebSocket) {
    let (mut tx, mut rx) = socket.split();
    // The first text message is the request; pings before it are answered
    // (tungstenite queues the pong and sends it on the next read).
    let deadline = tokio::time::Instant::now() + state.limits().request_timeout;
    let text = loop {
        match tokio::time::timeout_at(deadline, rx.next()).await {
            Err(_) => {
                close(
                    &mut tx,
                    &mut rx,
                    close_code::POLICY,
                    "no chat request in time",
                )
                .await;
                return;
            }
            Ok(None) => return,
            Ok(Some(Err(e))) => {
                fail(&mut tx, e).await;
                return;
            }
            Ok(Some(Ok(Message::Text(t)))) => break t,
            Ok(Some(Ok(Message::Ping(_) | Message::Pong(_)))) => {}
            // The client closed first: the next read sends our close reply
            // and ends the stream.
            Ok(Some(Ok(Message::Close(_)))) => {}
            Ok(Some(Ok(Message::Binary(_)))) => {
                let e = ApiError::bad_request(
                    "bad_message",
                    "send one JSON chat request as a text message",
                );
                state.metrics().rejected(e.code);
                let _ = send(&mut tx, &error_event(&e)).await;
                close(
                    &mut tx,
                    &mut rx,
                    close_code::UNSUPPORTED,
                    "text messages only",
                )
                .await;
                return;
            }
        }
    };
    if revoked_since_upgrade(&state, &caller, token.as_deref()).await {
        let e = ApiError::unauthorized();
        state.metrics().rejected("unauthorized");
        let _ = send(&mut tx, &error_event(&e)).await;
        close(&mut tx, &mut rx, close_code::POLICY, "token revoked").await;
        return;
    }
    let parsed = parse_required::<ChatRequest>(text.as_bytes())
        .and_then(|req| state.prepare_turn(&caller, req));
    let turn = match parsed {
        Ok(v) => v,
        Err(e) => {
            state.metrics().rejected(e.code);
            let _ = send(&mut tx, &error_event(&e)).await;
            close(&mut tx, &mut rx, close_code::NORMAL, "").await;
            return;
        }
    };
    // Over a limit: the gate decides (microseconds, no storage); a crisis
    // message gets its reply, anything else the `rate_limited` error it
    // would have had as a 429.
    if let Caller::Limited(wait) = caller {
        match turn.run().await {
            Ok(output) => {
                let output = Box::new(output);
                for ev in [
                    opencouch_core::StreamEvent::ResponseReady {
                        output: output.clone(),
                    },
                    opencouch_core::StreamEvent::Done { output },
                ] {
                    if !send(&mut tx, &opencouch_runtime::service::kit::wire_event(&ev)).await {
                        return;
                    }
                }
            }
            Err(_) => {
                state.metrics().rejected("rate_limited");
                let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
                let e = json!({
                    "type": "error",
                    "code": "rate_limited",
                    "message": format!("too many requests; try again in {} s", secs.max(1)),
                });
                let _ = send(&mut tx, &e).await;
            }
        }
        close(&mut tx, &mut rx, close_code::NORMAL, "").await;
        return;
    }
    let mut events = std::pin::pin!(turn_events(turn.stream()));
    let mut reading = true;
    loop {
        tokio::select! {
            ev = events.next() => match ev {
                Some(v) => {
                    if !send(&mut tx, &v).await {
                        // The client is gone: dropping the events tells the
                        // turn (a turn below crisis level stops uncommitted).
                        return;
                    }
                }
                None => break,
            },
            msg = rx.next(), if reading => match msg {
                Some(Ok(Message::Text(_) | Message::Binary(_))) => {
                    state.metrics().rejected("turn_in_progress");
                    let refused = json!({
                        "type": "refused",
                        "code": "turn_in_progress",
                        "message": "a turn is already running on this connection; this message was not processed",
                    });
                    if !send(&mut tx, &refused).await {
                        return;
                    }
                }
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                // The client closed mid-turn: nothing more can be sent.
                // Reading on answers its close; returning drops the events,
                // which cancels a turn below crisis level before its commit
                // (a crisis turn still commits).
                Some(Ok(Message::Close(_))) => {
                    let _ = tokio::time::timeout(CLOSE_GRACE, async {
                        while let Some(Ok(_)) = rx.next().await {}
                    })
                    .await;
                    return;
                }
                Some(Err(e)) => {
                    fail(&mut tx, e).await;
                    return;
                }
                None => reading = false,
            },
        }
    }
    close(&mut tx, &mut rx, close_code::NORMAL, "").await;
}
