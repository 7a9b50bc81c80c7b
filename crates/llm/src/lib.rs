//! OpenCouch model layer: a provider-neutral chat-model trait (text, streams,
//! tool calls, structured output), an OpenAI-compatible client that works
//! with OpenAI, Ollama, llama.cpp server, vLLM and LM Studio, embedding
//! providers, and the retry policy.
//!
//! Every model decision point in OpenCouch has a deterministic counterpart:
//! callers check [`LlmError::is_unavailable`] to decide when to fall back.
//!
//! Tool-call round trip: call [`ChatModel::complete`] with tools; when the
//! reply has tool calls, append [`ChatResponse::to_assistant_message`] and one
//! [`ChatMessage::tool`] per call, then call again.

mod config;
mod embeddings;
mod error;
mod http;
mod openai;
#[cfg(any(test, feature = "test-util"))]
mod scripted;
mod sse;
mod stream;
mod structured;
pub mod trace;
mod types;

use async_trait::async_trait;
use futures::stream::BoxStream;
use opencouch_core::ModelTier;

pub use config::{
    DEFAULT_CONTROL_MODEL, DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_QUALITY_MODEL, LlmConfig,
    MaxTokensField, OPENAI_BASE_URL, TierModels,
};
pub use embeddings::{EmbeddingProvider, EmbeddingsConfig, NullEmbeddings, OpenAiEmbeddings};
pub use error::LlmError;
pub use http::RetryPolicy;
pub use openai::OpenAiCompatClient;
#[cfg(any(test, feature = "test-util"))]
pub use scripted::ScriptedModel;
pub use sse::{DEFAULT_MAX_EVENT_BYTES, SseDecoder, SseTooLarge};
pub use stream::{StreamCollector, ToolCallAssembler, collect_stream, response_to_deltas};
pub use structured::{
    Structured, make_strict, parse_json_lenient, schema_name_for, strict_schema_for, structured,
    structured_with,
};
pub use types::{
    ChatMessage, ChatRequest, ChatResponse, FinishReason, ResponseFormat, StreamDelta, ToolCall,
    ToolChoice, ToolSpec, Usage,
};

/// Stream of reply deltas returned by [`ChatModel::stream`].
pub type DeltaStream = BoxStream<'static, Result<StreamDelta, LlmError>>;

/// A chat model. Object safe; use as `Arc<dyn ChatModel>`.
#[async_trait]
pub trait ChatModel: Send + Sync {
    /// One complete reply (text and/or tool calls).
    async fn complete(&self, req: ChatRequest) -> Result<ChatResponse, LlmError>;

    /// A streamed reply: [`StreamDelta::Text`] fragments as they arrive, then
    /// every assembled [`StreamDelta::ToolCall`], then one
    /// [`StreamDelta::Finished`]. Errors before the first byte (missing key,
    /// connection, status) come from the outer `Result`; later failures end the
    /// stream with one `Err` item (e.g. [`LlmError::StreamInterrupted`]).
    async fn stream(&self, req: ChatRequest) -> Result<DeltaStream, LlmError>;

    /// The model name used for `tier` (for diagnostics and traces).
    fn model_name(&self, tier: ModelTier) -> String;
}
