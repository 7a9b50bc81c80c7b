//! [`IndexCache`]: each owner's prepared semantic index ([`IndexedLayer`])
//! kept between turns and reused only while the namespace revision is
//! unchanged.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use opencouch_store::{MemoryRecord, MemoryStore};
use serde::{Deserialize, Serialize};

use super::index::MemoryIndex;
use crate::backend::MemoryError;
use crate::types::MemoryKind;

/// The records of one semantic namespace with their prepared index.
pub struct IndexedLayer {
    /// The records, in insertion order (hit indexes point here).
    pub records: Vec<MemoryRecord>,
    /// The index over them.
    pub index: MemoryIndex,
}

impl IndexedLayer {
    fn build(records: Vec<MemoryRecord>, model: Option<(&str, usize)>, dense_weight: f64) -> Self {
        let index = MemoryIndex::build(
            records.iter().map(|r| (&r.value, r.embedding.as_ref())),
            model,
        )
        .with_dense_weight(dense_weight);
        IndexedLayer { records, index }
    }
}

/// How the semantic index of a turn was obtained (the
/// `semantic_index_cache` diagnostic).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheOutcome {
    /// The cached index matched the namespace revision.
    Hit,
    /// Built from the store and cached.
    Miss,
    /// Built from the store, not cached (no cache given).
    Off,
}

impl CacheOutcome {
    /// The diagnostic spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            CacheOutcome::Hit => "hit",
            CacheOutcome::Miss => "miss",
            CacheOutcome::Off => "off",
        }
    }
}

struct CacheEntry {
    revision: u64,
    model: Option<(String, usize)>,
    dense_weight: f64,
    layer: Arc<IndexedLayer>,
    last_used: u64,
}

#[derive(Default)]
struct CacheInner {
    entries: HashMap<String, CacheEntry>,
    records: usize,
    tick: u64,
}

/// Prepared semantic-layer indexes per owner, kept between turns so a turn
/// costs one revision read plus the search instead of loading and indexing
/// every fact. An entry is used only while the namespace revision
/// ([`MemoryStore::revision`]) is unchanged, so any write or deletion, by
/// any process sharing the store, is seen on the next turn. Bounded by a
/// total record count; the least recently used owners go first.
pub struct IndexCache {
    inner: Mutex<CacheInner>,
    max_records: usize,
}

/// Default bound of [`IndexCache`]: records held across all owners.
pub const INDEX_CACHE_MAX_RECORDS: usize = 200_000;

/// Namespaces at least this large are indexed on the blocking pool.
const BLOCKING_BUILD_MIN_RECORDS: usize = 256;

impl Default for IndexCache {
    fn default() -> Self {
        Self::new(INDEX_CACHE_MAX_RECORDS)
    }
}

impl IndexCache {
    /// A cache holding at most `max_records` records over all owners.
    pub fn new(max_records: usize) -> Self {
        IndexCache {
            inner: Mutex::new(CacheInner::default()),
            max_records,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CacheInner> {
        // Entries are replaced whole; a poisoned lock holds no half-written entry.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Owners currently cached.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops an owner's entry (e.g. after a bulk clear).
    pub fn invalidate(&self, owner_id: &str) {
        let mut inner = self.lock();
        if let Some(e) = inner.entries.remove(owner_id) {
            inner.records -= e.layer.records.len();
        }
    }

    fn get(
        &self,
        owner_id: &str,
        revision: u64,
        model: Option<(&str, usize)>,
        dense_weight: f64,
    ) -> Option<Arc<IndexedLayer>> {
        let mut inner = self.lock();
        inner.tick += 1;
        let tick = inner.tick;
        let e = inner.entries.get_mut(owner_id)?;
        let same_model = e.model.as_ref().map(|(m, d)| (m.as_str(), *d)) == model;
        if e.revision != revision || !same_model || e.dense_weight != dense_weight {
            return None;
        }
        e.last_used = tick;
        Some(e.layer.clone())
    }

    fn insert(
        &self,
        owner_id: &str,
        revision: u64,
        model: Option<(&str, usize)>,
        dense_weight: f64,
        layer: Arc<IndexedLayer>,
    ) {
        let size = layer.records.len();
        let mut inner = self.lock();
        if let Some(old) = inner.entries.remove(owner_id) {
            inner.records -= old.layer.records.len();
        }
        if size > self.max_records {
            return;
        }
        while inner.records + size > self.max_records {
            let Some(oldest) = inner
                .entries
                .iter()
                .min_by_key(|(_, e)| e.last_used)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            if let Some(e) = inner.entries.remove(&oldest) {
                inner.records -= e.layer.records.len();
            }
        }
        inner.tick += 1;
        let last_used = inner.tick;
        inner.records += size;
        inner.entries.insert(
            owner_id.to_owned(),
            CacheEntry {
                revision,
                model: model.map(|(m, d)| (m.to_owned(), d)),
                dense_weight,
                layer,
                last_used,
            },
        );
    }
}

async fn build_layer(
    records: Vec<MemoryRecord>,
    model: Option<(&str, usize)>,
    dense_weight: f64,
) -> IndexedLayer {
    if records.len() < BLOCKING_BUILD_MIN_RECORDS {
        return IndexedLayer::build(records, model, dense_weight);
    }
    let owned = model.map(|(m, d)| (m.to_owned(), d));
    tokio::task::spawn_blocking(move || {
        IndexedLayer::build(
            records,
            owned.as_ref().map(|(m, d)| (m.as_str(), *d)),
            dense_weight,
        )
    })
    .await
    .unwrap_or_else(|e| {
        tracing::error!(error = %e, "semantic index build task failed; searching no facts this turn");
        IndexedLayer::build(Vec::new(), None, 1.0)
    })
}

/// The semantic layer of an owner, from the cache when it is current.
pub(super) async fn semantic_layer(
    store: &dyn MemoryStore,
    cache: Option<&IndexCache>,
    owner_id: &str,
    model: Option<(&str, usize)>,
    dense_weight: f64,
) -> Result<(Arc<IndexedLayer>, CacheOutcome), MemoryError> {
    let Some(cache) = cache else {
        // No cache: index afresh.
        let records = store.list(owner_id, MemoryKind::Semantic).await?;
        let layer = build_layer(records, model, dense_weight).await;
        return Ok((Arc::new(layer), CacheOutcome::Off));
    };
    // The revision is read before the records: a write in between makes
    // the cached entry look stale next time, never current when it is not.
    let revision = store.revision(owner_id, MemoryKind::Semantic).await?;
    if let Some(layer) = cache.get(owner_id, revision, model, dense_weight) {
        return Ok((layer, CacheOutcome::Hit));
    }
    let records = store.list(owner_id, MemoryKind::Semantic).await?;
    let layer = Arc::new(build_layer(records, model, dense_weight).await);
    cache.insert(owner_id, revision, model, dense_weight, layer.clone());
    Ok((layer, CacheOutcome::Miss))
}
