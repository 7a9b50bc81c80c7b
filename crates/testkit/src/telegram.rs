//! A fake Telegram Bot API on loopback, for testing `opencouch telegram`
//! offline.
//!
//! [`FakeTelegram`] serves `POST /bot<TOKEN>/<method>` (JSON bodies, and
//! `multipart/form-data` for `sendDocument`) for `getMe`, `getUpdates`
//! (with `offset` confirming earlier updates, `limit`, and a long-poll
//! `timeout` that returns as soon as an update arrives), `sendMessage`,
//! `sendChatAction`, `sendDocument`, `answerCallbackQuery`,
//! `editMessageReplyMarkup`, `setWebhook`, `deleteWebhook` and
//! `setMyCommands`, answering as the real API does
//! (`{"ok": true, "result": …}` or `{"ok": false, "error_code", "description",
//! "parameters"}`). Every call is recorded ([`BotCall`]) in arrival order.
//!
//! Tests queue updates ([`FakeTelegram::push_text`],
//! [`FakeTelegram::push_callback`], [`FakeTelegram::push_update`]); an update
//! stays queued until a `getUpdates` call confirms it with a larger
//! `offset`, as on Telegram, so a bot that restarts without confirming sees
//! it again. Faults: the next calls of a method can answer 429 with
//! `retry_after` ([`FakeTelegram::rate_limit_next`]) or any status
//! ([`FakeTelegram::fail_next`]); a wrong token answers 401.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

/// The token the fake accepts (any other answers 401).
pub const FAKE_BOT_TOKEN: &str = "123456:TEST-fake-bot-token";

/// The fake bot's user id.
pub const FAKE_BOT_ID: i64 = 123_456;

/// The longest a `getUpdates` long poll waits in the fake (whatever
/// `timeout` asks), so a test never waits long for an empty answer.
const MAX_POLL_WAIT: Duration = Duration::from_secs(2);

/// One Bot API call as the fake received it.
#[derive(Clone, Debug, PartialEq)]
pub struct BotCall {
    /// The method, e.g. `sendMessage`.
    pub method: String,
    /// The parameters: the JSON body, or for a multipart body its text
    /// fields plus `document` as `{"filename", "text"}`.
    pub body: Value,
    /// The status the fake answered.
    pub status: u16,
}

impl BotCall {
    /// The `chat_id` parameter as a number (sent as a number or a string).
    pub fn chat_id(&self) -> Option<i64> {
        match &self.body["chat_id"] {
            Value::Number(n) => n.as_i64(),
            Value::String(s) => s.parse().ok(),
            _ => None,
        }
    }

    /// The `text` parameter.
    pub fn text(&self) -> Option<&str> {
        self.body["text"].as_str()
    }
}

#[derive(Default)]
struct TgState {
    next_update_id: i64,
    /// Updates not yet confirmed, in id order.
    updates: VecDeque<Value>,
    /// The largest `offset` a `getUpdates` confirmed.
    confirmed: i64,
    calls: Vec<BotCall>,
    faults: HashMap<String, VecDeque<(u16, Option<u64>)>>,
    next_message_id: i64,
    webhook: Option<Value>,
}

struct TgShared {
    state: Mutex<TgState>,
    arrived: Notify,
}

impl TgShared {
    fn lock(&self) -> MutexGuard<'_, TgState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A fake Bot API on a random loopback port. Shuts down on drop.
pub struct FakeTelegram {
    addr: SocketAddr,
    shared: Arc<TgShared>,
    shutdown: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl std::fmt::Debug for FakeTelegram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeTelegram")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl FakeTelegram {
    /// Starts the fake. Panics when no loopback port can be bound
    /// (test-only helper).
    pub async fn start() -> FakeTelegram {
        match FakeTelegram::try_start().await {
            Ok(f) => f,
            Err(e) => panic!("FakeTelegram could not bind a loopback port: {e}"),
        }
    }

    /// Starts the fake, reporting bind errors.
    pub async fn try_start() -> std::io::Result<FakeTelegram> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let (tx, mut stop) = watch::channel(false);
        let shared = Arc::new(TgShared {
            state: Mutex::new(TgState {
                next_update_id: 1000,
                next_message_id: 1,
                ..TgState::default()
            }),
            arrived: Notify::new(),
        });
        let app = Router::new().fallback(handle).with_state(shared.clone());
        let task = tokio::spawn(async move {
            let serve = axum::serve(listener, app).with_graceful_shutdown(async move {
                let _ = stop.wait_for(|s| *s).await;
            });
            let _ = serve.await;
        });
        Ok(FakeTelegram {
            addr,
            shared,
            shutdown: tx,
            task,
        })
    }

    /// The base URL to use instead of `https://api.telegram.org`.
    pub fn api_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The token the fake accepts.
    pub fn token(&self) -> &'static str {
        FAKE_BOT_TOKEN
    }

    /// Queues an update (its `update_id` is assigned here); returns the id.
    pub fn push_update(&self, mut update: Value) -> i64 {
        let id = {
            let mut st = self.shared.lock();
            let id = st.next_update_id;
            st.next_update_id += 1;
            if let Some(obj) = update.as_object_mut() {
                obj.insert("update_id".into(), json!(id));
            }
            st.updates.push_back(update);
            id
        };
        self.shared.arrived.notify_waiters();
        id
    }

    /// Queues a text message from `user` in the private chat of that user
    /// (a private chat's id is the user's id); returns the update id.
    pub fn push_text(&self, user: i64, text: &str) -> i64 {
        self.push_update(json!({
            "message": {
                "message_id": 1,
                "date": 1_700_000_000,
                "from": {"id": user, "is_bot": false, "first_name": "Tester"},
                "chat": {"id": user, "type": "private", "first_name": "Tester"},
                "text": text,
            }
        }))
    }

    /// Queues a text message in a group chat; returns the update id.
    pub fn push_group_text(&self, chat: i64, user: i64, text: &str) -> i64 {
        self.push_update(json!({
            "message": {
                "message_id": 1,
                "date": 1_700_000_000,
                "from": {"id": user, "is_bot": false, "first_name": "Tester"},
                "chat": {"id": chat, "type": "group", "title": "A group"},
                "text": text,
            }
        }))
    }

    /// Queues a sticker (a message without text) in `user`'s private chat.
    pub fn push_sticker(&self, user: i64) -> i64 {
        self.push_update(json!({
            "message": {
                "message_id": 1,
                "date": 1_700_000_000,
                "from": {"id": user, "is_bot": false, "first_name": "Tester"},
                "chat": {"id": user, "type": "private", "first_name": "Tester"},
                "sticker": {"file_id": "x", "emoji": "🙂"},
            }
        }))
    }

    /// Queues a press of an inline keyboard button with `data` under the
    /// bot's message `message_id` in `user`'s private chat.
    pub fn push_callback(&self, user: i64, message_id: i64, data: &str) -> i64 {
        let query_id = format!("cb{message_id}-{data}");
        self.push_update(json!({
            "callback_query": {
                "id": query_id,
                "from": {"id": user, "is_bot": false, "first_name": "Tester"},
                "message": {
                    "message_id": message_id,
                    "date": 1_700_000_000,
                    "chat": {"id": user, "type": "private"},
                    "text": "(the bot's message)",
                },
                "chat_instance": "1",
                "data": data,
            }
        }))
    }

    /// The next `times` calls of `method` answer `status` (a 5xx, 400, …).
    pub fn fail_next(&self, method: &str, status: u16, times: usize) {
        let mut st = self.shared.lock();
        let q = st.faults.entry(method.to_owned()).or_default();
        q.extend(std::iter::repeat_n((status, None), times));
    }

    /// The next call of `method` answers 429 with `retry_after` seconds.
    pub fn rate_limit_next(&self, method: &str, retry_after: u64) {
        self.shared
            .lock()
            .faults
            .entry(method.to_owned())
            .or_default()
            .push_back((429, Some(retry_after)));
    }

    /// Drops every scripted fault: calls answer normally again.
    pub fn clear_faults(&self) {
        self.shared.lock().faults.clear();
    }

    /// Every call so far, in arrival order.
    pub fn calls(&self) -> Vec<BotCall> {
        self.shared.lock().calls.clone()
    }

    /// The calls of `method` that succeeded.
    pub fn ok_calls(&self, method: &str) -> Vec<BotCall> {
        self.shared
            .lock()
            .calls
            .iter()
            .filter(|c| c.method == method && c.status == 200)
            .cloned()
            .collect()
    }

    /// The texts of the messages sent to `chat` (successful `sendMessage`
    /// calls), in order.
    pub fn sent_texts(&self, chat: i64) -> Vec<String> {
        self.ok_calls("sendMessage")
            .iter()
            .filter(|c| c.chat_id() == Some(chat))
            .filter_map(|c| c.text().map(str::to_owned))
            .collect()
    }

    /// The largest offset a `getUpdates` confirmed.
    pub fn confirmed_offset(&self) -> i64 {
        self.shared.lock().confirmed
    }

    /// Updates queued and not yet confirmed.
    pub fn pending_updates(&self) -> usize {
        self.shared.lock().updates.len()
    }

    /// The parameters of the last successful `setWebhook`, while set.
    pub fn webhook(&self) -> Option<Value> {
        self.shared.lock().webhook.clone()
    }

    /// Waits until `done` holds for the calls so far, checking every 20 ms,
    /// for at most `limit`; whether it held.
    pub async fn wait_until(&self, limit: Duration, done: impl Fn(&[BotCall]) -> bool) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if done(&self.shared.lock().calls) {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for FakeTelegram {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
        self.task.abort();
    }
}

fn reply(status: StatusCode, body: Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn error_body(status: u16, retry_after: Option<u64>) -> Value {
    let description = match status {
        429 => format!(
            "Too Many Requests: retry after {}",
            retry_after.unwrap_or(1)
        ),
        401 => "Unauthorized".to_owned(),
        404 => "Not Found".to_owned(),
        400 => "Bad Request".to_owned(),
        s if s >= 500 => "Bad Gateway".to_owned(),
        _ => "Error".to_owned(),
    };
    let mut body = json!({"ok": false, "error_code": status, "description": description});
    if let Some(r) = retry_after {
        body["parameters"] = json!({"retry_after": r});
    }
    body
}

async fn handle(
    State(shared): State<Arc<TgShared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().trim_start_matches('/');
    let Some((token_part, method)) = path.split_once('/') else {
        return reply(StatusCode::NOT_FOUND, error_body(404, None));
    };
    let method = method.to_owned();
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let params = if content_type.starts_with("multipart/form-data") {
        parse_multipart(&content_type, &body)
    } else if body.is_empty() {
        json!({})
    } else {
        serde_json::from_slice(&body).unwrap_or(Value::Null)
    };
    let record = |status: u16| {
        shared.lock().calls.push(BotCall {
            method: method.clone(),
            body: params.clone(),
            status,
        });
    };
    if token_part != format!("bot{FAKE_BOT_TOKEN}") {
        record(401);
        return reply(StatusCode::UNAUTHORIZED, error_body(401, None));
    }
    if params.is_null() {
        record(400);
        return reply(StatusCode::BAD_REQUEST, error_body(400, None));
    }
    let fault = shared
        .lock()
        .faults
        .get_mut(&method)
        .and_then(VecDeque::pop_front);
    if let Some((status, retry_after)) = fault {
        record(status);
        let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        return reply(code, error_body(status, retry_after));
    }
    let result = match method.as_str() {
        "getUpdates" => {
            let updates = get_updates(&shared, &params).await;
            record(200);
            return reply(StatusCode::OK, json!({"ok": true, "result": updates}));
        }
        "getMe" => json!({
            "id": FAKE_BOT_ID, "is_bot": true, "first_name": "OpenCouch test",
            "username": "opencouch_test_bot"
        }),
        "sendMessage" | "sendDocument" => {
            let mut st = shared.lock();
            let id = st.next_message_id;
            st.next_message_id += 1;
            json!({
                "message_id": id,
                "date": 1_700_000_000,
                "chat": {"id": params["chat_id"].clone(), "type": "private"},
                "text": params["text"].clone(),
            })
        }
        "setWebhook" => {
            shared.lock().webhook = Some(params.clone());
            json!(true)
        }
        "deleteWebhook" => {
            shared.lock().webhook = None;
            json!(true)
        }
        "sendChatAction" | "answerCallbackQuery" | "setMyCommands" | "editMessageReplyMarkup" => {
            json!(true)
        }
        _ => {
            record(404);
            return reply(StatusCode::NOT_FOUND, error_body(404, None));
        }
    };
    record(200);
    reply(StatusCode::OK, json!({"ok": true, "result": result}))
}

/// `getUpdates`: confirms updates before `offset`, then answers the
/// pending ones (up to `limit`), waiting up to `timeout` seconds (at most
/// [`MAX_POLL_WAIT`]) for one to arrive when there is none.
async fn get_updates(shared: &TgShared, params: &Value) -> Vec<Value> {
    let offset = params["offset"].as_i64();
    let limit = params["limit"].as_u64().unwrap_or(100).clamp(1, 100) as usize;
    let wait = Duration::from_secs(params["timeout"].as_u64().unwrap_or(0)).min(MAX_POLL_WAIT);
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let notified = shared.arrived.notified();
        {
            let mut st = shared.lock();
            if let Some(off) = offset {
                while st
                    .updates
                    .front()
                    .and_then(|u| u["update_id"].as_i64())
                    .is_some_and(|id| id < off)
                {
                    st.updates.pop_front();
                }
                st.confirmed = st.confirmed.max(off);
            }
            let out: Vec<Value> = st.updates.iter().take(limit).cloned().collect();
            if !out.is_empty() {
                return out;
            }
        }
        if tokio::time::timeout_at(deadline, notified).await.is_err() {
            return Vec::new();
        }
    }
}

/// The fields of a `multipart/form-data` body: text parts as strings, a
/// file part as `{"filename", "text"}` (its bytes read as UTF-8, lossy).
fn parse_multipart(content_type: &str, body: &[u8]) -> Value {
    let Some(boundary) = content_type
        .split(';')
        .filter_map(|p| p.trim().strip_prefix("boundary="))
        .next()
        .map(|b| b.trim_matches('"').to_owned())
    else {
        return Value::Null;
    };
    let text = String::from_utf8_lossy(body);
    let delimiter = format!("--{boundary}");
    let mut out = serde_json::Map::new();
    for part in text.split(delimiter.as_str()).skip(1) {
        if part.starts_with("--") {
            break;
        }
        let part = part.strip_prefix("\r\n").unwrap_or(part);
        let Some((head, content)) = part.split_once("\r\n\r\n") else {
            continue;
        };
        let content = content.strip_suffix("\r\n").unwrap_or(content);
        let disposition = head
            .lines()
            .find(|l| l.to_ascii_lowercase().starts_with("content-disposition"))
            .unwrap_or_default();
        let field = |key: &str| {
            disposition
                .split(';')
                .filter_map(|p| p.trim().strip_prefix(&format!("{key}=")))
                .next()
                .map(|v| v.trim_matches('"').to_owned())
        };
        let Some(name) = field("name") else { continue };
        match field("filename") {
            Some(filename) => {
                out.insert(name, json!({"filename": filename, "text": content}));
            }
            None => {
                out.insert(name, json!(content));
            }
        }
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::parse_multipart;

    #[test]
    fn multipart_fields_and_files_are_read() {
        let body = "--XyZ\r\nContent-Disposition: form-data; name=\"chat_id\"\r\n\r\n42\r\n\
                    --XyZ\r\nContent-Disposition: form-data; name=\"document\"; filename=\"a.json\"\r\n\
                    Content-Type: application/json\r\n\r\n{\"x\":1}\r\n--XyZ--\r\n";
        let v = parse_multipart("multipart/form-data; boundary=XyZ", body.as_bytes());
        assert_eq!(v["chat_id"], "42");
        assert_eq!(v["document"]["filename"], "a.json");
        assert_eq!(v["document"]["text"], "{\"x\":1}");
    }
}
