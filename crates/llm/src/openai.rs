//! OpenAI-compatible Chat Completions client (OpenAI, Ollama, llama.cpp
//! server, vLLM, LM Studio) with lenient response parsing.

use std::collections::VecDeque;
use std::time::Duration;

use async_trait::async_trait;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use opencouch_core::ModelTier;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use tracing::Instrument;

use crate::config::{LlmConfig, MaxTokensField};
use crate::http::{HttpCore, RetryPolicy};
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
        let core = HttpCore::new(
            &config.base_url,
            config.api_key.clone(),
            config.require_key,
            config.timeout,
            RetryPolicy {
                max_attempts: config.max_attempts,
                backoff_base: config.backoff_base,
                max_backoff: config.max_backoff,
            },
        )?;
        Ok(OpenAiCompatClient { core, config })
    }

    /// The configuration (key masked in `Debug`).
    pub fn config(&self) -> &LlmConfig {
        &self.config
    }

    /// The JSON body sent for `req` (exposed for tests and debugging tools).
    pub fn request_body(&self, req: &ChatRequest, stream: bool) -> Value {
        let mut body = Map::new();
        body.insert("model".into(), json!(self.config.model_for(req.tier)));
        body.insert(
            "messages".into(),
            Value::Array(req.messages.iter().map(message_json).collect()),
        );
        if !req.tools.is_empty() {
            let tools = req
                .tools
                .iter()
                .map(|t| {
                    json!({"type": "function", "function": {
                        "name": t.name, "description": t.description, "parameters": t.parameters}})
                })
                .collect();
            body.insert("tools".into(), Value::Array(tools));
        }
        if let Some(choice) = &req.tool_choice {
            let v = match choice {
                ToolChoice::Auto => json!("auto"),
                ToolChoice::None => json!("none"),
                ToolChoice::Required => json!("required"),
                ToolChoice::Function(name) => {
                    json!({"type": "function", "function": {"name": name}})
                }
            };
            body.insert("tool_choice".into(), v);
        }
        if let Some(format) = &req.response_format {
            let v = match format {
                ResponseFormat::Text => json!({"type": "text"}),
                ResponseFormat::JsonObject => json!({"type": "json_object"}),
                ResponseFormat::JsonSchema {
                    name,
                    schema,
                    strict,
                } => {
                    json!({"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": strict}})
                }
            };
            body.insert("response_format".into(), v);
        }
        if let Some(t) = req.temperature {
            body.insert("temperature".into(), json!(t));
        }
        if let Some(max) = req.max_tokens {
            let field = match self.config.max_tokens_field {
                MaxTokensField::MaxCompletionTokens => "max_completion_tokens",
                MaxTokensField::MaxTokens => "max_tokens",
            };
            body.insert(field.into(), json!(max));
        }
        if stream {
            body.insert("stream".into(), json!(true));
            if self.config.stream_include_usage {
                body.insert("stream_options".into(), json!({"include_usage": true}));
            }
        }
        Value::Object(body)
    }
}

fn message_json(m: &ChatMessage) -> Value {
    match m {
        ChatMessage::System { content } => json!({"role": "system", "content": content}),
        ChatMessage::User { content } => json!({"role": "user", "content": content}),
        ChatMessage::Assistant {
            content,
            tool_calls,
        } => {
            let mut v = json!({"role": "assistant", "content": content});
            if !tool_calls.is_empty() {
                v["tool_calls"] = Value::Array(
                    tool_calls
                        .iter()
                        .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}))
                        .collect(),
                );
            }
            v
        }
        ChatMessage::Tool {
            tool_call_id,
            content,
        } => {
            json!({"role": "tool", "tool_call_id": tool_call_id, "content": content})
        }
    }
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
    body: BoxStream<'static, Result<Vec<u8>, reqwest::Error>>,
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
                Ok(Some(Ok(bytes))) => {
                    for event in self.decoder.push(&bytes) {
                        self.event(&event);
                    }
                }
                Ok(None) => {
                    for event in self.decoder.finish() {
                        self.event(&event);
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
        self.pending.push_back(Err(err));
        self.done = true;
    }

    fn finalize(&mut self) {
        for call in std::mem::take(&mut self.assembler).finish() {
            self.pending.push_back(Ok(StreamDelta::ToolCall(call)));
        }
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
        let body = self.request_body(&req, false);
        let span = tracing::debug_span!("llm.complete", model = %model, tier = %req.tier.as_str(), tools = req.tools.len());
        let resp = async {
            let bytes = self.core.post_json(CHAT_PATH, &body).await?;
            let resp = parse_completion(&bytes, &model)?;
            tracing::debug!(
                tool_calls = resp.tool_calls.len(),
                prompt_tokens = resp.usage.and_then(|u| u.prompt_tokens),
                completion_tokens = resp.usage.and_then(|u| u.completion_tokens),
                "chat completion parsed"
            );
            Ok::<_, LlmError>(resp)
        }
        .instrument(span)
        .await?;
        Ok(resp)
    }

    async fn stream(
        &self,
        req: ChatRequest,
    ) -> Result<BoxStream<'static, Result<StreamDelta, LlmError>>, LlmError> {
        let model = self.config.model_for(req.tier).to_owned();
        let body = self.request_body(&req, true);
        let resp = self.core.post_stream(CHAT_PATH, &body).await?;
        let state = StreamState {
            body: resp.bytes_stream().map_ok(|b| b.to_vec()).boxed(),
            decoder: SseDecoder::new(),
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
}
