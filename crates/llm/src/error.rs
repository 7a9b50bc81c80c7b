//! Typed errors of the model layer.
//!
//! Messages never contain conversation text, model output or API keys: the
//! detail strings are built from fixed phrases, HTTP status codes, JSON
//! pointers and serde error categories only.

use std::time::Duration;

/// Error of a chat or embeddings call.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum LlmError {
    /// A key is required by the configuration but none is set; no request was sent.
    #[error("no API key configured for the model provider")]
    MissingApiKey,
    /// The server could not be reached (DNS, refused, reset, TLS).
    #[error("could not reach the model provider: {detail}")]
    Connection {
        /// Fixed description of the failure kind.
        detail: String,
    },
    /// No (complete) answer within the configured timeout.
    #[error("model provider timed out after {} ms", after.as_millis())]
    Timeout {
        /// The timeout that elapsed.
        after: Duration,
    },
    /// HTTP 429 after all attempts.
    #[error("model provider rate limit (retry after {retry_after:?})")]
    RateLimited {
        /// The server's `Retry-After`, if it sent one.
        retry_after: Option<Duration>,
    },
    /// Any other non-success HTTP status (after retries for 5xx).
    #[error("model provider returned HTTP {status}")]
    Http {
        /// Status code.
        status: u16,
    },
    /// The response could not be understood.
    #[error("unreadable response from the model provider: {reason}")]
    BadResponse {
        /// What was wrong (no content).
        reason: String,
    },
    /// A streamed reply broke off before it was complete.
    #[error("model stream interrupted: {reason}")]
    StreamInterrupted {
        /// What happened (no content).
        reason: String,
    },
    /// Structured output stayed invalid after the repair attempt.
    #[error(
        "model output did not match the expected structure after {attempts} attempts: {reason}"
    )]
    InvalidStructuredOutput {
        /// Why the last attempt was rejected (JSON pointer and failure kind only).
        reason: String,
        /// Attempts made (normally 2: the first and one repair).
        attempts: u8,
    },
    /// No embedding provider is configured.
    #[error("no embedding provider configured")]
    EmbeddingsUnavailable,
    /// Invalid client configuration (e.g. an unusable base URL).
    #[error("invalid model provider configuration: {0}")]
    Config(String),
}

impl LlmError {
    /// True when the model is effectively unavailable and the caller should
    /// fall back to its deterministic counterpart: missing key, connection
    /// failure, timeout, an interrupted stream, or no embedding provider.
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            LlmError::MissingApiKey
                | LlmError::Connection { .. }
                | LlmError::Timeout { .. }
                | LlmError::StreamInterrupted { .. }
                | LlmError::EmbeddingsUnavailable
        )
    }

    /// True for failures the retry policy retries: connection errors, HTTP 429 and 5xx.
    /// Timeouts are not retried (a second full timeout would double the wait).
    pub fn is_retryable(&self) -> bool {
        match self {
            LlmError::Connection { .. } | LlmError::RateLimited { .. } => true,
            LlmError::Http { status } => *status >= 500,
            _ => false,
        }
    }

    /// A short stable label for diagnostics and metrics (e.g. `"timeout"`).
    pub fn kind(&self) -> &'static str {
        match self {
            LlmError::MissingApiKey => "missing_api_key",
            LlmError::Connection { .. } => "connection",
            LlmError::Timeout { .. } => "timeout",
            LlmError::RateLimited { .. } => "rate_limited",
            LlmError::Http { .. } => "http",
            LlmError::BadResponse { .. } => "bad_response",
            LlmError::StreamInterrupted { .. } => "stream_interrupted",
            LlmError::InvalidStructuredOutput { .. } => "invalid_structured_output",
            LlmError::EmbeddingsUnavailable => "embeddings_unavailable",
            LlmError::Config(_) => "config",
        }
    }

    /// A `BadResponse` describing a serde error by category and position only.
    pub(crate) fn from_json(what: &str, e: &serde_json::Error) -> LlmError {
        let category = match e.classify() {
            serde_json::error::Category::Io => "io",
            serde_json::error::Category::Syntax => "syntax",
            serde_json::error::Category::Data => "unexpected shape",
            serde_json::error::Category::Eof => "truncated",
        };
        LlmError::BadResponse {
            reason: format!(
                "{what}: {category} error at line {} column {}",
                e.line(),
                e.column()
            ),
        }
    }

    /// Maps a transport error without its URL or payload.
    pub(crate) fn from_reqwest(e: &reqwest::Error, timeout: Duration) -> LlmError {
        if e.is_timeout() {
            LlmError::Timeout { after: timeout }
        } else if e.is_connect() {
            LlmError::Connection {
                detail: "connect failed".to_owned(),
            }
        } else if e.is_body() || e.is_decode() {
            LlmError::Connection {
                detail: "response body failed".to_owned(),
            }
        } else if e.is_builder() {
            LlmError::Config("request could not be built (check the base URL)".to_owned())
        } else {
            LlmError::Connection {
                detail: "request failed".to_owned(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification_table() {
        let cases: Vec<(LlmError, bool, bool)> = vec![
            (LlmError::MissingApiKey, true, false),
            (LlmError::Connection { detail: "x".into() }, true, true),
            (
                LlmError::Timeout {
                    after: Duration::from_secs(1),
                },
                true,
                false,
            ),
            (LlmError::RateLimited { retry_after: None }, false, true),
            (LlmError::Http { status: 503 }, false, true),
            (LlmError::Http { status: 500 }, false, true),
            (LlmError::Http { status: 400 }, false, false),
            (LlmError::Http { status: 404 }, false, false),
            (LlmError::BadResponse { reason: "x".into() }, false, false),
            (
                LlmError::StreamInterrupted { reason: "x".into() },
                true,
                false,
            ),
            (
                LlmError::InvalidStructuredOutput {
                    reason: "x".into(),
                    attempts: 2,
                },
                false,
                false,
            ),
            (LlmError::EmbeddingsUnavailable, true, false),
            (LlmError::Config("x".into()), false, false),
        ];
        for (err, unavailable, retryable) in cases {
            assert_eq!(err.is_unavailable(), unavailable, "{err:?}");
            assert_eq!(err.is_retryable(), retryable, "{err:?}");
            assert!(!err.kind().is_empty());
        }
    }

    #[test]
    fn json_error_reason_has_no_content() {
        let secret = "my private sentence";
        let e = serde_json::from_str::<u32>(&format!("\"{secret}\"")).unwrap_err();
        let msg = LlmError::from_json("chat completion", &e).to_string();
        assert!(!msg.contains("private"), "{msg}");
    }
}
