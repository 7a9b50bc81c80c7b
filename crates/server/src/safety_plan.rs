//! The person's safety plan (`GET/PUT/DELETE /api/safety-plan`) and the
//! "I need help now" view (`GET /api/sos`).
//!
//! `/api/sos` is outside the token guard on purpose: the verified lines are
//! public and a person in crisis must see them whatever the state of their
//! token, the user store or a rate limit. With a token that checks out
//! within a short bound the person's own plan is shown too; otherwise the
//! lines alone. It sends no message and asks no model.

use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use opencouch_core::SafetyPlan;
use opencouch_runtime::service::{SafetyPlanView, Sos};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::AppState;
use crate::auth::{AuthMode, LOCAL_OWNER, bearer_token};
use crate::chat::Owner;
use crate::error::{ApiError, parse_required};
use crate::extract::{Body, Params};

/// How long `/api/sos` waits for a token check before it shows the lines
/// without the plan.
const SOS_AUTH_BOUND: Duration = Duration::from_secs(1);

fn view_json(v: &SafetyPlanView) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// The caller's plan (every section; empty lists when none was saved).
pub(crate) async fn get_plan(
    State(state): State<AppState>,
    owner: Owner,
) -> Result<Json<Value>, ApiError> {
    let view = state.service().safety_plan(&owner.0).await?;
    Ok(Json(view_json(&view)))
}

/// Replaces the caller's plan. 422 names the field on bad input.
pub(crate) async fn put_plan(
    State(state): State<AppState>,
    owner: Owner,
    Body(body): Body,
) -> Result<Json<Value>, ApiError> {
    let plan: SafetyPlan = parse_required(&body)?;
    let view = state.service().put_safety_plan(&owner.0, plan).await?;
    Ok(Json(view_json(&view)))
}

/// Deletes the caller's plan.
pub(crate) async fn delete_plan(
    State(state): State<AppState>,
    owner: Owner,
) -> Result<Json<Value>, ApiError> {
    let deleted = state.service().delete_safety_plan(&owner.0).await?;
    Ok(Json(json!({ "deleted": deleted })))
}

/// `GET /api/sos` query.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SosQuery {
    /// ISO 3166 alpha-2 country code (e.g. `GB`); none: the international
    /// directories.
    pub country: Option<String>,
}

/// Whose plan to show, if any: the local owner, or a token's owner when it
/// checks out within [`SOS_AUTH_BOUND`] and the per-address limit allows a
/// check. Anything else: no one (the lines alone).
async fn sos_owner(state: &AppState, token: Option<String>, client: String) -> Option<String> {
    match state.auth() {
        AuthMode::Local => Some(LOCAL_OWNER.to_owned()),
        AuthMode::Tokens(users) => {
            let token = token?;
            let now = Instant::now();
            state.unauthenticated().check(&client, now).ok()?;
            let verify = state.tokens().verify(users, &token, now);
            match tokio::time::timeout(SOS_AUTH_BOUND, verify).await {
                Ok(Ok(Some(owner))) => Some(owner),
                Ok(Ok(None)) => {
                    let _ = state.unauthenticated().take(&client, now);
                    None
                }
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "sos: the token could not be checked; lines only");
                    None
                }
                Err(_) => {
                    tracing::warn!("sos: the token check stalled; lines only");
                    None
                }
            }
        }
    }
}

/// "I need help now": the caller's plan and the verified lines.
pub(crate) async fn sos(
    State(state): State<AppState>,
    Params(q): Params<SosQuery>,
    req: Request,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    if let Some(c) = &q.country
        && !(c.len() == 2 && c.chars().all(|ch| ch.is_ascii_alphabetic()))
    {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_country",
            "country must be a two-letter ISO 3166 code such as GB",
        ));
    }
    let token = bearer_token(req.headers()).map(str::to_owned);
    let client = crate::conn::client_key(&req, &state.limits().trusted_proxies);
    drop(req);
    let owner = sos_owner(&state, token, client).await;
    let sos: Sos = state
        .service()
        .sos(owner.as_deref(), q.country.as_deref())
        .await;
    Ok((
        StatusCode::OK,
        Json(serde_json::to_value(&sos).unwrap_or(Value::Null)),
    ))
}
