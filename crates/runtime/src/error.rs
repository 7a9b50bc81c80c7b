//! [`RuntimeError`]: why a turn or session operation failed, with a stable
//! code for APIs and stream error events.

use opencouch_store::StoreError;

/// Why a turn or session operation failed. Turns degrade instead of
/// failing wherever they can; these are the cases they cannot.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("invalid input: {0}")]
    InvalidInput(&'static str),
    #[error("message is longer than {max} characters")]
    MessageTooLong { max: usize },
    #[error("storage error: {0}")]
    Store(#[from] StoreError),
    #[error("model configuration error: {0}")]
    Model(String),
    #[error("the turn task stopped unexpectedly")]
    Aborted,
    /// The turn's consumer went away before its commit (a turn below
    /// crisis level only); nothing of the turn was written.
    #[error("the turn was cancelled before it was saved: the client went away")]
    Cancelled,
    #[error("embedded data is invalid: {0}")]
    Data(String),
}

impl RuntimeError {
    /// A stable code for APIs and stream error events.
    pub fn code(&self) -> &'static str {
        match self {
            RuntimeError::InvalidInput(_) => "invalid_input",
            RuntimeError::MessageTooLong { .. } => "message_too_long",
            RuntimeError::Store(_) => "storage_unavailable",
            RuntimeError::Model(_) => "model_configuration",
            RuntimeError::Cancelled => "cancelled",
            RuntimeError::Aborted | RuntimeError::Data(_) => "internal",
        }
    }
}
