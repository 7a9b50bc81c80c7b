//! The app-owned write policy.
//!
//! A turn may yield [`MemoryCandidate`]s (from a model extractor, or from
//! the deterministic [`extract_candidates`]). Whatever proposed them, the
//! local hard clamps of [`apply_hard_clamps`] run last and cannot be
//! bypassed. Held candidates wait in the [`SessionMemoryBuffer`] until
//! session end, where [`promote`] applies the support thresholds and
//! [`commit_promotion`] reconciles and writes.
//!
//! Layout (each file depends only on the ones above it):
//! - `candidate`: what a turn proposes ([`MemoryCandidate`], [`PolicyAction`]);
//! - `clamps`: the hard clamps and the per-turn extraction gate;
//! - `extract`: the deterministic extractor;
//! - `buffer`: the session buffer;
//! - `promotion`: session-end support counting and thresholds;
//! - `model`: the model contract the policy consults in hybrid mode
//!   (callers name it through the `assist` module, which re-exports it) and the
//!   reconciliation verdict shapes;
//! - `reconcile`: reconciliation and the writes of a promotion.

mod buffer;
mod candidate;
mod clamps;
mod extract;
pub(crate) mod model;
mod promotion;
mod reconcile;

pub use buffer::*;
pub use candidate::*;
pub use clamps::*;
pub use extract::*;
pub use model::{ReconcileAction, ReconcileDecision};
pub use promotion::*;
pub use reconcile::*;

#[cfg(test)]
mod tests;
