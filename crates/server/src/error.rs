//! The one error shape of the API: `{code, message}` with an HTTP status.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
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

impl From<opencouch_runtime::RuntimeError> for ApiError {
    fn from(e: opencouch_runtime::RuntimeError) -> Self {
        use opencouch_runtime::RuntimeError as E;
        match &e {
            E::InvalidInput(_) => ApiError::bad_request(e.code(), e.to_string()),
            E::MessageTooLong { .. } => {
                ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, e.code(), e.to_string())
            }
            E::Store(_) => {
                tracing::error!(error = %e, "runtime storage error");
                ApiError::unavailable(e.code(), "storage is unavailable")
            }
            _ => {
                tracing::error!(error = %e, "runtime error");
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    e.code(),
                    "the turn could not be completed",
                )
            }
        }
    }
}

impl From<opencouch_store::StoreError> for ApiError {
    fn from(e: opencouch_store::StoreError) -> Self {
        tracing::error!(error = %e, "store error");
        ApiError::unavailable("storage_unavailable", "storage is unavailable")
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
