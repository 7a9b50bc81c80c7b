//! The one error shape of the API: `{code, message}` with an HTTP status.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use opencouch_runtime::service::{ErrorCode, ServiceError};
use serde::Serialize;

/// An API error. The message never echoes request content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Stable machine-readable code.
    pub code: &'static str,
    /// A short explanation for people.
    pub message: String,
}

/// The JSON body of every error response.
#[derive(Debug, Serialize)]
pub struct ErrorBody<'a> {
    /// Stable machine-readable code.
    pub code: &'a str,
    /// A short explanation for people.
    pub message: &'a str,
}

impl ApiError {
    /// An error with any status.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }

    /// 400 with a code.
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    /// 401: no or unknown token.
    pub fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "a valid bearer token is required",
        )
    }

    /// 404.
    pub fn not_found(what: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("{what} not found"),
        )
    }

    /// 500 without detail (details go to the log).
    pub fn internal() -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "internal error",
        )
    }

    /// 503: storage unavailable.
    pub fn unavailable(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, code, message)
    }

    /// The JSON form (also used for stream error events).
    pub fn body_json(&self) -> serde_json::Value {
        serde_json::json!({"code": self.code, "message": self.message})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            code: self.code,
            message: &self.message,
        };
        (self.status, Json(body)).into_response()
    }
}

impl From<ServiceError> for ApiError {
    /// The HTTP form of a service error: its code decides the status; the
    /// message is the service's words (never store details, which go to
    /// the log here).
    fn from(e: ServiceError) -> Self {
        let code = e.code();
        let status = status_of(code);
        if status.is_server_error() {
            tracing::error!(code = %code, error = %e, cause = ?e.cause(), "service error");
        }
        ApiError::new(status, code.as_str(), e.message())
    }
}

impl From<opencouch_runtime::service::UserError> for ApiError {
    /// A failed token check: the store is unavailable (503, never 401).
    fn from(e: opencouch_runtime::service::UserError) -> Self {
        tracing::error!(error = %e, "user store error");
        ApiError::unavailable("storage_unavailable", "storage is unavailable")
    }
}

/// The HTTP status of a service error code.
pub fn status_of(code: ErrorCode) -> StatusCode {
    match code {
        ErrorCode::InvalidInput | ErrorCode::MessageTooLong => StatusCode::UNPROCESSABLE_ENTITY,
        ErrorCode::InvalidThreadId
        | ErrorCode::InvalidOwner
        | ErrorCode::InvalidCursor
        | ErrorCode::InvalidMemoryAction
        | ErrorCode::ForgetTokenUnknown => StatusCode::BAD_REQUEST,
        ErrorCode::NotFound => StatusCode::NOT_FOUND,
        ErrorCode::ForgetTokenStale => StatusCode::CONFLICT,
        ErrorCode::StorageUnavailable => StatusCode::SERVICE_UNAVAILABLE,
        // The client left; nobody reads this status.
        ErrorCode::Cancelled => StatusCode::SERVICE_UNAVAILABLE,
        ErrorCode::ModelConfiguration | ErrorCode::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// Parses a JSON body. Empty bodies are allowed only when `T` has a
/// default (`allow_empty`). Syntax errors are 400, shape errors (unknown
/// fields, bad enum values, wrong types) 422. Messages carry positions,
/// never the input.
pub fn parse_json<T: serde::de::DeserializeOwned + Default>(
    bytes: &[u8],
    allow_empty: bool,
) -> Result<T, ApiError> {
    if allow_empty && bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    parse_required(bytes)
}

/// Parses a required JSON body (see [`parse_json`]).
pub fn parse_required<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes).map_err(|e| {
        use serde_json::error::Category;
        let at = format!("line {}, column {}", e.line(), e.column());
        match e.classify() {
            Category::Syntax | Category::Eof | Category::Io => ApiError::bad_request(
                "malformed_json",
                format!("the request body is not valid JSON ({at})"),
            ),
            Category::Data => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_body",
                format!("the request body does not match the expected schema ({at})"),
            ),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_service_code_has_a_status_and_caller_errors_are_4xx() {
        for code in ErrorCode::ALL {
            let status = status_of(code);
            assert_eq!(
                status.is_client_error(),
                code.is_caller_error(),
                "{code}: {status}"
            );
        }
    }
}
