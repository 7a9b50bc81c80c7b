//! OpenCouch crisis gate.
//!
//! Every user message is classified here before anything else runs. The
//! crate is pure (no I/O, no async): its phrase families, normalization
//! tables, resource directory, gazetteer and reply texts are data files
//! embedded at build time and checked by tests.
//!
//! * [`normalize()`]: one normalization pass (Unicode, leetspeak, slang);
//!   [`Normalized`] carries its result through every layer of one gate call.
//! * [`classify()`]: the deterministic classifier, plus the override
//!   helpers [`has_imminent`] and [`idiom_safe_without_risk`] used by the
//!   hybrid gate.
//! * [`classifier_prompt`] / [`normalize_model_output`]: the pure halves of
//!   the model classifier.
//! * [`extract_location`] / [`lookup`]: the curated crisis-resource directory.
//! * [`build_response_plan`] / [`safety_question`]: what to say.
//! * [`eval`]: metrics and dataset readers for measuring the gate.

pub mod classify;
pub mod episode;
pub mod error;
pub mod eval;
pub mod grammar;
pub mod language;
pub mod learned;
pub mod normalize;
pub mod personal_plan;
pub mod plan;
pub mod prompt;
pub mod resources;
pub mod rules;

pub use classify::{
    Classification, GateOptions, Layer, classify, classify_normalized, classify_pair,
    classify_pair_with, classify_with, has_imminent, idiom_safe_without_risk,
};
pub use episode::{CloseReason, EpisodeFacts, FollowUpDecision, ReplyKind};
pub use error::{RuleTableError, SafetyError};
pub use normalize::{Normalized, normalize};
pub use plan::{CrisisResponsePlan, RiskLabel, build_response_plan, safety_question};
pub use prompt::{classifier_prompt, normalize_model_output};
pub use resources::{
    CrisisResource, LocationResult, ResourceKind, ResourceLookup, extract_location,
    international_directory, lookup,
};

/// Loads every embedded data file the gate needs (phrase families, grammar
/// lexicon and construct table, normalization tables, the learned layer, the resource directory,
/// the safety plan's wording)
/// and reports the first that fails. Called at start-up, so a broken build
/// stops the program instead of running a quieter gate.
///
/// # Errors
/// The first data file that does not load.
pub fn check_data() -> Result<(), SafetyError> {
    rules::rules().map_err(Clone::clone)?;
    grammar::lexicon().map_err(Clone::clone)?;
    grammar::rule_table().map_err(Clone::clone)?;
    normalize::load_tables()?;
    learned::LearnedGate::embedded().map_err(Clone::clone)?;
    resources::directory().map_err(Clone::clone)?;
    personal_plan::texts().map_err(Clone::clone)?;
    language::languages().map_err(Clone::clone)?;
    Ok(())
}
