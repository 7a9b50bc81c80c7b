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

/// Stable machine codes of the service's errors (the `code` of HTTP error
/// bodies and stream `error` events).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// The message is empty, holds NUL, or a request field is invalid.
    InvalidInput,
    /// The message is longer than the limit.
    MessageTooLong,
    /// A thread id breaks the one thread-id rule.
    InvalidThreadId,
    /// An owner id is empty, too long or holds control characters.
    InvalidOwner,
    /// A page cursor the service did not give.
    InvalidCursor,
    /// The thread, memory item or other named thing does not exist (for
    /// this owner).
    NotFound,
    /// A memory request was refused (bad payload, not this owner's).
    InvalidMemoryAction,
    /// A forget-me confirmation token this owner was never given.
    ForgetTokenUnknown,
    /// A forget-me confirmation that expired or no longer matches.
    ForgetTokenStale,
    /// Storage failed or is unreachable.
    StorageUnavailable,
    /// The model client could not be configured.
    ModelConfiguration,
    /// The caller went away before the turn was saved (below crisis level).
    Cancelled,
    /// Anything else (a bug, invalid embedded data).
    Internal,
}

impl ErrorCode {
    /// The code as it appears on the wire.
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidInput => "invalid_input",
            ErrorCode::MessageTooLong => "message_too_long",
            ErrorCode::InvalidThreadId => "invalid_thread_id",
            ErrorCode::InvalidOwner => "invalid_owner",
            ErrorCode::InvalidCursor => "invalid_cursor",
            ErrorCode::NotFound => "not_found",
            ErrorCode::InvalidMemoryAction => "invalid_memory_action",
            ErrorCode::ForgetTokenUnknown => "forget_token_unknown",
            ErrorCode::ForgetTokenStale => "forget_token_stale",
            ErrorCode::StorageUnavailable => "storage_unavailable",
            ErrorCode::ModelConfiguration => "model_configuration",
            ErrorCode::Cancelled => "cancelled",
            ErrorCode::Internal => "internal",
        }
    }

    /// Every code (tests check each has a status and words).
    pub const ALL: [ErrorCode; 13] = [
        ErrorCode::InvalidInput,
        ErrorCode::MessageTooLong,
        ErrorCode::InvalidThreadId,
        ErrorCode::InvalidOwner,
        ErrorCode::InvalidCursor,
        ErrorCode::NotFound,
        ErrorCode::InvalidMemoryAction,
        ErrorCode::ForgetTokenUnknown,
        ErrorCode::ForgetTokenStale,
        ErrorCode::StorageUnavailable,
        ErrorCode::ModelConfiguration,
        ErrorCode::Cancelled,
        ErrorCode::Internal,
    ];

    /// Whether the caller can fix it by changing the request.
    pub const fn is_caller_error(self) -> bool {
        matches!(
            self,
            ErrorCode::InvalidInput
                | ErrorCode::MessageTooLong
                | ErrorCode::InvalidThreadId
                | ErrorCode::InvalidOwner
                | ErrorCode::InvalidCursor
                | ErrorCode::NotFound
                | ErrorCode::InvalidMemoryAction
                | ErrorCode::ForgetTokenUnknown
                | ErrorCode::ForgetTokenStale
        )
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for ErrorCode {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<str> for ErrorCode {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl RuntimeError {
    /// The service code of this failure.
    pub fn error_code(&self) -> ErrorCode {
        match self {
            RuntimeError::InvalidInput(_) => ErrorCode::InvalidInput,
            RuntimeError::MessageTooLong { .. } => ErrorCode::MessageTooLong,
            RuntimeError::Store(_) => ErrorCode::StorageUnavailable,
            RuntimeError::Model(_) => ErrorCode::ModelConfiguration,
            RuntimeError::Cancelled => ErrorCode::Cancelled,
            RuntimeError::Aborted | RuntimeError::Data(_) => ErrorCode::Internal,
        }
    }
}
