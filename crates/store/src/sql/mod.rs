//! The SQL layer the SQLite and PostgreSQL backends share: the dialect
//! interface each backend implements ([`SqlBackend`]), statements and their
//! arguments ([`Stmt`], [`Arg`]), typed row access ([`SqlRow`]), and the
//! conversions, enum parsing and error mapping of stored values.
//!
//! Every query is written once, here and in [`threads`], [`records`],
//! [`owners`] and `crate::users`, which implement the store traits for any [`SqlBackend`].
//! Query text uses `$1`-style placeholders, which both databases accept
//! (SQLite treats `$N` as parameter `N`, so a number may repeat). What the
//! two databases store differently is isolated in the backend: how an
//! [`Arg`] is bound (timestamps and JSON are TEXT in SQLite, `TIMESTAMPTZ` and
//! `JSONB` in PostgreSQL; levels `INTEGER` vs `SMALLINT`; embeddings a
//! little-endian BLOB vs `REAL[]`), how a [`SqlRow`] column is read back, how
//! a write transaction begins, and the byte-order collation
//! ([`SqlBackend::BYTE_ORDER`]).

pub(crate) mod owners;
pub(crate) mod records;
pub(crate) mod threads;

use std::borrow::Cow;
use std::future::Future;
use std::ops::{Deref, DerefMut};
use std::str::FromStr;

use chrono::{DateTime, NaiveDate, Utc};
use opencouch_core::{Message, ThreadState};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use sqlx::pool::PoolConnection;
use sqlx::{Database, Pool, Transaction};
use tokio::sync::OwnedMappedMutexGuard;

use crate::error::{StoreError, StoreResult};
use crate::records::SessionWrite;

/// A backend's connection type (what a pooled connection or a transaction
/// dereferences to).
pub(crate) type Conn<B> = <<B as SqlBackend>::DB as Database>::Connection;

/// A backend's transaction, begun on its pool.
pub(crate) type Tx<B> = Transaction<'static, <B as SqlBackend>::DB>;

/// What a SQL backend supplies so the shared queries can run on it: its
/// pool, how it binds [`Arg`]s and reads rows, and the few statements that
/// differ between dialects. The shared store-trait implementations
/// (`impl<B: SqlBackend> ThreadStore for B`, …) are written against this.
///
/// The shared code is generic over this trait rather than over
/// `sqlx::Database`: sqlx's executor and encode/decode bounds would have to
/// be restated on every generic function, so the three statement calls,
/// binding and row reading are written against concrete sqlx types in each
/// backend instead.
///
/// Public only so it may bound those implementations; the module is
/// private, so nothing outside the crate can name or implement it.
pub trait SqlBackend: Send + Sync + 'static {
    /// The sqlx database.
    type DB: Database;
    /// A result row.
    type Row: SqlRow + Send;

    /// What to append to a text column so it compares in byte order:
    /// empty for SQLite (its default `BINARY` collation is byte order),
    /// ` COLLATE "C"` for PostgreSQL. Thread ids and response paths are
    /// ordered this way on every backend.
    const BYTE_ORDER: &'static str;

    /// The query pool.
    fn pool(&self) -> &Pool<Self::DB>;

    /// A connection for a query on `thread_id` during its turn: the one
    /// pinned by the thread's lock when this process holds it and the
    /// dialect lends it (PostgreSQL), else a pooled one (the default).
    fn turn_conn(
        &self,
        thread_id: &str,
    ) -> impl Future<Output = StoreResult<TurnConn<Self::DB>>> + Send {
        let _ = thread_id;
        async move { Ok(TurnConn::Pooled(self.pool().acquire().await?)) }
    }

    /// Runs `stmt` on `conn`; the number of rows it changed.
    fn execute_in<'c>(
        conn: &'c mut Conn<Self>,
        stmt: Stmt<'c>,
    ) -> impl Future<Output = StoreResult<u64>> + Send + 'c;

    /// Runs `stmt` on `conn`; every row.
    fn fetch_all_in<'c>(
        conn: &'c mut Conn<Self>,
        stmt: Stmt<'c>,
    ) -> impl Future<Output = StoreResult<Vec<Self::Row>>> + Send + 'c;

    /// Runs `stmt` on `conn`; the first row, if any.
    fn fetch_optional_in<'c>(
        conn: &'c mut Conn<Self>,
        stmt: Stmt<'c>,
    ) -> impl Future<Output = StoreResult<Option<Self::Row>>> + Send + 'c;

    /// A record document for a JSON column, as this dialect stores it
    /// (JSON text in SQLite, `JSONB` in PostgreSQL); `what` names the record
    /// in the error when it cannot be represented as JSON.
    fn document<T: Serialize>(value: &T, what: &'static str) -> StoreResult<Arg<'static>>;

    /// Begins a write transaction (SQLite takes the write lock up front).
    fn begin_write(&self) -> impl Future<Output = StoreResult<Tx<Self>>> + Send {
        async move { Ok(self.pool().begin().await?) }
    }

    /// Appends `messages` to `thread_id`'s transcript at indexes `first`,
    /// `first + 1`, …: one multi-row `INSERT` per [`INSERT_ROWS`] entries
    /// unless the dialect has a bulk form (PostgreSQL overrides this).
    fn insert_transcript<'c>(
        conn: &'c mut Conn<Self>,
        thread_id: &'c str,
        first: i64,
        messages: &'c [Message],
    ) -> impl Future<Output = StoreResult<()>> + Send + 'c {
        async move {
            for (chunk_no, chunk) in messages.chunks(INSERT_ROWS).enumerate() {
                let rows: Vec<String> = (0..chunk.len())
                    .map(|r| {
                        let p = 1 + 7 * r;
                        format!(
                            "($1, ${}, ${}, ${}, ${}, ${}, ${}, ${})",
                            p + 1,
                            p + 2,
                            p + 3,
                            p + 4,
                            p + 5,
                            p + 6,
                            p + 7
                        )
                    })
                    .collect();
                let mut stmt = Stmt::new(format!(
                    "INSERT INTO transcript (thread_id, idx, role, content, route, response_style, \
                     crisis_level, at) VALUES {}",
                    rows.join(", ")
                ))
                .bind(thread_id);
                let base = first + (chunk_no * INSERT_ROWS) as i64;
                for (offset, m) in chunk.iter().enumerate() {
                    stmt = stmt
                        .bind(base + offset as i64)
                        .bind(m.role.as_str())
                        .bind(m.content.as_str())
                        .bind(m.route.map(|r| r.as_str()))
                        .bind(m.response_style.map(|r| r.as_str()))
                        .bind(Arg::Level(m.crisis_level))
                        .bind(m.at);
                }
                Self::execute_in(&mut *conn, stmt).await?;
            }
            Ok(())
        }
    }

    /// Whether [`Self::commit_at_end`] can commit (the default cannot).
    const COMMIT_AT_END: bool = false;

    /// Commits a turn in one statement (one round trip, no explicit
    /// transaction) if `thread_id`'s transcript currently ends at index
    /// `first`: appends the entries from there, upserts the snapshot and
    /// applies the session write, all or nothing. Returns whether it did;
    /// when the transcript ends elsewhere it writes nothing and returns
    /// `false`, and so does the default (dialects without such a form).
    fn commit_at_end<'a>(
        &'a self,
        commit: AtEnd<'a>,
    ) -> impl Future<Output = StoreResult<bool>> + Send + 'a {
        async move {
            let _ = commit;
            Ok(false)
        }
    }

    /// Runs `stmt` on a pooled connection; the number of rows it changed.
    fn execute(&self, stmt: Stmt<'_>) -> impl Future<Output = StoreResult<u64>> + Send {
        async move {
            let mut conn = self.pool().acquire().await?;
            Self::execute_in(&mut conn, stmt).await
        }
    }

    /// Runs `stmt` on a pooled connection; every row.
    fn fetch_all(
        &self,
        stmt: Stmt<'_>,
    ) -> impl Future<Output = StoreResult<Vec<Self::Row>>> + Send {
        async move {
            let mut conn = self.pool().acquire().await?;
            Self::fetch_all_in(&mut conn, stmt).await
        }
    }

    /// Runs `stmt` on a pooled connection; the first row, if any.
    fn fetch_optional(
        &self,
        stmt: Stmt<'_>,
    ) -> impl Future<Output = StoreResult<Option<Self::Row>>> + Send {
        async move {
            let mut conn = self.pool().acquire().await?;
            Self::fetch_optional_in(&mut conn, stmt).await
        }
    }

    /// Runs `stmt` on a pooled connection; its first row, which must exist.
    fn fetch_one(&self, stmt: Stmt<'_>) -> impl Future<Output = StoreResult<Self::Row>> + Send {
        async move {
            let mut conn = self.pool().acquire().await?;
            Self::fetch_one_in(&mut conn, stmt).await
        }
    }

    /// Runs `stmt` on `conn`; its first row, which must exist.
    fn fetch_one_in<'c>(
        conn: &'c mut Conn<Self>,
        stmt: Stmt<'c>,
    ) -> impl Future<Output = StoreResult<Self::Row>> + Send + 'c {
        async move {
            Self::fetch_optional_in(conn, stmt)
                .await?
                .ok_or(StoreError::Database(sqlx::Error::RowNotFound))
        }
    }
}

/// A connection from [`SqlBackend::turn_conn`].
pub enum TurnConn<DB: Database> {
    /// Taken from the query pool; returned on drop.
    Pooled(PoolConnection<DB>),
    /// Lent by the thread's held lock, exclusively until dropped.
    Held(OwnedMappedMutexGuard<Option<PoolConnection<DB>>, PoolConnection<DB>>),
}

impl<DB: Database> Deref for TurnConn<DB> {
    type Target = DB::Connection;

    fn deref(&self) -> &DB::Connection {
        match self {
            TurnConn::Pooled(conn) => conn,
            TurnConn::Held(conn) => conn,
        }
    }
}

impl<DB: Database> DerefMut for TurnConn<DB> {
    fn deref_mut(&mut self) -> &mut DB::Connection {
        match self {
            TurnConn::Pooled(conn) => conn,
            TurnConn::Held(conn) => conn,
        }
    }
}

/// Transcript rows per `INSERT` of the default [`SqlBackend::insert_transcript`]
/// (8 parameters a row, well under SQLite's limit of 32,766).
pub(crate) const INSERT_ROWS: usize = 100;

/// A turn commit for [`SqlBackend::commit_at_end`], its values already
/// checked and converted.
#[derive(Debug, Clone, Copy)]
pub struct AtEnd<'a> {
    /// The thread.
    pub thread_id: &'a str,
    /// Index of the first appended entry: where the transcript must end.
    pub first: i64,
    /// The entries to append.
    pub append: &'a [Message],
    /// The snapshot's `updated_at`.
    pub at: DateTime<Utc>,
    /// The snapshot's turn count.
    pub turn_count: i64,
    /// The transcript length after the commit (`first + append.len()`).
    pub message_count: i64,
    /// The encoded snapshot (its `message_count` already set).
    pub snapshot: &'a Value,
    /// What happens to the active-session row.
    pub session: &'a SessionWrite,
}

/// One value bound to a statement, by what it means; the backend picks the
/// column type (see [`SqlBackend`]).
#[derive(Debug, Clone)]
pub enum Arg<'a> {
    /// Text (`NULL` when `None`).
    Text(Option<&'a str>),
    /// A 64-bit integer (`BIGINT`).
    Int(Option<i64>),
    /// An `INTEGER` column: PostgreSQL binds an `i32` and refuses a larger
    /// value with [`StoreError::Invalid`] and this message; SQLite binds the
    /// value as it is.
    Int4(Option<i64>, &'static str),
    /// A boolean.
    Bool(bool),
    /// A timestamp (fixed-width RFC 3339 text in SQLite).
    Ts(Option<DateTime<Utc>>),
    /// A calendar day (`YYYY-MM-DD` text in SQLite).
    Date(NaiveDate),
    /// A crisis level, 0–3.
    Level(Option<u8>),
    /// A JSON document.
    Json(&'a Value),
    /// An embedding vector.
    Floats(Option<&'a [f32]>),
    /// Text the backend encoded itself ([`SqlBackend::document`]).
    OwnedText(String),
    /// JSON the backend encoded itself ([`SqlBackend::document`]).
    OwnedJson(Value),
}

impl<'a> From<&'a str> for Arg<'a> {
    fn from(v: &'a str) -> Self {
        Arg::Text(Some(v))
    }
}

impl<'a> From<&'a String> for Arg<'a> {
    fn from(v: &'a String) -> Self {
        Arg::Text(Some(v))
    }
}

impl<'a> From<Option<&'a str>> for Arg<'a> {
    fn from(v: Option<&'a str>) -> Self {
        Arg::Text(v)
    }
}

impl<'a> From<&'a Option<String>> for Arg<'a> {
    fn from(v: &'a Option<String>) -> Self {
        Arg::Text(v.as_deref())
    }
}

impl From<i64> for Arg<'_> {
    fn from(v: i64) -> Self {
        Arg::Int(Some(v))
    }
}

impl From<bool> for Arg<'_> {
    fn from(v: bool) -> Self {
        Arg::Bool(v)
    }
}

impl From<DateTime<Utc>> for Arg<'_> {
    fn from(v: DateTime<Utc>) -> Self {
        Arg::Ts(Some(v))
    }
}

impl From<Option<DateTime<Utc>>> for Arg<'_> {
    fn from(v: Option<DateTime<Utc>>) -> Self {
        Arg::Ts(v)
    }
}

impl From<NaiveDate> for Arg<'_> {
    fn from(v: NaiveDate) -> Self {
        Arg::Date(v)
    }
}

impl<'a> From<&'a Value> for Arg<'a> {
    fn from(v: &'a Value) -> Self {
        Arg::Json(v)
    }
}

/// A statement and its arguments, bound in order to `$1`, `$2`, ….
#[derive(Debug, Clone)]
pub struct Stmt<'a> {
    sql: Cow<'a, str>,
    args: Vec<Arg<'a>>,
}

impl<'a> Stmt<'a> {
    /// A statement with no arguments yet.
    pub fn new(sql: impl Into<Cow<'a, str>>) -> Self {
        Stmt {
            sql: sql.into(),
            args: Vec::new(),
        }
    }

    /// Appends the next argument.
    pub fn bind(mut self, arg: impl Into<Arg<'a>>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// The SQL text and the arguments, for the backend to bind and run.
    pub fn into_parts(self) -> (Cow<'a, str>, Vec<Arg<'a>>) {
        (self.sql, self.args)
    }
}

/// Typed access to a result row's columns by name. Each backend reads
/// a column in its own stored form and answers in the crate's types; a value
/// that cannot be read is [`StoreError::Corrupt`] naming `table` and the
/// column, a column of the wrong SQL type a [`StoreError::Database`].
pub trait SqlRow {
    /// A text column.
    fn text(&self, col: &str) -> StoreResult<String>;
    /// A nullable text column.
    fn opt_text(&self, col: &str) -> StoreResult<Option<String>>;
    /// A `BIGINT` column (or a count).
    fn int(&self, col: &str) -> StoreResult<i64>;
    /// A nullable `INTEGER` column.
    fn opt_int4(&self, col: &str) -> StoreResult<Option<i64>>;
    /// A boolean column (or an `EXISTS`).
    fn flag(&self, col: &str) -> StoreResult<bool>;
    /// A nullable crisis-level column (0–3).
    fn level(&self, table: &'static str, col: &'static str) -> StoreResult<Option<u8>>;
    /// A timestamp column.
    fn ts(&self, table: &'static str, col: &'static str) -> StoreResult<DateTime<Utc>>;
    /// A nullable timestamp column.
    fn opt_ts(&self, table: &'static str, col: &'static str) -> StoreResult<Option<DateTime<Utc>>>;
    /// A nullable timestamp column whose unreadable value counts as missing.
    fn lenient_ts(&self, col: &str) -> StoreResult<Option<DateTime<Utc>>>;
    /// A calendar-day column.
    fn date(&self, table: &'static str, col: &'static str) -> StoreResult<NaiveDate>;
    /// A JSON column deserialized into `T`.
    fn json<T: DeserializeOwned>(&self, table: &'static str, col: &'static str) -> StoreResult<T>;
    /// A JSON column that may be unreadable: `None` when it is (invalid JSON
    /// text in SQLite, a JSON `null` in PostgreSQL).
    fn lenient_json(&self, col: &str) -> StoreResult<Option<Value>>;
    /// A thread-state snapshot column.
    fn state(&self, col: &str) -> StoreResult<ThreadState>;
    /// A nullable embedding-vector column.
    fn floats(&self, table: &'static str, col: &'static str) -> StoreResult<Option<Vec<f32>>>;
}

/// A count or index for a `BIGINT` column.
pub(crate) fn to_i64(v: u64) -> StoreResult<i64> {
    i64::try_from(v).map_err(|_| StoreError::Invalid("count exceeds i64"))
}

/// A `BIGINT` count or index read back; negative is corrupt.
pub(crate) fn to_u64(v: i64, table: &'static str, column: &'static str) -> StoreResult<u64> {
    u64::try_from(v).map_err(|_| StoreError::corrupt(table, column))
}

/// A `usize` limit for a `LIMIT` clause (saturating).
pub(crate) fn to_limit(v: usize) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// A stored enum name parsed back.
pub(crate) fn parse_enum<T: FromStr>(
    raw: &str,
    table: &'static str,
    column: &'static str,
) -> StoreResult<T> {
    raw.parse::<T>()
        .map_err(|_| StoreError::corrupt(table, column))
}

/// A nullable stored enum name parsed back.
pub(crate) fn opt_enum<T: FromStr>(
    raw: Option<String>,
    table: &'static str,
    column: &'static str,
) -> StoreResult<Option<T>> {
    raw.map(|r| parse_enum(&r, table, column)).transpose()
}

/// A stored crisis level checked to be 0–3.
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
pub(crate) fn conflict(err: StoreError, what: &'static str) -> StoreError {
    match &err {
        StoreError::Database(sqlx::Error::Database(db)) if db.is_unique_violation() => {
            StoreError::Conflict { what }
        }
        _ => err,
    }
}
