//! Embedding providers: the trait, an OpenAI-compatible client and a null provider.

use std::fmt;
use std::sync::OnceLock;
use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::LlmError;
use crate::config::{OPENAI_BASE_URL, mask_base_url, mask_key};
use crate::http::{HttpCore, http_core_for};

/// Turns texts into vectors.
#[async_trait]
pub trait EmbeddingProvider: Send + Sync {
    /// One vector per input text, in input order. An empty input gives an empty output.
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, LlmError>;
    /// Identifier of the embedding model (stored next to vectors so a model
    /// change can be detected).
    fn model_id(&self) -> &str;
    /// Vector length, when known (configured, or learned from the first reply).
    fn dimension(&self) -> Option<usize>;
}

/// A provider for "no embeddings configured": every call fails with
/// [`LlmError::EmbeddingsUnavailable`] (which `is_unavailable()`), so retrieval
/// degrades to token recall.
#[derive(Clone, Copy, Debug, Default)]
pub struct NullEmbeddings;

#[async_trait]
impl EmbeddingProvider for NullEmbeddings {
    async fn embed(&self, _texts: &[String]) -> Result<Vec<Vec<f32>>, LlmError> {
        Err(LlmError::EmbeddingsUnavailable)
    }
    fn model_id(&self) -> &str {
        "none"
    }
    fn dimension(&self) -> Option<usize> {
        None
    }
}

/// Configuration of [`OpenAiEmbeddings`]. `Debug` masks the key.
#[derive(Clone, PartialEq)]
pub struct EmbeddingsConfig {
    /// Base URL including the version segment.
    pub base_url: String,
    /// Bearer key; sent when set.
    pub api_key: Option<String>,
    /// Fail with `MissingApiKey` (no request) when no key is set.
    pub require_key: bool,
    /// Model name, e.g. `text-embedding-3-small` or `nomic-embed-text`.
    pub model: String,
    /// Requested dimension (`dimensions` field), if any.
    pub dimensions: Option<usize>,
    /// Texts per request.
    pub batch_size: usize,
    /// Per-attempt timeout.
    pub timeout: Duration,
    /// Attempts in total.
    pub max_attempts: u32,
    /// First backoff.
    pub backoff_base: Duration,
    /// Cap on any wait.
    pub max_backoff: Duration,
    /// Cap on a response body; a longer one fails with
    /// [`LlmError::BadResponse`] (default 32 MiB: 64 vectors of 3,072
    /// dimensions are about 4 MiB of JSON).
    pub max_response_bytes: usize,
}

impl Default for EmbeddingsConfig {
    fn default() -> EmbeddingsConfig {
        EmbeddingsConfig {
            base_url: OPENAI_BASE_URL.to_owned(),
            api_key: None,
            require_key: true,
            model: "text-embedding-3-small".to_owned(),
            dimensions: None,
            batch_size: 64,
            timeout: Duration::from_secs(30),
            max_attempts: 2,
            backoff_base: Duration::from_millis(250),
            max_backoff: Duration::from_secs(5),
            max_response_bytes: 32 * 1024 * 1024,
        }
    }
}

impl fmt::Debug for EmbeddingsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmbeddingsConfig")
            .field("base_url", &mask_base_url(&self.base_url))
            .field("api_key", &format_args!("{}", mask_key(&self.api_key)))
            .field("require_key", &self.require_key)
            .field("model", &self.model)
            .field("dimensions", &self.dimensions)
            .field("batch_size", &self.batch_size)
            .field("timeout", &self.timeout)
            .field("max_attempts", &self.max_attempts)
            .field("backoff_base", &self.backoff_base)
            .field("max_backoff", &self.max_backoff)
            .field("max_response_bytes", &self.max_response_bytes)
            .finish()
    }
}

/// `POST {base}/embeddings` client, batched, with the shared retry policy.
pub struct OpenAiEmbeddings {
    core: HttpCore,
    config: EmbeddingsConfig,
    learned_dimension: OnceLock<usize>,
}

impl fmt::Debug for OpenAiEmbeddings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiEmbeddings")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
struct WireList {
    #[serde(default)]
    data: Vec<WireItem>,
}

#[derive(Deserialize)]
struct WireItem {
    #[serde(default)]
    index: Option<usize>,
    #[serde(default)]
    embedding: Value,
}

impl OpenAiEmbeddings {
    /// Builds the client; fails only on an unusable base URL.
    pub fn new(config: EmbeddingsConfig) -> Result<OpenAiEmbeddings, LlmError> {
        let core = http_core_for!(&config)?;
        Ok(OpenAiEmbeddings {
            core,
            config,
            learned_dimension: OnceLock::new(),
        })
    }

    /// One request, in its `embeddings {model}` span.
    async fn embed_batch(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, LlmError> {
        let span = crate::trace::embeddings_span(&self.config.model, texts.len());
        let result = tracing::Instrument::instrument(self.request_batch(texts), span.clone()).await;
        if let Err(e) = &result {
            crate::trace::record_error(&span, e);
        }
        result
    }

    async fn request_batch(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, LlmError> {
        let mut body = json!({"model": self.config.model, "input": texts});
        if let Some(d) = self.config.dimensions {
            body["dimensions"] = json!(d);
        }
        let bytes = self.core.post_json("embeddings", &body).await?;
        let list: WireList =
            serde_json::from_slice(&bytes).map_err(|e| LlmError::from_json("embeddings", &e))?;
        if list.data.len() != texts.len() {
            return Err(LlmError::BadResponse {
                reason: format!(
                    "expected {} embeddings, got {}",
                    texts.len(),
                    list.data.len()
                ),
            });
        }
        let mut slots: Vec<Option<Vec<f32>>> = vec![None; texts.len()];
        for (pos, item) in list.data.into_iter().enumerate() {
            let idx = item.index.unwrap_or(pos);
            let vector: Vec<f32> =
                serde_json::from_value(item.embedding).map_err(|_| LlmError::BadResponse {
                    reason: "embedding is not an array of numbers".to_owned(),
                })?;
            match slots.get_mut(idx) {
                Some(slot @ None) => *slot = Some(vector),
                _ => {
                    return Err(LlmError::BadResponse {
                        reason: "embedding indexes are out of range or repeated".to_owned(),
                    });
                }
            }
        }
        let vectors: Vec<Vec<f32>> = slots.into_iter().flatten().collect();
        Ok(vectors)
    }
}

#[async_trait]
impl EmbeddingProvider for OpenAiEmbeddings {
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, LlmError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        self.core.check_key()?;
        let mut out = Vec::with_capacity(texts.len());
        for batch in texts.chunks(self.config.batch_size.max(1)) {
            out.extend(self.embed_batch(batch).await?);
        }
        let dim = out.first().map_or(0, Vec::len);
        if dim == 0 || out.iter().any(|v| v.len() != dim) {
            return Err(LlmError::BadResponse {
                reason: "embeddings are empty or of unequal length".to_owned(),
            });
        }
        if let Some(expected) = self.dimension()
            && expected != dim
        {
            return Err(LlmError::BadResponse {
                reason: format!("embedding dimension {dim} differs from expected {expected}"),
            });
        }
        let _ = self.learned_dimension.set(dim);
        tracing::debug!(model = %self.config.model, count = out.len(), dim, "embeddings computed");
        Ok(out)
    }

    fn model_id(&self) -> &str {
        &self.config.model
    }

    fn dimension(&self) -> Option<usize> {
        self.config
            .dimensions
            .or_else(|| self.learned_dimension.get().copied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn null_embeddings_are_unavailable() {
        let n = NullEmbeddings;
        let err = n.embed(&["x".to_owned()]).await.unwrap_err();
        assert_eq!(err, LlmError::EmbeddingsUnavailable);
        assert!(err.is_unavailable());
        assert_eq!(n.dimension(), None);
        assert_eq!(n.model_id(), "none");
    }

    #[test]
    fn debug_masks_key() {
        let cfg = EmbeddingsConfig {
            api_key: Some("sk-embed-secret".into()),
            ..EmbeddingsConfig::default()
        };
        assert!(!format!("{cfg:?}").contains("sk-embed"));
    }
}
