//! Records on SQL: the [`MemoryStore`], [`CrisisLog`], [`FeedbackStore`]
//! and [`VoiceFinalizationStore`] implementations for every [`SqlBackend`].

use async_trait::async_trait;
use chrono::{DateTime, NaiveDate, Utc};

use super::{Arg, SqlBackend, SqlRow, Stmt, conflict, parse_enum, to_i64, to_u64};
use crate::error::{StoreError, StoreResult};
use crate::records::{
    CrisisRecord, DailyCrisisCount, Embedding, FeedbackRecord, MemoryKind, MemoryRecord,
    ResponsePath, VoiceFinalization, VoiceFinalizationState,
};
use crate::traits::{CrisisLog, FeedbackStore, MemoryStore, VoiceFinalizationStore};

fn memory_from_row(row: &impl SqlRow) -> StoreResult<MemoryRecord> {
    const T: &str = "memory_records";
    let dim = row.opt_int4("embedding_dim")?;
    // The vector is only read when the record names its model.
    let embedding = match row.opt_text("embedding_model")? {
        Some(model) => match row.floats(T, "embedding")? {
            Some(values) => {
                if dim != i64::try_from(values.len()).ok() {
                    return Err(StoreError::corrupt(T, "embedding_dim"));
                }
                Some(Embedding { model, values })
            }
            None => None,
        },
        None => None,
    };
    Ok(MemoryRecord {
        id: row.text("id")?,
        owner_id: row.text("owner_id")?,
        kind: parse_enum(&row.text("namespace_kind")?, T, "namespace_kind")?,
        category: row.opt_text("category")?,
        value: row.json(T, "value")?,
        created_at: row.ts(T, "created_at")?,
        last_referenced_at: row.opt_ts(T, "last_referenced_at")?,
        dormant_at: row.opt_ts(T, "dormant_at")?,
        user_visible: row.flag("user_visible")?,
        embedding,
    })
}

/// Binds `r`'s columns from `category` on, in table order.
fn bind_memory_columns<'a>(stmt: Stmt<'a>, r: &'a MemoryRecord) -> Stmt<'a> {
    let embedding = r.embedding.as_ref();
    stmt.bind(&r.category)
        .bind(&r.value)
        .bind(r.created_at)
        .bind(r.last_referenced_at)
        .bind(r.dormant_at)
        .bind(r.user_visible)
        .bind(Arg::Floats(embedding.map(|e| e.values.as_slice())))
        .bind(Arg::Int4(
            embedding.map(|e| e.dim() as i64),
            "embedding too long",
        ))
        .bind(embedding.map(|e| e.model.as_str()))
}

#[async_trait]
impl<B: SqlBackend> MemoryStore for B {
    async fn put(&self, r: &MemoryRecord) -> StoreResult<()> {
        let stmt = Stmt::new(
            "INSERT INTO memory_records (id, owner_id, namespace_kind, category, value, created_at, \
             last_referenced_at, dormant_at, user_visible, embedding, embedding_dim, embedding_model) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
        )
        .bind(&r.id)
        .bind(&r.owner_id)
        .bind(r.kind.as_str());
        self.execute(bind_memory_columns(stmt, r))
            .await
            .map_err(|e| conflict(e, "memory record"))?;
        Ok(())
    }

    async fn get(
        &self,
        owner_id: &str,
        kind: MemoryKind,
        id: &str,
    ) -> StoreResult<Option<MemoryRecord>> {
        let stmt = Stmt::new(
            "SELECT * FROM memory_records WHERE owner_id = $1 AND namespace_kind = $2 AND id = $3",
        )
        .bind(owner_id)
        .bind(kind.as_str())
        .bind(id);
        let row = self.fetch_optional(stmt).await?;
        row.as_ref().map(memory_from_row).transpose()
    }

    async fn list(&self, owner_id: &str, kind: MemoryKind) -> StoreResult<Vec<MemoryRecord>> {
        let stmt = Stmt::new(
            "SELECT * FROM memory_records WHERE owner_id = $1 AND namespace_kind = $2 ORDER BY insertion_order",
        )
        .bind(owner_id)
        .bind(kind.as_str());
        let rows = self.fetch_all(stmt).await?;
        rows.iter().map(memory_from_row).collect()
    }

    async fn update(&self, r: &MemoryRecord) -> StoreResult<bool> {
        let stmt = Stmt::new(
            "UPDATE memory_records SET category = $4, value = $5, created_at = $6, last_referenced_at = $7, \
             dormant_at = $8, user_visible = $9, embedding = $10, embedding_dim = $11, embedding_model = $12 \
             WHERE id = $1 AND owner_id = $2 AND namespace_kind = $3",
        )
        .bind(&r.id)
        .bind(&r.owner_id)
        .bind(r.kind.as_str());
        Ok(self.execute(bind_memory_columns(stmt, r)).await? > 0)
    }

    async fn delete(&self, owner_id: &str, kind: MemoryKind, id: &str) -> StoreResult<bool> {
        let stmt = Stmt::new(
            "DELETE FROM memory_records WHERE owner_id = $1 AND namespace_kind = $2 AND id = $3",
        )
        .bind(owner_id)
        .bind(kind.as_str())
        .bind(id);
        Ok(self.execute(stmt).await? > 0)
    }

    async fn count(&self, owner_id: &str, kind: MemoryKind) -> StoreResult<u64> {
        let stmt = Stmt::new(
            "SELECT COUNT(*) AS n FROM memory_records WHERE owner_id = $1 AND namespace_kind = $2",
        )
        .bind(owner_id)
        .bind(kind.as_str());
        let n = self.fetch_one(stmt).await?.int("n")?;
        to_u64(n, "memory_records", "count")
    }

    async fn revision(&self, owner_id: &str, kind: MemoryKind) -> StoreResult<u64> {
        let stmt = Stmt::new(
            "SELECT revision FROM memory_revisions WHERE owner_id = $1 AND namespace_kind = $2",
        )
        .bind(owner_id)
        .bind(kind.as_str());
        let n = match self.fetch_optional(stmt).await? {
            Some(row) => row.int("revision")?,
            None => 0,
        };
        to_u64(n, "memory_revisions", "revision")
    }
}

#[async_trait]
impl<B: SqlBackend> CrisisLog for B {
    async fn append(&self, record: &CrisisRecord) -> StoreResult<bool> {
        let r = record.clone().normalized();
        let value = B::document(&r, "crisis record is not JSON")?;
        let stmt = Stmt::new(
            "INSERT INTO crisis_log (id, event_type, session_id_opaque, user_id_or_null, detected_at, detected_date, \
             level, response_path, retention_extended_until, value) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
             ON CONFLICT (id) DO NOTHING",
        )
        .bind(&r.id)
        .bind(r.event_type.as_str())
        .bind(&r.session_id_opaque)
        .bind(&r.user_id_or_null)
        .bind(r.detected_at)
        .bind(r.detected_at.date_naive())
        .bind(Arg::Level(Some(r.level.get())))
        .bind(r.response_path.as_str())
        .bind(r.retention_extended_until)
        .bind(value);
        Ok(self.execute(stmt).await? > 0)
    }

    async fn daily_counts(&self, since: NaiveDate) -> StoreResult<Vec<DailyCrisisCount>> {
        const T: &str = "crisis_log";
        let stmt = Stmt::new(format!(
            "SELECT detected_date, level, response_path, COUNT(*) AS n FROM crisis_log WHERE detected_date >= $1 \
             GROUP BY detected_date, level, response_path \
             ORDER BY detected_date, level, response_path{}",
            B::BYTE_ORDER
        ))
        .bind(since);
        let rows = self.fetch_all(stmt).await?;
        rows.iter()
            .map(|r| {
                Ok(DailyCrisisCount {
                    day: r.date(T, "detected_date")?,
                    level: r.level(T, "level")?.unwrap_or(0),
                    response_path: parse_enum::<ResponsePath>(
                        &r.text("response_path")?,
                        T,
                        "response_path",
                    )?,
                    count: to_u64(r.int("n")?, T, "count")?,
                })
            })
            .collect()
    }

    async fn purge_before(&self, cutoff: DateTime<Utc>, now: DateTime<Utc>) -> StoreResult<u64> {
        let stmt = Stmt::new(
            "DELETE FROM crisis_log WHERE detected_at < $1 \
             AND (retention_extended_until IS NULL OR retention_extended_until <= $2)",
        )
        .bind(cutoff)
        .bind(now);
        self.execute(stmt).await
    }

    async fn count(&self) -> StoreResult<u64> {
        let stmt = Stmt::new("SELECT COUNT(*) AS n FROM crisis_log");
        let n = self.fetch_one(stmt).await?.int("n")?;
        to_u64(n, "crisis_log", "count")
    }

    async fn list_for_session(&self, session_id_opaque: &str) -> StoreResult<Vec<CrisisRecord>> {
        let stmt = Stmt::new(
            "SELECT value FROM crisis_log WHERE session_id_opaque = $1 ORDER BY insertion_order",
        )
        .bind(session_id_opaque);
        let rows = self.fetch_all(stmt).await?;
        rows.iter().map(|r| r.json("crisis_log", "value")).collect()
    }
}

#[async_trait]
impl<B: SqlBackend> FeedbackStore for B {
    async fn append(&self, r: &FeedbackRecord) -> StoreResult<()> {
        let value = B::document(r, "feedback record is not JSON")?;
        let stmt = Stmt::new(
            "INSERT INTO session_feedback (id, session_id_opaque, user_id_or_null, recorded_at, recorded_date, label, \
             turn_count_at_end, source, schema_version, value) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        )
        .bind(&r.id)
        .bind(&r.session_id_opaque)
        .bind(&r.user_id_or_null)
        .bind(r.recorded_at)
        .bind(r.recorded_at.date_naive())
        .bind(r.label.as_str())
        .bind(to_i64(r.turn_count_at_end)?)
        .bind(r.source.as_str())
        .bind(Arg::Int4(
            Some(i64::from(r.schema_version)),
            "schema_version too large",
        ))
        .bind(value);
        self.execute(stmt)
            .await
            .map_err(|e| conflict(e, "feedback record"))?;
        Ok(())
    }

    async fn list_for_session(&self, session_id_opaque: &str) -> StoreResult<Vec<FeedbackRecord>> {
        let stmt = Stmt::new(
            "SELECT value FROM session_feedback WHERE session_id_opaque = $1 ORDER BY insertion_order",
        )
        .bind(session_id_opaque);
        let rows = self.fetch_all(stmt).await?;
        rows.iter()
            .map(|r| r.json("session_feedback", "value"))
            .collect()
    }

    async fn count(&self) -> StoreResult<u64> {
        let stmt = Stmt::new("SELECT COUNT(*) AS n FROM session_feedback");
        let n = self.fetch_one(stmt).await?.int("n")?;
        to_u64(n, "session_feedback", "count")
    }
}

#[async_trait]
impl<B: SqlBackend> VoiceFinalizationStore for B {
    async fn set(&self, s: &VoiceFinalization) -> StoreResult<()> {
        let stmt = Stmt::new(
            "INSERT INTO voice_finalization_status (thread_id, status, detail, updated_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (thread_id) DO UPDATE SET status = excluded.status, detail = excluded.detail, \
             updated_at = excluded.updated_at",
        )
        .bind(&s.thread_id)
        .bind(s.status.as_str())
        .bind(&s.detail)
        .bind(s.updated_at);
        self.execute(stmt).await?;
        Ok(())
    }

    async fn get(&self, thread_id: &str) -> StoreResult<Option<VoiceFinalization>> {
        const T: &str = "voice_finalization_status";
        let stmt = Stmt::new("SELECT * FROM voice_finalization_status WHERE thread_id = $1")
            .bind(thread_id);
        let row = self.fetch_optional(stmt).await?;
        row.map(|r| {
            Ok(VoiceFinalization {
                thread_id: r.text("thread_id")?,
                status: parse_enum::<VoiceFinalizationState>(&r.text("status")?, T, "status")?,
                detail: r.opt_text("detail")?,
                updated_at: r.ts(T, "updated_at")?,
            })
        })
        .transpose()
    }
}
