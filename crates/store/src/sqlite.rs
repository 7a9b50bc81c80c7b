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
//! (`2026-01-01T12:00:00.000000Z`), so text order equals time order; JSON is
//! TEXT and embeddings a little-endian f32 BLOB.
//!
//! This file owns what is SQLite's own: opening the file (private
//! permissions, pragmas), migrations, `BEGIN IMMEDIATE`, and how values are
//! bound and read back (its `SqlBackend` and `SqlRow` implementations). The
//! queries themselves are shared with PostgreSQL in `crate::sql`.

use std::path::Path;
#[cfg(test)]
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, NaiveDate, Utc};
use opencouch_core::ThreadState;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use sqlx::sqlite::{
    SqliteArguments, SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};
use sqlx::{Row, Sqlite, SqliteConnection, SqlitePool};

use crate::codec::decode_state_str;
use crate::error::{StoreError, StoreResult};
use crate::lock::ThreadLocks;
use crate::records::{embedding_from_le_bytes, embedding_to_le_bytes};
use crate::session::parse_timestamp;
use crate::sql::{Arg, SqlBackend, SqlRow, Stmt, crisis_level_u8};
use crate::{Backend, Stores};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");

/// The schema version this build migrates to: the newest embedded
/// migration (SQLite and PostgreSQL keep the same numbering; the test
/// `migrations_match_across_backends` checks both directories).
pub fn schema_version() -> i64 {
    MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0)
}

/// Busy timeout for every connection.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The SQLite backend (implements every store trait).
#[derive(Clone, Debug)]
pub struct SqliteStores {
    pool: SqlitePool,
}

/// Formats a timestamp in the fixed-width stored form.
fn fmt_ts(t: DateTime<Utc>) -> String {
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
        // No health check on acquire: a connection to a local file does not
        // go stale, and sqlx's default ping costs a hop to the connection's
        // worker thread on every query.
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .test_before_acquire(false)
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

/// Binds one argument in its SQLite form: timestamps as fixed-width text,
/// days as `YYYY-MM-DD`, JSON as text, levels as `INTEGER`, embeddings as a
/// little-endian f32 BLOB.
fn bind<'q>(q: SqliteQuery<'q>, arg: Arg<'q>) -> StoreResult<SqliteQuery<'q>> {
    Ok(match arg {
        Arg::Text(v) => q.bind(v),
        Arg::Int(v) | Arg::Int4(v, _) => q.bind(v),
        Arg::Bool(v) => q.bind(v),
        Arg::Ts(v) => q.bind(v.map(fmt_ts)),
        Arg::Date(v) => q.bind(v.to_string()),
        Arg::Level(v) => q.bind(v.map(i64::from)),
        Arg::Json(v) => q.bind(json_text(v)?),
        Arg::Floats(v) => q.bind(v.map(embedding_to_le_bytes)),
        Arg::OwnedText(v) => q.bind(v),
        Arg::OwnedJson(v) => q.bind(json_text(&v)?),
    })
}

fn json_text(v: &Value) -> StoreResult<String> {
    serde_json::to_string(v).map_err(|_| StoreError::Invalid("value is not JSON"))
}

type SqliteQuery<'q> = sqlx::query::Query<'q, Sqlite, SqliteArguments<'q>>;

/// The statement with its arguments bound.
fn prepare<'q>(sql: &'q str, args: Vec<Arg<'q>>) -> StoreResult<SqliteQuery<'q>> {
    args.into_iter().try_fold(sqlx::query(sql), bind)
}

impl SqlBackend for SqliteStores {
    type DB = Sqlite;
    type Row = SqliteRow;

    const BYTE_ORDER: &'static str = "";

    fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    async fn execute_in<'c>(conn: &'c mut SqliteConnection, stmt: Stmt<'c>) -> StoreResult<u64> {
        let (sql, args) = stmt.into_parts();
        let done = prepare(&sql, args)?.execute(conn).await?;
        Ok(done.rows_affected())
    }

    async fn fetch_all_in<'c>(
        conn: &'c mut SqliteConnection,
        stmt: Stmt<'c>,
    ) -> StoreResult<Vec<SqliteRow>> {
        let (sql, args) = stmt.into_parts();
        Ok(prepare(&sql, args)?.fetch_all(conn).await?)
    }

    async fn fetch_optional_in<'c>(
        conn: &'c mut SqliteConnection,
        stmt: Stmt<'c>,
    ) -> StoreResult<Option<SqliteRow>> {
        let (sql, args) = stmt.into_parts();
        Ok(prepare(&sql, args)?.fetch_optional(conn).await?)
    }

    fn document<T: Serialize>(value: &T, what: &'static str) -> StoreResult<Arg<'static>> {
        serde_json::to_string(value)
            .map(Arg::OwnedText)
            .map_err(|_| StoreError::Invalid(what))
    }

    /// `BEGIN IMMEDIATE`: concurrent writers queue on the busy timeout
    /// instead of failing on a lock upgrade.
    async fn begin_write(&self) -> StoreResult<sqlx::Transaction<'static, Sqlite>> {
        Ok(self.pool.begin_with("BEGIN IMMEDIATE").await?)
    }
}

/// Columns in their SQLite form (see [`bind`]).
impl SqlRow for SqliteRow {
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
        Ok(self.try_get(col)?)
    }

    fn flag(&self, col: &str) -> StoreResult<bool> {
        Ok(self.try_get(col)?)
    }

    fn level(&self, table: &'static str, col: &'static str) -> StoreResult<Option<u8>> {
        crisis_level_u8(self.try_get(col)?, table, col)
    }

    fn ts(&self, table: &'static str, col: &'static str) -> StoreResult<DateTime<Utc>> {
        req_ts(&self.try_get::<String, _>(col)?, table, col)
    }

    fn opt_ts(&self, table: &'static str, col: &'static str) -> StoreResult<Option<DateTime<Utc>>> {
        opt_ts(self.try_get(col)?, table, col)
    }

    fn lenient_ts(&self, col: &str) -> StoreResult<Option<DateTime<Utc>>> {
        let raw: Option<String> = self.try_get(col)?;
        Ok(parse_timestamp(raw.as_deref()))
    }

    fn date(&self, table: &'static str, col: &'static str) -> StoreResult<NaiveDate> {
        let raw: String = self.try_get(col)?;
        NaiveDate::from_str(&raw).map_err(|_| StoreError::corrupt(table, col))
    }

    fn json<T: DeserializeOwned>(&self, table: &'static str, col: &'static str) -> StoreResult<T> {
        let raw: String = self.try_get(col)?;
        serde_json::from_str(&raw).map_err(|_| StoreError::corrupt(table, col))
    }

    fn lenient_json(&self, col: &str) -> StoreResult<Option<Value>> {
        let raw: String = self.try_get(col)?;
        Ok(serde_json::from_str(&raw).ok())
    }

    fn state(&self, col: &str) -> StoreResult<ThreadState> {
        Ok(decode_state_str(&self.try_get::<String, _>(col)?)?)
    }

    fn floats(&self, table: &'static str, col: &'static str) -> StoreResult<Option<Vec<f32>>> {
        let blob: Option<Vec<u8>> = self.try_get(col)?;
        blob.map(|b| embedding_from_le_bytes(&b).ok_or(StoreError::corrupt(table, col)))
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::records::SessionWrite;
    use crate::sql::threads::thread_page_sql;

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
            let sql = format!(
                "EXPLAIN QUERY PLAN {}",
                thread_page_sql(SqliteStores::BYTE_ORDER, by_owner, after)
            );
            let mut query = sqlx::query(&sql);
            if by_owner {
                query = query.bind("alice");
            }
            if after {
                query = query.bind("2026-01-01T00:00:00.000000Z").bind("alice:t");
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

#[cfg(test)]
mod schema_tests {
    #[test]
    fn migrations_match_across_backends() {
        let names = |dir: &str| {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("migrations")
                .join(dir);
            let mut v: Vec<String> = std::fs::read_dir(path)
                .expect("migrations directory")
                .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
                .collect();
            v.sort();
            v
        };
        let sqlite = names("sqlite");
        assert_eq!(sqlite, names("postgres"));
        assert_eq!(super::schema_version(), sqlite.len() as i64);
    }
}
