//! Reconciliation: how a promoted fact or rule meets what is already
//! stored (bump, supersede, coexist; append, replace, skip), and the writes
//! of a promotion or an explicit rule.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use opencouch_core::Confidence;
use opencouch_store::MemoryStore;

use super::candidate::{CandidateBody, MemoryCandidate, PolicyAction};
use super::clamps::apply_hard_clamps;
use super::model::{PolicyModel, ReconcileAction, ReconcileDecision, RuleAction, RuleDecision};
use super::promotion::Promotion;
use crate::backend::{MemoryError, active_facts, fact_record, load_profile, save_profile, upsert};
use crate::retrieval::{Embedder, embed_for_storage};
use crate::types::{
    ProceduralProfile, ProceduralRule, RuleSource, SemanticFact, TypeError, WriteTiming,
    normalize_space_lower,
};

/// The reconciliation outcome for one new fact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reconciliation {
    /// Nothing in the slot: insert.
    Insert,
    /// Refresh these existing facts (ids); do not insert.
    Bump(Vec<String>),
    /// Insert and retire these existing facts (ids).
    Supersede(Vec<String>),
    /// Insert alongside.
    Coexist,
}

/// A reconciliation decision that cannot be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecisionError {
    /// A decision named an index outside the slot.
    #[error("reconciliation index {index} is out of range (slot holds {len})")]
    InvalidIndex {
        /// The bad index.
        index: usize,
        /// Slot size.
        len: usize,
    },
    /// Bump or supersede without a target.
    #[error("reconciliation decision names no target")]
    NoTarget,
}

/// A reconciliation or promotion-write error.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// A decision that cannot be applied.
    #[error(transparent)]
    Decision(#[from] DecisionError),
    /// An invalid record.
    #[error(transparent)]
    Type(#[from] TypeError),
    /// The store failed.
    #[error(transparent)]
    Backend(#[from] MemoryError),
}

/// The active facts sharing the new fact's slot (category, subject,
/// predicate and object type).
pub fn slot_of<'a>(existing: &'a [SemanticFact], new: &SemanticFact) -> Vec<&'a SemanticFact> {
    existing
        .iter()
        .filter(|f| {
            f.is_active()
                && f.category == new.category
                && f.subject.entity_type == new.subject.entity_type
                && f.subject.normalized_identifier() == new.subject.normalized_identifier()
                && f.predicate == new.predicate
                && f.object.entity_type == new.object.entity_type
        })
        .collect()
}

/// Decides how a new fact meets the facts already stored.
///
/// An exact duplicate (same normalized object identifier and evidence) is a
/// bump; otherwise `decision` decides (none, or low confidence → coexist).
///
/// # Errors
/// [`DecisionError::InvalidIndex`] / [`DecisionError::NoTarget`] for a bad decision.
pub fn reconcile_semantic(
    existing: &[SemanticFact],
    new: &SemanticFact,
    decision: Option<&ReconcileDecision>,
) -> Result<Reconciliation, DecisionError> {
    let slot = slot_of(existing, new);
    if slot.is_empty() {
        return Ok(Reconciliation::Insert);
    }
    let norm = |s: &str| normalize_space_lower(s);
    let dups: Vec<String> = slot
        .iter()
        .filter(|f| {
            f.object.normalized_identifier() == new.object.normalized_identifier()
                && norm(&f.evidence_quote) == norm(&new.evidence_quote)
        })
        .map(|f| f.id.clone())
        .collect();
    if !dups.is_empty() {
        return Ok(Reconciliation::Bump(dups));
    }
    let Some(d) = decision else {
        return Ok(Reconciliation::Coexist);
    };
    if let Some(&index) = d.target_indexes.iter().find(|&&i| i >= slot.len()) {
        return Err(DecisionError::InvalidIndex {
            index,
            len: slot.len(),
        });
    }
    if d.confidence == Confidence::Low {
        return Ok(Reconciliation::Coexist);
    }
    let ids = || {
        d.target_indexes
            .iter()
            .map(|&i| slot[i].id.clone())
            .collect::<Vec<_>>()
    };
    match d.action {
        ReconcileAction::Coexist => Ok(Reconciliation::Coexist),
        ReconcileAction::Bump if d.target_indexes.is_empty() => Err(DecisionError::NoTarget),
        ReconcileAction::Supersede if d.target_indexes.is_empty() => Err(DecisionError::NoTarget),
        ReconcileAction::Bump => Ok(Reconciliation::Bump(ids())),
        ReconcileAction::Supersede => Ok(Reconciliation::Supersede(ids())),
    }
}

impl Reconciliation {
    /// Applies the outcome to `existing` (refresh or retire) and returns the
    /// fact to insert, if any.
    pub fn apply(
        &self,
        existing: &mut [SemanticFact],
        new: SemanticFact,
        now: DateTime<Utc>,
    ) -> Option<SemanticFact> {
        match self {
            Reconciliation::Insert | Reconciliation::Coexist => Some(new),
            Reconciliation::Bump(ids) => {
                for f in existing.iter_mut().filter(|f| ids.contains(&f.id)) {
                    f.last_referenced_at = Some(now);
                }
                None
            }
            Reconciliation::Supersede(ids) => {
                for f in existing.iter_mut().filter(|f| ids.contains(&f.id)) {
                    f.dormant_at = Some(now);
                    f.superseded_by = Some(new.id.clone());
                }
                Some(new)
            }
        }
    }
}

/// Whether an equivalent rule (normalized text) is already active.
pub fn rule_is_duplicate(rules: &[ProceduralRule], rule: &str) -> bool {
    let n = normalize_rule(rule);
    rules
        .iter()
        .any(|r| r.is_active() && normalize_rule(&r.rule) == n)
}

fn normalize_rule(rule: &str) -> String {
    normalize_space_lower(rule.trim_end_matches(['.', '!', ' ']))
}

/// What [`commit_promotion`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CommitSummary {
    /// New facts written.
    pub facts_inserted: usize,
    /// Existing facts refreshed.
    pub facts_bumped: usize,
    /// Existing facts retired.
    pub facts_superseded: usize,
    /// Rules appended.
    pub rules_added: usize,
    /// Rules skipped as duplicates.
    pub rules_skipped: usize,
    /// Existing rules retired by a replacement.
    pub rules_replaced: usize,
    /// Reconciliation questions put to the policy model.
    pub model_calls: usize,
    /// Model answers that failed, timed out or named an invalid index (the
    /// deterministic default applied: coexist / append).
    pub model_fallbacks: usize,
}

/// At most this many reconciliation questions go to the model per
/// promotion; the rest take the deterministic default.
pub const MAX_RECONCILE_MODEL_CALLS: usize = 8;

/// How a new rule meets the active rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleReconciliation {
    /// Add it.
    Append,
    /// Retire the active rule at this index and add the new one.
    Replace(usize),
    /// Write nothing; the index names the equivalent rule when known.
    Skip(Option<usize>),
}

/// Applies a model's rule decision: low confidence means append; an index
/// outside `0..len` is an error.
///
/// # Errors
/// [`DecisionError::InvalidIndex`] for a bad index,
/// [`DecisionError::NoTarget`] for a replace without one.
pub fn decide_rule(len: usize, d: &RuleDecision) -> Result<RuleReconciliation, DecisionError> {
    if let Some(index) = d.target_index.filter(|&i| i >= len) {
        return Err(DecisionError::InvalidIndex { index, len });
    }
    if d.confidence == Confidence::Low {
        return Ok(RuleReconciliation::Append);
    }
    match (d.action, d.target_index) {
        (RuleAction::Append, _) => Ok(RuleReconciliation::Append),
        (RuleAction::Skip, i) => Ok(RuleReconciliation::Skip(i)),
        (RuleAction::Replace, Some(i)) => Ok(RuleReconciliation::Replace(i)),
        (RuleAction::Replace, None) => Err(DecisionError::NoTarget),
    }
}

/// What [`add_rule`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleOutcome {
    /// Appended.
    Added,
    /// Appended, retiring the rule with this text.
    Replaced {
        /// The retired rule's text.
        retired: String,
    },
    /// Not written; an equivalent rule (this text) is active.
    Skipped {
        /// The equivalent rule's text, when known.
        existing: Option<String>,
    },
}

/// Whether and how the policy model took part in a reconciliation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ModelUse {
    /// The model was asked.
    pub called: bool,
    /// Its answer was not used (failure, timeout or invalid index).
    pub fell_back: bool,
}

/// Adds `rule` to `profile` through procedural reconciliation: an exact
/// duplicate is skipped; otherwise, when a model is given and active rules
/// exist, the model chooses append / replace / skip (low confidence →
/// append; failure or an invalid index → append). A replaced rule is retired
/// into `archived_rules`. The caller saves the profile.
pub async fn add_rule(
    profile: &mut ProceduralProfile,
    rule: ProceduralRule,
    model: Option<&dyn PolicyModel>,
    now: DateTime<Utc>,
) -> (RuleOutcome, ModelUse) {
    let mut used = ModelUse::default();
    if let Some(existing) = profile
        .active_rules()
        .find(|r| normalize_rule(&r.rule) == normalize_rule(&rule.rule))
    {
        let existing = Some(existing.rule.clone());
        return (RuleOutcome::Skipped { existing }, used);
    }
    let (decision, picked) = {
        let active: Vec<&ProceduralRule> = profile.active_rules().collect();
        let decision = match model {
            Some(m) if !active.is_empty() => {
                used.called = true;
                match m.reconcile_rule(&active, &rule).await {
                    Ok(d) => decide_rule(active.len(), &d).unwrap_or_else(|e| {
                        tracing::warn!(error = %e, "rule reconciliation answer unusable; appending");
                        used.fell_back = true;
                        RuleReconciliation::Append
                    }),
                    Err(e) => {
                        tracing::warn!(error = %e, "rule reconciliation model failed; appending");
                        used.fell_back = true;
                        RuleReconciliation::Append
                    }
                }
            }
            _ => RuleReconciliation::Append,
        };
        let picked = match decision {
            RuleReconciliation::Replace(i) | RuleReconciliation::Skip(Some(i)) => {
                active.get(i).map(|r| (r.id.clone(), r.rule.clone()))
            }
            _ => None,
        };
        (decision, picked)
    };
    match (decision, picked) {
        (RuleReconciliation::Skip(_), picked) => (
            RuleOutcome::Skipped {
                existing: picked.map(|(_, text)| text),
            },
            used,
        ),
        (RuleReconciliation::Replace(_), Some((old_id, retired))) => {
            if let Some(pos) = profile.rules.iter().position(|r| r.id == old_id) {
                let mut old = profile.rules.remove(pos);
                old.dormant_at = Some(now);
                old.superseded_by = Some(rule.id.clone());
                profile.archived_rules.push(old);
            }
            profile.rules.push(rule);
            (RuleOutcome::Replaced { retired }, used)
        }
        (RuleReconciliation::Append | RuleReconciliation::Replace(_), _) => {
            profile.rules.push(rule);
            (RuleOutcome::Added, used)
        }
    }
}

/// Reconciles and writes a promotion without a model (exact duplicates
/// bump, everything else coexists; procedural exact duplicates are
/// skipped). See [`commit_promotion_with`].
///
/// # Errors
/// [`PolicyError::Backend`] when the store fails.
pub async fn commit_promotion(
    store: &dyn MemoryStore,
    embedder: Option<&dyn Embedder>,
    owner_id: &str,
    promotion: Promotion,
    now: DateTime<Utc>,
) -> Result<CommitSummary, PolicyError> {
    commit_promotion_with(store, embedder, None, owner_id, promotion, now).await
}

/// Reconciles and writes a promotion.
///
/// Facts: an empty slot inserts; an exact duplicate (normalized identifier
/// and evidence) bumps; otherwise, with a `model`, the model chooses bump /
/// supersede / coexist (low confidence → coexist; a failure or an invalid
/// index → coexist for that fact, logged without content); without one, the
/// facts coexist. Rules go through [`add_rule`]. New facts are embedded when
/// an embedder is given (failures store no vector).
///
/// # Errors
/// [`PolicyError::Backend`] when the store fails.
pub async fn commit_promotion_with(
    store: &dyn MemoryStore,
    embedder: Option<&dyn Embedder>,
    model: Option<&dyn PolicyModel>,
    owner_id: &str,
    promotion: Promotion,
    now: DateTime<Utc>,
) -> Result<CommitSummary, PolicyError> {
    let mut summary = CommitSummary::default();
    let mut existing = active_facts(store, owner_id).await?;
    let mut touched: HashSet<String> = HashSet::new();
    let mut inserts = Vec::new();
    for fact in promotion.facts {
        let mut outcome = reconcile_semantic(&existing, &fact, None)?;
        if outcome == Reconciliation::Coexist
            && let Some(m) = model
            && summary.model_calls < MAX_RECONCILE_MODEL_CALLS
        {
            summary.model_calls += 1;
            let slot = slot_of(&existing, &fact);
            outcome = match m.reconcile_fact(&slot, &fact).await {
                Ok(reply) => match reconcile_semantic(&existing, &fact, Some(&reply.into())) {
                    Ok(o) => o,
                    Err(e) => {
                        tracing::warn!(error = %e, "fact reconciliation answer unusable; coexisting");
                        summary.model_fallbacks += 1;
                        Reconciliation::Coexist
                    }
                },
                Err(e) => {
                    tracing::warn!(error = %e, "fact reconciliation model failed; coexisting");
                    summary.model_fallbacks += 1;
                    Reconciliation::Coexist
                }
            };
        }
        match &outcome {
            Reconciliation::Bump(ids) => {
                summary.facts_bumped += ids.len();
                touched.extend(ids.iter().cloned());
            }
            Reconciliation::Supersede(ids) => {
                summary.facts_superseded += ids.len();
                touched.extend(ids.iter().cloned());
            }
            Reconciliation::Insert | Reconciliation::Coexist => {}
        }
        if let Some(new) = outcome.apply(&mut existing, fact, now) {
            existing.push(new.clone());
            inserts.push(new);
        }
    }
    let vectors = match embedder {
        Some(e) if !inserts.is_empty() => {
            let texts: Vec<String> = inserts.iter().map(|f| f.evidence_quote.clone()).collect();
            embed_for_storage(e, &texts)
                .await
                .map_err(|err| tracing::warn!(error = %err, "fact embedding failed"))
                .ok()
        }
        _ => None,
    };
    for f in existing.iter().filter(|f| touched.contains(&f.id)) {
        upsert(store, &fact_record(owner_id, f, None))
            .await
            .map_err(MemoryError::from)?;
    }
    for (i, f) in inserts.iter().enumerate() {
        let emb = vectors.as_ref().and_then(|v| v.get(i).cloned());
        upsert(store, &fact_record(owner_id, f, emb))
            .await
            .map_err(MemoryError::from)?;
        summary.facts_inserted += 1;
    }
    if !promotion.rules.is_empty() {
        let mut profile = load_profile(store, owner_id).await?;
        for rule in promotion.rules {
            let model = model.filter(|_| summary.model_calls < MAX_RECONCILE_MODEL_CALLS);
            let (outcome, used) = add_rule(&mut profile, rule, model, now).await;
            summary.model_calls += usize::from(used.called);
            summary.model_fallbacks += usize::from(used.fell_back);
            match outcome {
                RuleOutcome::Added => summary.rules_added += 1,
                RuleOutcome::Replaced { .. } => {
                    summary.rules_added += 1;
                    summary.rules_replaced += 1;
                }
                RuleOutcome::Skipped { .. } => summary.rules_skipped += 1,
            }
        }
        save_profile(store, owner_id, &profile, now).await?;
    }
    Ok(summary)
}

/// Writes a candidate the buffer admitted as [`Admission::CommitNow`](super::Admission::CommitNow)
/// immediately: only a procedural rule on an explicit memory-control request
/// gets there. The rule goes through [`add_rule`] with `WriteTiming::Immediate`.
/// Anything else is refused (`Ok(None)`): semantic facts are never written
/// immediately.
///
/// # Errors
/// [`PolicyError::Type`] for an invalid rule, [`PolicyError::Backend`] when
/// the store fails.
pub async fn commit_now(
    store: &dyn MemoryStore,
    model: Option<&dyn PolicyModel>,
    owner_id: &str,
    candidate: &MemoryCandidate,
    now: DateTime<Utc>,
) -> Result<Option<RuleOutcome>, PolicyError> {
    let CandidateBody::Procedural(p) = &candidate.body else {
        return Ok(None);
    };
    if !candidate.explicit_memory_request
        || apply_hard_clamps(candidate).action != PolicyAction::CommitNow
    {
        return Ok(None);
    }
    let rule = ProceduralRule::new(
        &p.rule,
        vec![candidate.evidence_quote.clone()],
        RuleSource::ExplicitUser,
        WriteTiming::Immediate,
        "explicit_user_request",
        now,
    )?;
    let mut profile = load_profile(store, owner_id).await?;
    let (outcome, _) = add_rule(&mut profile, rule, model, now).await;
    if !matches!(outcome, RuleOutcome::Skipped { .. }) {
        save_profile(store, owner_id, &profile, now).await?;
    }
    Ok(Some(outcome))
}
