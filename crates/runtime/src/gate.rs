//! The crisis gate: the first stage of every turn.
//!
//! **Invariants:**
//! * Every turn gets a [`GateVerdict`]; there is no "no assessment" path
//!   (fail closed: model errors fall back to the deterministic ladder).
//! * A [`GateVerdict`] can only be built here, and every specialist input
//!   carries one, so no specialist can run on an unassessed message.
//! * In hybrid mode the model can raise a level above the deterministic
//!   ladder; it may lower only a deterministic level 1 to 0, and only when
//!   it says 0 with high confidence (grief, exam stress). It never lowers 2
//!   or 3. Deterministic overrides (imminent, idiom-safe, denial after a
//!   safety question) skip the model entirely.
//! * An open crisis episode puts a floor of level 2 on the verdict
//!   (path `crisis_episode`) until the pure episode decision
//!   (`opencouch_safety::episode`) closes it. The message is still classified
//!   on its own first, and its own level wins when higher (a 3 stays 3);
//!   nothing, the model included, lowers the floor.
//! * The client never supplies a level: history comes from the server-side
//!   transcript only.

use std::sync::Arc;
use std::time::{Duration, Instant};

use opencouch_core::state::CrisisEpisode;
use opencouch_core::{
    ClassifierPath, Confidence, CrisisAssessment, CrisisLevel, Message, ModelTier, OverrideKind,
};
use opencouch_llm::ChatModel;
use opencouch_safety::episode::{self, EpisodeFacts, FollowUpDecision};

use crate::semantic::SemanticOutcome;
use serde::Deserialize;

/// The gate's decision for one message. Constructed only by [`CrisisGate`].
#[derive(Debug, Clone, PartialEq)]
pub struct GateVerdict {
    assessment: CrisisAssessment,
    path: ClassifierPath,
    override_kind: Option<OverrideKind>,
    llm_failure: bool,
    elapsed_ms: f64,
    /// The message's own level, before any episode floor.
    own_level: CrisisLevel,
    /// The episode decision, when an episode was open for this turn.
    episode: Option<FollowUpDecision>,
    /// What the semantic signal said, when it ran.
    semantic: Option<SemanticOutcome>,
    /// The deterministic layer that decided (grammar, lexicon, history, …).
    layer: &'static str,
    /// The model lowered a deterministic level 1 to 0.
    model_lowered: bool,
}

/// The reason recorded when the semantic signal (the learned layer) raised
/// the verdict.
pub const SEMANTIC_REASON: &str = opencouch_safety::classify::LEARNED_REASON;

/// The reason recorded when the episode floor raised the verdict.
pub const EPISODE_REASON: &str = "Open crisis episode: a follow-up stays on the crisis path until the person says they are safe.";

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
    /// The level of the message on its own (before the episode floor).
    pub fn own_level(&self) -> CrisisLevel {
        self.own_level
    }
    /// The episode decision when a crisis episode was open for this turn.
    pub fn episode(&self) -> Option<&FollowUpDecision> {
        self.episode.as_ref()
    }
    /// What the semantic signal said, when it ran for this message.
    pub fn semantic(&self) -> Option<&SemanticOutcome> {
        self.semantic.as_ref()
    }
    /// Which layer decided the level: `grammar`, `lexicon`, `history`,
    /// `safety_answer`, `semantic`, `model`, `crisis_episode` or `none`.
    pub fn layer(&self) -> &'static str {
        if self.path == ClassifierPath::CrisisEpisode {
            "crisis_episode"
        } else {
            self.layer
        }
    }
    /// Whether the episode floor raised the level above the message's own.
    pub fn raised_by_episode(&self) -> bool {
        self.path == ClassifierPath::CrisisEpisode
    }
    /// Whether the model lowered a deterministic level 1 to 0.
    pub fn model_lowered(&self) -> bool {
        self.model_lowered
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
            own_level: assessment.level,
            assessment,
            path: ClassifierPath::Deterministic,
            override_kind: None,
            llm_failure: false,
            elapsed_ms: 0.0,
            episode: None,
            model_lowered: false,
            semantic: None,
            layer: "none",
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

/// Deterministic classifier with its learned layer (the "semantic
/// signal", on unless turned off) and, in hybrid mode, a model classifier.
#[derive(Clone)]
pub struct CrisisGate {
    model: Option<Arc<dyn ChatModel>>,
    timeout: Duration,
    semantic: bool,
}

impl CrisisGate {
    /// A gate with no model: the deterministic classifier only.
    pub fn deterministic() -> Self {
        CrisisGate {
            model: None,
            timeout: Duration::from_secs(10),
            semantic: true,
        }
    }

    /// The same gate with the semantic signal (the learned layer) on or off
    /// (it may raise a level, never lowers one; skipped when a deterministic
    /// override decided).
    pub fn with_semantic(mut self, on: bool) -> Self {
        self.semantic = on;
        self
    }

    /// Whether the semantic signal is on.
    pub fn has_semantic(&self) -> bool {
        self.semantic
    }

    /// A hybrid gate; `timeout` bounds the model call.
    pub fn hybrid(model: Arc<dyn ChatModel>, timeout: Duration) -> Self {
        CrisisGate {
            model: Some(model),
            timeout,
            semantic: true,
        }
    }

    /// The deterministic verdict alone (rules and the learned layer, no
    /// model call): what a turn uses when it may not wait for anything.
    pub(crate) async fn assess_without_model(
        &self,
        history: &[Message],
        message: &str,
    ) -> GateVerdict {
        CrisisGate::deterministic()
            .with_semantic(self.semantic)
            .assess(history, message)
            .await
    }

    /// Classifies `message` given the server-side `history` (no episode).
    pub async fn assess(&self, history: &[Message], message: &str) -> GateVerdict {
        self.assess_in_episode(history, message, None).await
    }

    /// Classifies `message` given the server-side `history` and the
    /// thread's open crisis episode, if any: the message is classified on
    /// its own first, then the pure episode decision says whether the
    /// episode closes and which floor the verdict keeps.
    pub async fn assess_in_episode(
        &self,
        history: &[Message],
        message: &str,
        open: Option<&CrisisEpisode>,
    ) -> GateVerdict {
        // One normalization for every layer of this gate call.
        let text = opencouch_safety::Normalized::new(message);
        let mut verdict = self.classify_message(history, message, &text).await;
        let Some(ep) = open else {
            return verdict;
        };
        let facts = EpisodeFacts {
            max_level: ep.max_level,
            calm_turns: ep.calm_turns,
        };
        let decision = episode::decide_normalized(facts, &text, verdict.own_level);
        let floored = episode::apply_floor(verdict.own_level, decision.floor);
        if floored > verdict.assessment.level {
            verdict.assessment = CrisisAssessment::new(floored, Confidence::Medium, EPISODE_REASON);
            verdict.path = ClassifierPath::CrisisEpisode;
            verdict.override_kind = None;
        }
        verdict.episode = Some(decision);
        verdict
    }

    /// The message's own verdict: deterministic ladder, overrides and, in
    /// hybrid mode, the model.
    async fn classify_message(
        &self,
        history: &[Message],
        message: &str,
        text: &opencouch_safety::Normalized,
    ) -> GateVerdict {
        let started = Instant::now();
        let rules = tracing::info_span!(
            "stage",
            "otel.name" = "crisis_gate.rules",
            "opencouch.stage" = "crisis_gate.rules",
            "opencouch.learned_layer" = self.semantic,
            "opencouch.outcome" = tracing::field::Empty,
            "opencouch.level" = tracing::field::Empty,
        );
        let det = rules.in_scope(|| {
            opencouch_safety::classify_normalized(
                history,
                text,
                opencouch_safety::GateOptions {
                    learned: self.semantic,
                },
            )
        });
        rules.record("opencouch.outcome", det.layer.as_str());
        rules.record("opencouch.level", i64::from(det.assessment.level.get()));
        drop(rules);
        let layer = det.layer.as_str();
        let semantic: Option<SemanticOutcome> = det.learned.map(SemanticOutcome::from);
        let finish = |assessment: CrisisAssessment,
                      path,
                      override_kind,
                      llm_failure,
                      lowered: bool,
                      layer: &'static str| {
            let assessment = assessment.enforce_truth_table();
            GateVerdict {
                own_level: assessment.level,
                assessment,
                path,
                override_kind,
                llm_failure,
                elapsed_ms: started.elapsed().as_secs_f64() * 1000.0,
                episode: None,
                model_lowered: lowered,
                semantic,
                layer,
            }
        };
        if det.path == ClassifierPath::DeterministicOverride {
            return finish(
                det.assessment,
                det.path,
                det.override_kind,
                false,
                false,
                layer,
            );
        }
        let Some(model) = &self.model else {
            return finish(
                det.assessment,
                ClassifierPath::Deterministic,
                None,
                false,
                false,
                layer,
            );
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
                let before = det.assessment.level;
                let (merged, lowered) = merge_model(det.assessment, from_model);
                let layer = if merged.level != before {
                    "model"
                } else {
                    layer
                };
                return finish(
                    merged,
                    ClassifierPath::LlmPrimary,
                    None,
                    false,
                    lowered,
                    layer,
                );
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "crisis model failed; using deterministic ladder");
            }
            Err(_) => {
                tracing::warn!(
                    timeout_ms = self.timeout.as_millis() as u64,
                    "crisis model timed out; using deterministic ladder"
                );
            }
        }
        // The model failed or timed out: the deterministic ladder decides,
        // marked as a model failure.
        finish(
            det.assessment,
            ClassifierPath::Deterministic,
            None,
            true,
            false,
            layer,
        )
    }
}

/// Merges the deterministic and the model assessment: the model may raise
/// any level; it may lower only a deterministic 1 to 0, and only when it
/// says 0 with high confidence. Returns the merged assessment and whether
/// the model lowered the level.
pub fn merge_model(det: CrisisAssessment, model: CrisisAssessment) -> (CrisisAssessment, bool) {
    if model.level >= det.level {
        return (model, false);
    }
    let may_lower = det.level == CrisisLevel::AMBIGUOUS
        && model.level == CrisisLevel::NONE
        && model.confidence == Confidence::High;
    if may_lower {
        (model, true)
    } else {
        (det, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(level: u8, confidence: Confidence) -> CrisisAssessment {
        CrisisAssessment::new(CrisisLevel::new(level).unwrap(), confidence, "t")
    }

    #[test]
    fn the_model_lowers_only_a_one_and_only_with_high_confidence() {
        use Confidence::{High, Low, Medium};
        // (det, model level, model confidence) -> (merged, lowered)
        let rows = [
            (1, 0, High, 0, true),
            (1, 0, Medium, 1, false),
            (1, 0, Low, 1, false),
            (2, 0, High, 2, false),
            (2, 1, High, 2, false),
            (3, 0, High, 3, false),
            (3, 2, High, 3, false),
            (0, 2, Low, 2, false),
            (1, 3, Medium, 3, false),
            (0, 0, High, 0, false),
        ];
        for (det, m, conf, want, lowered) in rows {
            let (got, l) = merge_model(a(det, Medium), a(m, conf));
            assert_eq!(got.level.get(), want, "det {det} model {m} {conf:?}");
            assert_eq!(l, lowered, "det {det} model {m} {conf:?}");
        }
    }

    #[tokio::test]
    async fn the_episode_floor_holds_and_level_three_wins() {
        let gate = CrisisGate::deterministic();
        let at = chrono::Utc::now();
        let ep = CrisisEpisode::open(at, 1, CrisisLevel::EXPLICIT);
        let v = gate.assess_in_episode(&[], "whatever", Some(&ep)).await;
        assert_eq!(v.assessment().level, CrisisLevel::EXPLICIT);
        assert_eq!(v.own_level(), CrisisLevel::NONE);
        assert_eq!(v.path(), ClassifierPath::CrisisEpisode);
        assert!(v.raised_by_episode());
        assert!(
            v.assessment().needs_crisis_response,
            "flags follow the floor"
        );
        assert_eq!(v.assessment().reason, EPISODE_REASON);
        assert!(v.episode().is_some_and(|d| d.close.is_none()));

        let v = gate
            .assess_in_episode(
                &[],
                "i have the pills here and i'm going to take them all tonight",
                Some(&ep),
            )
            .await;
        assert_eq!(v.assessment().level, CrisisLevel::IMMINENT, "3 wins");
        assert_ne!(v.path(), ClassifierPath::CrisisEpisode);

        let v = gate.assess_in_episode(&[], "i'm safe now", Some(&ep)).await;
        assert!(v.episode().is_some_and(|d| d.close.is_some()));
        assert_eq!(
            v.assessment().level,
            CrisisLevel::NONE,
            "closing: own level"
        );

        let v = gate.assess(&[], "whatever").await;
        assert!(v.episode().is_none());
        assert_eq!(v.assessment().level, CrisisLevel::NONE);
    }
}
