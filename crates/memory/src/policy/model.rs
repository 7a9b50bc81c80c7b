//! The model side of the write policy as a contract: [`PolicyModel`], the
//! structured-output shapes it answers with and the reconciliation verdicts.
//!
//! The policy consults it at promotion and for explicit preferences; the
//! runtime implements it with a chat model. Callers name the contract
//! through the `assist` module, which re-exports it and validates what a
//! model proposes (the fact verdicts are re-exported from `policy`). It
//! lives here so that the policy never depends on `assist`.

use async_trait::async_trait;
use opencouch_core::{Confidence, Message};
use serde::{Deserialize, Serialize};

use super::candidate::PolicyAction;
use crate::types::{EntityRef, FactCategory, Predicate, ProceduralRule, SemanticFact};

/// A model call of the write policy failed. Carries no content.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyModelError {
    /// The model could not be reached or answered with an error (the
    /// client's error kind, e.g. `connection`, `http`).
    #[error("policy model unavailable ({0})")]
    Unavailable(&'static str),
    /// The call took longer than its bound.
    #[error("policy model timed out")]
    Timeout,
    /// The reply did not fit the schema, even after the repair attempt.
    #[error("policy model reply was invalid")]
    Invalid,
}

impl PolicyModelError {
    /// A short code for diagnostics and logs.
    pub fn code(&self) -> &'static str {
        match self {
            PolicyModelError::Unavailable(kind) => kind,
            PolicyModelError::Timeout => "timeout",
            PolicyModelError::Invalid => "invalid_output",
        }
    }
}

/// The model side of the write policy.
#[async_trait]
pub trait PolicyModel: Send + Sync {
    /// Proposes fact and rule candidates for the current message
    /// (`history` is earlier context of the session, never evidence).
    async fn extract(
        &self,
        history: &[Message],
        message: &str,
    ) -> Result<ExtractionReply, PolicyModelError>;

    /// bump / supersede / coexist for `new` against the active facts of its
    /// slot (indexes are 0-based into `slot`).
    async fn reconcile_fact(
        &self,
        slot: &[&SemanticFact],
        new: &SemanticFact,
    ) -> Result<FactReconcileReply, PolicyModelError>;

    /// append / replace / skip for `new` against the active rules (indexes
    /// are 0-based into `active`).
    async fn reconcile_rule(
        &self,
        active: &[&ProceduralRule],
        new: &ProceduralRule,
    ) -> Result<RuleDecision, PolicyModelError>;

    /// Rewrites an explicit preference as one second-person rule.
    async fn normalize_preference(&self, text: &str) -> Result<PreferenceReply, PolicyModelError>;
}

/// A reconciliation verdict proposed by a model (or a test).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReconcileDecision {
    /// bump, supersede or coexist.
    pub action: ReconcileAction,
    /// 0-based indexes into the slot's active records.
    #[serde(default)]
    pub target_indexes: Vec<usize>,
    /// The decider's confidence; low means coexist.
    pub confidence: Confidence,
}

/// The reconciliation actions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReconcileAction {
    /// The new fact confirms existing ones: refresh them, write nothing new.
    Bump,
    /// The new fact replaces existing ones: they go dormant.
    Supersede,
    /// Keep both.
    Coexist,
}

// ---------------------------------------------------------------------------
// Structured-output shapes
// ---------------------------------------------------------------------------

/// One proposed fact.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProposedFact {
    /// Category.
    pub category: FactCategory,
    /// Subject (usually the user).
    pub subject: EntityRef,
    /// Predicate.
    pub predicate: Predicate,
    /// Object.
    pub object: EntityRef,
    /// The person's exact words from the current message (≤280 characters).
    pub evidence_quote: String,
    /// 0–1.
    pub confidence: f32,
    /// Proposed policy action.
    pub action: PolicyAction,
}

/// One proposed response rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProposedRule {
    /// Second-person rule (≤280 characters).
    pub rule: String,
    /// Stated directly (true) or inferred (false).
    pub explicit: bool,
    /// The person's exact words from the current message (≤280 characters).
    pub evidence_quote: String,
    /// Following it would weaken safety behaviour.
    pub safety_conflict: bool,
    /// 0–1.
    pub confidence: f32,
    /// Proposed policy action.
    pub action: PolicyAction,
}

/// The extractor's reply.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ExtractionReply {
    /// Fact candidates.
    pub facts: Vec<ProposedFact>,
    /// Rule candidates.
    pub rules: Vec<ProposedRule>,
}

/// The fact reconciler's reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FactReconcileReply {
    /// bump, supersede or coexist.
    pub action: ReconcileAction,
    /// 0-based indexes into the slot.
    pub target_indexes: Vec<usize>,
    /// Low means coexist.
    pub confidence: Confidence,
}

impl From<FactReconcileReply> for ReconcileDecision {
    fn from(r: FactReconcileReply) -> Self {
        ReconcileDecision {
            action: r.action,
            target_indexes: r.target_indexes,
            confidence: r.confidence,
        }
    }
}

/// The procedural reconciliation actions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RuleAction {
    /// Add the new rule.
    Append,
    /// Retire the rule at `target_index` and add the new one.
    Replace,
    /// An equivalent rule exists; write nothing.
    Skip,
}

/// The rule reconciler's reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RuleDecision {
    /// append, replace or skip.
    pub action: RuleAction,
    /// 0-based index into the active rules (replace / skip).
    pub target_index: Option<usize>,
    /// Low means append.
    pub confidence: Confidence,
}

/// The preference writer's reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PreferenceReply {
    /// One second-person rule.
    pub rule: String,
}

/// A scripted [`PolicyModel`] for unit tests: each method pops its next
/// scripted answer (an empty script is an unavailable model).
#[cfg(test)]
pub(crate) mod testing {
    use std::collections::VecDeque;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    type Script<T> = Mutex<VecDeque<Result<T, PolicyModelError>>>;

    #[derive(Default)]
    pub(crate) struct ScriptedPolicyModel {
        pub(crate) extract: Script<ExtractionReply>,
        pub(crate) facts: Script<FactReconcileReply>,
        pub(crate) rules: Script<RuleDecision>,
        pub(crate) prefs: Script<PreferenceReply>,
        pub(crate) calls: AtomicUsize,
    }

    fn pop<T>(s: &Script<T>, calls: &AtomicUsize) -> Result<T, PolicyModelError> {
        calls.fetch_add(1, Ordering::SeqCst);
        s.lock()
            .expect("script lock")
            .pop_front()
            .unwrap_or(Err(PolicyModelError::Unavailable("script_empty")))
    }

    impl ScriptedPolicyModel {
        pub(crate) fn calls(&self) -> usize {
            self.calls.load(Ordering::SeqCst)
        }
    }

    #[async_trait]
    impl PolicyModel for ScriptedPolicyModel {
        async fn extract(
            &self,
            _history: &[Message],
            _message: &str,
        ) -> Result<ExtractionReply, PolicyModelError> {
            pop(&self.extract, &self.calls)
        }
        async fn reconcile_fact(
            &self,
            _slot: &[&SemanticFact],
            _new: &SemanticFact,
        ) -> Result<FactReconcileReply, PolicyModelError> {
            pop(&self.facts, &self.calls)
        }
        async fn reconcile_rule(
            &self,
            _active: &[&ProceduralRule],
            _new: &ProceduralRule,
        ) -> Result<RuleDecision, PolicyModelError> {
            pop(&self.rules, &self.calls)
        }
        async fn normalize_preference(
            &self,
            _text: &str,
        ) -> Result<PreferenceReply, PolicyModelError> {
            pop(&self.prefs, &self.calls)
        }
    }
}
