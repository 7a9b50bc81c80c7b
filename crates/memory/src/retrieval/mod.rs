//! Per-turn hybrid retrieval: token recall + embedding cosine fused by
//! Reciprocal Rank Fusion, with a first-turn catch-up arc.
//!
//! The ranking math is pure ([`lexical_score`], [`cosine`], [`rrf_fuse`],
//! [`MemoryIndex`]); [`retrieve`] wires it to the store's
//! [`MemoryStore`](opencouch_store::MemoryStore) and an optional [`Embedder`].
//!
//! Layout (each file depends only on the ones above it):
//! - `embed`: the [`Embedder`] contract;
//! - `scoring`: the pure ranking math (token recall, cosine, RRF);
//! - `index`: [`MemoryIndex`], BM25F postings plus quantized vectors;
//! - `cache`: [`IndexCache`], prepared semantic indexes kept between turns;
//! - `search`: the layer search and the per-turn [`retrieve`].

mod cache;
mod embed;
mod index;
mod scoring;
mod search;

pub use cache::*;
pub use embed::*;
pub use index::*;
pub use scoring::*;
pub use search::*;

#[cfg(test)]
mod tests;
