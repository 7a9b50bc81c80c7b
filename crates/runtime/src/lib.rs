//! OpenCouch turn runtime: the app-owned outer shape of every turn.
//!
//! Entry points: channels call the [`Service`] ([`Runtime::service`]); the
//! [`Runtime`] holds the parts. Two drivers do the I/O in order and are the
//! only modules besides the service that see the runtime: [`turn`] (a turn)
//! and [`session`] (session end, the sweeper). Every decision is a stage
//! that gets only its inputs and the [`ports`] it needs: the crisis gate
//! ([`gate`]), triage ([`triage`]), the pure route plan ([`plan`]) and turn
//! steps ([`steps`]), specialists ([`specialists`], [`exercise`], [`memory`];
//! their shared input and outcome in [`stage`]), tools ([`tools`]) and our
//! bounded tool loop ([`agent`]); a streamed reply goes out through
//! [`reply`].

pub mod agent;
pub mod audit;
pub mod embeddings;
mod error;
pub mod exercise;
pub mod extraction;
mod fallback;
pub mod gate;
pub mod intent;
pub mod memory;
pub mod owner_data;
pub mod plan;
pub mod policy_model;
pub mod ports;
pub mod reply;
pub mod runtime;
pub mod semantic;
pub mod service;
pub mod session;
pub mod session_end;
pub mod specialists;
pub mod stage;
mod steps;
pub mod summary;
pub mod thread_id;
pub mod tools;
pub mod triage;
pub mod turn;

pub use extraction::FlushOutcome;
pub use gate::{CrisisGate, GateVerdict};
pub use ports::{MemoryPorts, ModelPort, Ports};
pub use reply::TurnStream;
pub use runtime::{Runtime, RuntimeError, RuntimeOptions, model_from_settings, open_stores};
pub use service::{Service, ServiceError};
pub use session::FeedbackSource;
pub use session_end::{EndSessionOutcome, SessionSummary};
