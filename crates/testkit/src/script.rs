//! Scripting vocabulary for [`FakeOpenAi`](crate::FakeOpenAi): request matchers,
//! replies (content and faults) and rules that tie them together.

use std::time::Duration;

use serde_json::Value;

use crate::RecordedRequest;

/// The endpoint a rule applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// `POST /v1/chat/completions`.
    ChatCompletions,
    /// `POST /v1/embeddings`.
    Embeddings,
    /// `POST /v1/realtime/client_secrets`.
    ClientSecrets,
    /// `POST /v1/realtime/calls` (an SDP offer; answered with SDP, 201).
    RealtimeCalls,
}

impl Endpoint {
    /// The path (below the server root) this endpoint is served on.
    pub fn path(self) -> &'static str {
        match self {
            Endpoint::ChatCompletions => "/v1/chat/completions",
            Endpoint::Embeddings => "/v1/embeddings",
            Endpoint::ClientSecrets => "/v1/realtime/client_secrets",
            Endpoint::RealtimeCalls => "/v1/realtime/calls",
        }
    }

    /// The endpoint served on `path`, if any.
    pub fn from_path(path: &str) -> Option<Endpoint> {
        [
            Endpoint::ChatCompletions,
            Endpoint::Embeddings,
            Endpoint::ClientSecrets,
            Endpoint::RealtimeCalls,
        ]
        .into_iter()
        .find(|e| e.path() == path)
    }
}

/// A predicate on a recorded request. All string comparisons are
/// case-sensitive substring checks.
#[derive(Clone, Debug)]
pub enum Match {
    /// Every request.
    Any,
    /// The raw request body contains this substring.
    BodyContains(String),
    /// The text of the last `user` message contains this substring.
    LastUserContains(String),
    /// The request offers at least one tool.
    HasTools,
    /// The request offers a tool with this function name.
    ToolOffered(String),
    /// The request carries a `response_format`.
    HasResponseFormat,
    /// The request's `model` field equals this name.
    Model(String),
    /// The request asks for `stream: true`.
    Streaming,
    /// The role of the last message (e.g. `"tool"` after a tool round).
    LastRoleIs(String),
    /// All of the inner matchers hold.
    All(Vec<Match>),
    /// The inner matcher does not hold.
    Not(Box<Match>),
}

impl Match {
    /// Matches every request.
    pub fn any() -> Match {
        Match::Any
    }
    /// The raw body contains `needle`.
    pub fn body_contains(needle: impl Into<String>) -> Match {
        Match::BodyContains(needle.into())
    }
    /// The last user message contains `needle`.
    pub fn last_user_contains(needle: impl Into<String>) -> Match {
        Match::LastUserContains(needle.into())
    }
    /// The request offers tools.
    pub fn has_tools() -> Match {
        Match::HasTools
    }
    /// The request offers a tool named `name`.
    pub fn tool_offered(name: impl Into<String>) -> Match {
        Match::ToolOffered(name.into())
    }
    /// The request has a `response_format`.
    pub fn has_response_format() -> Match {
        Match::HasResponseFormat
    }
    /// The request names `model`.
    pub fn model(model: impl Into<String>) -> Match {
        Match::Model(model.into())
    }
    /// The request asks for SSE streaming.
    pub fn streaming() -> Match {
        Match::Streaming
    }
    /// The last message has role `role`.
    pub fn last_role(role: impl Into<String>) -> Match {
        Match::LastRoleIs(role.into())
    }
    /// Both `self` and `other` hold.
    pub fn and(self, other: Match) -> Match {
        match self {
            Match::All(mut v) => {
                v.push(other);
                Match::All(v)
            }
            first => Match::All(vec![first, other]),
        }
    }
    /// Negation of `self`.
    pub fn negate(self) -> Match {
        Match::Not(Box::new(self))
    }

    /// Whether `req` satisfies this matcher.
    pub fn matches(&self, req: &RecordedRequest) -> bool {
        match self {
            Match::Any => true,
            Match::BodyContains(n) => req.raw_body.contains(n.as_str()),
            Match::LastUserContains(n) => req
                .last_user_message()
                .is_some_and(|t| t.contains(n.as_str())),
            Match::HasTools => req
                .body
                .get("tools")
                .and_then(Value::as_array)
                .is_some_and(|t| !t.is_empty()),
            Match::ToolOffered(name) => req.tool_names().iter().any(|t| t == name),
            Match::HasResponseFormat => req
                .body
                .get("response_format")
                .is_some_and(|v| !v.is_null()),
            Match::Model(m) => req.model() == Some(m.as_str()),
            Match::Streaming => req.is_stream(),
            Match::LastRoleIs(role) => req.last_role() == Some(role.as_str()),
            Match::All(all) => all.iter().all(|m| m.matches(req)),
            Match::Not(inner) => !inner.matches(req),
        }
    }
}

/// One scripted tool call in a [`Reply`].
#[derive(Clone, Debug, PartialEq)]
pub struct ScriptedToolCall {
    /// Function name.
    pub name: String,
    /// Arguments; sent as their compact JSON text.
    pub arguments: Value,
}

/// What the fake server answers.
#[derive(Clone, Debug)]
pub(crate) enum ReplyKind {
    Text(String),
    ToolCalls {
        text: Option<String>,
        calls: Vec<ScriptedToolCall>,
    },
    Embeddings(Vec<Vec<f32>>),
    Status {
        status: u16,
        retry_after: Option<u64>,
        message: String,
    },
    Hang(Duration),
    Malformed,
    Raw {
        status: u16,
        content_type: String,
        body: String,
    },
    CutStream {
        text: String,
        after_chunks: usize,
    },
}

/// A scripted reply: content (text, tool calls, JSON, embeddings) or a fault,
/// plus optional latency before the response starts and between SSE chunks.
#[derive(Clone, Debug)]
pub struct Reply {
    pub(crate) kind: ReplyKind,
    pub(crate) latency: Duration,
    pub(crate) chunk_delay: Duration,
    /// Held until [`crate::FakeOpenAi::release`] (after `latency`).
    pub(crate) held: bool,
}

impl Reply {
    fn of(kind: ReplyKind) -> Reply {
        Reply {
            kind,
            latency: Duration::ZERO,
            chunk_delay: Duration::ZERO,
            held: false,
        }
    }

    /// A plain assistant text reply (finish reason `stop`).
    pub fn text(text: impl Into<String>) -> Reply {
        Reply::of(ReplyKind::Text(text.into()))
    }

    /// Structured output: the assistant content is the compact JSON text of `value`.
    pub fn json(value: Value) -> Reply {
        Reply::of(ReplyKind::Text(value.to_string()))
    }

    /// One tool call (finish reason `tool_calls`).
    pub fn tool_call(name: impl Into<String>, arguments: Value) -> Reply {
        Reply::tool_calls(vec![(name.into(), arguments)])
    }

    /// Several tool calls in one assistant message.
    pub fn tool_calls<N: Into<String>>(calls: Vec<(N, Value)>) -> Reply {
        let calls = calls
            .into_iter()
            .map(|(name, arguments)| ScriptedToolCall {
                name: name.into(),
                arguments,
            })
            .collect();
        Reply::of(ReplyKind::ToolCalls { text: None, calls })
    }

    /// Adds assistant text next to the tool calls of a tool-call reply; on other
    /// replies this is a no-op.
    pub fn with_text(mut self, text: impl Into<String>) -> Reply {
        if let ReplyKind::ToolCalls { text: t, .. } = &mut self.kind {
            *t = Some(text.into());
        }
        self
    }

    /// Scripted embedding vectors (for the embeddings endpoint), returned as is.
    pub fn embeddings(vectors: Vec<Vec<f32>>) -> Reply {
        Reply::of(ReplyKind::Embeddings(vectors))
    }

    /// An HTTP error status with an OpenAI-shaped `{"error": {...}}` body.
    pub fn status(status: u16) -> Reply {
        Reply::of(ReplyKind::Status {
            status,
            retry_after: None,
            message: format!("fake error {status}"),
        })
    }

    /// HTTP 500.
    pub fn server_error() -> Reply {
        Reply::status(500)
    }

    /// HTTP 429 with a `Retry-After: <seconds>` header.
    pub fn rate_limited(retry_after_secs: u64) -> Reply {
        Reply::of(ReplyKind::Status {
            status: 429,
            retry_after: Some(retry_after_secs),
            message: "fake rate limit".to_owned(),
        })
    }

    /// Sleeps for `duration` before answering (to exceed a client timeout), then
    /// answers with the text "late reply".
    pub fn hang(duration: Duration) -> Reply {
        Reply::of(ReplyKind::Hang(duration))
    }

    /// HTTP 200 with a truncated, unparseable JSON body (for streaming requests:
    /// an SSE event whose data is not JSON, then `[DONE]`).
    pub fn malformed() -> Reply {
        Reply::of(ReplyKind::Malformed)
    }

    /// An exact body with the given status and `application/json` content type,
    /// for non-standard servers (e.g. `finish_reason: ""`, `usage: {}`).
    pub fn raw_json(status: u16, body: Value) -> Reply {
        Reply::of(ReplyKind::Raw {
            status,
            content_type: "application/json".to_owned(),
            body: body.to_string(),
        })
    }

    /// An exact body with any status and content type (e.g. a hand-written SSE stream).
    pub fn raw(status: u16, content_type: impl Into<String>, body: impl Into<String>) -> Reply {
        Reply::of(ReplyKind::Raw {
            status,
            content_type: content_type.into(),
            body: body.into(),
        })
    }

    /// A streamed text reply whose connection is aborted after `after_chunks`
    /// SSE events (the role chunk counts as one). Non-streaming requests get a
    /// body cut in the middle.
    pub fn cut_stream(text: impl Into<String>, after_chunks: usize) -> Reply {
        Reply::of(ReplyKind::CutStream {
            text: text.into(),
            after_chunks,
        })
    }

    /// Waits `latency` before the response starts.
    pub fn with_latency(mut self, latency: Duration) -> Reply {
        self.latency = latency;
        self
    }

    /// Holds the response until the test calls [`crate::FakeOpenAi::release`]
    /// (or the server shuts down): a request that stays in flight exactly as
    /// long as the test needs, with no clock involved.
    pub fn held(mut self) -> Reply {
        self.held = true;
        self
    }

    /// Waits `delay` between SSE events of a streamed reply.
    pub fn with_chunk_delay(mut self, delay: Duration) -> Reply {
        self.chunk_delay = delay;
        self
    }
}

/// A scripted rule: on `endpoint`, when `matcher` holds, answer `reply`.
/// One-shot rules are consumed on use; sticky rules stay.
#[derive(Clone, Debug)]
pub struct Rule {
    pub(crate) endpoint: Endpoint,
    pub(crate) matcher: Match,
    pub(crate) reply: Reply,
    pub(crate) sticky: bool,
}

impl Rule {
    /// A one-shot rule on the chat completions endpoint.
    pub fn new(matcher: Match, reply: Reply) -> Rule {
        Rule {
            endpoint: Endpoint::ChatCompletions,
            matcher,
            reply,
            sticky: false,
        }
    }

    /// Applies the rule to another endpoint.
    pub fn on(mut self, endpoint: Endpoint) -> Rule {
        self.endpoint = endpoint;
        self
    }

    /// Keeps the rule after it matched.
    pub fn sticky(mut self) -> Rule {
        self.sticky = true;
        self
    }
}
