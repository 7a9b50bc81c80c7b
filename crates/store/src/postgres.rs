//! PostgreSQL backend: durable, multi-instance deployments.
//!
//! Several server processes may share one database: turns on a thread are
//! serialized by advisory locks taken through [`ThreadLocks`] on a separate
//! lock pool, and the embedded migrations run under sqlx's migration lock,
//! so concurrent start-ups do not race. Durability is PostgreSQL's default
//! (`synchronous_commit=on`): a committed turn survives a crash.
//!
//! This file owns what is PostgreSQL's own: the two pools, migrations, the
//! bulk transcript insert (`UNNEST`), the one-statement turn commit
//! (data-modifying CTEs), and how values are bound and read back
//! (its `SqlBackend` and `SqlRow` implementations: `TIMESTAMPTZ`, `DATE`,
//! `JSONB`, `SMALLINT` levels, `REAL[]` embeddings). The queries themselves
//! are shared with SQLite in `crate::sql`; advisory locks live in
//! `crate::lock`.

use std::str::FromStr;
use std::sync::LazyLock;
use std::time::Duration;

use chrono::{DateTime, NaiveDate, Utc};
use opencouch_core::{Message, ThreadState};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use sqlx::postgres::{PgArguments, PgConnectOptions, PgPoolOptions, PgRow};
use sqlx::{Connection, PgConnection, PgPool, Postgres, Row};
use tokio::sync::OwnedMutexGuard;

use crate::codec::decode_state;
use crate::error::{StoreError, StoreResult};
use crate::lock::{HeldConns, ThreadLocks};
use crate::records::SessionWrite;
use crate::sql::{Arg, AtEnd, SqlBackend, SqlRow, Stmt, TurnConn, crisis_level_u8, to_i64};
use crate::{Backend, Stores};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

/// Connections for queries.
pub const QUERY_POOL_SIZE: u32 = 10;
/// Connections for advisory locks (each held turn pins one).
pub const LOCK_POOL_SIZE: u32 = 16;
/// A pooled connection idle for at least this long is pinged before it is
/// handed out (a server restart or a dropped network path is noticed there
/// and the connection replaced). One in steady use is handed out without the
/// ping: sqlx's default pings on *every* acquire, one extra round trip per
/// query. (sqlx also pings every connection returned to the pool; that
/// one runs on a background task, off the caller's path.)
pub const IDLE_PING_AFTER: Duration = Duration::from_secs(1);

/// Pool options shared by the query and the lock pool: the health check
/// only for connections idle [`IDLE_PING_AFTER`] or longer.
fn pool_options(max_connections: u32) -> PgPoolOptions {
    PgPoolOptions::new()
        .max_connections(max_connections)
        .test_before_acquire(false)
        .before_acquire(|conn, meta| {
            Box::pin(async move {
                if meta.idle_for >= IDLE_PING_AFTER {
                    conn.ping().await?;
                }
                Ok(true)
            })
        })
}

/// The PostgreSQL backend (implements every store trait).
#[derive(Clone, Debug)]
pub struct PgStores {
    pool: PgPool,
    lock_pool: PgPool,
    /// Connections of this process's held thread locks, lent to the turn
    /// queries on those threads (see [`SqlBackend::turn_conn`]).
    held: HeldConns,
}

impl PgStores {
    /// Connects to `url` and applies the embedded migrations.
    pub async fn connect(url: &str) -> StoreResult<Self> {
        let options = PgConnectOptions::from_str(url)?;
        let pool = pool_options(QUERY_POOL_SIZE)
            .connect_with(options.clone())
            .await?;
        let lock_pool = pool_options(LOCK_POOL_SIZE).connect_lazy_with(options);
        let stores = PgStores {
            pool,
            lock_pool,
            held: HeldConns::default(),
        };
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
    /// PostgreSQL advisory locks; while a thread's lock is held, this
    /// backend runs the turn's queries on the thread (load, session row,
    /// commit) on the lock's connection.
    pub fn into_stores(self) -> Stores {
        let locks = ThreadLocks::with_postgres_sharing(self.lock_pool.clone(), self.held.clone());
        Stores::from_backend(std::sync::Arc::new(self), Backend::Postgres, locks)
    }

    /// Closes both pools.
    pub async fn close(&self) {
        self.lock_pool.close().await;
        self.pool.close().await;
    }
}

type PgQuery<'q> = sqlx::query::Query<'q, Postgres, PgArguments>;

/// Binds one argument in its PostgreSQL form: `TIMESTAMPTZ`, `DATE`,
/// `JSONB`, `SMALLINT` levels, `INTEGER` where the column is one, `REAL[]`
/// embeddings.
fn bind<'q>(q: PgQuery<'q>, arg: Arg<'q>) -> StoreResult<PgQuery<'q>> {
    Ok(match arg {
        Arg::Text(v) => q.bind(v),
        Arg::Int(v) => q.bind(v),
        Arg::Int4(v, too_large) => q.bind(
            v.map(i32::try_from)
                .transpose()
                .map_err(|_| StoreError::Invalid(too_large))?,
        ),
        Arg::Bool(v) => q.bind(v),
        Arg::Ts(v) => q.bind(v),
        Arg::Date(v) => q.bind(v),
        Arg::Level(v) => q.bind(v.map(i16::from)),
        Arg::Json(v) => q.bind(v),
        Arg::Floats(v) => q.bind(v),
        Arg::OwnedText(v) => q.bind(v),
        Arg::OwnedJson(v) => q.bind(v),
    })
}

/// The statement with its arguments bound.
fn prepare<'q>(sql: &'q str, args: Vec<Arg<'q>>) -> StoreResult<PgQuery<'q>> {
    args.into_iter().try_fold(sqlx::query(sql), bind)
}

impl SqlBackend for PgStores {
    type DB = Postgres;
    type Row = PgRow;

    const BYTE_ORDER: &'static str = " COLLATE \"C\"";

    fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The held thread lock's connection when this process holds the lock.
    async fn turn_conn(&self, thread_id: &str) -> StoreResult<TurnConn<Postgres>> {
        if let Some(slot) = self.held.get(thread_id)
            && let Ok(conn) = OwnedMutexGuard::try_map(slot.lock_owned().await, Option::as_mut)
        {
            return Ok(TurnConn::Held(conn));
        }
        Ok(TurnConn::Pooled(self.pool.acquire().await?))
    }

    async fn execute_in<'c>(conn: &'c mut PgConnection, stmt: Stmt<'c>) -> StoreResult<u64> {
        let (sql, args) = stmt.into_parts();
        let done = prepare(&sql, args)?.execute(conn).await?;
        Ok(done.rows_affected())
    }

    async fn fetch_all_in<'c>(
        conn: &'c mut PgConnection,
        stmt: Stmt<'c>,
    ) -> StoreResult<Vec<PgRow>> {
        let (sql, args) = stmt.into_parts();
        Ok(prepare(&sql, args)?.fetch_all(conn).await?)
    }

    async fn fetch_optional_in<'c>(
        conn: &'c mut PgConnection,
        stmt: Stmt<'c>,
    ) -> StoreResult<Option<PgRow>> {
        let (sql, args) = stmt.into_parts();
        Ok(prepare(&sql, args)?.fetch_optional(conn).await?)
    }

    fn document<T: Serialize>(value: &T, what: &'static str) -> StoreResult<Arg<'static>> {
        serde_json::to_value(value)
            .map(Arg::OwnedJson)
            .map_err(|_| StoreError::Invalid(what))
    }

    /// One statement for all entries: parallel arrays through `UNNEST`.
    async fn insert_transcript<'c>(
        conn: &'c mut PgConnection,
        thread_id: &'c str,
        first: i64,
        messages: &'c [Message],
    ) -> StoreResult<()> {
        let a = TranscriptArrays::new(messages);
        let idx: Vec<i64> = (0..messages.len() as i64).map(|o| first + o).collect();
        sqlx::query(
            "INSERT INTO transcript (thread_id, idx, role, content, route, response_style, crisis_level, at) \
             SELECT $1, * FROM UNNEST($2::BIGINT[], $3::TEXT[], $4::TEXT[], $5::TEXT[], $6::TEXT[], \
             $7::SMALLINT[], $8::TIMESTAMPTZ[])",
        )
        .bind(thread_id)
        .bind(&idx)
        .bind(&a.role)
        .bind(&a.content)
        .bind(&a.route)
        .bind(&a.style)
        .bind(&a.level)
        .bind(&a.at)
        .execute(conn)
        .await?;
        Ok(())
    }

    const COMMIT_AT_END: bool = true;

    /// One statement (see [`commit_at_end_sql`]): one round trip instead
    /// of six (`BEGIN`, end of transcript, rows, snapshot, session row,
    /// `COMMIT`), the same durability (`synchronous_commit` applies to the
    /// statement's implicit transaction as to an explicit one).
    async fn commit_at_end<'a>(&'a self, c: AtEnd<'a>) -> StoreResult<bool> {
        let a = TranscriptArrays::new(c.append);
        let mut q = sqlx::query(commit_at_end_sql(c.session))
            .bind(c.thread_id)
            .bind(c.first)
            .bind(&a.role)
            .bind(&a.content)
            .bind(&a.route)
            .bind(&a.style)
            .bind(&a.level)
            .bind(&a.at)
            .bind(c.at)
            .bind(c.turn_count)
            .bind(c.message_count)
            .bind(c.snapshot);
        if let SessionWrite::Upsert(s) = c.session {
            q = q
                .bind(s.started_at)
                .bind(s.last_active_at)
                .bind(to_i64(s.transcript_start_index)?)
                .bind(i16::from(s.max_crisis_level.min(3)))
                .bind(&s.session_buffer)
                .bind(s.rotate_after_this_turn)
                .bind(s.finalize_required_reason.as_deref());
        }
        let mut conn = self.turn_conn(c.thread_id).await?;
        let next: i64 = q.fetch_one(&mut *conn).await?.try_get("n")?;
        Ok(next == c.first)
    }
}

/// The parallel arrays of a bulk transcript insert (`UNNEST`), one element
/// per message.
struct TranscriptArrays<'m> {
    role: Vec<&'m str>,
    content: Vec<&'m str>,
    route: Vec<Option<&'m str>>,
    style: Vec<Option<&'m str>>,
    level: Vec<Option<i16>>,
    at: Vec<Option<DateTime<Utc>>>,
}

impl<'m> TranscriptArrays<'m> {
    fn new(messages: &'m [Message]) -> Self {
        TranscriptArrays {
            role: messages.iter().map(|m| m.role.as_str()).collect(),
            content: messages.iter().map(|m| m.content.as_str()).collect(),
            route: messages
                .iter()
                .map(|m| m.route.map(|r| r.as_str()))
                .collect(),
            style: messages
                .iter()
                .map(|m| m.response_style.map(|r| r.as_str()))
                .collect(),
            level: messages
                .iter()
                .map(|m| m.crisis_level.map(i16::from))
                .collect(),
            at: messages.iter().map(|m| m.at).collect(),
        }
    }
}

/// [`SqlBackend::commit_at_end`]'s statement: data-modifying CTEs, each
/// gated on `ok` (the transcript's current end, `next`, is the expected
/// `$2`), so either all of them write or none does; PostgreSQL runs the
/// statement as one transaction. Parameters: thread id, expected end, the
/// message arrays ($3–$8), `updated_at`, turn count, message count,
/// snapshot ($9–$12), then the session row's columns after the thread id
/// ($13–$19) for an upsert. It returns `next`.
fn commit_at_end_sql(session: &SessionWrite) -> &'static str {
    const HEAD: &str = "WITH next AS (SELECT COALESCE(MAX(idx) + 1, 0) AS n FROM transcript WHERE thread_id = $1), \
         ok AS (SELECT n FROM next WHERE n = $2), \
         ins AS (INSERT INTO transcript (thread_id, idx, role, content, route, response_style, crisis_level, at) \
         SELECT $1, ok.n + m.ord - 1, m.role, m.content, m.route, m.response_style, m.crisis_level, m.at \
         FROM ok, UNNEST($3::TEXT[], $4::TEXT[], $5::TEXT[], $6::TEXT[], $7::SMALLINT[], $8::TIMESTAMPTZ[]) \
         WITH ORDINALITY AS m(role, content, route, response_style, crisis_level, at, ord)), \
         snap AS (INSERT INTO thread_state (thread_id, updated_at, turn_count, message_count, value) \
         SELECT $1, $9, $10, $11, $12 FROM ok ON CONFLICT (thread_id) DO UPDATE SET updated_at = excluded.updated_at, \
         turn_count = excluded.turn_count, message_count = excluded.message_count, value = excluded.value)";
    static SQL: LazyLock<[String; 3]> = LazyLock::new(|| {
        [
            format!("{HEAD} SELECT n FROM next"),
            format!(
                "{HEAD}, sess AS (INSERT INTO active_sessions (thread_id, started_at, last_active_at, \
                 transcript_start_index, max_crisis_level, session_buffer, rotate_after_this_turn, \
                 finalize_required_reason) SELECT $1, $13, $14, $15, $16, $17, $18, $19 FROM ok \
                 ON CONFLICT (thread_id) DO UPDATE SET started_at = excluded.started_at, \
                 last_active_at = excluded.last_active_at, transcript_start_index = excluded.transcript_start_index, \
                 max_crisis_level = excluded.max_crisis_level, session_buffer = excluded.session_buffer, \
                 rotate_after_this_turn = excluded.rotate_after_this_turn, \
                 finalize_required_reason = excluded.finalize_required_reason) SELECT n FROM next"
            ),
            format!(
                "{HEAD}, sess AS (DELETE FROM active_sessions WHERE thread_id = $1 \
                 AND EXISTS (SELECT 1 FROM ok)) SELECT n FROM next"
            ),
        ]
    });
    match session {
        SessionWrite::Keep => &SQL[0],
        SessionWrite::Upsert(_) => &SQL[1],
        SessionWrite::Clear => &SQL[2],
    }
}

/// Columns in their PostgreSQL form (see [`bind`]).
impl SqlRow for PgRow {
    fn text(&self, col: &str) -> StoreResult<String> {
        Ok(self.try_get(col)?)
    }

    fn opt_text(&self, col: &str) -> StoreResult<Option<String>> {
        Ok(self.try_get(col)?)
    }

    fn int(&self, col: &str) -> StoreResult<i64> {
        Ok(self.try_get(col)?)
    }

    fn opt_int4(&self, col: &str) -> StoreResult<Option<i64>> {
        Ok(self.try_get::<Option<i32>, _>(col)?.map(i64::from))
    }

    fn flag(&self, col: &str) -> StoreResult<bool> {
        Ok(self.try_get(col)?)
    }

    fn level(&self, table: &'static str, col: &'static str) -> StoreResult<Option<u8>> {
        let raw: Option<i16> = self.try_get(col)?;
        crisis_level_u8(raw.map(i64::from), table, col)
    }

    fn ts(&self, _table: &'static str, col: &'static str) -> StoreResult<DateTime<Utc>> {
        Ok(self.try_get(col)?)
    }

    fn opt_ts(
        &self,
        _table: &'static str,
        col: &'static str,
    ) -> StoreResult<Option<DateTime<Utc>>> {
        Ok(self.try_get(col)?)
    }

    fn lenient_ts(&self, col: &str) -> StoreResult<Option<DateTime<Utc>>> {
        Ok(self.try_get(col)?)
    }

    fn date(&self, _table: &'static str, col: &'static str) -> StoreResult<NaiveDate> {
        Ok(self.try_get(col)?)
    }

    fn json<T: DeserializeOwned>(&self, table: &'static str, col: &'static str) -> StoreResult<T> {
        let raw: Value = self.try_get(col)?;
        serde_json::from_value(raw).map_err(|_| StoreError::corrupt(table, col))
    }

    /// `JSONB` is always valid JSON; a JSON `null` counts as unreadable.
    fn lenient_json(&self, col: &str) -> StoreResult<Option<Value>> {
        let raw: Value = self.try_get(col)?;
        Ok(Some(raw).filter(|v| !v.is_null()))
    }

    fn state(&self, col: &str) -> StoreResult<ThreadState> {
        Ok(decode_state(&self.try_get::<Value, _>(col)?)?)
    }

    fn floats(&self, _table: &'static str, col: &'static str) -> StoreResult<Option<Vec<f32>>> {
        Ok(self.try_get(col)?)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::sql::threads::thread_page_sql;

    /// The one-statement commit writes when the transcript ends where
    /// expected and writes nothing otherwise (`commit_turn` then takes the
    /// transaction), for every kind of session write.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn commit_at_end_writes_only_at_the_end() {
        use opencouch_core::Channel;

        use crate::session::ActiveSession;
        use crate::traits::{SessionStore, ThreadStore};

        let Some(db) = crate::testing::pg_test_db().await else {
            return;
        };
        let pg = PgStores::connect(db.url()).await.unwrap();
        let state = ThreadState::new("cae", Channel::Web);
        let snapshot = crate::codec::encode_state(&state).unwrap();
        let append = [Message::user("u"), Message::assistant("a")];
        // Whole seconds: what the database keeps (microseconds) is exact.
        let now = DateTime::from_timestamp(1_770_000_000, 0).unwrap();
        let row = ActiveSession::start("cae", now, 0);
        let sessions = [
            SessionWrite::Upsert(row.clone()),
            SessionWrite::Keep,
            SessionWrite::Clear,
        ];
        for (i, session) in sessions.iter().enumerate() {
            let first = 2 * i as i64;
            let commit = |first: i64| AtEnd {
                thread_id: "cae",
                first,
                append: &append,
                at: now,
                turn_count: i as i64 + 1,
                message_count: first + 2,
                snapshot: &snapshot,
                session,
            };
            // Ahead of and behind the end: nothing written.
            for wrong in [first + 1, first - 1] {
                assert!(
                    !pg.commit_at_end(commit(wrong)).await.unwrap(),
                    "{i}/{wrong}"
                );
            }
            let before = pg.history("cae", 100, None).await.unwrap();
            assert_eq!(before.len(), 2 * i, "{i}");
            assert!(pg.commit_at_end(commit(first)).await.unwrap(), "{i}");
            let rows = pg.history("cae", 100, None).await.unwrap();
            let idx: Vec<u64> = rows.iter().map(|e| e.index).collect();
            assert_eq!(idx, (0..first as u64 + 2).collect::<Vec<_>>(), "{i}");
            let count: i64 = sqlx::query_scalar(
                "SELECT message_count FROM thread_state WHERE thread_id = 'cae'",
            )
            .fetch_one(pg.pool())
            .await
            .unwrap();
            assert_eq!(count, first + 2, "{i}");
            let got = SessionStore::get(&pg, "cae").await.unwrap();
            match session {
                SessionWrite::Clear => assert!(got.is_none()),
                _ => assert_eq!(got.as_ref(), Some(&row)),
            }
        }
        pg.close().await;
    }

    /// While this process holds a thread's lock, the turn's queries on the
    /// thread run on the connection holding the advisory lock; other
    /// threads' queries, and this one's after release, use the pool.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn turn_queries_run_on_the_lock_connection() {
        let Some(db) = crate::testing::pg_test_db().await else {
            return;
        };
        let pg = PgStores::connect(db.url()).await.unwrap();
        let stores = pg.clone().into_stores();
        async fn pid(conn: &mut TurnConn<Postgres>) -> i32 {
            sqlx::query_scalar("SELECT pg_backend_pid()")
                .fetch_one(&mut **conn)
                .await
                .unwrap()
        }
        async fn lock_holders(pg: &PgStores) -> Vec<i32> {
            sqlx::query_scalar(
                "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted \
                 AND classid = 1 AND objid::INT = hashtext('t1')",
            )
            .fetch_all(pg.pool())
            .await
            .unwrap()
        }
        for round in 0..2 {
            let guard = stores.lock_thread("t1").await.unwrap();
            let mut conn = pg.turn_conn("t1").await.unwrap();
            assert!(matches!(conn, TurnConn::Held(_)), "{round}");
            let holder = pid(&mut conn).await;
            drop(conn);
            assert_eq!(lock_holders(&pg).await, vec![holder], "{round}");
            let mut other = pg.turn_conn("t2").await.unwrap();
            assert!(matches!(other, TurnConn::Pooled(_)));
            assert_ne!(pid(&mut other).await, holder);
            drop(other);
            if round == 0 {
                guard.release().await.unwrap();
            } else {
                drop(guard);
                // The spawned unlock finishes before the lock is free again.
                drop(stores.lock_thread("t1").await.unwrap());
            }
            assert!(matches!(
                pg.turn_conn("t1").await.unwrap(),
                TurnConn::Pooled(_)
            ));
        }
        pg.close().await;
    }

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
            let sql = format!(
                "EXPLAIN {}",
                thread_page_sql(PgStores::BYTE_ORDER, by_owner, after)
            );
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
