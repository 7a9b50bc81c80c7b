//! Client configuration for OpenAI-compatible providers.

use std::fmt;
use std::time::Duration;

use opencouch_core::ModelTier;

/// Default base URL (OpenAI).
pub const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
/// Default control / fast model (the original's `OPENAI_MODEL` default).
pub const DEFAULT_CONTROL_MODEL: &str = "gpt-5.4-mini";
/// Default quality model (the original's `RESPONSE_QUALITY_OPENAI_MODEL` default).
pub const DEFAULT_QUALITY_MODEL: &str = "gpt-5.4";

/// Default cap on a non-streamed chat response body: 8 MiB.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 8 * 1024 * 1024;

/// Model name per tier. Safety, routing, memory and summarisation use
/// `control`; therapeutic prose uses `fast` or `quality`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TierModels {
    /// Control model.
    pub control: String,
    /// Fast response model.
    pub fast: String,
    /// Quality response model.
    pub quality: String,
}

impl TierModels {
    /// The same model for every tier (typical for a local server).
    pub fn uniform(model: impl Into<String>) -> TierModels {
        let m = model.into();
        TierModels {
            control: m.clone(),
            fast: m.clone(),
            quality: m,
        }
    }

    /// Model name for `tier`.
    pub fn for_tier(&self, tier: ModelTier) -> &str {
        match tier {
            ModelTier::Control => &self.control,
            ModelTier::Fast => &self.fast,
            ModelTier::Quality => &self.quality,
        }
    }
}

impl Default for TierModels {
    fn default() -> TierModels {
        TierModels {
            control: DEFAULT_CONTROL_MODEL.to_owned(),
            fast: DEFAULT_CONTROL_MODEL.to_owned(),
            quality: DEFAULT_QUALITY_MODEL.to_owned(),
        }
    }
}

/// Which request field carries the output-token cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaxTokensField {
    /// `max_completion_tokens` (current OpenAI models).
    MaxCompletionTokens,
    /// `max_tokens` (Ollama, llama.cpp, vLLM, LM Studio, older OpenAI models).
    MaxTokens,
}

/// Configuration of [`crate::OpenAiCompatClient`]. `Debug` masks the key.
#[derive(Clone, PartialEq)]
pub struct LlmConfig {
    /// Base URL including the version segment, e.g. `http://localhost:11434/v1`.
    pub base_url: String,
    /// Bearer key; sent when set.
    pub api_key: Option<String>,
    /// When true and `api_key` is `None`, calls fail with `MissingApiKey` without any request.
    pub require_key: bool,
    /// Model per tier.
    pub models: TierModels,
    /// Per-attempt timeout (for streams: until the headers and between chunks).
    pub timeout: Duration,
    /// Attempts in total, including the first (at least 1; default 2).
    pub max_attempts: u32,
    /// First backoff; doubles per retry.
    pub backoff_base: Duration,
    /// Upper bound on any wait between attempts, including a server's `Retry-After`.
    pub max_backoff: Duration,
    /// Field for [`crate::ChatRequest::max_tokens`].
    pub max_tokens_field: MaxTokensField,
    /// Ask streams to end with a usage chunk (`stream_options.include_usage`).
    pub stream_include_usage: bool,
    /// Cap on one streamed line and on one event's data; a longer one ends
    /// the stream with [`crate::LlmError::StreamInterrupted`] (default 1 MiB).
    pub max_event_bytes: usize,
    /// Cap on a whole non-streamed response body; a longer one fails with
    /// [`crate::LlmError::BadResponse`] (default 8 MiB).
    pub max_response_bytes: usize,
}

impl LlmConfig {
    /// OpenAI with the default models; a key is required.
    pub fn openai(api_key: Option<String>) -> LlmConfig {
        LlmConfig {
            api_key,
            ..LlmConfig::default()
        }
    }

    /// A local OpenAI-compatible server (Ollama, llama.cpp, vLLM, LM Studio):
    /// no key required, one model for every tier, `max_tokens` field.
    pub fn local(base_url: impl Into<String>, model: impl Into<String>) -> LlmConfig {
        LlmConfig {
            base_url: base_url.into(),
            api_key: None,
            require_key: false,
            models: TierModels::uniform(model),
            max_tokens_field: MaxTokensField::MaxTokens,
            ..LlmConfig::default()
        }
    }

    /// Model name for `tier`.
    pub fn model_for(&self, tier: ModelTier) -> &str {
        self.models.for_tier(tier)
    }
}

impl Default for LlmConfig {
    fn default() -> LlmConfig {
        LlmConfig {
            base_url: OPENAI_BASE_URL.to_owned(),
            api_key: None,
            require_key: true,
            models: TierModels::default(),
            timeout: Duration::from_secs(30),
            max_attempts: 2,
            backoff_base: Duration::from_millis(250),
            max_backoff: Duration::from_secs(5),
            max_tokens_field: MaxTokensField::MaxCompletionTokens,
            stream_include_usage: true,
            max_event_bytes: crate::sse::DEFAULT_MAX_EVENT_BYTES,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
        }
    }
}

/// A base URL for `Debug` output: a user-info password and the query (which
/// may carry a key, e.g. `?api-key=…`) are replaced by `****`; a value that
/// does not parse is not shown.
pub(crate) fn mask_base_url(url: &str) -> String {
    let Ok(mut parsed) = reqwest::Url::parse(url) else {
        return "(not a valid URL)".to_owned();
    };
    if parsed.password().is_some() && parsed.set_password(Some("****")).is_err() {
        return "(URL with credentials)".to_owned();
    }
    if parsed.query().is_some() {
        parsed.set_query(Some("****"));
    }
    parsed.to_string()
}

/// Masks a secret for `Debug` output.
pub(crate) fn mask_key(key: &Option<String>) -> &'static str {
    match key {
        Some(_) => "Some(<redacted>)",
        None => "None",
    }
}

impl fmt::Debug for LlmConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LlmConfig")
            .field("base_url", &mask_base_url(&self.base_url))
            .field("api_key", &format_args!("{}", mask_key(&self.api_key)))
            .field("require_key", &self.require_key)
            .field("models", &self.models)
            .field("timeout", &self.timeout)
            .field("max_attempts", &self.max_attempts)
            .field("backoff_base", &self.backoff_base)
            .field("max_backoff", &self.max_backoff)
            .field("max_tokens_field", &self.max_tokens_field)
            .field("stream_include_usage", &self.stream_include_usage)
            .field("max_event_bytes", &self.max_event_bytes)
            .field("max_response_bytes", &self.max_response_bytes)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_masks_key() {
        let cfg = LlmConfig::openai(Some("sk-very-secret-123".into()));
        let dbg = format!("{cfg:?}");
        assert!(!dbg.contains("sk-very"), "{dbg}");
        assert!(dbg.contains("<redacted>"));
        let cfg = LlmConfig::local(
            "https://u:pw-secret@proxy.example/v1?api-key=key-secret",
            "m",
        );
        let dbg = format!("{cfg:?}");
        assert!(!dbg.contains("secret"), "{dbg}");
        assert!(
            dbg.contains("https://u:****@proxy.example/v1?****"),
            "{dbg}"
        );
    }

    #[test]
    fn tiers_map_to_models() {
        let cfg = LlmConfig::default();
        let cases = [
            (ModelTier::Control, DEFAULT_CONTROL_MODEL),
            (ModelTier::Fast, DEFAULT_CONTROL_MODEL),
            (ModelTier::Quality, DEFAULT_QUALITY_MODEL),
        ];
        for (tier, model) in cases {
            assert_eq!(cfg.model_for(tier), model);
        }
        let local = LlmConfig::local("http://localhost:11434/v1", "llama3.2");
        assert!(!local.require_key);
        assert_eq!(local.model_for(ModelTier::Quality), "llama3.2");
    }
}
