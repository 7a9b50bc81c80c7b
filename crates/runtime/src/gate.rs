//! The crisis gate: the first stage of every turn.
//!
//! **Invariants:**
//! * Every turn gets a [`GateVerdict`]; there is no "no assessment" path
//!   (fail closed: model errors fall back to the deterministic ladder).
//! * A [`GateVerdict`] can only be built here, and every specialist input
//!   carries one, so no specialist can run on an unassessed message.
//! * In hybrid mode the model can raise a level above the deterministic
//!   ladder but never lower it; deterministic overrides (imminent,
//!   idiom-safe, denial after a safety question) skip the model entirely.
//! * The client never supplies a level: history comes from the server-side
//!   transcript only.

use std::sync::Arc;
use std::time::{Duration, Instant};

use opencouch_core::{ClassifierPath, CrisisAssessment, Message, ModelTier, OverrideKind};
use opencouch_llm::ChatModel;
use serde::Deserialize;

/// The gate's decision for one message. Constructed only by [`CrisisGate`].
#[derive(Debug, Clone, PartialEq)]
pub struct GateVerdict {
    assessment: CrisisAssessment,
    path: ClassifierPath,
    override_kind: Option<OverrideKind>,
    llm_failure: bool,
    elapsed_ms: f64,
}

impl GateVerdict {
    pub fn assessment(&self) -> &CrisisAssessment {
        &self.assessment
    }
    pub fn path(&self) -> ClassifierPath {
        self.path
    }
    pub fn override_kind(&self) -> Option<OverrideKind> {
        self.override_kind
    }
    pub fn llm_failure(&self) -> bool {
        self.llm_failure
    }
    pub fn elapsed_ms(&self) -> f64 {
        self.elapsed_ms
    }
    /// `crisis`, `check`, `distress` or `normal` for the routing trace.
    pub fn decision(&self) -> &'static str {
        match self.assessment.level.get() {
            3 | 2 => "crisis",
            1 => "check",
            _ => "normal",
        }
    }

    /// Builds a verdict for tests of downstream code that need one. Not
    /// available outside tests so production code must go through the gate.
    #[cfg(any(test, feature = "test-util"))]
    pub fn for_tests(assessment: CrisisAssessment) -> Self {
        GateVerdict {
            assessment,
            path: ClassifierPath::Deterministic,
            override_kind: None,
            llm_failure: false,
            elapsed_ms: 0.0,
        }
    }
}

/// Raw model output before normalization (lenient on purpose: the model may
/// say level 9 or confidence "unknown").
#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct ModelCrisisOutput {
    /// 0 none, 1 ambiguous, 2 explicit ideation or self-harm, 3 imminent.
    level: i64,
    /// low, medium or high.
    confidence: String,
    /// One short sentence, without quoting the user.
    reason: String,
}

/// Deterministic classifier plus, in hybrid mode, a model classifier.
#[derive(Clone)]
pub struct CrisisGate {
    model: Option<Arc<dyn ChatModel>>,
    timeout: Duration,
}

impl CrisisGate {
    /// A gate with no model: the deterministic classifier only.
    pub fn deterministic() -> Self {
        CrisisGate {
            model: None,
            timeout: Duration::from_secs(10),
        }
    }

    /// A hybrid gate; `timeout` bounds the model call.
    pub fn hybrid(model: Arc<dyn ChatModel>, timeout: Duration) -> Self {
        CrisisGate {
            model: Some(model),
            timeout,
        }
    }

    /// Classifies `message` given the server-side `history`.
    pub async fn assess(&self, history: &[Message], message: &str) -> GateVerdict {
        let started = Instant::now();
        let det = opencouch_safety::classify(history, message);
        let finish = |assessment: CrisisAssessment, path, override_kind, llm_failure| GateVerdict {
            assessment: assessment.enforce_truth_table(),
            path,
            override_kind,
            llm_failure,
            elapsed_ms: started.elapsed().as_secs_f64() * 1000.0,
        };
        // Deterministic overrides never consult the model.
        if det.path == ClassifierPath::DeterministicOverride {
            return finish(det.assessment, det.path, det.override_kind, false);
        }
        let Some(model) = &self.model else {
            return finish(det.assessment, ClassifierPath::Deterministic, None, false);
        };
        let (system, user) = opencouch_safety::classifier_prompt(history, message);
        let call = opencouch_llm::structured::<ModelCrisisOutput, _>(
            model.as_ref(),
            ModelTier::Control,
            &system,
            &user,
        );
        match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok(out)) => {
                let from_model = opencouch_safety::normalize_model_output(
                    out.level,
                    &out.confidence,
                    &out.reason,
                );
                // The model may raise but never lower the deterministic level.
                let merged = if det.assessment.level > from_model.level {
                    det.assessment
                } else {
                    from_model
                };
                finish(merged, ClassifierPath::LlmPrimary, None, false)
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "crisis model failed; using deterministic ladder");
                finish(det.assessment, ClassifierPath::Deterministic, None, true)
            }
            Err(_) => {
                tracing::warn!(
                    timeout_ms = self.timeout.as_millis() as u64,
                    "crisis model timed out; using deterministic ladder"
                );
                finish(det.assessment, ClassifierPath::Deterministic, None, true)
            }
        }
    }
}
