//! OpenCouch memory layer.
//!
//! Three layers scoped by owner (user id, else thread id): semantic facts,
//! episodic session arcs and the procedural profile ([`types`]). Around
//! them:
//! - [`retrieval`]: per-turn hybrid retrieval (token recall + embeddings,
//!   RRF k=60), first-turn catch-up, diagnostics;
//! - [`policy`]: the app-owned write policy (hard clamps, small-talk gate,
//!   deterministic extractor, session buffer, promotion, reconciliation);
//! - [`assist`]: the model side of the write policy in hybrid mode (the
//!   [`assist::PolicyModel`] contract and the validation of what it proposes);
//! - [`control`]: the memory-control service shared by chat, API and voice
//!   (prepare → confirm/cancel deletions, the 9 tools, the intent gate);
//! - `embed_local` (feature `local-embeddings`): all-MiniLM-L6-v2 on CPU;
//! - [`eval`]: LoCoMo recall@k evaluation.
//!
//! Records are kept in the store crate's [`opencouch_store::MemoryStore`]
//! as its [`opencouch_store::MemoryRecord`] (one record type, one storage
//! trait); [`backend`] encodes the layers as those records.

pub mod assist;
pub mod backend;
pub mod control;
#[cfg(feature = "local-embeddings")]
pub mod embed_local;
pub mod eval;
mod lexicon;
pub mod policy;
pub mod retrieval;
pub mod text;
pub mod types;

pub use backend::MemoryError;
pub use retrieval::{
    EmbedError, Embedder, IndexCache, RetrievalPath, RetrievalRequest, TurnMemory,
    WorkingMemoryEntry, retrieve, retrieve_cached,
};
pub use types::{
    ApproachContext, EntityRef, EntityType, FactCategory, MemoryKind, MoodArc, Predicate,
    ProceduralProfile, ProceduralRule, RuleSource, SemanticFact, SessionArc, TypeError,
    WriteTiming, owner_id,
};
