//! OpenAI-compatible Chat Completions client (OpenAI, Ollama, llama.cpp
//! server, vLLM, LM Studio) with lenient response parsing.

use std::collections::VecDeque;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::BoxStream;
use opencouch_core::ModelTier;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracing::Instrument;

use crate::config::{LlmConfig, MaxTokensField};
use crate::http::{HttpCore, http_core_for};
use crate::sse::SseDecoder;
use crate::stream::ToolCallAssembler;
use crate::{
    ChatMessage, ChatModel, ChatRequest, ChatResponse, FinishReason, LlmError, ResponseFormat,
    StreamDelta, ToolChoice, Usage,
};

const CHAT_PATH: &str = "chat/completions";

/// Chat client for any OpenAI-compatible server.
#[derive(Clone)]
pub struct OpenAiCompatClient {
    core: HttpCore,
    config: LlmConfig,
}

impl std::fmt::Debug for OpenAiCompatClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiCompatClient")
            .field("config", &self.config)
            .finish()
    }
}

impl OpenAiCompatClient {
    /// Builds a client; fails only on an unusable base URL.
    pub fn new(config: LlmConfig) -> Result<OpenAiCompatClient, LlmError> {
        let core = http_core_for!(&config)?;
        Ok(OpenAiCompatClient { core, config })
    }

    /// The configuration (key masked in `Debug`).
    pub fn config(&self) -> &LlmConfig {
        &self.config
    }

    /// One `GET {base}/models` with the configured key (HTTP or HTTPS), no
    /// retries: the HTTP status, for `opencouch doctor`'s reachability check.
    pub async fn probe_models(&self, timeout: Duration) -> Result<u16, LlmError> {
        self.core.get_status("models", timeout).await
    }

    /// The JSON body sent for `req` (exposed for tests and debugging tools).
    pub fn request_body(&self, req: &ChatRequest, stream: bool) -> Value {
        serde_json::to_value(self.wire_request(req, stream)).unwrap_or(Value::Null)
    }

    /// The body as sent: serialized straight from the request, with no
    /// intermediate JSON tree (no copy of the prompt, the history or the
    /// schemas per call).
    fn request_bytes(&self, req: &ChatRequest, stream: bool) -> Result<Vec<u8>, LlmError> {
        crate::http::encode(&self.wire_request(req, stream))
    }

    fn wire_request<'a>(&'a self, req: &'a ChatRequest, stream: bool) -> WireRequest<'a> {
        let max = |field: MaxTokensField| {
            req.max_tokens
                .filter(|_| self.config.max_tokens_field == field)
        };
        WireRequest {
            model: self.config.model_for(req.tier),
            messages: req.messages.iter().map(WireMessageOut::from).collect(),
            tools: req
                .tools
                .iter()
                .map(|t| WireTool {
                    kind: "function",
                    function: WireToolFunction {
                        name: &t.name,
                        description: &t.description,
                        parameters: &t.parameters,
                    },
                })
                .collect(),
            tool_choice: req.tool_choice.as_ref().map(|c| match c {
                ToolChoice::Auto => WireToolChoice::Mode("auto"),
                ToolChoice::None => WireToolChoice::Mode("none"),
                ToolChoice::Required => WireToolChoice::Mode("required"),
                ToolChoice::Function(name) => WireToolChoice::Function {
                    kind: "function",
                    function: WireName { name },
                },
            }),
            response_format: req.response_format.as_ref().map(|f| match f {
                ResponseFormat::Text => WireFormat::Text,
                ResponseFormat::JsonObject => WireFormat::JsonObject,
                ResponseFormat::JsonSchema {
                    name,
                    schema,
                    strict,
                } => WireFormat::JsonSchema {
                    json_schema: WireSchema {
                        name,
                        schema,
                        strict: *strict,
                    },
                },
            }),
            temperature: req.temperature,
            max_completion_tokens: max(MaxTokensField::MaxCompletionTokens),
            max_tokens: max(MaxTokensField::MaxTokens),
            stream,
            stream_options: (stream && self.config.stream_include_usage).then_some(StreamOptions {
                include_usage: true,
            }),
        }
    }
}

// ---- the request as sent (borrowed from the `ChatRequest`) ---------------

#[derive(Serialize)]
struct WireRequest<'a> {
    model: &'a str,
    messages: Vec<WireMessageOut<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<WireToolChoice<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<WireFormat<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_completion_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
enum WireMessageOut<'a> {
    System {
        content: &'a str,
    },
    User {
        content: &'a str,
    },
    Assistant {
        content: Option<&'a str>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<WireCallOut<'a>>,
    },
    Tool {
        tool_call_id: &'a str,
        content: &'a str,
    },
}

impl<'a> From<&'a ChatMessage> for WireMessageOut<'a> {
    fn from(m: &'a ChatMessage) -> Self {
        match m {
            ChatMessage::System { content } => WireMessageOut::System { content },
            ChatMessage::User { content } => WireMessageOut::User { content },
            ChatMessage::Assistant {
                content,
                tool_calls,
            } => WireMessageOut::Assistant {
                content: content.as_deref(),
                tool_calls: tool_calls
                    .iter()
                    .map(|c| WireCallOut {
                        id: &c.id,
                        kind: "function",
                        function: WireCallFunction {
                            name: &c.name,
                            arguments: &c.arguments,
                        },
                    })
                    .collect(),
            },
            ChatMessage::Tool {
                tool_call_id,
                content,
            } => WireMessageOut::Tool {
                tool_call_id,
                content,
            },
        }
    }
}

#[derive(Serialize)]
struct WireCallOut<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireCallFunction<'a>,
}

#[derive(Serialize)]
struct WireCallFunction<'a> {
    name: &'a str,
    arguments: &'a str,
}

#[derive(Serialize)]
struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireToolFunction<'a>,
}

#[derive(Serialize)]
struct WireToolFunction<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
}

#[derive(Serialize)]
#[serde(untagged)]
enum WireToolChoice<'a> {
    Mode(&'static str),
    Function {
        #[serde(rename = "type")]
        kind: &'static str,
        function: WireName<'a>,
    },
}

#[derive(Serialize)]
struct WireName<'a> {
    name: &'a str,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireFormat<'a> {
    Text,
    JsonObject,
    JsonSchema { json_schema: WireSchema<'a> },
}

#[derive(Serialize)]
struct WireSchema<'a> {
    name: &'a str,
    schema: &'a Value,
    strict: bool,
}

// ---- lenient wire types -------------------------------------------------

#[derive(Debug, Default, Deserialize)]
struct WireCompletion {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    choices: Option<Vec<WireChoice>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
struct WireChoice {
    #[serde(default)]
    index: Option<u32>,
    #[serde(default)]
    message: Option<WireMessage>,
    #[serde(default)]
    delta: Option<WireMessage>,
    #[serde(default)]
    finish_reason: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
struct WireMessage {
    #[serde(default)]
    content: Option<Value>,
    #[serde(default)]
    refusal: Option<Value>,
    #[serde(default)]
    tool_calls: Option<Vec<WireToolCall>>,
    #[serde(default)]
    function_call: Option<WireFunction>,
}

#[derive(Debug, Default, Deserialize)]
struct WireToolCall {
    #[serde(default)]
    index: Option<u32>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<WireFunction>,
}

#[derive(Debug, Default, Deserialize)]
struct WireFunction {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: Option<Value>,
    #[serde(default)]
    completion_tokens: Option<Value>,
    #[serde(default)]
    total_tokens: Option<Value>,
}

fn as_u32(v: &Option<Value>) -> Option<u32> {
    v.as_ref()
        .and_then(Value::as_u64)
        .map(|n| u32::try_from(n).unwrap_or(u32::MAX))
}

impl WireUsage {
    fn into_usage(self) -> Option<Usage> {
        let u = Usage {
            prompt_tokens: as_u32(&self.prompt_tokens),
            completion_tokens: as_u32(&self.completion_tokens),
            total_tokens: as_u32(&self.total_tokens),
        };
        (!u.is_empty()).then_some(u)
    }
}

/// Text of `content`: a string, or an array of parts with `text`.
fn content_text(content: Option<&Value>) -> Option<String> {
    let text = match content? {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.as_str().or_else(|| p.get("text").and_then(Value::as_str)))
            .collect::<String>(),
        _ => return None,
    };
    (!text.is_empty()).then_some(text)
}

fn arguments_text(args: Option<&Value>) -> Option<String> {
    match args? {
        Value::String(s) => Some(s.clone()),
        Value::Null => None,
        other => Some(other.to_string()),
    }
}

fn finish_text(v: Option<&Value>) -> Option<FinishReason> {
    v.and_then(Value::as_str).and_then(FinishReason::parse)
}

/// The choice this client reads (index 0, or the first).
fn first_choice(choices: Vec<WireChoice>) -> Option<WireChoice> {
    let pos = choices
        .iter()
        .position(|c| c.index.unwrap_or(0) == 0)
        .unwrap_or(0);
    choices.into_iter().nth(pos)
}

fn parse_completion(bytes: &[u8], requested_model: &str) -> Result<ChatResponse, LlmError> {
    let wire: WireCompletion =
        serde_json::from_slice(bytes).map_err(|e| LlmError::from_json("chat completion", &e))?;
    let choices = wire.choices.unwrap_or_default();
    if choices.is_empty() {
        let reason = if wire.error.is_some() {
            "provider returned an error object"
        } else {
            "no choices in reply"
        };
        return Err(LlmError::BadResponse {
            reason: reason.to_owned(),
        });
    }
    let choice = first_choice(choices).unwrap_or_default();
    let msg = choice.message.or(choice.delta).unwrap_or_default();
    let mut asm = ToolCallAssembler::new();
    for (i, tc) in msg.tool_calls.unwrap_or_default().into_iter().enumerate() {
        let f = tc.function.unwrap_or_default();
        let idx = tc.index.unwrap_or(u32::try_from(i).unwrap_or(u32::MAX));
        let args = arguments_text(f.arguments.as_ref());
        asm.push(
            Some(idx),
            tc.id.as_deref(),
            f.name.as_deref(),
            Some(args.as_deref().unwrap_or("")),
        );
    }
    if let Some(f) = msg.function_call {
        let args = arguments_text(f.arguments.as_ref());
        asm.push(
            Some(u32::MAX),
            None,
            f.name.as_deref(),
            Some(args.as_deref().unwrap_or("")),
        );
    }
    Ok(ChatResponse {
        text: content_text(msg.content.as_ref()),
        tool_calls: asm.finish(),
        finish_reason: finish_text(choice.finish_reason.as_ref()),
        usage: wire.usage.and_then(WireUsage::into_usage),
        model: wire
            .model
            .filter(|m| !m.is_empty())
            .unwrap_or_else(|| requested_model.to_owned()),
        refusal: msg
            .refusal
            .as_ref()
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned),
    })
}

// ---- streaming ------------------------------------------------------------

struct StreamState {
    /// When the request was sent, the tier, and whether a token came yet
    /// (for `/metrics`).
    started: std::time::Instant,
    tier: &'static str,
    first_token: bool,
    span: tracing::Span,
    /// Whether content capture is allowed for this call.
    capture: bool,
    /// The reply text so far, kept only when `capture` is on.
    text: String,
    body: BoxStream<'static, Result<bytes::Bytes, reqwest::Error>>,
    decoder: SseDecoder,
    assembler: ToolCallAssembler,
    pending: VecDeque<Result<StreamDelta, LlmError>>,
    finish_reason: Option<FinishReason>,
    usage: Option<Usage>,
    model: String,
    done: bool,
    idle_timeout: Duration,
}

impl StreamState {
    async fn next_item(&mut self) -> Option<Result<StreamDelta, LlmError>> {
        loop {
            if let Some(item) = self.pending.pop_front() {
                return Some(item);
            }
            if self.done {
                return None;
            }
            match tokio::time::timeout(self.idle_timeout, self.body.next()).await {
                Err(_) => self.fail(LlmError::Timeout {
                    after: self.idle_timeout,
                }),
                Ok(Some(Err(_))) => {
                    self.fail(LlmError::StreamInterrupted {
                        reason: "connection lost mid-stream".to_owned(),
                    });
                }
                Ok(Some(Ok(bytes))) => match self.decoder.push(&bytes) {
                    Ok(events) => {
                        for event in events {
                            self.event(&event);
                        }
                    }
                    Err(e) => self.too_large(e),
                },
                Ok(None) => {
                    match self.decoder.finish() {
                        Ok(events) => {
                            for event in events {
                                self.event(&event);
                            }
                        }
                        Err(e) => self.too_large(e),
                    }
                    if !self.done {
                        if self.finish_reason.is_some() {
                            // Lenient: some servers end without `[DONE]`.
                            self.finalize();
                        } else {
                            self.fail(LlmError::StreamInterrupted {
                                reason: "stream ended before completion".to_owned(),
                            });
                        }
                    }
                }
            }
        }
    }

    fn fail(&mut self, err: LlmError) {
        tracing::warn!(error = err.kind(), "model stream failed");
        crate::trace::record_error(&self.span, &err);
        opencouch_core::telemetry::record_model_call(
            self.tier,
            self.started.elapsed().as_secs_f64(),
            Some(err.kind()),
        );
        self.pending.push_back(Err(err));
        self.done = true;
    }

    /// An event or line past the cap: the stream ends here (and the
    /// connection is dropped with it, so the server stops sending).
    fn too_large(&mut self, e: crate::sse::SseTooLarge) {
        if !self.done {
            self.fail(LlmError::StreamInterrupted {
                reason: e.to_string(),
            });
        }
    }

    fn finalize(&mut self) {
        for call in std::mem::take(&mut self.assembler).finish() {
            self.pending.push_back(Ok(StreamDelta::ToolCall(call)));
        }
        opencouch_core::telemetry::record_model_call(
            self.tier,
            self.started.elapsed().as_secs_f64(),
            None,
        );
        crate::trace::record_response(
            &self.span,
            &self.model,
            self.usage,
            self.finish_reason.as_ref(),
            (!self.text.is_empty()).then_some(self.text.as_str()),
        );
        self.pending.push_back(Ok(StreamDelta::Finished {
            finish_reason: self.finish_reason.take(),
            usage: self.usage.take(),
            model: std::mem::take(&mut self.model),
        }));
        self.done = true;
    }

    fn event(&mut self, data: &str) {
        if self.done {
            return;
        }
        let data = data.trim();
        if data.is_empty() {
            return;
        }
        if data == "[DONE]" {
            self.finalize();
            return;
        }
        let chunks: Vec<WireCompletion> = match serde_json::from_str::<WireCompletion>(data) {
            Ok(c) => vec![c],
            // Lenient: events separated by single newlines arrive joined.
            Err(e) => match data
                .lines()
                .map(|l| l.trim().trim_start_matches("data:").trim())
                .filter(|l| !l.is_empty())
                .map(serde_json::from_str::<WireCompletion>)
                .collect::<Result<Vec<_>, _>>()
            {
                Ok(v) if data.contains('\n') => v,
                _ => {
                    self.fail(LlmError::from_json("stream chunk", &e));
                    return;
                }
            },
        };
        for chunk in chunks {
            self.chunk(chunk);
        }
    }

    fn chunk(&mut self, chunk: WireCompletion) {
        if let Some(m) = chunk.model.filter(|m| !m.is_empty()) {
            self.model = m;
        }
        if let Some(u) = chunk.usage.and_then(WireUsage::into_usage) {
            self.usage = Some(u);
        }
        let choices = chunk.choices.unwrap_or_default();
        if choices.is_empty() && chunk.error.is_some() {
            self.fail(LlmError::BadResponse {
                reason: "provider reported an error mid-stream".to_owned(),
            });
            return;
        }
        let Some(choice) = first_choice(choices) else {
            return;
        };
        if let Some(delta) = choice.delta.or(choice.message) {
            if let Some(text) = content_text(delta.content.as_ref()) {
                if !self.first_token {
                    self.first_token = true;
                    opencouch_core::telemetry::record_first_token(
                        self.tier,
                        self.started.elapsed().as_secs_f64(),
                    );
                }
                if self.capture {
                    self.text.push_str(&text);
                }
                self.pending.push_back(Ok(StreamDelta::Text(text)));
            }
            for tc in delta.tool_calls.unwrap_or_default() {
                let f = tc.function.unwrap_or_default();
                let args = arguments_text(f.arguments.as_ref());
                self.assembler.push(
                    tc.index,
                    tc.id.as_deref(),
                    f.name.as_deref(),
                    args.as_deref(),
                );
            }
        }
        if let Some(reason) = finish_text(choice.finish_reason.as_ref()) {
            self.finish_reason = Some(reason);
        }
    }
}

#[async_trait]
impl ChatModel for OpenAiCompatClient {
    async fn complete(&self, req: ChatRequest) -> Result<ChatResponse, LlmError> {
        let model = self.config.model_for(req.tier).to_owned();
        let body = self.request_bytes(&req, false)?;
        let span = crate::trace::chat_span(&model, req.tier.as_str(), req.tools.len(), false);
        crate::trace::record_input(&span, &req.messages);
        let started = std::time::Instant::now();
        let resp = async {
            let bytes = self.core.post_bytes(CHAT_PATH, body).await?;
            let resp = parse_completion(&bytes, &model)?;
            tracing::debug!(
                tool_calls = resp.tool_calls.len(),
                prompt_tokens = resp.usage.and_then(|u| u.prompt_tokens),
                completion_tokens = resp.usage.and_then(|u| u.completion_tokens),
                "chat completion parsed"
            );
            Ok::<_, LlmError>(resp)
        }
        .instrument(span.clone())
        .await;
        match &resp {
            Ok(r) => crate::trace::record_response(
                &span,
                &r.model,
                r.usage,
                r.finish_reason.as_ref(),
                r.text.as_deref(),
            ),
            Err(e) => crate::trace::record_error(&span, e),
        }
        opencouch_core::telemetry::record_model_call(
            req.tier.as_str(),
            started.elapsed().as_secs_f64(),
            resp.as_ref().err().map(LlmError::kind),
        );
        resp
    }

    async fn stream(
        &self,
        req: ChatRequest,
    ) -> Result<BoxStream<'static, Result<StreamDelta, LlmError>>, LlmError> {
        let model = self.config.model_for(req.tier).to_owned();
        let body = self.request_bytes(&req, true)?;
        // The span lives as long as the stream: it ends when the stream is
        // finished or dropped.
        let span = crate::trace::chat_span(&model, req.tier.as_str(), req.tools.len(), true);
        crate::trace::record_input(&span, &req.messages);
        let started = std::time::Instant::now();
        let tier = req.tier.as_str();
        let resp = match self
            .core
            .post_stream(CHAT_PATH, body)
            .instrument(span.clone())
            .await
        {
            Ok(resp) => resp,
            Err(e) => {
                crate::trace::record_error(&span, &e);
                opencouch_core::telemetry::record_model_call(
                    tier,
                    started.elapsed().as_secs_f64(),
                    Some(e.kind()),
                );
                return Err(e);
            }
        };
        let state = StreamState {
            started,
            tier,
            first_token: false,
            capture: crate::trace::capture_allowed(),
            span,
            text: String::new(),
            body: resp.bytes_stream().boxed(),
            decoder: SseDecoder::with_limit(self.config.max_event_bytes),
            assembler: ToolCallAssembler::new(),
            pending: VecDeque::new(),
            finish_reason: None,
            usage: None,
            model,
            done: false,
            idle_timeout: self.core.timeout,
        };
        Ok(futures::stream::unfold(state, |mut st| async move {
            st.next_item().await.map(|item| (item, st))
        })
        .boxed())
    }

    fn model_name(&self, tier: ModelTier) -> String {
        self.config.model_for(tier).to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ToolCall;
    use serde_json::json;

    fn client() -> OpenAiCompatClient {
        OpenAiCompatClient::new(LlmConfig::local("http://127.0.0.1:9/v1", "m")).unwrap()
    }

    /// (label, body, text, tool calls, finish reason, usage present)
    type ParseCase = (
        &'static str,
        Value,
        Option<&'static str>,
        usize,
        Option<FinishReason>,
        bool,
    );

    #[test]
    fn lenient_parse_table() {
        let cases: Vec<ParseCase> = vec![
            (
                "empty finish reason and empty usage",
                json!({"choices": [{"message": {"content": "hi"}, "finish_reason": ""}], "usage": {}}),
                Some("hi"),
                0,
                None,
                false,
            ),
            (
                "null content with tool call lacking type; object arguments",
                json!({"choices": [{"message": {"content": null, "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": {"a": 1}}}]}, "finish_reason": "tool_calls"}]}),
                None,
                1,
                Some(FinishReason::ToolCalls),
                false,
            ),
            (
                "array-of-parts content, unknown finish reason, extra fields",
                json!({"id": 5, "weird": [1], "choices": [{"index": 0, "message": {"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}, "finish_reason": "eos_token"}], "usage": {"prompt_tokens": 3}}),
                Some("ab"),
                0,
                Some(FinishReason::Other("eos_token".into())),
                true,
            ),
        ];
        for (label, body, text, calls, finish, has_usage) in cases {
            let r = parse_completion(body.to_string().as_bytes(), "req-model").unwrap();
            assert_eq!(r.text.as_deref(), text, "{label}");
            assert_eq!(r.tool_calls.len(), calls, "{label}");
            assert_eq!(r.finish_reason, finish, "{label}");
            assert_eq!(r.usage.is_some(), has_usage, "{label}");
            assert_eq!(r.model, "req-model", "{label}");
        }
    }

    #[test]
    fn unusable_bodies_are_bad_responses() {
        for body in [
            "not json",
            "{\"choices\": []}",
            "{\"error\": {\"message\": \"x\"}}",
            "[1,2]",
        ] {
            let r = parse_completion(body.as_bytes(), "m");
            assert!(
                matches!(r, Err(LlmError::BadResponse { .. })),
                "{body}: {r:?}"
            );
        }
    }

    #[test]
    fn request_body_shape() {
        let c = client();
        let req = ChatRequest::new(
            ModelTier::Fast,
            vec![
                ChatMessage::system("s"),
                ChatMessage::user("u"),
                ChatMessage::assistant_tool_calls(
                    None,
                    vec![ToolCall {
                        id: "c1".into(),
                        name: "f".into(),
                        arguments: "{}".into(),
                    }],
                ),
                ChatMessage::tool("c1", "{\"ok\":true}"),
            ],
        )
        .with_tools(vec![crate::ToolSpec::new(
            "f",
            "d",
            json!({"type": "object"}),
        )])
        .with_tool_choice(ToolChoice::Function("f".into()))
        .with_max_tokens(50);
        let body = c.request_body(&req, true);
        assert_eq!(body["model"], "m");
        assert_eq!(
            body["messages"][2]["tool_calls"][0]["function"]["name"],
            "f"
        );
        assert_eq!(body["messages"][2]["content"], Value::Null);
        assert_eq!(body["messages"][3]["tool_call_id"], "c1");
        assert_eq!(body["tools"][0]["type"], "function");
        assert_eq!(body["tool_choice"]["function"]["name"], "f");
        assert_eq!(body["max_tokens"], 50);
        assert_eq!(body["stream"], true);
        assert_eq!(body["stream_options"]["include_usage"], true);
    }

    /// The whole body of a structured request, field by field, as the Chat
    /// Completions API documents it (nothing extra, nothing missing).
    #[test]
    fn structured_request_body_is_exactly_the_documented_shape() {
        let c = client();
        let req = ChatRequest::new(ModelTier::Control, vec![ChatMessage::user("hi")])
            .with_response_format(ResponseFormat::JsonSchema {
                name: "x".into(),
                schema: json!({"type": "object"}),
                strict: true,
            })
            .with_tool_choice(ToolChoice::None);
        let body = c.request_body(&req, false);
        assert_eq!(
            body,
            json!({
                "model": "m",
                "messages": [{"role": "user", "content": "hi"}],
                "tool_choice": "none",
                "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}, "strict": true}},
            })
        );
        let sent: Value = serde_json::from_slice(&c.request_bytes(&req, false).unwrap()).unwrap();
        assert_eq!(sent, body, "the bytes sent are the body");
        let plain = ChatRequest::new(ModelTier::Control, vec![ChatMessage::assistant("ok")])
            .with_response_format(ResponseFormat::JsonObject);
        assert_eq!(
            c.request_body(&plain, false),
            json!({
                "model": "m",
                "messages": [{"role": "assistant", "content": "ok"}],
                "response_format": {"type": "json_object"},
            })
        );
    }
}
