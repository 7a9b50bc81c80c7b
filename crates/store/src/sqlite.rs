//! SQLite backend: one database file, the zero-setup default.
//!
//! Connection settings: WAL journal, `synchronous=NORMAL`, `busy_timeout`
//! 5 s, foreign keys on. Durability: in WAL mode with `synchronous=NORMAL` a
//! committed transaction survives a crash or kill of the *process* (the WAL
//! is written before `COMMIT` returns); a power loss or OS crash may lose the
//! last transactions (they are fsynced at checkpoint, not at commit).
//! Write transactions start with `BEGIN IMMEDIATE`, so concurrent writers
//! queue on the busy timeout instead of failing on a lock upgrade.
//!
//! Timestamps are TEXT in a fixed-width RFC 3339 UTC form
//! (`2026-01-01T12:00:00.000000Z`), so text order equals time order.

use std::path::Path;
#[cfg(test)]
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, NaiveDate, Utc};
use opencouch_core::{Message, ResponseStyle, Role, Route};
use serde_json::Value;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Row, SqliteConnection, SqlitePool};

use crate::codec::{decode_state_str, encode_state_string};
use crate::error::{StoreError, StoreResult};
use crate::lock::ThreadLocks;
use crate::records::{
    CommitOutcome, CrisisRecord, DailyCrisisCount, Embedding, FeedbackRecord, MemoryKind,
    MemoryRecord, ResponsePath, SessionWrite, ThreadCursor, ThreadPage, ThreadSnapshot,
    ThreadSummary, TranscriptEntry, TurnCommit, VoiceFinalization, VoiceFinalizationState,
    embedding_from_le_bytes, embedding_to_le_bytes,
};
use crate::session::{ActiveSession, REASON_UNREADABLE_PAYLOAD, parse_timestamp};
use crate::traits::{
    CrisisLog, FeedbackStore, MemoryStore, SessionStore, ThreadStore, VoiceFinalizationStore,
};
use crate::{Backend, Stores};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");

/// Busy timeout for every connection.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The SQLite backend (implements every store trait).
#[derive(Clone, Debug)]
pub struct SqliteStores {
    pool: SqlitePool,
}

/// Formats a timestamp in the fixed-width stored form.
pub(crate) fn fmt_ts(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

fn req_ts(raw: &str, table: &'static str, column: &'static str) -> StoreResult<DateTime<Utc>> {
    parse_timestamp(Some(raw)).ok_or(StoreError::corrupt(table, column))
}

fn opt_ts(
    raw: Option<String>,
    table: &'static str,
    column: &'static str,
) -> StoreResult<Option<DateTime<Utc>>> {
    raw.map(|r| req_ts(&r, table, column)).transpose()
}

pub(crate) fn to_i64(v: u64) -> StoreResult<i64> {
    i64::try_from(v).map_err(|_| StoreError::Invalid("count exceeds i64"))
}

pub(crate) fn to_u64(v: i64, table: &'static str, column: &'static str) -> StoreResult<u64> {
    u64::try_from(v).map_err(|_| StoreError::corrupt(table, column))
}

pub(crate) fn parse_enum<T: FromStr>(
    raw: &str,
    table: &'static str,
    column: &'static str,
) -> StoreResult<T> {
    raw.parse::<T>()
        .map_err(|_| StoreError::corrupt(table, column))
}

pub(crate) fn opt_enum<T: FromStr>(
    raw: Option<String>,
    table: &'static str,
    column: &'static str,
) -> StoreResult<Option<T>> {
    raw.map(|r| parse_enum(&r, table, column)).transpose()
}

pub(crate) fn crisis_level_u8(
    raw: Option<i64>,
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

/// Maps a unique-constraint violation to [`StoreError::Conflict`].
pub(crate) fn conflict(err: sqlx::Error, what: &'static str) -> StoreError {
    match &err {
        sqlx::Error::Database(db) if db.is_unique_violation() => StoreError::Conflict { what },
        _ => StoreError::Database(err),
    }
}

impl SqliteStores {
    /// Opens (creating parent directories and the file if needed) and
    /// migrates the database at `path`.
    ///
    /// The database holds conversations, crisis messages included, so on
    /// Unix it is private to the account whatever the umask: directories
    /// this call creates are `0700`, and the database file and its `-wal`
    /// and `-shm` files are `0600` (an existing file is tightened to
    /// `0600`; an existing directory is left as it is).
    pub async fn open(path: impl AsRef<Path>) -> StoreResult<Self> {
        let path = path.as_ref();
        let owned = path.to_path_buf();
        tokio::task::spawn_blocking(move || private::prepare(&owned))
            .await
            .map_err(std::io::Error::other)??;
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(BUSY_TIMEOUT)
            .foreign_keys(true);
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options)
            .await?;
        let stores = SqliteStores { pool };
        stores.migrate().await?;
        // SQLite creates `-wal` / `-shm` with the database file's mode;
        // tighten them anyway in case they predate this build.
        let owned = path.to_path_buf();
        tokio::task::spawn_blocking(move || private::restrict_companions(&owned))
            .await
            .map_err(std::io::Error::other)??;
        Ok(stores)
    }

    /// Applies the embedded migrations (idempotent). Called by [`Self::open`].
    pub async fn migrate(&self) -> StoreResult<()> {
        MIGRATOR.run(&self.pool).await?;
        Ok(())
    }

    /// The connection pool (for diagnostics and tests).
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// Wraps this backend into a [`Stores`] bundle with in-process locks
    /// (one process owns a SQLite file).
    pub fn into_stores(self) -> Stores {
        Stores::from_backend(
            std::sync::Arc::new(self),
            Backend::Sqlite,
            ThreadLocks::in_process(),
        )
    }

    /// Closes the pool (checkpointing the WAL).
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

/// Creates `dir` and its missing parents like `create_dir_all`, but every
/// directory it creates is owner-only (`0700` on Unix, whatever the umask);
/// existing directories are left as they are. For anything OpenCouch keeps
/// in its data directory.
pub fn create_private_dirs(dir: &Path) -> std::io::Result<()> {
    private::create_dirs(dir)
}

/// Owner-only permissions for the database directory and files.
mod private {
    use std::io;
    use std::path::{Path, PathBuf};

    /// Mode of directories created for the database.
    #[cfg(unix)]
    pub(super) const DIR_MODE: u32 = 0o700;
    /// Mode of the database file and its `-wal` / `-shm` files.
    #[cfg(unix)]
    pub(super) const FILE_MODE: u32 = 0o600;

    fn in_memory(path: &Path) -> bool {
        path.as_os_str().is_empty() || path.as_os_str() == ":memory:"
    }

    /// Creates the missing parent directories (owner-only) and the database
    /// file (owner-only) before SQLite opens it.
    pub(super) fn prepare(path: &Path) -> io::Result<()> {
        if in_memory(path) {
            return Ok(());
        }
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            create_dirs(parent)?;
        }
        create_file(path)
    }

    /// The `-wal` and `-shm` files of the database at `path`, when present,
    /// get the file mode.
    pub(super) fn restrict_companions(path: &Path) -> io::Result<()> {
        if in_memory(path) {
            return Ok(());
        }
        for suffix in ["-wal", "-shm"] {
            let mut name = path.as_os_str().to_owned();
            name.push(suffix);
            let companion = PathBuf::from(name);
            if companion.exists() {
                restrict(&companion)?;
            }
        }
        Ok(())
    }

    #[cfg(unix)]
    pub(super) fn create_dirs(dir: &Path) -> io::Result<()> {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        // The directories this call creates, set explicitly afterwards: the
        // builder's mode is subject to the umask.
        let missing: Vec<PathBuf> = dir
            .ancestors()
            .take_while(|p| !p.as_os_str().is_empty() && !p.exists())
            .map(Path::to_path_buf)
            .collect();
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(DIR_MODE)
            .create(dir)?;
        for d in missing {
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(DIR_MODE))?;
        }
        Ok(())
    }

    #[cfg(not(unix))]
    pub(super) fn create_dirs(dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)
    }

    #[cfg(unix)]
    fn create_file(path: &Path) -> io::Result<()> {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(FILE_MODE)
            .open(path)?;
        restrict(path)
    }

    #[cfg(not(unix))]
    fn create_file(_path: &Path) -> io::Result<()> {
        Ok(())
    }

    #[cfg(unix)]
    fn restrict(path: &Path) -> io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(FILE_MODE))
    }

    #[cfg(not(unix))]
    fn restrict(_path: &Path) -> io::Result<()> {
        Ok(())
    }
}

#[derive(sqlx::FromRow)]
struct TranscriptRow {
    idx: i64,
    role: String,
    content: String,
    route: Option<String>,
    response_style: Option<String>,
    crisis_level: Option<i64>,
    at: Option<String>,
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
                crisis_level: crisis_level_u8(self.crisis_level, T, "crisis_level")?,
                at: opt_ts(self.at, T, "at")?,
            },
        })
    }
}

const TRANSCRIPT_COLUMNS: &str = "idx, role, content, route, response_style, crisis_level, at";

async fn upsert_session(conn: &mut SqliteConnection, s: &ActiveSession) -> StoreResult<()> {
    let buffer = serde_json::to_string(&s.session_buffer)
        .map_err(|_| StoreError::Invalid("session buffer is not JSON"))?;
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
    .bind(fmt_ts(s.started_at))
    .bind(s.last_active_at.map(fmt_ts))
    .bind(to_i64(s.transcript_start_index)?)
    .bind(i64::from(s.max_crisis_level.min(3)))
    .bind(buffer)
    .bind(s.rotate_after_this_turn)
    .bind(&s.finalize_required_reason)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

fn session_from_row(row: &sqlx::sqlite::SqliteRow) -> StoreResult<ActiveSession> {
    const T: &str = "active_sessions";
    let started: String = row.try_get("started_at")?;
    let last: Option<String> = row.try_get("last_active_at")?;
    let buffer_raw: String = row.try_get("session_buffer")?;
    let mut reason: Option<String> = row.try_get("finalize_required_reason")?;
    let session_buffer = match serde_json::from_str::<Value>(&buffer_raw) {
        Ok(v) => v,
        Err(_) => {
            reason = Some(REASON_UNREADABLE_PAYLOAD.to_owned());
            Value::Null
        }
    };
    let level: i64 = row.try_get("max_crisis_level")?;
    Ok(ActiveSession {
        thread_id: row.try_get("thread_id")?,
        started_at: req_ts(&started, T, "started_at")?,
        last_active_at: parse_timestamp(last.as_deref()),
        transcript_start_index: to_u64(
            row.try_get("transcript_start_index")?,
            T,
            "transcript_start_index",
        )?,
        max_crisis_level: crisis_level_u8(Some(level), T, "max_crisis_level")?.unwrap_or(0),
        session_buffer,
        rotate_after_this_turn: row.try_get("rotate_after_this_turn")?,
        finalize_required_reason: reason,
    })
}

/// The thread listing query: parameters are the owner (when `by_owner`),
/// the cursor's time twice and its thread id (when `after`), then the row
/// limit. Served by `thread_state_owner_updated_idx` (one owner) or
/// `thread_state_updated_id_idx` (every owner).
fn thread_page_sql(by_owner: bool, after: bool) -> String {
    format!(
        "SELECT thread_id, turn_count, message_count, updated_at FROM thread_state WHERE {}{} \
         ORDER BY updated_at DESC, thread_id ASC LIMIT ?",
        if by_owner { "owner_id = ?" } else { "1 = 1" },
        if after {
            " AND updated_at <= ? AND (updated_at < ? OR thread_id > ?)"
        } else {
            ""
        },
    )
}

#[async_trait]
impl ThreadStore for SqliteStores {
    async fn load(&self, thread_id: &str, recent: usize) -> StoreResult<Option<ThreadSnapshot>> {
        let mut conn = self.pool.acquire().await?;
        let Some(raw): Option<String> =
            sqlx::query_scalar("SELECT value FROM thread_state WHERE thread_id = $1")
                .bind(thread_id)
                .fetch_optional(&mut *conn)
                .await?
        else {
            return Ok(None);
        };
        let state = decode_state_str(&raw)?;
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
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        let next: i64 = sqlx::query_scalar(
            "SELECT COALESCE(MAX(idx) + 1, 0) FROM transcript WHERE thread_id = $1",
        )
        .bind(&state.thread_id)
        .fetch_one(&mut *tx)
        .await?;
        for (offset, m) in append.iter().enumerate() {
            sqlx::query(
                "INSERT INTO transcript (thread_id, idx, role, content, route, response_style, crisis_level, at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            )
            .bind(&state.thread_id)
            .bind(next + offset as i64)
            .bind(m.role.as_str())
            .bind(&m.content)
            .bind(m.route.map(|r| r.as_str()))
            .bind(m.response_style.map(|r| r.as_str()))
            .bind(m.crisis_level.map(i64::from))
            .bind(m.at.map(fmt_ts))
            .execute(&mut *tx)
            .await?;
        }
        let first_index = to_u64(next, "transcript", "idx")?;
        let message_count = first_index + append.len() as u64;
        state.message_count = message_count;
        let snapshot = encode_state_string(&state)?;
        sqlx::query(
            "INSERT INTO thread_state (thread_id, updated_at, turn_count, message_count, value) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (thread_id) DO UPDATE SET updated_at = excluded.updated_at, \
             turn_count = excluded.turn_count, message_count = excluded.message_count, value = excluded.value",
        )
        .bind(&state.thread_id)
        .bind(fmt_ts(at))
        .bind(to_i64(state.turn_count)?)
        .bind(to_i64(message_count)?)
        .bind(snapshot)
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
            let at = fmt_ts(c.updated_at);
            query = query.bind(at.clone()).bind(at).bind(&c.thread_id);
        }
        let rows = query
            .bind(i64::try_from(limit.saturating_add(1)).unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await?;
        let rows = rows
            .iter()
            .map(|r| {
                let updated: String = r.try_get("updated_at")?;
                Ok(ThreadSummary {
                    thread_id: r.try_get("thread_id")?,
                    turn_count: to_u64(r.try_get("turn_count")?, T, "turn_count")?,
                    message_count: to_u64(r.try_get("message_count")?, T, "message_count")?,
                    updated_at: req_ts(&updated, T, "updated_at")?,
                })
            })
            .collect::<StoreResult<Vec<_>>>()?;
        Ok(ThreadPage::from_rows(rows, limit))
    }

    async fn delete_thread(&self, thread_id: &str) -> StoreResult<bool> {
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
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
impl SessionStore for SqliteStores {
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

fn memory_from_row(row: &sqlx::sqlite::SqliteRow) -> StoreResult<MemoryRecord> {
    const T: &str = "memory_records";
    let kind: String = row.try_get("namespace_kind")?;
    let value: String = row.try_get("value")?;
    let created: String = row.try_get("created_at")?;
    let blob: Option<Vec<u8>> = row.try_get("embedding")?;
    let dim: Option<i64> = row.try_get("embedding_dim")?;
    let model: Option<String> = row.try_get("embedding_model")?;
    let embedding = match (blob, model) {
        (Some(bytes), Some(model)) => {
            let values =
                embedding_from_le_bytes(&bytes).ok_or(StoreError::corrupt(T, "embedding"))?;
            if dim != Some(values.len() as i64) {
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
        value: serde_json::from_str(&value).map_err(|_| StoreError::corrupt(T, "value"))?,
        created_at: req_ts(&created, T, "created_at")?,
        last_referenced_at: opt_ts(row.try_get("last_referenced_at")?, T, "last_referenced_at")?,
        dormant_at: opt_ts(row.try_get("dormant_at")?, T, "dormant_at")?,
        user_visible: row.try_get("user_visible")?,
        embedding,
    })
}

fn json_text(v: &Value) -> StoreResult<String> {
    serde_json::to_string(v).map_err(|_| StoreError::Invalid("value is not JSON"))
}

#[async_trait]
impl MemoryStore for SqliteStores {
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
        .bind(json_text(&r.value)?)
        .bind(fmt_ts(r.created_at))
        .bind(r.last_referenced_at.map(fmt_ts))
        .bind(r.dormant_at.map(fmt_ts))
        .bind(r.user_visible)
        .bind(r.embedding.as_ref().map(|e| embedding_to_le_bytes(&e.values)))
        .bind(r.embedding.as_ref().map(|e| e.dim() as i64))
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
        .bind(json_text(&r.value)?)
        .bind(fmt_ts(r.created_at))
        .bind(r.last_referenced_at.map(fmt_ts))
        .bind(r.dormant_at.map(fmt_ts))
        .bind(r.user_visible)
        .bind(r.embedding.as_ref().map(|e| embedding_to_le_bytes(&e.values)))
        .bind(r.embedding.as_ref().map(|e| e.dim() as i64))
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
impl CrisisLog for SqliteStores {
    async fn append(&self, record: &CrisisRecord) -> StoreResult<bool> {
        let r = record.clone().normalized();
        let value = serde_json::to_string(&r)
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
        .bind(fmt_ts(r.detected_at))
        .bind(r.detected_at.date_naive().to_string())
        .bind(i64::from(r.level.get()))
        .bind(r.response_path.as_str())
        .bind(r.retention_extended_until.map(fmt_ts))
        .bind(value)
        .execute(&self.pool)
        .await?;
        Ok(res.rows_affected() > 0)
    }

    async fn daily_counts(&self, since: NaiveDate) -> StoreResult<Vec<DailyCrisisCount>> {
        const T: &str = "crisis_log";
        let rows = sqlx::query(
            "SELECT detected_date, level, response_path, COUNT(*) AS n FROM crisis_log WHERE detected_date >= $1 \
             GROUP BY detected_date, level, response_path ORDER BY detected_date, level, response_path",
        )
        .bind(since.to_string())
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                let day: String = r.try_get("detected_date")?;
                let path: String = r.try_get("response_path")?;
                let level: i64 = r.try_get("level")?;
                Ok(DailyCrisisCount {
                    day: NaiveDate::from_str(&day)
                        .map_err(|_| StoreError::corrupt(T, "detected_date"))?,
                    level: crisis_level_u8(Some(level), T, "level")?.unwrap_or(0),
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
        .bind(fmt_ts(cutoff))
        .bind(fmt_ts(now))
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
        let rows: Vec<String> = sqlx::query_scalar(
            "SELECT value FROM crisis_log WHERE session_id_opaque = $1 ORDER BY insertion_order",
        )
        .bind(session_id_opaque)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|v| {
                serde_json::from_str(v).map_err(|_| StoreError::corrupt("crisis_log", "value"))
            })
            .collect()
    }
}

#[async_trait]
impl FeedbackStore for SqliteStores {
    async fn append(&self, r: &FeedbackRecord) -> StoreResult<()> {
        let value = serde_json::to_string(r)
            .map_err(|_| StoreError::Invalid("feedback record is not JSON"))?;
        sqlx::query(
            "INSERT INTO session_feedback (id, session_id_opaque, user_id_or_null, recorded_at, recorded_date, label, \
             turn_count_at_end, source, schema_version, value) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        )
        .bind(&r.id)
        .bind(&r.session_id_opaque)
        .bind(&r.user_id_or_null)
        .bind(fmt_ts(r.recorded_at))
        .bind(r.recorded_at.date_naive().to_string())
        .bind(r.label.as_str())
        .bind(to_i64(r.turn_count_at_end)?)
        .bind(r.source.as_str())
        .bind(i64::from(r.schema_version))
        .bind(value)
        .execute(&self.pool)
        .await
        .map_err(|e| conflict(e, "feedback record"))?;
        Ok(())
    }

    async fn list_for_session(&self, session_id_opaque: &str) -> StoreResult<Vec<FeedbackRecord>> {
        let rows: Vec<String> = sqlx::query_scalar(
            "SELECT value FROM session_feedback WHERE session_id_opaque = $1 ORDER BY insertion_order",
        )
        .bind(session_id_opaque)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|v| {
                serde_json::from_str(v)
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
impl VoiceFinalizationStore for SqliteStores {
    async fn set(&self, s: &VoiceFinalization) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO voice_finalization_status (thread_id, status, detail, updated_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (thread_id) DO UPDATE SET status = excluded.status, detail = excluded.detail, \
             updated_at = excluded.updated_at",
        )
        .bind(&s.thread_id)
        .bind(s.status.as_str())
        .bind(&s.detail)
        .bind(fmt_ts(s.updated_at))
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
            let updated: String = r.try_get("updated_at")?;
            Ok(VoiceFinalization {
                thread_id: r.try_get("thread_id")?,
                status: parse_enum::<VoiceFinalizationState>(&status, T, "status")?,
                detail: r.try_get("detail")?,
                updated_at: req_ts(&updated, T, "updated_at")?,
            })
        })
        .transpose()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Every shape of the thread listing is an index search with no sort
    /// step, so one owner's page costs the same whatever others store.
    #[tokio::test]
    async fn thread_pages_use_an_index_without_sorting() {
        let dir = tempfile::tempdir().unwrap();
        let db = SqliteStores::open(dir.path().join("plan.db"))
            .await
            .unwrap();
        for (by_owner, after, index) in [
            (true, false, "thread_state_owner_updated_idx"),
            (true, true, "thread_state_owner_updated_idx"),
            (false, false, "thread_state_updated_id_idx"),
            (false, true, "thread_state_updated_id_idx"),
        ] {
            let sql = format!("EXPLAIN QUERY PLAN {}", thread_page_sql(by_owner, after));
            let mut query = sqlx::query(&sql);
            if by_owner {
                query = query.bind("alice");
            }
            if after {
                query = query
                    .bind("2026-01-01T00:00:00.000000Z")
                    .bind("2026-01-01T00:00:00.000000Z")
                    .bind("alice:t");
            }
            let rows = query.bind(21_i64).fetch_all(db.pool()).await.unwrap();
            let plan: Vec<String> = rows
                .iter()
                .map(|r| r.try_get::<String, _>("detail").unwrap())
                .collect();
            let plan = plan.join("; ");
            assert!(plan.contains(index), "{by_owner}/{after}: {plan}");
            assert!(!plan.contains("TEMP B-TREE"), "{by_owner}/{after}: {plan}");
        }
        db.close().await;
    }

    /// The database is private to the account: directories created for it
    /// are 0700, the file and its `-wal` / `-shm` 0600, whatever the umask.
    #[cfg(unix)]
    #[tokio::test]
    async fn database_files_are_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let path = data.join("nested/opencouch.sqlite3");
        let db = SqliteStores::open(&path).await.unwrap();
        // A write, so the WAL and shared-memory files exist.
        db.clone()
            .into_stores()
            .threads
            .commit_turn(crate::records::TurnCommit {
                state: opencouch_core::ThreadState::new("t", opencouch_core::Channel::Test),
                append: Vec::new(),
                session: SessionWrite::Keep,
                at: Utc::now(),
            })
            .await
            .unwrap();
        assert_eq!(mode(&data), 0o700, "data directory");
        assert_eq!(mode(&data.join("nested")), 0o700, "nested directory");
        assert_eq!(mode(&path), 0o600, "database file");
        for suffix in ["-wal", "-shm"] {
            let companion = PathBuf::from(format!("{}{suffix}", path.display()));
            assert!(companion.exists(), "{suffix} exists while open");
            assert_eq!(mode(&companion), 0o600, "{suffix}");
        }
        db.close().await;

        // A database created by an earlier build (0644) is tightened, and
        // the directory it lives in, not created here, is left alone.
        let old_dir = dir.path().join("old");
        std::fs::create_dir(&old_dir).unwrap();
        std::fs::set_permissions(&old_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let old = old_dir.join("old.sqlite3");
        let db = SqliteStores::open(&old).await.unwrap();
        db.close().await;
        std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o644)).unwrap();
        let db = SqliteStores::open(&old).await.unwrap();
        assert_eq!(mode(&old), 0o600, "existing database file tightened");
        assert_eq!(mode(&old_dir), 0o755, "existing directory untouched");
        db.close().await;
    }
}
