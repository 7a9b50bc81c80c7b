//! The person's safety plan through the service: read, replace and delete
//! it (`GET/PUT/DELETE /api/safety-plan`, the web page's card, the
//! terminal's `/plan`), and the "I need help now" view ([`Service::sos`]):
//! the plan and the verified lines for the person's country, with no model
//! and no message sent, within the crisis bound.
//!
//! Plans live in the persistent store only (the incognito runtime never
//! writes one); they are owner data (export, forget-me).

use chrono::{DateTime, Utc};
use opencouch_core::SafetyPlan;
use opencouch_safety::personal_plan;
use serde::Serialize;
use serde_json::Value;

use super::api::{Service, check_owner};
use super::error::{ErrorCode, ServiceError};
use crate::thread_id::owner_problem;

/// A stored plan and when it last changed (`None`: never saved; the plan
/// is then empty).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SafetyPlanView {
    /// The plan (every section, possibly empty).
    #[serde(flatten)]
    pub plan: SafetyPlan,
    /// Last change.
    pub updated_at: Option<DateTime<Utc>>,
}

/// Whether the SOS view could show the person's plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SosPlan {
    /// Shown.
    Shown,
    /// The person has no plan (or it is empty).
    None,
    /// There is no one to read it for (an unverified caller).
    NotAvailable,
    /// It could not be read within the bound; the lines are shown anyway.
    Unavailable,
}

/// "I need help now": what to show at once, without a model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sos {
    /// The person's plan, when it could be read.
    pub plan: Option<SafetyPlan>,
    /// The plan as text (their numbers marked as theirs), when shown.
    pub plan_text: Option<String>,
    /// What came of reading it.
    pub plan_status: SosPlan,
    /// The country the lines are for, when known.
    pub country_code: Option<String>,
    /// Its name, when known.
    pub country_name: Option<String>,
    /// The verified lines (the resource directory's entries).
    pub resources: Vec<Value>,
    /// What to do in immediate danger (directory numbers only).
    pub emergency_advice: String,
    /// All of it as text for a text channel: the emergency advice, the
    /// person's plan (their own numbers marked as theirs), then the
    /// verified lines.
    pub text: String,
}

impl Service {
    /// The owner's safety plan (an empty plan when none was saved).
    ///
    /// # Errors
    /// `invalid_owner`, `storage_unavailable`.
    pub async fn safety_plan(&self, owner: &str) -> Result<SafetyPlanView, ServiceError> {
        check_owner(owner)?;
        let record = self
            .persistent
            .stores()
            .safety_plans
            .safety_plan(owner)
            .await?;
        Ok(match record {
            Some(r) => SafetyPlanView {
                plan: serde_json::from_value(r.value).unwrap_or_default(),
                updated_at: Some(r.updated_at),
            },
            None => SafetyPlanView {
                plan: SafetyPlan::default(),
                updated_at: None,
            },
        })
    }

    /// Replaces the owner's safety plan with `plan` (checked: bounded
    /// lengths, phone numbers that are numbers; entries trimmed). An empty
    /// plan deletes the stored one.
    ///
    /// # Errors
    /// `invalid_input` naming the field (`safety plan people[0].phone: …`),
    /// `invalid_owner`, `storage_unavailable`.
    pub async fn put_safety_plan(
        &self,
        owner: &str,
        plan: SafetyPlan,
    ) -> Result<SafetyPlanView, ServiceError> {
        check_owner(owner)?;
        plan.validate()
            .map_err(|p| ServiceError::new(ErrorCode::InvalidInput, format!("safety plan {p}")))?;
        let plan = plan.normalized();
        let store = &self.persistent.stores().safety_plans;
        if plan.is_empty() {
            store.delete_safety_plan(owner).await?;
            return Ok(SafetyPlanView {
                plan,
                updated_at: None,
            });
        }
        crate::safety_plan::write(store.as_ref(), owner, &plan).await?;
        tracing::info!(
            sections = opencouch_core::safety_plan::Section::ALL
                .iter()
                .filter(|s| plan.len_of(**s) > 0)
                .count(),
            "safety plan saved"
        );
        self.safety_plan(owner).await
    }

    /// Deletes the owner's safety plan; whether there was one.
    ///
    /// # Errors
    /// `invalid_owner`, `storage_unavailable`.
    pub async fn delete_safety_plan(&self, owner: &str) -> Result<bool, ServiceError> {
        check_owner(owner)?;
        Ok(self
            .persistent
            .stores()
            .safety_plans
            .delete_safety_plan(owner)
            .await?)
    }

    /// "I need help now": the owner's plan (read within the crisis bound;
    /// without it when the store is slow or down) and the verified lines
    /// for `country` (an ISO 3166 alpha-2 code; unknown or none: the
    /// international directories). No model, no message, nothing written.
    /// `owner` is `None` for a caller whose identity is not known: the
    /// lines only.
    pub async fn sos(&self, owner: Option<&str>, country: Option<&str>) -> Sos {
        let location = match country.map(str::trim).filter(|c| c.len() == 2) {
            Some(code) => opencouch_safety::LocationResult::country(code),
            None => opencouch_safety::LocationResult::none(),
        };
        let lookup = opencouch_safety::lookup(&location);
        let (plan, plan_status) = match owner.filter(|o| owner_problem(o).is_none()) {
            None => (None, SosPlan::NotAvailable),
            Some(owner) => {
                // The same bounded read as a crisis reply's: a failure or a
                // stall leaves its mark in `diag` and the lines go out alone.
                let mut diag = opencouch_core::Diagnostics::new();
                let plan = crate::safety_plan::load_for_crisis(
                    Some(&self.persistent.stores().safety_plans),
                    owner,
                    self.persistent.options().storage_crisis_bound,
                    &mut diag,
                )
                .await;
                let status = match (&plan, diag.get_str("safety_plan")) {
                    (Some(_), _) => SosPlan::Shown,
                    (None, Some(_)) => SosPlan::Unavailable,
                    (None, None) => SosPlan::None,
                };
                (plan, status)
            }
        };
        let plan_text = plan.as_ref().map(personal_plan::render_plan);
        let mut text = lookup.emergency_advice.clone();
        if let Some(p) = &plan_text {
            text.push_str("\n\n");
            text.push_str(p);
        }
        text.push_str("\n\n");
        text.push_str(&match &lookup.country_name {
            Some(name) => format!("Verified crisis lines for {name}:"),
            None => "Verified crisis lines and directories:".to_owned(),
        });
        for r in &lookup.resources {
            text.push('\n');
            text.push_str(&opencouch_safety::plan::format_resource(r));
        }
        Sos {
            plan,
            plan_text,
            plan_status,
            country_code: lookup.country_code.clone(),
            country_name: lookup.country_name.clone(),
            resources: lookup
                .resources
                .iter()
                .filter_map(|r| serde_json::to_value(r).ok())
                .collect(),
            emergency_advice: lookup.emergency_advice,
            text,
        }
    }
}
