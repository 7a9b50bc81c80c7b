//! The persistence seam of the memory layer.
//!
//! [`MemoryBackend`] is a small owner-scoped record store; the runtime adapts
//! the real store crate to it with a thin adapter. [`InMemoryBackend`] is the
//! reference implementation used in tests, incognito-free local runs and
//! evaluation.

use std::collections::HashMap;
use std::sync::RwLock;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::types::{MemoryKind, ProceduralProfile, SemanticFact, SessionArc};

/// The id of the one procedural record of an owner.
pub const PROFILE_RECORD_ID: &str = "profile";

/// A vector embedding stored with a record, with the model that made it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredEmbedding {
    /// The vector.
    pub vector: Vec<f32>,
    /// Embedding model id.
    pub model: String,
    /// Dimension (equals `vector.len()` when well formed).
    pub dim: usize,
}

/// One stored memory record, scoped by (owner_id, kind).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryRecord {
    /// Record key, unique within its namespace.
    pub id: String,
    /// Owner (user id, else thread id).
    pub owner_id: String,
    /// Layer.
    pub kind: MemoryKind,
    /// Fact category, when the record is a fact.
    pub category: Option<String>,
    /// The typed record as JSON.
    pub value: Value,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Last time retrieval used the record (`None` when never), as the
    /// record itself says.
    pub last_referenced_at: Option<DateTime<Utc>>,
    /// When the record went dormant (a superseded or retired fact), as the
    /// record itself says; dormant records are kept but never recalled.
    pub dormant_at: Option<DateTime<Utc>>,
    /// Visible to its owner.
    pub user_visible: bool,
    /// Optional embedding of the record's primary text.
    pub embedding: Option<StoredEmbedding>,
}

/// A failure of the record store. Never carries record content.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    /// The store could not be reached or failed.
    #[error("memory store unavailable: {0}")]
    Unavailable(String),
    /// A stored value could not be decoded as its type.
    #[error("stored {kind} record could not be decoded")]
    Decode {
        /// Layer of the bad record.
        kind: MemoryKind,
    },
}

/// An owner-scoped record store. Object safe; `list` returns records in
/// insertion order (retrieval breaks ties by it).
#[async_trait]
pub trait MemoryBackend: Send + Sync {
    /// All records of one namespace, in insertion order.
    async fn list(
        &self,
        owner_id: &str,
        kind: MemoryKind,
    ) -> Result<Vec<MemoryRecord>, BackendError>;
    /// Inserts a record, or replaces the record with the same
    /// (owner, kind, id) in place (keeping its position).
    async fn put(&self, record: MemoryRecord) -> Result<(), BackendError>;
    /// Replaces an existing record; returns false when it does not exist.
    async fn update(&self, record: MemoryRecord) -> Result<bool, BackendError>;
    /// Deletes a record; returns false when it did not exist.
    async fn delete(
        &self,
        owner_id: &str,
        kind: MemoryKind,
        id: &str,
    ) -> Result<bool, BackendError>;
    /// A counter that changes on every write to the namespace, by any
    /// process, or `None` when the backend keeps none (then nothing built
    /// from the namespace may be cached).
    async fn revision(
        &self,
        owner_id: &str,
        kind: MemoryKind,
    ) -> Result<Option<u64>, BackendError> {
        let _ = (owner_id, kind);
        Ok(None)
    }
}

type Namespace = (String, MemoryKind);

/// A process-local [`MemoryBackend`].
#[derive(Debug, Default)]
pub struct InMemoryBackend {
    inner: RwLock<HashMap<Namespace, Vec<MemoryRecord>>>,
    revisions: RwLock<HashMap<Namespace, u64>>,
}

impl InMemoryBackend {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
}

fn poisoned() -> BackendError {
    BackendError::Unavailable("in-memory store lock poisoned".to_owned())
}

impl InMemoryBackend {
    fn bump(&self, owner_id: &str, kind: MemoryKind) -> Result<(), BackendError> {
        let mut revs = self.revisions.write().map_err(|_| poisoned())?;
        *revs.entry((owner_id.to_owned(), kind)).or_insert(0) += 1;
        Ok(())
    }
}

#[async_trait]
impl MemoryBackend for InMemoryBackend {
    async fn list(
        &self,
        owner_id: &str,
        kind: MemoryKind,
    ) -> Result<Vec<MemoryRecord>, BackendError> {
        let map = self.inner.read().map_err(|_| poisoned())?;
        Ok(map
            .get(&(owner_id.to_owned(), kind))
            .cloned()
            .unwrap_or_default())
    }

    async fn put(&self, record: MemoryRecord) -> Result<(), BackendError> {
        let mut map = self.inner.write().map_err(|_| poisoned())?;
        let list = map
            .entry((record.owner_id.clone(), record.kind))
            .or_default();
        let (owner, kind) = (record.owner_id.clone(), record.kind);
        match list.iter_mut().find(|r| r.id == record.id) {
            Some(slot) => *slot = record,
            None => list.push(record),
        }
        self.bump(&owner, kind)
    }

    async fn update(&self, record: MemoryRecord) -> Result<bool, BackendError> {
        let mut map = self.inner.write().map_err(|_| poisoned())?;
        let Some(list) = map.get_mut(&(record.owner_id.clone(), record.kind)) else {
            return Ok(false);
        };
        let (owner, kind) = (record.owner_id.clone(), record.kind);
        match list.iter_mut().find(|r| r.id == record.id) {
            Some(slot) => {
                *slot = record;
                self.bump(&owner, kind)?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    async fn delete(
        &self,
        owner_id: &str,
        kind: MemoryKind,
        id: &str,
    ) -> Result<bool, BackendError> {
        let mut map = self.inner.write().map_err(|_| poisoned())?;
        let Some(list) = map.get_mut(&(owner_id.to_owned(), kind)) else {
            return Ok(false);
        };
        let before = list.len();
        list.retain(|r| r.id != id);
        let deleted = list.len() != before;
        if deleted {
            self.bump(owner_id, kind)?;
        }
        Ok(deleted)
    }

    async fn revision(
        &self,
        owner_id: &str,
        kind: MemoryKind,
    ) -> Result<Option<u64>, BackendError> {
        let revs = self.revisions.read().map_err(|_| poisoned())?;
        Ok(Some(
            revs.get(&(owner_id.to_owned(), kind)).copied().unwrap_or(0),
        ))
    }
}

fn to_value<T: Serialize>(v: &T) -> Value {
    // Serializing these plain structs cannot fail (no maps with non-string
    // keys, no custom serializers); fall back to Null defensively.
    serde_json::to_value(v).unwrap_or(Value::Null)
}

impl MemoryRecord {
    /// Wraps a semantic fact.
    pub fn from_fact(
        owner_id: &str,
        fact: &SemanticFact,
        embedding: Option<StoredEmbedding>,
    ) -> Self {
        MemoryRecord {
            id: fact.id.clone(),
            owner_id: owner_id.to_owned(),
            kind: MemoryKind::Semantic,
            category: Some(fact.category.as_str().to_owned()),
            value: to_value(fact),
            created_at: fact.created_at,
            last_referenced_at: fact.last_referenced_at,
            dormant_at: fact.dormant_at,
            user_visible: fact.user_visible,
            embedding,
        }
    }

    /// Wraps a session arc.
    pub fn from_arc(owner_id: &str, arc: &SessionArc, embedding: Option<StoredEmbedding>) -> Self {
        MemoryRecord {
            id: arc.id.clone(),
            owner_id: owner_id.to_owned(),
            kind: MemoryKind::Episodic,
            category: None,
            value: to_value(arc),
            created_at: arc.created_at,
            last_referenced_at: arc.last_referenced_at,
            dormant_at: None,
            user_visible: arc.user_visible,
            embedding,
        }
    }

    /// Wraps the procedural profile (one record per owner).
    pub fn from_profile(owner_id: &str, profile: &ProceduralProfile, now: DateTime<Utc>) -> Self {
        MemoryRecord {
            id: PROFILE_RECORD_ID.to_owned(),
            owner_id: owner_id.to_owned(),
            kind: MemoryKind::Procedural,
            category: None,
            value: to_value(profile),
            created_at: now,
            last_referenced_at: None,
            dormant_at: None,
            user_visible: true,
            embedding: None,
        }
    }

    /// Decodes a semantic record.
    ///
    /// # Errors
    /// [`BackendError::Decode`] when the value is not a fact.
    pub fn as_fact(&self) -> Result<SemanticFact, BackendError> {
        serde_json::from_value(self.value.clone()).map_err(|_| BackendError::Decode {
            kind: MemoryKind::Semantic,
        })
    }

    /// Decodes an episodic record.
    ///
    /// # Errors
    /// [`BackendError::Decode`] when the value is not an arc.
    pub fn as_arc(&self) -> Result<SessionArc, BackendError> {
        serde_json::from_value(self.value.clone()).map_err(|_| BackendError::Decode {
            kind: MemoryKind::Episodic,
        })
    }
}

/// Loads the procedural profile of an owner (the default when absent).
///
/// # Errors
/// A [`BackendError`] from the store or a profile that does not decode.
pub async fn load_profile(
    backend: &dyn MemoryBackend,
    owner_id: &str,
) -> Result<ProceduralProfile, BackendError> {
    let records = backend.list(owner_id, MemoryKind::Procedural).await?;
    match records.iter().find(|r| r.id == PROFILE_RECORD_ID) {
        Some(r) => serde_json::from_value(r.value.clone()).map_err(|_| BackendError::Decode {
            kind: MemoryKind::Procedural,
        }),
        None => Ok(ProceduralProfile::default()),
    }
}

/// Stores the procedural profile of an owner.
///
/// # Errors
/// A [`BackendError`] from the store.
pub async fn save_profile(
    backend: &dyn MemoryBackend,
    owner_id: &str,
    profile: &ProceduralProfile,
    now: DateTime<Utc>,
) -> Result<(), BackendError> {
    backend
        .put(MemoryRecord::from_profile(owner_id, profile, now))
        .await
}

/// The active semantic facts of an owner, in insertion order (undecodable
/// records are skipped with a warning).
///
/// # Errors
/// A [`BackendError`] from the store.
pub async fn active_facts(
    backend: &dyn MemoryBackend,
    owner_id: &str,
) -> Result<Vec<SemanticFact>, BackendError> {
    let records = backend.list(owner_id, MemoryKind::Semantic).await?;
    Ok(decode_all(&records, MemoryRecord::as_fact)
        .into_iter()
        .filter(SemanticFact::is_active)
        .collect())
}

/// The visible session arcs of an owner, in insertion order.
///
/// # Errors
/// A [`BackendError`] from the store.
pub async fn visible_arcs(
    backend: &dyn MemoryBackend,
    owner_id: &str,
) -> Result<Vec<SessionArc>, BackendError> {
    let records = backend.list(owner_id, MemoryKind::Episodic).await?;
    Ok(decode_all(&records, MemoryRecord::as_arc)
        .into_iter()
        .filter(|a| a.user_visible)
        .collect())
}

fn decode_all<T>(
    records: &[MemoryRecord],
    f: impl Fn(&MemoryRecord) -> Result<T, BackendError>,
) -> Vec<T> {
    records
        .iter()
        .filter_map(|r| match f(r) {
            Ok(v) => Some(v),
            Err(e) => {
                tracing::warn!(error = %e, "skipping undecodable memory record");
                None
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(owner: &str, id: &str, n: i64) -> MemoryRecord {
        MemoryRecord {
            id: id.into(),
            owner_id: owner.into(),
            kind: MemoryKind::Semantic,
            category: None,
            value: Value::from(n),
            created_at: Utc::now(),
            last_referenced_at: None,
            dormant_at: None,
            user_visible: true,
            embedding: None,
        }
    }

    #[tokio::test]
    async fn crud_is_owner_scoped_and_ordered() {
        let b = InMemoryBackend::new();
        b.put(rec("u1", "a", 1)).await.unwrap();
        b.put(rec("u1", "b", 2)).await.unwrap();
        b.put(rec("u2", "a", 9)).await.unwrap();
        b.put(rec("u1", "a", 3)).await.unwrap();
        let l = b.list("u1", MemoryKind::Semantic).await.unwrap();
        assert_eq!(
            l.iter()
                .map(|r| (r.id.as_str(), r.value.as_i64()))
                .collect::<Vec<_>>(),
            vec![("a", Some(3)), ("b", Some(2))]
        );
        assert!(b.list("u1", MemoryKind::Episodic).await.unwrap().is_empty());
        assert!(!b.update(rec("u1", "zz", 0)).await.unwrap());
        assert!(b.update(rec("u1", "b", 5)).await.unwrap());
        assert!(b.delete("u1", MemoryKind::Semantic, "a").await.unwrap());
        assert!(!b.delete("u1", MemoryKind::Semantic, "a").await.unwrap());
        assert_eq!(b.list("u2", MemoryKind::Semantic).await.unwrap().len(), 1);
    }

    #[tokio::test]
    async fn profile_defaults_and_roundtrips() {
        let b = InMemoryBackend::new();
        let p = load_profile(&b, "u").await.unwrap();
        assert!(!p.proactive_recall_enabled);
        let p2 = ProceduralProfile {
            proactive_recall_enabled: true,
            ..p
        };
        save_profile(&b, "u", &p2, Utc::now()).await.unwrap();
        assert!(
            load_profile(&b, "u")
                .await
                .unwrap()
                .proactive_recall_enabled
        );
    }
}
