//! Test kit for OpenCouch: a protocol-faithful fake OpenAI-compatible server,
//! a fake Hugging Face hub for model downloads ([`FakeHub`], see [`hub`]),
//! and a fake Telegram Bot API ([`FakeTelegram`], see [`telegram`]).
//!
//! [`FakeOpenAi`] serves real HTTP on `127.0.0.1` (random port) so clients are
//! exercised end to end: chat completions (JSON and SSE streaming, including
//! tool-call deltas split across chunks), embeddings (deterministic
//! bag-of-words vectors, see [`hash_embedding`]), Realtime client secrets
//! (GA or beta answer shape, see [`SecretShape`]) and Realtime calls (an SDP
//! offer answered with an SDP answer, 201, `Location` naming the call).
//!
//! Tests script replies with rules: one-shot rules are consumed in FIFO order
//! (the first matching one wins), sticky rules stay, and an unmatched request
//! gets the default reply ("fake reply" unless changed with
//! [`FakeOpenAi::set_default`]). Faults (HTTP 500, 429 with `Retry-After`,
//! hangs, malformed bodies, streams cut midway) and latency are replies too.
//!
//! ```no_run
//! # async fn demo() {
//! use opencouch_testkit::{FakeOpenAi, Match, Reply};
//! use serde_json::json;
//! let fake = FakeOpenAi::start().await;
//! fake.push_when(
//!     Match::last_user_contains("pills"),
//!     Reply::tool_call("lookup_crisis_resources", json!({"country": "US"})),
//! );
//! fake.set_default(Reply::text("ok"));
//! let url = fake.base_url(); // http://127.0.0.1:PORT/v1
//! # let _ = url;
//! # }
//! ```

pub mod canned;
pub mod embed;
pub mod hub;
pub mod otlp;
mod script;
mod server;
pub mod telegram;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use embed::{cosine, hash_embedding};
pub use hub::{FakeHub, HubRequest};
pub use otlp::FakeCollector;
pub use script::{Endpoint, Match, Reply, Rule, ScriptedToolCall};
pub use telegram::{BotCall, FAKE_BOT_TOKEN, FakeTelegram};

/// The shape of a minted Realtime client secret.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SecretShape {
    /// GA: `{value, expires_at, session}`.
    #[default]
    Ga,
    /// The older beta: `{…session fields, client_secret: {value, expires_at}}`.
    Beta,
}

/// Default embedding dimension of the fake embeddings endpoint.
pub const DEFAULT_EMBEDDING_DIMENSION: usize = 64;

/// Text of the default chat reply.
pub const DEFAULT_REPLY_TEXT: &str = "fake reply";

/// One request as the fake server received it.
#[derive(Clone, Debug)]
pub struct RecordedRequest {
    /// HTTP method, e.g. `POST`.
    pub method: String,
    /// Request path, e.g. `/v1/chat/completions`.
    pub path: String,
    /// Headers with lower-cased names, in arrival order.
    pub headers: Vec<(String, String)>,
    /// The body parsed as JSON (`Value::Null` when it is not JSON).
    pub body: Value,
    /// The body as (lossy UTF-8) text.
    pub raw_body: String,
}

/// Text of a message `content` that is a string or an array of text parts.
fn content_text(content: &Value) -> Option<String> {
    match content {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => Some(
            parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str).or_else(|| p.as_str()))
                .collect::<Vec<_>>()
                .join(""),
        ),
        _ => None,
    }
}

impl RecordedRequest {
    /// First value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The `model` field of the body.
    pub fn model(&self) -> Option<&str> {
        self.body.get("model").and_then(Value::as_str)
    }

    /// Whether the body asks for `stream: true`.
    pub fn is_stream(&self) -> bool {
        self.body
            .get("stream")
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }

    /// The chat `messages` array (empty when absent).
    pub fn messages(&self) -> &[Value] {
        self.body
            .get("messages")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    /// Role of the last chat message.
    pub fn last_role(&self) -> Option<&str> {
        self.messages()
            .last()
            .and_then(|m| m.get("role"))
            .and_then(Value::as_str)
    }

    /// Text of the last `user` message.
    pub fn last_user_message(&self) -> Option<String> {
        self.messages()
            .iter()
            .rev()
            .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
            .and_then(|m| m.get("content"))
            .and_then(content_text)
    }

    /// Names of the function tools offered by the request.
    pub fn tool_names(&self) -> Vec<String> {
        self.body
            .get("tools")
            .and_then(Value::as_array)
            .map(|tools| {
                tools
                    .iter()
                    .filter_map(|t| {
                        t.pointer("/function/name")
                            .and_then(Value::as_str)
                            .map(str::to_owned)
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Mutable script and log of the fake server.
struct State {
    once: VecDeque<Rule>,
    sticky: Vec<Rule>,
    chat_default: Reply,
    embedding_dimension: usize,
    secret_ttl_secs: u64,
    secret_shape: SecretShape,
    requests: Vec<RecordedRequest>,
}

/// State shared between the handle and the server task.
pub(crate) struct Shared {
    state: Mutex<State>,
    /// When each streamed chat reply's first text event was handed to the
    /// connection (for time-to-first-token measurements).
    pub(crate) first_text_sent: Arc<Mutex<Vec<std::time::Instant>>>,
    counter: AtomicU64,
    shutdown: watch::Receiver<bool>,
    /// Set by [`FakeOpenAi::release`]: held replies answer.
    released: watch::Sender<bool>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the script inconsistent.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Next value of a per-server counter (ids of completions, tool calls, secrets).
    pub(crate) fn next_id(&self) -> u64 {
        self.counter.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub(crate) fn record(&self, req: RecordedRequest) {
        self.lock().requests.push(req);
    }

    /// The scripted reply for `req`: first matching one-shot rule (consumed),
    /// else first matching sticky rule, else `None` (endpoint default).
    pub(crate) fn pick(&self, endpoint: Endpoint, req: &RecordedRequest) -> Option<Reply> {
        let mut st = self.lock();
        if let Some(pos) = st
            .once
            .iter()
            .position(|r| r.endpoint == endpoint && r.matcher.matches(req))
        {
            return st.once.remove(pos).map(|r| r.reply);
        }
        st.sticky
            .iter()
            .find(|r| r.endpoint == endpoint && r.matcher.matches(req))
            .map(|r| r.reply.clone())
    }

    pub(crate) fn chat_default(&self) -> Reply {
        self.lock().chat_default.clone()
    }

    pub(crate) fn embedding_dimension(&self) -> usize {
        self.lock().embedding_dimension
    }

    pub(crate) fn secret_ttl_secs(&self) -> u64 {
        self.lock().secret_ttl_secs
    }

    pub(crate) fn secret_shape(&self) -> SecretShape {
        self.lock().secret_shape
    }

    /// Waits until held replies are released (or the server shuts down).
    pub(crate) async fn wait_released(&self) {
        let mut released = self.released.subscribe();
        let mut stop = self.shutdown.clone();
        tokio::select! {
            _ = released.wait_for(|r| *r) => {}
            _ = stop.wait_for(|s| *s) => {}
        }
    }

    /// Sleeps for `d`, returning early when the server shuts down.
    pub(crate) async fn sleep(&self, d: std::time::Duration) {
        if d.is_zero() {
            return;
        }
        let mut rx = self.shutdown.clone();
        tokio::select! {
            () = tokio::time::sleep(d) => {}
            _ = rx.wait_for(|stop| *stop) => {}
        }
    }
}

/// A fake OpenAI-compatible server on a random loopback port. Shuts down on drop.
pub struct FakeOpenAi {
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl std::fmt::Debug for FakeOpenAi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeOpenAi")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl FakeOpenAi {
    /// Starts the server. Panics when no loopback port can be bound (test-only helper).
    pub async fn start() -> FakeOpenAi {
        match FakeOpenAi::try_start().await {
            Ok(fake) => fake,
            Err(e) => panic!("FakeOpenAi could not bind a loopback port: {e}"),
        }
    }

    /// Starts the server, reporting bind errors.
    pub async fn try_start() -> std::io::Result<FakeOpenAi> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let (tx, rx) = watch::channel(false);
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                once: VecDeque::new(),
                sticky: Vec::new(),
                chat_default: Reply::text(DEFAULT_REPLY_TEXT),
                embedding_dimension: DEFAULT_EMBEDDING_DIMENSION,
                secret_ttl_secs: 600,
                secret_shape: SecretShape::Ga,
                requests: Vec::new(),
            }),
            first_text_sent: Arc::default(),
            counter: AtomicU64::new(0),
            shutdown: rx.clone(),
            released: watch::channel(false).0,
        });
        let app = server::router(shared.clone());
        let mut stop = rx;
        let task = tokio::spawn(async move {
            // Small SSE chunks must not wait for delayed ACKs (Nagle), as with real providers.
            let listener =
                axum::serve::ListenerExt::tap_io(listener, |tcp: &mut tokio::net::TcpStream| {
                    let _ = tcp.set_nodelay(true);
                });
            let serve = axum::serve(listener, app).with_graceful_shutdown(async move {
                let _ = stop.wait_for(|s| *s).await;
            });
            // The server only ends on shutdown; an accept error has nowhere to go.
            let _ = serve.await;
        });
        Ok(FakeOpenAi {
            addr,
            shared,
            shutdown: tx,
            task,
        })
    }

    /// Socket address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Lets every reply scripted with [`Reply::held`] answer, now and from
    /// now on.
    pub fn release(&self) {
        self.shared.released.send_replace(true);
    }

    /// Base URL for OpenAI clients, e.g. `http://127.0.0.1:PORT/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Queues a one-shot chat reply for the next chat request (any content).
    pub fn push(&self, reply: Reply) {
        self.push_rule(Rule::new(Match::Any, reply));
    }

    /// Queues a one-shot chat reply for the next chat request matching `matcher`.
    pub fn push_when(&self, matcher: Match, reply: Reply) {
        self.push_rule(Rule::new(matcher, reply));
    }

    /// Adds a sticky chat rule: every chat request matching `matcher` (and no
    /// one-shot rule) gets `reply`.
    pub fn always_when(&self, matcher: Match, reply: Reply) {
        self.push_rule(Rule::new(matcher, reply).sticky());
    }

    /// Adds any rule (any endpoint, one-shot or sticky).
    pub fn push_rule(&self, rule: Rule) {
        let mut st = self.shared.lock();
        if rule.sticky {
            st.sticky.push(rule);
        } else {
            st.once.push_back(rule);
        }
    }

    /// Removes every one-shot and sticky rule.
    pub fn clear_rules(&self) {
        let mut st = self.shared.lock();
        st.once.clear();
        st.sticky.clear();
    }

    /// Number of one-shot rules not consumed yet.
    pub fn pending_rules(&self) -> usize {
        self.shared.lock().once.len()
    }

    /// Sets the reply for chat requests no rule matches.
    pub fn set_default(&self, reply: Reply) {
        self.shared.lock().chat_default = reply;
    }

    /// Sets the dimension of default embeddings (a request's `dimensions` field wins).
    pub fn set_embedding_dimension(&self, dimension: usize) {
        self.shared.lock().embedding_dimension = dimension.max(1);
    }

    /// Sets the lifetime reported in `expires_at` of minted client secrets.
    pub fn set_client_secret_ttl(&self, secs: u64) {
        self.shared.lock().secret_ttl_secs = secs;
    }

    /// Sets the shape of minted client secrets (GA by default).
    pub fn set_client_secret_shape(&self, shape: SecretShape) {
        self.shared.lock().secret_shape = shape;
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.lock().requests.clone()
    }

    /// Requests received on one endpoint.
    pub fn requests_to(&self, endpoint: Endpoint) -> Vec<RecordedRequest> {
        self.shared
            .lock()
            .requests
            .iter()
            .filter(|r| r.path == endpoint.path())
            .cloned()
            .collect()
    }

    /// Number of requests received so far (all endpoints).
    pub fn request_count(&self) -> usize {
        self.shared.lock().requests.len()
    }

    /// Forgets the recorded requests (rules are kept).
    pub fn clear_requests(&self) {
        self.shared.lock().requests.clear();
    }

    /// When each streamed chat reply with text handed its first text event
    /// to the connection, in order (for time-to-first-token benchmarks).
    pub fn first_text_sent(&self) -> Vec<std::time::Instant> {
        self.shared
            .first_text_sent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

impl Drop for FakeOpenAi {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
        self.task.abort();
    }
}
