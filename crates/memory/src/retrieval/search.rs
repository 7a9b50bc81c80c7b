//! The layer search ([`search_layers`]: active facts and recent session
//! arcs, plus the first-turn catch-up) and the per-turn [`retrieve`], which
//! adds the procedural profile and the diagnostics.

use std::time::Instant;

use chrono::{DateTime, Duration, Utc};
use opencouch_core::Diagnostics;
use opencouch_store::{MemoryRecord, MemoryStore};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::cache::{CacheOutcome, IndexCache, semantic_layer};
use super::embed::Embedder;
use super::index::{MemoryIndex, SearchMode};
use super::scoring::primary_text;
use crate::backend::{MemoryError, decode_arc, decode_fact, load_profile};
use crate::types::{MemoryKind, SemanticFact, SessionArc};

/// Semantic candidates searched per list.
pub const SEMANTIC_SEARCH_LIMIT: usize = 20;
/// Active semantic facts kept.
pub const SEMANTIC_KEEP: usize = 5;
/// Episodic arcs kept.
pub const EPISODIC_LIMIT: usize = 2;
/// Episodic arcs older than this are not searched.
pub const EPISODIC_MAX_AGE_DAYS: i64 = 30;

/// How a retrieval ran (the `retrieval_path` diagnostic).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RetrievalPath {
    /// Token recall and embeddings fused by RRF.
    HybridRrf,
    /// Token recall only (no embedder configured).
    TokenRecall,
    /// Token recall because the embedding call failed.
    TokenRecallAfterEmbedError,
    /// Both stores empty: nothing searched, no embedding call.
    SkippedEmptyStore,
}

impl RetrievalPath {
    /// The diagnostic spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            RetrievalPath::HybridRrf => "hybrid_rrf",
            RetrievalPath::TokenRecall => "token_recall",
            RetrievalPath::TokenRecallAfterEmbedError => "token_recall_after_embed_error",
            RetrievalPath::SkippedEmptyStore => "skipped_empty_store",
        }
    }
}

/// One retrieved memory, ready for the prompt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkingMemoryEntry {
    /// Layer (semantic or episodic).
    pub kind: MemoryKind,
    /// Record key.
    pub key: String,
    /// The record's primary text (evidence quote or arc summary).
    pub text: String,
    /// Fusion score (0 for a catch-up that did not match the query).
    pub score: f64,
    /// True for the first-turn "last time we talked" arc.
    pub is_catch_up: bool,
    /// The full typed record as JSON.
    pub value: Value,
}

/// What retrieval hands to the specialist for one turn.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct TurnMemory {
    /// Semantic then episodic entries (catch-up arc first among episodic).
    pub working_memory: Vec<WorkingMemoryEntry>,
    /// Active procedural rules, always applied.
    pub procedural_rules: Vec<String>,
    /// Whether past sessions may be brought up unprompted.
    pub proactive_recall_enabled: bool,
    /// A one-line human-readable summary of what was retrieved (no content).
    pub summary: String,
    /// Retrieval diagnostics.
    pub diagnostics: Diagnostics,
}

/// One retrieval request.
#[derive(Debug, Clone)]
pub struct RetrievalRequest<'a> {
    /// Namespace owner.
    pub owner_id: &'a str,
    /// The user's message.
    pub query: &'a str,
    /// True on the session's first turn (transcript length 1): adds the catch-up arc.
    pub first_turn_of_session: bool,
    /// The current time (arc age filter).
    pub now: DateTime<Utc>,
}

/// A retrieval failure (the store failed; embedding failures degrade instead).
#[derive(Debug, thiserror::Error)]
pub enum RetrievalError {
    /// The store failed.
    #[error(transparent)]
    Backend(#[from] MemoryError),
}

/// Semantic + episodic search results before the procedural profile.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerHits {
    /// Semantic entries (active facts only).
    pub semantic: Vec<WorkingMemoryEntry>,
    /// Episodic entries (arcs ≤30 days old; catch-up first when requested).
    pub episodic: Vec<WorkingMemoryEntry>,
    /// How the search ran.
    pub path: RetrievalPath,
    /// Semantic store size.
    pub semantic_store_size: usize,
    /// Episodic store size.
    pub episodic_store_size: usize,
    /// Whether the semantic index came from the cache.
    pub semantic_index_cache: CacheOutcome,
}

fn entry(kind: MemoryKind, r: &MemoryRecord, score: f64, is_catch_up: bool) -> WorkingMemoryEntry {
    WorkingMemoryEntry {
        kind,
        key: r.id.clone(),
        text: primary_text(&r.value).unwrap_or_default().to_owned(),
        score,
        is_catch_up,
        value: r.value.clone(),
    }
}

/// Searches the semantic and episodic layers of an owner (no index cache).
///
/// # Errors
/// [`RetrievalError::Backend`] when the store fails.
pub async fn search_layers(
    store: &dyn MemoryStore,
    embedder: Option<&dyn Embedder>,
    req: &RetrievalRequest<'_>,
    semantic_keep: usize,
    episodic_keep: usize,
) -> Result<LayerHits, RetrievalError> {
    search_layers_cached(store, embedder, None, req, semantic_keep, episodic_keep).await
}

/// Searches the semantic and episodic layers of an owner.
///
/// `semantic_keep` bounds the kept active facts, `episodic_keep` the arcs.
/// Store loads run in parallel; the semantic index comes from `cache` when
/// it is current; the query is embedded at most once, and not at all when
/// both stores are empty.
///
/// # Errors
/// [`RetrievalError::Backend`] when the store fails.
pub async fn search_layers_cached(
    store: &dyn MemoryStore,
    embedder: Option<&dyn Embedder>,
    cache: Option<&IndexCache>,
    req: &RetrievalRequest<'_>,
    semantic_keep: usize,
    episodic_keep: usize,
) -> Result<LayerHits, RetrievalError> {
    let model = embedder.map(|e| (e.model_id(), e.dimension()));
    let dense_weight = embedder.map_or(1.0, |e| e.rrf_weight());
    let (semantic, episodic) = tokio::join!(
        semantic_layer(store, cache, req.owner_id, model, dense_weight),
        store.list(req.owner_id, MemoryKind::Episodic)
    );
    let ((semantic, cache_outcome), episodic) = (semantic?, episodic.map_err(MemoryError::from)?);
    let (semantic_store_size, episodic_store_size) = (semantic.records.len(), episodic.len());
    if semantic.records.is_empty() && episodic.is_empty() {
        return Ok(LayerHits {
            semantic: Vec::new(),
            episodic: Vec::new(),
            path: RetrievalPath::SkippedEmptyStore,
            semantic_store_size,
            episodic_store_size,
            semantic_index_cache: cache_outcome,
        });
    }

    let (query_vector, path) = match embedder {
        None => (None, RetrievalPath::TokenRecall),
        Some(e) => match e.embed(&[req.query.to_owned()]).await {
            Ok(mut v) if v.len() == 1 => (v.pop(), RetrievalPath::HybridRrf),
            Ok(_) => {
                tracing::warn!("embedder returned the wrong number of vectors; using token recall");
                (None, RetrievalPath::TokenRecallAfterEmbedError)
            }
            Err(err) => {
                tracing::warn!(error = %err, "query embedding failed; using token recall");
                (None, RetrievalPath::TokenRecallAfterEmbedError)
            }
        },
    };
    let mode = if query_vector.is_some() {
        SearchMode::Hybrid
    } else {
        SearchMode::Token
    };

    // Semantic: search 20, keep the first `semantic_keep` active facts.
    let sem_hits = semantic.index.search(
        req.query,
        query_vector.as_deref(),
        mode,
        SEMANTIC_SEARCH_LIMIT,
    );
    let semantic_entries: Vec<WorkingMemoryEntry> = sem_hits
        .into_iter()
        .filter(|h| {
            decode_fact(&semantic.records[h.index]).is_ok_and(|f: SemanticFact| f.is_active())
        })
        .take(semantic_keep)
        .map(|h| {
            entry(
                MemoryKind::Semantic,
                &semantic.records[h.index],
                h.score,
                false,
            )
        })
        .collect();

    // Episodic: only visible arcs at most 30 days old are searched.
    let cutoff = req.now - Duration::days(EPISODIC_MAX_AGE_DAYS);
    let arcs: Vec<(&MemoryRecord, SessionArc)> = episodic
        .iter()
        .filter_map(|r| decode_arc(r).ok().map(|a| (r, a)))
        .filter(|(_, a)| a.user_visible)
        .collect();
    let recent: Vec<&(&MemoryRecord, SessionArc)> =
        arcs.iter().filter(|(_, a)| a.ended_at >= cutoff).collect();
    let epi_index = MemoryIndex::build(
        recent.iter().map(|(r, _)| (&r.value, r.embedding.as_ref())),
        model,
    )
    .with_dense_weight(dense_weight);
    let epi_hits = epi_index.search(req.query, query_vector.as_deref(), mode, episodic_keep);
    let mut episodic_entries: Vec<WorkingMemoryEntry> = epi_hits
        .iter()
        .map(|h| entry(MemoryKind::Episodic, recent[h.index].0, h.score, false))
        .collect();

    if req.first_turn_of_session {
        let latest = arcs
            .iter()
            .enumerate()
            .max_by(|(ia, (_, a)), (ib, (_, b))| {
                a.ended_at
                    .cmp(&b.ended_at)
                    .then_with(|| a.created_at.cmp(&b.created_at))
                    .then_with(|| ia.cmp(ib))
            });
        if let Some((_, (record, arc))) = latest {
            let same = |e: &WorkingMemoryEntry| {
                e.value.get("summary").and_then(Value::as_str) == Some(arc.summary.as_str())
                    && e.value.get("primary_themes")
                        == serde_json::to_value(&arc.primary_themes).ok().as_ref()
            };
            match episodic_entries.iter().position(same) {
                Some(pos) => {
                    let mut e = episodic_entries.remove(pos);
                    e.is_catch_up = true;
                    episodic_entries.insert(0, e);
                }
                None => episodic_entries.insert(0, entry(MemoryKind::Episodic, record, 0.0, true)),
            }
        }
    }

    Ok(LayerHits {
        semantic: semantic_entries,
        episodic: episodic_entries,
        path,
        semantic_store_size,
        episodic_store_size,
        semantic_index_cache: cache_outcome,
    })
}

/// The per-turn memory context: semantic and episodic search (in parallel),
/// then the procedural profile, with diagnostics.
///
/// # Errors
/// [`RetrievalError::Backend`] when the store fails. Embedding failures
/// degrade to token recall.
pub async fn retrieve(
    store: &dyn MemoryStore,
    embedder: Option<&dyn Embedder>,
    req: &RetrievalRequest<'_>,
) -> Result<TurnMemory, RetrievalError> {
    retrieve_cached(store, embedder, None, req).await
}

/// [`retrieve`] with the semantic index taken from `cache` when current.
///
/// # Errors
/// [`RetrievalError::Backend`] when the store fails. Embedding failures
/// degrade to token recall.
pub async fn retrieve_cached(
    store: &dyn MemoryStore,
    embedder: Option<&dyn Embedder>,
    cache: Option<&IndexCache>,
    req: &RetrievalRequest<'_>,
) -> Result<TurnMemory, RetrievalError> {
    let started = Instant::now();
    let hits =
        search_layers_cached(store, embedder, cache, req, SEMANTIC_KEEP, EPISODIC_LIMIT).await?;
    let profile = load_profile(store, req.owner_id).await?;
    let procedural_rules: Vec<String> = profile.active_rules().map(|r| r.rule.clone()).collect();

    let mut diagnostics = Diagnostics::new();
    diagnostics.set("load_memory_ms", started.elapsed().as_secs_f64() * 1000.0);
    diagnostics.set("semantic_hits", hits.semantic.len());
    diagnostics.set("semantic_store_size", hits.semantic_store_size);
    diagnostics.set("episodic_hits", hits.episodic.len());
    diagnostics.set("episodic_store_size", hits.episodic_store_size);
    diagnostics.set("procedural_count", procedural_rules.len());
    diagnostics.set("proactive_recall", profile.proactive_recall_enabled);
    diagnostics.set("retrieval_path", hits.path.as_str());
    diagnostics.set("semantic_index_cache", hits.semantic_index_cache.as_str());

    let catch_up = hits.episodic.iter().any(|e| e.is_catch_up);
    let summary = summary_line(
        hits.semantic.len(),
        hits.episodic.len(),
        procedural_rules.len(),
        catch_up,
    );
    let mut working_memory = hits.semantic;
    working_memory.extend(hits.episodic);
    Ok(TurnMemory {
        working_memory,
        procedural_rules,
        proactive_recall_enabled: profile.proactive_recall_enabled,
        summary,
        diagnostics,
    })
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// "Recalled 2 saved facts, 1 past-session summary (catch-up) and 1 style rule."
pub fn summary_line(facts: usize, arcs: usize, rules: usize, catch_up: bool) -> String {
    if facts + arcs + rules == 0 {
        return "No saved memory was relevant to this turn.".to_owned();
    }
    format!(
        "Recalled {}, {}{} and {}.",
        plural(facts, "saved fact", "saved facts"),
        plural(arcs, "past-session summary", "past-session summaries"),
        if catch_up {
            " (including a catch-up on the last session)"
        } else {
            ""
        },
        plural(rules, "style rule", "style rules"),
    )
}
