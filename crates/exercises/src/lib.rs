//! Guided exercises: the reviewed catalog, the consent/start rules, the
//! deterministic step classifier and the deterministic renderers.
//!
//! * [`Catalog`]: 13 exercises, one TOML file each under `catalog/`,
//!   embedded at build time and validated once ([`Catalog::builtin`]).
//! * [`detect_start`] / [`active_action`]: an exercise starts only on
//!   explicit consent; while one is active, side requests route away and
//!   keep it, clarifying questions preserve it, "stop" clears it.
//! * [`classify_step`] / [`assess_step`]: the deterministic step classifier
//!   (and the hybrid shortcut); [`step_classifier_prompt`] and
//!   [`StepClassification`] for the model classifier.
//! * [`render_step`] and friends: the deterministic responder's text.
//!
//! The state machine itself ([`opencouch_core::exercise::transition`]) lives
//! in the core crate; [`Exercise::start`] and [`Exercise::transition`] feed
//! it the catalog's step data.
//!
//! **Architecture invariant:** everything here is pure. Phrase lists, step
//! texts and responder wording are data files reviewed like code; a data
//! error is caught by the tests and, at run time, degrades to "start
//! nothing / hold" instead of panicking.

mod catalog;
mod classify;
mod consent;
mod model;
mod phrases;
mod render;
mod text;

pub use catalog::{
    Catalog, CatalogError, Category, Completion, DEFAULT_JUDGED_MIN_WORDS, DURATION_RANGE,
    Exercise, ExerciseSummary, Fit, Level, RatingRange, Step,
};
pub use classify::{
    SHORT_REPLY_WORDS, StepAssessment, StepReason, assess_step, classify_step,
    classify_step_with_history, count_items, is_blank, items_found, items_remaining,
};
pub use consent::{
    ActiveAction, SideRequest, StartBasis, StartDecision, active_action, asks_to_come_back,
    detect_start,
};
pub use model::{
    ClassifiedOutcome, REPLY_END, REPLY_START, StepClassification, step_classifier_prompt,
};
pub use phrases::PhraseError;
pub use render::{
    RenderMode, context_line, render_cancel, render_completion, render_hold, render_intro,
    render_items_progress, render_offer, render_resume, render_skill_block, render_start,
    render_step, render_transition,
};

pub use opencouch_core::exercise::{
    ExerciseState, InvalidExerciseState, StepOutcome, Transition, TransitionKind, start, transition,
};

/// Checks that every embedded data file loads (catalog, phrase lists,
/// responder wording).
/// Meant for startup health checks; the tests assert it too.
pub fn check_builtin_data() -> Result<(), String> {
    Catalog::try_builtin().map_err(|e| e.to_string())?;
    phrases::Phrases::try_builtin().map_err(|e| e.to_string())?;
    render::check()
}
