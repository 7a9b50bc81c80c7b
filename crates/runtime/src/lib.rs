//! OpenCouch turn runtime: the app-owned outer shape of every turn.
//!
//! **Entry point for channels:** start a [`Host`] once ([`Host::start`]
//! from the settings) and call its [`Service`] ([`service`]): turns (whole
//! or streamed, folded for text channels by [`service::kit`]), sessions,
//! threads and history, memory, progress, export and forget-me, with the
//! service's own request, result and error types. Channels use nothing
//! else of this crate (the architecture test checks it).
//!
//! Inside, the [`Runtime`] holds the parts of one memory mode. Two drivers
//! do the I/O in order and are the only modules besides the service that
//! see it: `turn` (a turn) and `session` (session end, the sweeper). Every
//! decision is a stage that gets only its inputs and the [`ports`] it
//! needs: the crisis gate ([`gate`]), triage ([`triage`]), the pure route
//! plan ([`plan`]) and turn steps, specialists ([`specialists`],
//! [`exercise`], [`memory`]; their shared input and outcome in [`stage`]),
//! tools ([`tools`]) and our bounded tool loop ([`agent`]); a streamed
//! reply goes out through `reply`.
//!
//! The stage modules stay public for this crate's own tests, benchmarks
//! and the evaluation commands (`opencouch eval`), which test stages
//! directly; channels may not use them.

pub mod agent;
mod audit;
mod counted;
pub mod embeddings;
mod error;
pub mod exercise;
mod extraction;
mod fallback;
pub mod gate;
pub mod intent;
pub mod memory;
mod memory_undo;
mod owner_data;
pub mod plan;
mod policy_model;
pub mod ports;
mod replies;
mod reply;
pub mod retry;
mod runtime;
pub mod safety_plan;
mod semantic;
pub mod service;
mod session;
mod session_end;
pub mod session_stage;
pub mod skills;
mod spans;
pub mod specialists;
pub mod stage;
mod steps;
mod summary;
mod thread_id;
pub mod tools;
mod tracker;
pub mod triage;
mod turn;
mod users;

pub use extraction::FlushOutcome;
pub use gate::{CrisisGate, GateVerdict};
pub use ports::{MemoryPorts, ModelPort, Ports};
pub use runtime::{
    Runtime, RuntimeError, RuntimeOptions, check_embedded_data, model_from_settings, open_stores,
};
pub use service::{Host, HostOptions, Service, ServiceError};
