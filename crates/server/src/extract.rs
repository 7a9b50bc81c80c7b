//! Request extractors with the API's `{code, message}` errors, shared by
//! every handler module (the router in `api.rs` and the modules it mounts).

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Query, Request};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};

use crate::error::ApiError;

/// A raw JSON request body (size-limited, sent as `application/json`);
/// parsed by the handler.
pub struct Body(pub Bytes);

/// How long a body may take to arrive (set per request by the router from
/// [`crate::Limits::body_timeout`]); a slow body is 408, not the request
/// timeout's 503.
#[derive(Debug, Clone, Copy)]
pub struct BodyTimeout(pub std::time::Duration);

impl<S: Send + Sync> FromRequest<S> for Body {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let declared = req.headers().contains_key(header::CONTENT_TYPE);
        if declared {
            crate::guard::require_json(req.headers(), false)?;
        }
        let headers = req.headers().clone();
        let limit = req.extensions().get::<BodyTimeout>().map(|t| t.0);
        let read = Bytes::from_request(req, state);
        let read = match limit {
            Some(limit) => match tokio::time::timeout(limit, read).await {
                Ok(r) => r,
                Err(_) => {
                    return Err(ApiError::new(
                        StatusCode::REQUEST_TIMEOUT,
                        "request_timeout",
                        "the request body did not arrive in time",
                    ));
                }
            },
            None => read.await,
        };
        let bytes = read.map_err(|rej| {
            if rej.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "body_too_large",
                    "the request body is too large",
                )
            } else {
                ApiError::bad_request("bad_body", "the request body could not be read")
            }
        })?;
        if !declared {
            crate::guard::require_json(&headers, bytes.is_empty())?;
        }
        Ok(Body(bytes))
    }
}

/// Query parameters with `{code, message}` errors.
pub struct Params<T>(pub T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> FromRequestParts<S> for Params<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(q)| Params(q))
            .map_err(|_| {
                ApiError::bad_request("invalid_query", "the query parameters are not valid")
            })
    }
}
