//! OpenCouch turn runtime: the app-owned outer shape of every turn.
//!
//! Entry point: [`Runtime`] ([`Runtime::run_turn`], [`Runtime::run_turn_stream`],
//! [`Runtime::end_session`]). The pipeline reads top to bottom in
//! [`turn`]; the crisis gate is in [`gate`], triage in [`triage`], the pure
//! route plan in [`plan`], specialists in [`specialists`], [`exercise`] and
//! [`memory`], tools in [`tools`], and our bounded tool loop in [`agent`].

pub mod agent;
pub mod embeddings;
pub mod exercise;
pub mod extraction;
mod fallback;
pub mod gate;
pub mod memory;
pub mod plan;
pub mod policy_model;
pub mod runtime;
pub mod semantic;
pub mod service;
pub mod session;
pub mod specialists;
pub mod summary;
pub mod thread_id;
pub mod tools;
pub mod triage;
pub mod turn;

pub use extraction::FlushOutcome;
pub use gate::{CrisisGate, GateVerdict};
pub use runtime::{Runtime, RuntimeError, RuntimeOptions, model_from_settings, open_stores};
pub use service::{Service, ServiceError};
pub use session::{EndSessionOutcome, FeedbackSource, SessionSummary};
