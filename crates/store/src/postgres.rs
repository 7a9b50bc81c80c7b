//! PostgreSQL backend: durable, multi-instance deployments.
//!
//! Several server processes may share one database: turns on a thread are
//! serialized by advisory locks taken through [`ThreadLocks`] on a separate
//! lock pool, and the embedded migrations run under sqlx's migration lock,
//! so concurrent start-ups do not race. Durability is PostgreSQL's default
//! (`synchronous_commit=on`): a committed turn survives a crash.

use std::str::FromStr;

use async_trait::async_trait;
use chrono::{DateTime, NaiveDate, Utc};
use opencouch_core::{Message, ResponseStyle, Role, Route};
use serde_json::Value;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{PgConnection, PgPool, Row};

use crate::codec::{decode_state, encode_state};
use crate::error::{StoreError, StoreResult};
use crate::lock::ThreadLocks;
use crate::records::{
    CommitOutcome, CrisisRecord, DailyCrisisCount, Embedding, FeedbackRecord, MemoryKind,
    MemoryRecord, ResponsePath, SessionWrite, ThreadCursor, ThreadPage, ThreadSnapshot,
    ThreadSummary, TranscriptEntry, TurnCommit, VoiceFinalization, VoiceFinalizationState,
};
use crate::session::{ActiveSession, REASON_UNREADABLE_PAYLOAD};
use crate::sqlite::{conflict, opt_enum, parse_enum, to_i64, to_u64};
use crate::traits::{
    CrisisLog, FeedbackStore, MemoryStore, SessionStore, ThreadStore, VoiceFinalizationStore,
};
use crate::{Backend, Stores};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

/// Connections for queries.
pub const QUERY_POOL_SIZE: u32 = 10;
/// Connections for advisory locks (each held turn pins one).
pub const LOCK_POOL_SIZE: u32 = 16;

/// The PostgreSQL backend (implements every store trait).
#[derive(Clone, Debug)]
pub struct PgStores {
    pool: PgPool,
    lock_pool: PgPool,
}

fn level_u8(
    raw: Option<i16>,
    table: &'static str,
    column: &'static str,
) -> StoreResult<Option<u8>> {
    raw.map(|v| {
        u8::try_from(v)
            .ok()
            .filter(|l| *l <= 3)
            .ok_or(StoreError::corrupt(table, column))
    })
    .transpose()
}

impl PgStores {
    /// Connects to `url` and applies the embedded migrations.
    pub async fn connect(url: &str) -> StoreResult<Self> {
        let options = PgConnectOptions::from_str(url)?;
        let pool = PgPoolOptions::new()
            .max_connections(QUERY_POOL_SIZE)
            .connect_with(options.clone())
            .await?;
        let lock_pool = PgPoolOptions::new()
            .max_connections(LOCK_POOL_SIZE)
            .connect_lazy_with(options);
        let stores = PgStores { pool, lock_pool };
        stores.migrate().await?;
        Ok(stores)
    }

    /// Applies the embedded migrations (idempotent; serialized across
    /// processes by sqlx's migration advisory lock). Called by
    /// [`Self::connect`].
    pub async fn migrate(&self) -> StoreResult<()> {
        MIGRATOR.run(&self.pool).await?;
        Ok(())
    }

    /// The query pool (diagnostics and tests).
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Wraps this backend into a [`Stores`] bundle whose locks also hold
    /// PostgreSQL advisory locks.
    pub fn into_stores(self) -> Stores {
        let locks = ThreadLocks::with_postgres(self.lock_pool.clone());
        Stores::from_backend(std::sync::Arc::new(self), Backend::Postgres, locks)
    }

    /// Closes both pools.
    pub async fn close(&self) {
        self.lock_pool.close().await;
        self.pool.close().await;
    }
}

#[derive(sqlx::FromRow)]
struct TranscriptRow {
    idx: i64,
    role: String,
    content: String,
    route: Option<String>,
    response_style: Option<String>,
    crisis_level: Option<i16>,
    at: Option<DateTime<Utc>>,
}

impl TranscriptRow {
    fn into_entry(self) -> StoreResult<TranscriptEntry> {
        const T: &str = "transcript";
        Ok(TranscriptEntry {
            index: to_u64(self.idx, T, "idx")?,
            message: Message {
                role: parse_enum::<Role>(&self.role, T, "role")?,
                content: self.content,
                route: opt_enum::<Route>(self.route, T, "route")?,
                response_style: opt_enum::<ResponseStyle>(
                    self.response_style,
                    T,
                    "response_style",
                )?,
                crisis_level: level_u8(self.crisis_level, T, "crisis_level")?,
                at: self.at,
            },
        })
    }
}

const TRANSCRIPT_COLUMNS: &str = "idx, role, content, route, response_style, crisis_level, at";

async fn upsert_session(conn: &mut PgConnection, s: &ActiveSession) -> StoreResult<()> {
    sqlx::query(
        "INSERT INTO active_sessions (thread_id, started_at, last_active_at, transcript_start_index, \
         max_crisis_level, session_buffer, rotate_after_this_turn, finalize_required_reason) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
         ON CONFLICT (thread_id) DO UPDATE SET started_at = excluded.started_at, \
         last_active_at = excluded.last_active_at, transcript_start_index = excluded.transcript_start_index, \
         max_crisis_level = excluded.max_crisis_level, session_buffer = excluded.session_buffer, \
         rotate_after_this_turn = excluded.rotate_after_this_turn, \
         finalize_required_reason = excluded.finalize_required_reason",
    )
    .bind(&s.thread_id)
    .bind(s.started_at)
    .bind(s.last_active_at)
    .bind(to_i64(s.transcript_start_index)?)
    .bind(i16::from(s.max_crisis_level.min(3)))
    .bind(&s.session_buffer)
    .bind(s.rotate_after_this_turn)
    .bind(&s.finalize_required_reason)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

fn session_from_row(row: &sqlx::postgres::PgRow) -> StoreResult<ActiveSession> {
    const T: &str = "active_sessions";
    let mut reason: Option<String> = row.try_get("finalize_required_reason")?;
    // JSONB is always valid JSON; a null buffer is treated as unreadable.
    let session_buffer: Value = row.try_get("session_buffer")?;
    if session_buffer.is_null() {
        reason = Some(REASON_UNREADABLE_PAYLOAD.to_owned());
    }
    Ok(ActiveSession {
        thread_id: row.try_get("thread_id")?,
        started_at: row.try_get("started_at")?,
        last_active_at: row.try_get("last_active_at")?,
        transcript_start_index: to_u64(
            row.try_get("transcript_start_index")?,
            T,
            "transcript_start_index",
        )?,
        max_crisis_level: level_u8(
            Some(row.try_get("max_crisis_level")?),
            T,
            "max_crisis_level",
        )?
        .unwrap_or(0),
        session_buffer,
        rotate_after_this_turn: row.try_get("rotate_after_this_turn")?,
        finalize_required_reason: reason,
    })
}

/// The thread listing query: parameters are the owner (when `by_owner`),
/// the cursor's time and thread id (when `after`), then the row limit.
/// Thread ids compare in byte order (`COLLATE "C"`), as in the indexes
/// `thread_state_owner_updated_idx` (one owner) and
/// `thread_state_updated_id_idx` (every owner) and the other backends.
fn thread_page_sql(by_owner: bool, after: bool) -> String {
    let mut n = 0;
    let mut param = || {
        n += 1;
        format!("${n}")
    };
    let mut filter = vec!["TRUE".to_owned()];
    if by_owner {
        filter.push(format!("owner_id = {}", param()));
    }
    if after {
        let (at, id) = (param(), param());
        filter.push(format!(
            "updated_at <= {at} AND (updated_at < {at} OR thread_id COLLATE \"C\" > {id})"
        ));
    }
    format!(
        "SELECT thread_id, turn_count, message_count, updated_at FROM thread_state WHERE {} \
         ORDER BY updated_at DESC, thread_id COLLATE \"C\" ASC LIMIT {}",
        filter.join(" AND "),
        param(),
    )
}

#[async_trait]
impl ThreadStore for PgStores {
    async fn load(&self, thread_id: &str, recent: usize) -> StoreResult<Option<ThreadSnapshot>> {
        let mut conn = self.pool.acquire().await?;
        let Some(raw): Option<Value> =
            sqlx::query_scalar("SELECT value FROM thread_state WHERE thread_id = $1")
                .bind(thread_id)
                .fetch_optional(&mut *conn)
                .await?
        else {
            return Ok(None);
        };
        let state = decode_state(&raw)?;
        // Only rows the snapshot already counts: a commit landing between the
        // two reads appends at `idx >= message_count`, so the window always
        // matches the snapshot without a transaction.
        let rows: Vec<TranscriptRow> = sqlx::query_as(&format!(
            "SELECT {TRANSCRIPT_COLUMNS} FROM transcript WHERE thread_id = $1 AND idx < $3 \
             ORDER BY idx DESC LIMIT $2"
        ))
        .bind(thread_id)
        .bind(i64::try_from(recent).unwrap_or(i64::MAX))
        .bind(to_i64(state.message_count)?)
        .fetch_all(&mut *conn)
        .await?;
        let mut recent = rows
            .into_iter()
            .map(TranscriptRow::into_entry)
            .collect::<StoreResult<Vec<_>>>()?;
        recent.reverse();
        Ok(Some(ThreadSnapshot { state, recent }))
    }

    async fn commit_turn(&self, commit: TurnCommit) -> StoreResult<CommitOutcome> {
        let TurnCommit {
            mut state,
            append,
            session,
            at,
        } = commit;
        if let SessionWrite::Upsert(s) = &session
            && s.thread_id != state.thread_id
        {
            return Err(StoreError::Invalid("session row belongs to another thread"));
        }
        let mut tx = self.pool.begin().await?;
        let next: i64 = sqlx::query_scalar(
            "SELECT COALESCE(MAX(idx) + 1, 0) FROM transcript WHERE thread_id = $1",
        )
        .bind(&state.thread_id)
        .fetch_one(&mut *tx)
        .await?;
        if !append.is_empty() {
            // One statement for all entries: parallel arrays through UNNEST.
            let n = append.len();
            let mut idx = Vec::with_capacity(n);
            let mut role = Vec::with_capacity(n);
            let mut content = Vec::with_capacity(n);
            let mut route: Vec<Option<&str>> = Vec::with_capacity(n);
            let mut style: Vec<Option<&str>> = Vec::with_capacity(n);
            let mut level: Vec<Option<i16>> = Vec::with_capacity(n);
            let mut at_col: Vec<Option<DateTime<Utc>>> = Vec::with_capacity(n);
            for (offset, m) in append.iter().enumerate() {
                idx.push(next + offset as i64);
                role.push(m.role.as_str());
                content.push(m.content.as_str());
                route.push(m.route.map(|r| r.as_str()));
                style.push(m.response_style.map(|r| r.as_str()));
                level.push(m.crisis_level.map(i16::from));
                at_col.push(m.at);
            }
            sqlx::query(
                "INSERT INTO transcript (thread_id, idx, role, content, route, response_style, crisis_level, at) \
                 SELECT $1, * FROM UNNEST($2::BIGINT[], $3::TEXT[], $4::TEXT[], $5::TEXT[], $6::TEXT[], \
                 $7::SMALLINT[], $8::TIMESTAMPTZ[])",
            )
            .bind(&state.thread_id)
            .bind(&idx)
            .bind(&role)
            .bind(&content)
            .bind(&route)
            .bind(&style)
            .bind(&level)
            .bind(&at_col)
            .execute(&mut *tx)
            .await?;
        }
        let first_index = to_u64(next, "transcript", "idx")?;
        let message_count = first_index + append.len() as u64;
        state.message_count = message_count;
        let snapshot = encode_state(&state)?;
        sqlx::query(
            "INSERT INTO thread_state (thread_id, updated_at, turn_count, message_count, value) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (thread_id) DO UPDATE SET updated_at = excluded.updated_at, \
             turn_count = excluded.turn_count, message_count = excluded.message_count, value = excluded.value",
        )
        .bind(&state.thread_id)
        .bind(at)
        .bind(to_i64(state.turn_count)?)
        .bind(to_i64(message_count)?)
        .bind(&snapshot)
        .execute(&mut *tx)
        .await?;
        match &session {
            SessionWrite::Keep => {}
            SessionWrite::Upsert(s) => upsert_session(&mut tx, s).await?,
            SessionWrite::Clear => {
                sqlx::query("DELETE FROM active_sessions WHERE thread_id = $1")
                    .bind(&state.thread_id)
                    .execute(&mut *tx)
                    .await?;
            }
        }
        tx.commit().await?;
        Ok(CommitOutcome {
            first_index,
            message_count,
        })
    }

    async fn history(
        &self,
        thread_id: &str,
        limit: usize,
        before: Option<u64>,
    ) -> StoreResult<Vec<TranscriptEntry>> {
        let before = before.map_or(Ok(i64::MAX), to_i64)?;
        let rows: Vec<TranscriptRow> = sqlx::query_as(&format!(
            "SELECT {TRANSCRIPT_COLUMNS} FROM transcript WHERE thread_id = $1 AND idx < $2 ORDER BY idx DESC LIMIT $3"
        ))
        .bind(thread_id)
        .bind(before)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&self.pool)
        .await?;
        let mut out = rows
            .into_iter()
            .map(TranscriptRow::into_entry)
            .collect::<StoreResult<Vec<_>>>()?;
        out.reverse();
        Ok(out)
    }

    async fn list_threads_page(
        &self,
        owner: Option<&str>,
        limit: usize,
        after: Option<&ThreadCursor>,
    ) -> StoreResult<ThreadPage> {
        const T: &str = "thread_state";
        if limit == 0 {
            return Err(StoreError::Invalid("limit must be at least 1"));
        }
        let sql = thread_page_sql(owner.is_some(), after.is_some());
        let mut query = sqlx::query(&sql);
        if let Some(owner) = owner {
            query = query.bind(owner);
        }
        if let Some(c) = after {
            query = query.bind(c.updated_at).bind(&c.thread_id);
        }
        let rows = query
            .bind(i64::try_from(limit.saturating_add(1)).unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await?;
        let rows = rows
            .iter()
            .map(|r| {
                Ok(ThreadSummary {
                    thread_id: r.try_get("thread_id")?,
                    turn_count: to_u64(r.try_get("turn_count")?, T, "turn_count")?,
                    message_count: to_u64(r.try_get("message_count")?, T, "message_count")?,
                    updated_at: r.try_get("updated_at")?,
                })
            })
            .collect::<StoreResult<Vec<_>>>()?;
        Ok(ThreadPage::from_rows(rows, limit))
    }

    async fn delete_thread(&self, thread_id: &str) -> StoreResult<bool> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("DELETE FROM transcript WHERE thread_id = $1")
            .bind(thread_id)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM active_sessions WHERE thread_id = $1")
            .bind(thread_id)
            .execute(&mut *tx)
            .await?;
        let gone = sqlx::query("DELETE FROM thread_state WHERE thread_id = $1")
            .bind(thread_id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(gone.rows_affected() > 0)
    }
}

#[async_trait]
impl SessionStore for PgStores {
    async fn get(&self, thread_id: &str) -> StoreResult<Option<ActiveSession>> {
        let row = sqlx::query("SELECT * FROM active_sessions WHERE thread_id = $1")
            .bind(thread_id)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(session_from_row).transpose()
    }

    async fn put(&self, session: &ActiveSession) -> StoreResult<()> {
        let mut conn = self.pool.acquire().await?;
        upsert_session(&mut conn, session).await
    }

    async fn mark_finalize_required(&self, thread_id: &str, reason: &str) -> StoreResult<bool> {
        let r = sqlx::query(
            "UPDATE active_sessions SET finalize_required_reason = $2 WHERE thread_id = $1",
        )
        .bind(thread_id)
        .bind(reason)
        .execute(&self.pool)
        .await?;
        Ok(r.rows_affected() > 0)
    }

    async fn clear(&self, thread_id: &str) -> StoreResult<bool> {
        let r = sqlx::query("DELETE FROM active_sessions WHERE thread_id = $1")
            .bind(thread_id)
            .execute(&self.pool)
            .await?;
        Ok(r.rows_affected() > 0)
    }

    async fn list(&self) -> StoreResult<Vec<ActiveSession>> {
        let rows = sqlx::query("SELECT * FROM active_sessions ORDER BY thread_id")
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(session_from_row).collect()
    }
}

fn memory_from_row(row: &sqlx::postgres::PgRow) -> StoreResult<MemoryRecord> {
    const T: &str = "memory_records";
    let kind: String = row.try_get("namespace_kind")?;
    let values: Option<Vec<f32>> = row.try_get("embedding")?;
    let dim: Option<i32> = row.try_get("embedding_dim")?;
    let model: Option<String> = row.try_get("embedding_model")?;
    let embedding = match (values, model) {
        (Some(values), Some(model)) => {
            if dim != i32::try_from(values.len()).ok() {
                return Err(StoreError::corrupt(T, "embedding_dim"));
            }
            Some(Embedding { model, values })
        }
        _ => None,
    };
    Ok(MemoryRecord {
        id: row.try_get("id")?,
        owner_id: row.try_get("owner_id")?,
        kind: parse_enum(&kind, T, "namespace_kind")?,
        category: row.try_get("category")?,
        value: row.try_get("value")?,
        created_at: row.try_get("created_at")?,
        last_referenced_at: row.try_get("last_referenced_at")?,
        dormant_at: row.try_get("dormant_at")?,
        user_visible: row.try_get("user_visible")?,
        embedding,
    })
}

fn embedding_dim(r: &MemoryRecord) -> StoreResult<Option<i32>> {
    r.embedding
        .as_ref()
        .map(|e| i32::try_from(e.dim()).map_err(|_| StoreError::Invalid("embedding too long")))
        .transpose()
}

#[async_trait]
impl MemoryStore for PgStores {
    async fn put(&self, r: &MemoryRecord) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO memory_records (id, owner_id, namespace_kind, category, value, created_at, \
             last_referenced_at, dormant_at, user_visible, embedding, embedding_dim, embedding_model) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
        )
        .bind(&r.id)
        .bind(&r.owner_id)
        .bind(r.kind.as_str())
        .bind(&r.category)
        .bind(&r.value)
        .bind(r.created_at)
        .bind(r.last_referenced_at)
        .bind(r.dormant_at)
        .bind(r.user_visible)
        .bind(r.embedding.as_ref().map(|e| e.values.as_slice()))
        .bind(embedding_dim(r)?)
        .bind(r.embedding.as_ref().map(|e| e.model.as_str()))
        .execute(&self.pool)
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
        let row = sqlx::query(
            "SELECT * FROM memory_records WHERE owner_id = $1 AND namespace_kind = $2 AND id = $3",
        )
        .bind(owner_id)
        .bind(kind.as_str())
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(memory_from_row).transpose()
    }

    async fn list(&self, owner_id: &str, kind: MemoryKind) -> StoreResult<Vec<MemoryRecord>> {
        let rows = sqlx::query(
            "SELECT * FROM memory_records WHERE owner_id = $1 AND namespace_kind = $2 ORDER BY insertion_order",
        )
        .bind(owner_id)
        .bind(kind.as_str())
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(memory_from_row).collect()
    }

    async fn update(&self, r: &MemoryRecord) -> StoreResult<bool> {
        let res = sqlx::query(
            "UPDATE memory_records SET category = $4, value = $5, created_at = $6, last_referenced_at = $7, \
             dormant_at = $8, user_visible = $9, embedding = $10, embedding_dim = $11, embedding_model = $12 \
             WHERE id = $1 AND owner_id = $2 AND namespace_kind = $3",
        )
        .bind(&r.id)
        .bind(&r.owner_id)
        .bind(r.kind.as_str())
        .bind(&r.category)
        .bind(&r.value)
        .bind(r.created_at)
        .bind(r.last_referenced_at)
        .bind(r.dormant_at)
        .bind(r.user_visible)
        .bind(r.embedding.as_ref().map(|e| e.values.as_slice()))
        .bind(embedding_dim(r)?)
        .bind(r.embedding.as_ref().map(|e| e.model.as_str()))
        .execute(&self.pool)
        .await?;
        Ok(res.rows_affected() > 0)
    }

    async fn delete(&self, owner_id: &str, kind: MemoryKind, id: &str) -> StoreResult<bool> {
        let res = sqlx::query(
            "DELETE FROM memory_records WHERE owner_id = $1 AND namespace_kind = $2 AND id = $3",
        )
        .bind(owner_id)
        .bind(kind.as_str())
        .bind(id)
        .execute(&self.pool)
        .await?;
        Ok(res.rows_affected() > 0)
    }

    async fn count(&self, owner_id: &str, kind: MemoryKind) -> StoreResult<u64> {
        let n: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM memory_records WHERE owner_id = $1 AND namespace_kind = $2",
        )
        .bind(owner_id)
        .bind(kind.as_str())
        .fetch_one(&self.pool)
        .await?;
        to_u64(n, "memory_records", "count")
    }

    async fn revision(&self, owner_id: &str, kind: MemoryKind) -> StoreResult<u64> {
        let n: Option<i64> = sqlx::query_scalar(
            "SELECT revision FROM memory_revisions WHERE owner_id = $1 AND namespace_kind = $2",
        )
        .bind(owner_id)
        .bind(kind.as_str())
        .fetch_optional(&self.pool)
        .await?;
        to_u64(n.unwrap_or(0), "memory_revisions", "revision")
    }
}

#[async_trait]
impl CrisisLog for PgStores {
    async fn append(&self, record: &CrisisRecord) -> StoreResult<bool> {
        let r = record.clone().normalized();
        let value = serde_json::to_value(&r)
            .map_err(|_| StoreError::Invalid("crisis record is not JSON"))?;
        let res = sqlx::query(
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
        .bind(i16::from(r.level.get()))
        .bind(r.response_path.as_str())
        .bind(r.retention_extended_until)
        .bind(&value)
        .execute(&self.pool)
        .await?;
        Ok(res.rows_affected() > 0)
    }

    async fn daily_counts(&self, since: NaiveDate) -> StoreResult<Vec<DailyCrisisCount>> {
        const T: &str = "crisis_log";
        let rows = sqlx::query(
            "SELECT detected_date, level, response_path, COUNT(*) AS n FROM crisis_log WHERE detected_date >= $1 \
             GROUP BY detected_date, level, response_path \
             ORDER BY detected_date, level, response_path COLLATE \"C\"",
        )
        .bind(since)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                let path: String = r.try_get("response_path")?;
                let level: i16 = r.try_get("level")?;
                Ok(DailyCrisisCount {
                    day: r.try_get("detected_date")?,
                    level: level_u8(Some(level), T, "level")?.unwrap_or(0),
                    response_path: parse_enum::<ResponsePath>(&path, T, "response_path")?,
                    count: to_u64(r.try_get("n")?, T, "count")?,
                })
            })
            .collect()
    }

    async fn purge_before(&self, cutoff: DateTime<Utc>, now: DateTime<Utc>) -> StoreResult<u64> {
        let res = sqlx::query(
            "DELETE FROM crisis_log WHERE detected_at < $1 \
             AND (retention_extended_until IS NULL OR retention_extended_until <= $2)",
        )
        .bind(cutoff)
        .bind(now)
        .execute(&self.pool)
        .await?;
        Ok(res.rows_affected())
    }

    async fn count(&self) -> StoreResult<u64> {
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM crisis_log")
            .fetch_one(&self.pool)
            .await?;
        to_u64(n, "crisis_log", "count")
    }

    async fn list_for_session(&self, session_id_opaque: &str) -> StoreResult<Vec<CrisisRecord>> {
        let rows: Vec<Value> = sqlx::query_scalar(
            "SELECT value FROM crisis_log WHERE session_id_opaque = $1 ORDER BY insertion_order",
        )
        .bind(session_id_opaque)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|v| {
                serde_json::from_value(v).map_err(|_| StoreError::corrupt("crisis_log", "value"))
            })
            .collect()
    }
}

#[async_trait]
impl FeedbackStore for PgStores {
    async fn append(&self, r: &FeedbackRecord) -> StoreResult<()> {
        let value = serde_json::to_value(r)
            .map_err(|_| StoreError::Invalid("feedback record is not JSON"))?;
        sqlx::query(
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
        .bind(i32::try_from(r.schema_version).map_err(|_| StoreError::Invalid("schema_version too large"))?)
        .bind(&value)
        .execute(&self.pool)
        .await
        .map_err(|e| conflict(e, "feedback record"))?;
        Ok(())
    }

    async fn list_for_session(&self, session_id_opaque: &str) -> StoreResult<Vec<FeedbackRecord>> {
        let rows: Vec<Value> = sqlx::query_scalar(
            "SELECT value FROM session_feedback WHERE session_id_opaque = $1 ORDER BY insertion_order",
        )
        .bind(session_id_opaque)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|v| {
                serde_json::from_value(v)
                    .map_err(|_| StoreError::corrupt("session_feedback", "value"))
            })
            .collect()
    }

    async fn count(&self) -> StoreResult<u64> {
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM session_feedback")
            .fetch_one(&self.pool)
            .await?;
        to_u64(n, "session_feedback", "count")
    }
}

#[async_trait]
impl VoiceFinalizationStore for PgStores {
    async fn set(&self, s: &VoiceFinalization) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO voice_finalization_status (thread_id, status, detail, updated_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (thread_id) DO UPDATE SET status = excluded.status, detail = excluded.detail, \
             updated_at = excluded.updated_at",
        )
        .bind(&s.thread_id)
        .bind(s.status.as_str())
        .bind(&s.detail)
        .bind(s.updated_at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn get(&self, thread_id: &str) -> StoreResult<Option<VoiceFinalization>> {
        const T: &str = "voice_finalization_status";
        let row = sqlx::query("SELECT * FROM voice_finalization_status WHERE thread_id = $1")
            .bind(thread_id)
            .fetch_optional(&self.pool)
            .await?;
        row.map(|r| {
            let status: String = r.try_get("status")?;
            Ok(VoiceFinalization {
                thread_id: r.try_get("thread_id")?,
                status: parse_enum::<VoiceFinalizationState>(&status, T, "status")?,
                detail: r.try_get("detail")?,
                updated_at: r.try_get("updated_at")?,
            })
        })
        .transpose()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Every shape of the thread listing can be answered by an index scan
    /// in listing order. Sequential scans, bitmap scans and sorts are
    /// discouraged so the tiny table cannot hide a plan that needs a sort
    /// (a collation that differs from the index's would).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn thread_pages_use_an_index_without_sorting() {
        let Some(db) = crate::testing::pg_test_db().await else {
            return;
        };
        let pg = PgStores::connect(db.url()).await.unwrap();
        let mut conn = pg.pool().acquire().await.unwrap();
        for setting in ["enable_seqscan", "enable_bitmapscan", "enable_sort"] {
            sqlx::query(&format!("SET {setting} = off"))
                .execute(&mut *conn)
                .await
                .unwrap();
        }
        for (by_owner, after, index) in [
            (true, false, "thread_state_owner_updated_idx"),
            (true, true, "thread_state_owner_updated_idx"),
            (false, false, "thread_state_updated_id_idx"),
            (false, true, "thread_state_updated_id_idx"),
        ] {
            let sql = format!("EXPLAIN {}", thread_page_sql(by_owner, after));
            let mut query = sqlx::query(&sql);
            if by_owner {
                query = query.bind("alice");
            }
            if after {
                query = query.bind(Utc::now()).bind("alice:t");
            }
            let rows = query.bind(21_i64).fetch_all(&mut *conn).await.unwrap();
            let plan: Vec<String> = rows
                .iter()
                .map(|r| r.try_get::<String, _>(0).unwrap())
                .collect();
            let plan = plan.join("\n");
            assert!(plan.contains(index), "{by_owner}/{after}:\n{plan}");
            assert!(!plan.contains("Sort"), "{by_owner}/{after}:\n{plan}");
        }
        drop(conn);
        pg.close().await;
    }
}
