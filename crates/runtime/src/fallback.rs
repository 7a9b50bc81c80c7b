//! The model path of a specialist turn and its deterministic fallback: the
//! one place that decides when the deterministic reply is used (no model, a
//! failed model call, an unusable model reply) and records a model failure.

use opencouch_core::Diagnostics;
use opencouch_llm::{ChatModel, LlmError};

/// Why the deterministic reply is used.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Fallback<'e> {
    /// No model is configured (deterministic mode).
    NoModel,
    /// The model call failed; the failure is already recorded.
    Failed(&'e LlmError),
    /// The model answered, but the model path found the reply unusable (and
    /// recorded why).
    Unusable,
}

/// How a failed model call is recorded in the turn diagnostics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FailureNote {
    /// `openai_sdk_fallback_reason`, `openai_response_llm_override = false`
    /// and a warning log (crisis, clarification, therapeutic and grounded
    /// lookup turns).
    Specialist,
    /// `openai_sdk_fallback_reason` only (guided-exercise and memory-control
    /// turns).
    Reason,
}

impl FailureNote {
    fn record(self, diag: &mut Diagnostics, e: &LlmError) {
        diag.set("openai_sdk_fallback_reason", e.kind());
        if self == FailureNote::Specialist {
            diag.set("openai_response_llm_override", false);
            // The target the specialists logged under before this helper.
            tracing::warn!(
                target: "opencouch_runtime::specialists",
                error = %e,
                "specialist model failed; deterministic reply used"
            );
        }
    }
}

/// What the model path of a turn produced.
#[derive(Debug)]
pub(crate) enum ModelReply<T> {
    /// No model is configured.
    NoModel,
    /// A usable reply.
    Reply(T),
    /// The model answered, but the model path found the reply unusable.
    Unusable,
    /// The model call failed.
    Failed(LlmError),
}

/// Runs `model_path` with the model when one is configured. The model path
/// returns `Ok(None)` for a reply it finds unusable (after recording why in
/// `diag`); an error is a failed model call.
pub(crate) async fn model_reply<'m, 'd, T, F>(
    model: Option<&'m dyn ChatModel>,
    diag: &'d mut Diagnostics,
    model_path: impl FnOnce(&'m dyn ChatModel, &'d mut Diagnostics) -> F,
) -> ModelReply<T>
where
    F: Future<Output = Result<Option<T>, LlmError>>,
{
    let Some(model) = model else {
        return ModelReply::NoModel;
    };
    match model_path(model, diag).await {
        Ok(Some(reply)) => ModelReply::Reply(reply),
        Ok(None) => ModelReply::Unusable,
        Err(e) => ModelReply::Failed(e),
    }
}

impl<T> ModelReply<T> {
    /// The model's reply, or else `deterministic`'s (a failed call is
    /// recorded in `diag` first, as `note` says).
    pub(crate) fn or_deterministic(
        self,
        diag: &mut Diagnostics,
        note: FailureNote,
        deterministic: impl FnOnce(&mut Diagnostics, Fallback<'_>) -> T,
    ) -> T {
        match self {
            ModelReply::Reply(reply) => reply,
            ModelReply::NoModel => deterministic(diag, Fallback::NoModel),
            ModelReply::Unusable => deterministic(diag, Fallback::Unusable),
            ModelReply::Failed(e) => {
                note.record(diag, &e);
                deterministic(diag, Fallback::Failed(&e))
            }
        }
    }
}
