//! Provider-neutral request and response types of the chat-model layer.

use opencouch_core::ModelTier;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A tool call requested by the model.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Provider-assigned call id; echoed back in the `tool` message with the result.
    pub id: String,
    /// Function name.
    pub name: String,
    /// Arguments as JSON text, exactly as the model produced them (may be invalid JSON).
    pub arguments: String,
}

impl ToolCall {
    /// Parses the arguments as JSON (`{}` when empty).
    pub fn arguments_json(&self) -> Result<Value, serde_json::Error> {
        if self.arguments.trim().is_empty() {
            Ok(Value::Object(Default::default()))
        } else {
            serde_json::from_str(&self.arguments)
        }
    }
}

/// One message of a chat conversation, in the OpenAI Chat Completions roles.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum ChatMessage {
    /// Instructions.
    System {
        /// Text.
        content: String,
    },
    /// The person's words.
    User {
        /// Text.
        content: String,
    },
    /// A model turn: text and/or tool calls.
    Assistant {
        /// Text, if any.
        content: Option<String>,
        /// Tool calls the model asked for (empty for plain text).
        tool_calls: Vec<ToolCall>,
    },
    /// The result of one tool call.
    Tool {
        /// Id of the [`ToolCall`] this answers.
        tool_call_id: String,
        /// Result text (often JSON).
        content: String,
    },
}

impl ChatMessage {
    /// A system message.
    pub fn system(content: impl Into<String>) -> ChatMessage {
        ChatMessage::System {
            content: content.into(),
        }
    }
    /// A user message.
    pub fn user(content: impl Into<String>) -> ChatMessage {
        ChatMessage::User {
            content: content.into(),
        }
    }
    /// An assistant text message.
    pub fn assistant(content: impl Into<String>) -> ChatMessage {
        ChatMessage::Assistant {
            content: Some(content.into()),
            tool_calls: Vec::new(),
        }
    }
    /// An assistant message carrying tool calls (append it before the tool results).
    pub fn assistant_tool_calls(content: Option<String>, tool_calls: Vec<ToolCall>) -> ChatMessage {
        ChatMessage::Assistant {
            content,
            tool_calls,
        }
    }
    /// A tool result for call `tool_call_id`.
    pub fn tool(tool_call_id: impl Into<String>, content: impl Into<String>) -> ChatMessage {
        ChatMessage::Tool {
            tool_call_id: tool_call_id.into(),
            content: content.into(),
        }
    }
    /// Role name on the wire.
    pub fn role(&self) -> &'static str {
        match self {
            ChatMessage::System { .. } => "system",
            ChatMessage::User { .. } => "user",
            ChatMessage::Assistant { .. } => "assistant",
            ChatMessage::Tool { .. } => "tool",
        }
    }
}

/// A function tool offered to the model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// Function name (`^[a-zA-Z0-9_-]{1,64}$`).
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: Value,
}

impl ToolSpec {
    /// A tool with an explicit parameter schema.
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters: Value,
    ) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: description.into(),
            parameters,
        }
    }

    /// A tool whose parameters schema is generated from `T` (strict-mode shaped,
    /// see [`crate::strict_schema_for`]).
    pub fn from_type<T: schemars::JsonSchema>(
        name: impl Into<String>,
        description: impl Into<String>,
    ) -> ToolSpec {
        ToolSpec::new(
            name,
            description,
            crate::structured::strict_schema_for::<T>(),
        )
    }
}

/// How the model may use the offered tools.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ToolChoice {
    /// The model decides.
    Auto,
    /// No tool calls.
    None,
    /// At least one tool call.
    Required,
    /// Exactly this function.
    Function(String),
}

/// Output format constraint.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ResponseFormat {
    /// Free text (the default; rarely needs to be sent).
    Text,
    /// Any JSON object.
    JsonObject,
    /// JSON matching a schema.
    JsonSchema {
        /// Schema name (`^[a-zA-Z0-9_-]{1,64}$`).
        name: String,
        /// The JSON Schema.
        schema: Value,
        /// OpenAI strict mode.
        strict: bool,
    },
}

/// A chat request, provider-neutral; the client maps `tier` to a model name.
#[derive(Clone, Debug, PartialEq)]
pub struct ChatRequest {
    /// Which configured model to use.
    pub tier: ModelTier,
    /// The conversation.
    pub messages: Vec<ChatMessage>,
    /// Offered tools (empty: none).
    pub tools: Vec<ToolSpec>,
    /// Tool policy; `None` leaves the provider default (auto when tools are offered).
    pub tool_choice: Option<ToolChoice>,
    /// Output format constraint.
    pub response_format: Option<ResponseFormat>,
    /// Sampling temperature (omit for models that only accept the default).
    pub temperature: Option<f32>,
    /// Output token cap.
    pub max_tokens: Option<u32>,
}

impl ChatRequest {
    /// A request with only messages set.
    pub fn new(tier: ModelTier, messages: Vec<ChatMessage>) -> ChatRequest {
        ChatRequest {
            tier,
            messages,
            tools: Vec::new(),
            tool_choice: None,
            response_format: None,
            temperature: None,
            max_tokens: None,
        }
    }
    /// Offers `tools`.
    pub fn with_tools(mut self, tools: Vec<ToolSpec>) -> ChatRequest {
        self.tools = tools;
        self
    }
    /// Sets the tool policy.
    pub fn with_tool_choice(mut self, choice: ToolChoice) -> ChatRequest {
        self.tool_choice = Some(choice);
        self
    }
    /// Sets the output format.
    pub fn with_response_format(mut self, format: ResponseFormat) -> ChatRequest {
        self.response_format = Some(format);
        self
    }
    /// Sets the temperature.
    pub fn with_temperature(mut self, temperature: f32) -> ChatRequest {
        self.temperature = Some(temperature);
        self
    }
    /// Caps output tokens.
    pub fn with_max_tokens(mut self, max_tokens: u32) -> ChatRequest {
        self.max_tokens = Some(max_tokens);
        self
    }
}

/// Why the model stopped. Unknown values are kept in `Other`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FinishReason {
    /// Natural end.
    Stop,
    /// Token cap reached.
    Length,
    /// The model asked for tools.
    ToolCalls,
    /// Provider filter.
    ContentFilter,
    /// Any other non-empty value.
    Other(String),
}

impl FinishReason {
    /// Lenient parse: empty strings mean "not reported".
    pub fn parse(raw: &str) -> Option<FinishReason> {
        match raw.trim() {
            "" => None,
            "stop" | "eos" | "end_turn" => Some(FinishReason::Stop),
            "length" | "max_tokens" => Some(FinishReason::Length),
            "tool_calls" | "function_call" | "tool_use" => Some(FinishReason::ToolCalls),
            "content_filter" => Some(FinishReason::ContentFilter),
            other => Some(FinishReason::Other(other.to_owned())),
        }
    }
}

/// Token accounting (each field optional: servers differ).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Input tokens.
    pub prompt_tokens: Option<u32>,
    /// Output tokens.
    pub completion_tokens: Option<u32>,
    /// Total tokens.
    pub total_tokens: Option<u32>,
}

impl Usage {
    /// Whether no field is set (e.g. the server sent `usage: {}`).
    pub fn is_empty(&self) -> bool {
        self.prompt_tokens.is_none()
            && self.completion_tokens.is_none()
            && self.total_tokens.is_none()
    }
}

/// A complete chat reply.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ChatResponse {
    /// Assistant text (`None` when the reply is only tool calls).
    pub text: Option<String>,
    /// Requested tool calls.
    pub tool_calls: Vec<ToolCall>,
    /// Why generation stopped, when reported.
    pub finish_reason: Option<FinishReason>,
    /// Token usage, when reported with at least one field.
    pub usage: Option<Usage>,
    /// Model name the server reports (or the requested one).
    pub model: String,
    /// A refusal message, when the provider reports one separately.
    pub refusal: Option<String>,
}

impl ChatResponse {
    /// The assistant message to append to the conversation before tool results.
    pub fn to_assistant_message(&self) -> ChatMessage {
        ChatMessage::Assistant {
            content: self.text.clone(),
            tool_calls: self.tool_calls.clone(),
        }
    }

    /// Whether the model asked for tools.
    pub fn has_tool_calls(&self) -> bool {
        !self.tool_calls.is_empty()
    }
}

/// One item of a streamed reply.
#[derive(Clone, Debug, PartialEq)]
pub enum StreamDelta {
    /// A text fragment (concatenate in order).
    Text(String),
    /// A complete tool call, assembled from its deltas (emitted at the end).
    ToolCall(ToolCall),
    /// The last item: stop reason, usage and model.
    Finished {
        /// Why generation stopped.
        finish_reason: Option<FinishReason>,
        /// Usage, when the server reported it.
        usage: Option<Usage>,
        /// Model name the server reports (or the requested one).
        model: String,
    },
}
