//! How the memory layers are kept in the store: the typed records (facts,
//! arcs, the procedural profile) as the store crate's [`MemoryRecord`]s in
//! a [`MemoryStore`], and the reads and writes every part of this crate
//! shares (profile load/save, active facts, visible arcs, insert-or-replace).
//!
//! There is one record type and one storage trait, the store's; this
//! module only encodes and decodes the layer documents. Tests and
//! evaluation use the store's in-memory backend.

use chrono::{DateTime, Utc};
use opencouch_store::{Embedding, MemoryRecord, MemoryStore, StoreError};
use serde::Serialize;
use serde_json::Value;

use crate::retrieval::{Embedder, embed_for_storage};
use crate::types::{MemoryKind, ProceduralProfile, SemanticFact, SessionArc};

/// The id of the one procedural record of an owner.
pub const PROFILE_RECORD_ID: &str = "profile";

/// A failure reading or writing memory. Never carries record content.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// The store could not be reached or failed.
    #[error("memory store unavailable: {0}")]
    Store(#[from] StoreError),
    /// A stored value could not be decoded as its type.
    #[error("stored {kind} record could not be decoded")]
    Decode {
        /// Layer of the bad record.
        kind: MemoryKind,
    },
}

/// Inserts `record`, or replaces the record with the same (owner, kind, id)
/// in place (keeping its insertion position).
///
/// # Errors
/// The store's error.
pub async fn upsert(store: &dyn MemoryStore, record: &MemoryRecord) -> Result<(), StoreError> {
    if store.update(record).await? {
        return Ok(());
    }
    store.put(record).await
}

fn to_value<T: Serialize>(v: &T) -> Value {
    // Serializing these plain structs cannot fail (no maps with non-string
    // keys, no custom serializers); fall back to Null defensively.
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// A semantic fact as a store record. The fact's own times fill the
/// columns: `last_referenced_at` is when retrieval last used it (`None`
/// when never), `dormant_at` when it went dormant.
pub fn fact_record(
    owner_id: &str,
    fact: &SemanticFact,
    embedding: Option<Embedding>,
) -> MemoryRecord {
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

/// A session arc as a store record.
pub fn arc_record(owner_id: &str, arc: &SessionArc, embedding: Option<Embedding>) -> MemoryRecord {
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

/// The procedural profile as a store record (one per owner).
pub fn profile_record(
    owner_id: &str,
    profile: &ProceduralProfile,
    now: DateTime<Utc>,
) -> MemoryRecord {
    MemoryRecord::new(
        owner_id,
        MemoryKind::Procedural,
        PROFILE_RECORD_ID,
        to_value(profile),
        now,
    )
}

/// Decodes a semantic record.
///
/// # Errors
/// [`MemoryError::Decode`] when the value is not a fact.
pub fn decode_fact(record: &MemoryRecord) -> Result<SemanticFact, MemoryError> {
    serde_json::from_value(record.value.clone()).map_err(|_| MemoryError::Decode {
        kind: MemoryKind::Semantic,
    })
}

/// Decodes an episodic record.
///
/// # Errors
/// [`MemoryError::Decode`] when the value is not an arc.
pub fn decode_arc(record: &MemoryRecord) -> Result<SessionArc, MemoryError> {
    serde_json::from_value(record.value.clone()).map_err(|_| MemoryError::Decode {
        kind: MemoryKind::Episodic,
    })
}

/// Loads the procedural profile of an owner (the default when absent).
///
/// # Errors
/// A [`MemoryError`] from the store or a profile that does not decode.
pub async fn load_profile(
    store: &dyn MemoryStore,
    owner_id: &str,
) -> Result<ProceduralProfile, MemoryError> {
    match store
        .get(owner_id, MemoryKind::Procedural, PROFILE_RECORD_ID)
        .await?
    {
        Some(r) => serde_json::from_value(r.value).map_err(|_| MemoryError::Decode {
            kind: MemoryKind::Procedural,
        }),
        None => Ok(ProceduralProfile::default()),
    }
}

/// Stores the procedural profile of an owner (insert or replace).
///
/// # Errors
/// A [`MemoryError`] from the store.
pub async fn save_profile(
    store: &dyn MemoryStore,
    owner_id: &str,
    profile: &ProceduralProfile,
    now: DateTime<Utc>,
) -> Result<(), MemoryError> {
    upsert(store, &profile_record(owner_id, profile, now)).await?;
    Ok(())
}

/// Stores a session arc (insert or replace), with the embedding of its
/// summary when an embedder is given (an embedding failure stores no
/// vector).
///
/// # Errors
/// A [`MemoryError`] from the store.
pub async fn save_arc(
    store: &dyn MemoryStore,
    embedder: Option<&dyn Embedder>,
    owner_id: &str,
    arc: &SessionArc,
) -> Result<(), MemoryError> {
    let embedding = match embedder {
        Some(e) => embed_for_storage(e, std::slice::from_ref(&arc.summary))
            .await
            .ok()
            .and_then(|mut v| v.pop()),
        None => None,
    };
    upsert(store, &arc_record(owner_id, arc, embedding)).await?;
    Ok(())
}

/// The active semantic facts of an owner, in insertion order (undecodable
/// records are skipped with a warning).
///
/// # Errors
/// A [`MemoryError`] from the store.
pub async fn active_facts(
    store: &dyn MemoryStore,
    owner_id: &str,
) -> Result<Vec<SemanticFact>, MemoryError> {
    let records = store.list(owner_id, MemoryKind::Semantic).await?;
    Ok(decode_all(&records, decode_fact)
        .into_iter()
        .filter(SemanticFact::is_active)
        .collect())
}

/// The visible session arcs of an owner, in insertion order.
///
/// # Errors
/// A [`MemoryError`] from the store.
pub async fn visible_arcs(
    store: &dyn MemoryStore,
    owner_id: &str,
) -> Result<Vec<SessionArc>, MemoryError> {
    let records = store.list(owner_id, MemoryKind::Episodic).await?;
    Ok(decode_all(&records, decode_arc)
        .into_iter()
        .filter(|a| a.user_visible)
        .collect())
}

fn decode_all<T>(
    records: &[MemoryRecord],
    f: impl Fn(&MemoryRecord) -> Result<T, MemoryError>,
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
    use opencouch_store::MemoryBackend as InMemoryStore;

    use super::*;

    fn rec(owner: &str, id: &str, n: i64) -> MemoryRecord {
        MemoryRecord::new(owner, MemoryKind::Semantic, id, Value::from(n), Utc::now())
    }

    #[tokio::test]
    async fn upsert_is_owner_scoped_and_keeps_order() {
        let b = InMemoryStore::new();
        upsert(&b, &rec("u1", "a", 1)).await.unwrap();
        upsert(&b, &rec("u1", "b", 2)).await.unwrap();
        upsert(&b, &rec("u2", "a", 9)).await.unwrap();
        upsert(&b, &rec("u1", "a", 3)).await.unwrap();
        let l = b.list("u1", MemoryKind::Semantic).await.unwrap();
        assert_eq!(
            l.iter()
                .map(|r| (r.id.as_str(), r.value.as_i64()))
                .collect::<Vec<_>>(),
            vec![("a", Some(3)), ("b", Some(2))]
        );
        assert!(b.list("u1", MemoryKind::Episodic).await.unwrap().is_empty());
        assert!(!b.update(&rec("u1", "zz", 0)).await.unwrap());
        assert!(b.update(&rec("u1", "b", 5)).await.unwrap());
        assert!(b.delete("u1", MemoryKind::Semantic, "a").await.unwrap());
        assert!(!b.delete("u1", MemoryKind::Semantic, "a").await.unwrap());
        assert_eq!(b.list("u2", MemoryKind::Semantic).await.unwrap().len(), 1);
    }

    #[tokio::test]
    async fn profile_defaults_and_roundtrips() {
        let b = InMemoryStore::new();
        let p = load_profile(&b, "u").await.unwrap();
        assert!(!p.proactive_recall_enabled);
        let p2 = ProceduralProfile {
            proactive_recall_enabled: true,
            ..p
        };
        save_profile(&b, "u", &p2, Utc::now()).await.unwrap();
        // Saved twice: the second save replaces the first.
        save_profile(&b, "u", &p2, Utc::now()).await.unwrap();
        assert!(
            load_profile(&b, "u")
                .await
                .unwrap()
                .proactive_recall_enabled
        );
        assert_eq!(b.count("u", MemoryKind::Procedural).await.unwrap(), 1);
    }

    #[tokio::test]
    async fn undecodable_records_are_an_error_without_content() {
        let b = InMemoryStore::new();
        let bad = MemoryRecord::new(
            "u",
            MemoryKind::Procedural,
            PROFILE_RECORD_ID,
            Value::from("secret words"),
            Utc::now(),
        );
        b.put(&bad).await.unwrap();
        let e = load_profile(&b, "u").await.unwrap_err();
        assert!(matches!(
            e,
            MemoryError::Decode {
                kind: MemoryKind::Procedural
            }
        ));
        assert!(!e.to_string().contains("secret"));
        let fact = MemoryRecord::new("u", MemoryKind::Semantic, "f", Value::from(1), Utc::now());
        b.put(&fact).await.unwrap();
        assert!(active_facts(&b, "u").await.unwrap().is_empty());
    }
}
