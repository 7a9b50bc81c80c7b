//! In-process scripted chat model for unit tests of other crates (feature `test-util`).

use std::collections::VecDeque;
use std::sync::Mutex;

use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::BoxStream;
use opencouch_core::ModelTier;
use serde_json::Value;

use crate::stream::response_to_deltas;
use crate::{ChatModel, ChatRequest, ChatResponse, FinishReason, LlmError, StreamDelta, ToolCall};

/// A [`ChatModel`] that answers from a FIFO queue without any HTTP, and
/// records every request. When the queue is empty it answers the default
/// (text `"scripted reply"` unless changed).
#[derive(Debug)]
pub struct ScriptedModel {
    queue: Mutex<VecDeque<Result<ChatResponse, LlmError>>>,
    default: Mutex<Result<ChatResponse, LlmError>>,
    requests: Mutex<Vec<ChatRequest>>,
    next_call: Mutex<u64>,
}

impl Default for ScriptedModel {
    fn default() -> ScriptedModel {
        ScriptedModel::new()
    }
}

fn text_response(text: &str) -> ChatResponse {
    ChatResponse {
        text: Some(text.to_owned()),
        finish_reason: Some(FinishReason::Stop),
        model: "scripted".to_owned(),
        ..ChatResponse::default()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl ScriptedModel {
    /// An empty script.
    pub fn new() -> ScriptedModel {
        ScriptedModel {
            queue: Mutex::new(VecDeque::new()),
            default: Mutex::new(Ok(text_response("scripted reply"))),
            requests: Mutex::new(Vec::new()),
            next_call: Mutex::new(0),
        }
    }

    /// A model that always fails with `err` (e.g. `MissingApiKey` to test fallbacks).
    pub fn failing(err: LlmError) -> ScriptedModel {
        let m = ScriptedModel::new();
        *lock(&m.default) = Err(err);
        m
    }

    /// Queues a text reply.
    pub fn push_text(&self, text: impl Into<String>) -> &ScriptedModel {
        self.push_response(text_response(&text.into()))
    }

    /// Queues a reply whose text is the JSON `value` (structured output).
    pub fn push_json(&self, value: Value) -> &ScriptedModel {
        self.push_text(value.to_string())
    }

    /// Queues a reply with one tool call (`arguments` sent as JSON text).
    pub fn push_tool_call(&self, name: impl Into<String>, arguments: Value) -> &ScriptedModel {
        let id = {
            let mut n = lock(&self.next_call);
            *n += 1;
            format!("call_scripted_{n}")
        };
        self.push_response(ChatResponse {
            tool_calls: vec![ToolCall {
                id,
                name: name.into(),
                arguments: arguments.to_string(),
            }],
            finish_reason: Some(FinishReason::ToolCalls),
            model: "scripted".to_owned(),
            ..ChatResponse::default()
        })
    }

    /// Queues any response.
    pub fn push_response(&self, resp: ChatResponse) -> &ScriptedModel {
        lock(&self.queue).push_back(Ok(resp));
        self
    }

    /// Queues an error.
    pub fn push_error(&self, err: LlmError) -> &ScriptedModel {
        lock(&self.queue).push_back(Err(err));
        self
    }

    /// Sets the reply used when the queue is empty.
    pub fn set_default_text(&self, text: impl Into<String>) {
        *lock(&self.default) = Ok(text_response(&text.into()));
    }

    /// Every request received, in order.
    pub fn requests(&self) -> Vec<ChatRequest> {
        lock(&self.requests).clone()
    }

    /// Number of requests received.
    pub fn request_count(&self) -> usize {
        lock(&self.requests).len()
    }

    /// Queued replies not used yet.
    pub fn remaining(&self) -> usize {
        lock(&self.queue).len()
    }
}

#[async_trait]
impl ChatModel for ScriptedModel {
    async fn complete(&self, req: ChatRequest) -> Result<ChatResponse, LlmError> {
        lock(&self.requests).push(req);
        let next = lock(&self.queue).pop_front();
        next.unwrap_or_else(|| lock(&self.default).clone())
    }

    async fn stream(
        &self,
        req: ChatRequest,
    ) -> Result<BoxStream<'static, Result<StreamDelta, LlmError>>, LlmError> {
        let resp = self.complete(req).await?;
        Ok(futures::stream::iter(response_to_deltas(resp, 8).into_iter().map(Ok)).boxed())
    }

    fn model_name(&self, _tier: ModelTier) -> String {
        "scripted".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ChatMessage, collect_stream};
    use serde_json::json;

    #[tokio::test]
    async fn replies_in_order_then_default() {
        let m = ScriptedModel::new();
        m.push_tool_call("lookup", json!({"q": 1}))
            .push_text("done")
            .push_error(LlmError::MissingApiKey);
        let req = ChatRequest::new(ModelTier::Control, vec![ChatMessage::user("hi")]);
        let first = m.complete(req.clone()).await.unwrap();
        assert_eq!(first.tool_calls[0].name, "lookup");
        assert_eq!(
            first.tool_calls[0].arguments_json().unwrap(),
            json!({"q": 1})
        );
        let streamed = collect_stream(m.stream(req.clone()).await.unwrap())
            .await
            .unwrap();
        assert_eq!(streamed.text.as_deref(), Some("done"));
        assert_eq!(m.complete(req.clone()).await, Err(LlmError::MissingApiKey));
        assert_eq!(
            m.complete(req).await.unwrap().text.as_deref(),
            Some("scripted reply")
        );
        assert_eq!(m.request_count(), 4);
        assert_eq!(m.remaining(), 0);
    }
}
