//! [`ServiceError`]: the one error of the service API, with a stable
//! machine [`ErrorCode`]. The HTTP layer maps a code to a status; a terminal
//! or a chat bot maps it to words ([`ServiceError::message`] is already
//! written for a person and never holds message text or store details).

use opencouch_memory::control::ControlError;
use opencouch_store::StoreError;

pub use crate::error::ErrorCode;
use crate::error::RuntimeError;

/// Why a service call failed: a code and words for a person. The cause (a
/// store or model error) is kept as the source for logs.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct ServiceError {
    code: ErrorCode,
    message: String,
    #[source]
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl ServiceError {
    /// An error with this code and message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ServiceError {
            code,
            message: message.into(),
            source: None,
        }
    }

    pub(crate) fn caused(
        code: ErrorCode,
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        ServiceError {
            code,
            message: message.into(),
            source: Some(Box::new(source)),
        }
    }

    /// `what` does not exist (for this owner).
    pub fn not_found(what: &str) -> Self {
        ServiceError::new(ErrorCode::NotFound, format!("{what} not found"))
    }

    /// The stable machine code.
    pub fn code(&self) -> ErrorCode {
        self.code
    }

    /// Words for the person (never message text or store details).
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The underlying cause, for logs (a store or model error).
    pub fn cause(&self) -> Option<&(dyn std::error::Error + Send + Sync + 'static)> {
        self.source.as_deref()
    }
}

impl From<RuntimeError> for ServiceError {
    fn from(e: RuntimeError) -> Self {
        match e {
            RuntimeError::InvalidInput(why) => ServiceError::new(ErrorCode::InvalidInput, why),
            RuntimeError::MessageTooLong { max } => ServiceError::new(
                ErrorCode::MessageTooLong,
                format!("message is longer than {max} characters"),
            ),
            RuntimeError::Store(e) => e.into(),
            RuntimeError::Cancelled => ServiceError::new(
                ErrorCode::Cancelled,
                "the turn was cancelled before it was saved: the client went away",
            ),
            e @ RuntimeError::Model(_) => ServiceError::caused(
                ErrorCode::ModelConfiguration,
                "the model client could not be configured",
                e,
            ),
            e @ (RuntimeError::Aborted | RuntimeError::Data(_)) => {
                ServiceError::caused(ErrorCode::Internal, "the turn could not be completed", e)
            }
        }
    }
}

impl From<StoreError> for ServiceError {
    fn from(e: StoreError) -> Self {
        ServiceError::caused(ErrorCode::StorageUnavailable, "storage is unavailable", e)
    }
}

impl From<ControlError> for ServiceError {
    fn from(e: ControlError) -> Self {
        match e {
            ControlError::IndexOutOfRange { .. } => {
                ServiceError::new(ErrorCode::NotFound, e.to_string())
            }
            ControlError::Backend(_) => {
                ServiceError::caused(ErrorCode::StorageUnavailable, "storage is unavailable", e)
            }
            other => ServiceError::new(ErrorCode::InvalidMemoryAction, other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_distinct_snake_case() {
        let mut seen = std::collections::HashSet::new();
        for code in ErrorCode::ALL {
            let s = code.as_str();
            assert!(seen.insert(s), "{s} twice");
            assert!(s.chars().all(|c| c.is_ascii_lowercase() || c == '_'), "{s}");
        }
    }

    #[test]
    fn store_failures_never_show_their_details() {
        let e: ServiceError = StoreError::Io(std::io::Error::other("secret path /x")).into();
        assert_eq!(e.code(), ErrorCode::StorageUnavailable);
        assert_eq!(e.message(), "storage is unavailable");
        assert!(e.cause().is_some());
    }
}
