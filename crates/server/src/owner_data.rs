//! `GET /api/export` and `POST /api/forget-me` (→ `/confirm`): the
//! service's export and forget-me for the caller (the owner comes from the
//! token, as everywhere).

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use opencouch_runtime::service::{
    ExportFormat, ExportRequest, ForgetMeConfirm, ForgetMeCounts, ForgetMeRequest,
};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::AppState;
use crate::chat::Owner;
use crate::error::{ApiError, parse_json, parse_required};
use crate::extract::{Body, Params};

/// `GET /api/export` query.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportQuery {
    /// `json` (default) or `md` (`markdown`).
    pub format: Option<String>,
}

/// `POST /api/forget-me` body (optional, empty).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForgetMeBody {}

/// `POST /api/forget-me/confirm` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForgetMeConfirmBody {
    /// The token `POST /api/forget-me` gave.
    pub token: String,
}

fn counts_json(c: &ForgetMeCounts) -> Value {
    serde_json::to_value(c).unwrap_or(Value::Null)
}

/// Everything kept for the caller, as JSON (`opencouch.export/1`) or
/// Markdown, sent as a download.
pub(crate) async fn export(
    State(state): State<AppState>,
    owner: Owner,
    Params(q): Params<ExportQuery>,
) -> Result<Response, ApiError> {
    let format = match q.format.as_deref() {
        None => ExportFormat::Json,
        Some(name) => ExportFormat::parse(name).ok_or_else(|| {
            state.metrics().rejected("invalid_format");
            ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_format",
                "format must be json or md",
            )
        })?,
    };
    let file = state
        .service()
        .export(&ExportRequest {
            owner: owner.0.clone(),
            format,
        })
        .await?;
    // The file name holds only letters, digits, `-`, `_` and `.`.
    let disposition = HeaderValue::from_str(&format!("attachment; filename=\"{}\"", file.filename))
        .map_err(|_| ApiError::internal())?;
    let mut resp = file.body.into_response();
    let headers = resp.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(file.media_type),
    );
    headers.insert(header::CONTENT_DISPOSITION, disposition);
    Ok(resp)
}

/// What forgetting the caller would delete, and the token to confirm it.
/// Deletes nothing.
pub(crate) async fn forget_me_prepare(
    State(state): State<AppState>,
    owner: Owner,
    Body(body): Body,
) -> Result<Json<Value>, ApiError> {
    let _: ForgetMeBody = parse_json(&body, true)?;
    let plan = state
        .service()
        .forget_me_prepare(&ForgetMeRequest { owner: owner.0 })
        .await?;
    Ok(Json(json!({
        "token": plan.token,
        "expires_at": plan.expires_at,
        "counts": counts_json(&plan.counts),
        "total": plan.counts.deleted(),
        "message": plan.message,
    })))
}

/// Deletes everything kept for the caller (the crisis log keeps anonymous
/// entries) and says exactly what was deleted. In token mode the caller's
/// sign-in account goes too: this token stops working.
pub(crate) async fn forget_me_confirm(
    State(state): State<AppState>,
    owner: Owner,
    Body(body): Body,
) -> Result<Json<Value>, ApiError> {
    let req: ForgetMeConfirmBody = parse_required(&body)?;
    // The service runs the deletion in its own task: a request that times
    // out or is dropped never stops it halfway; a graceful stop waits for it.
    let done = state
        .service()
        .forget_me_confirm(&ForgetMeConfirm {
            owner: owner.0,
            token: req.token,
        })
        .await?;
    Ok(Json(json!({
        "deleted": counts_json(&done.counts),
        "total": done.counts.deleted(),
        "message": done.message,
    })))
}
