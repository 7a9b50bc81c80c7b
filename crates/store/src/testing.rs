//! Test support shared with other crates: a throw-away PostgreSQL database
//! per test, and the schema walk of the forget-me tests
//! ([`SCHEMA_TABLES`], [`sqlite_rows_mentioning`], [`pg_rows_mentioning`]).
//! Not part of the stable API.
//!
//! [`pg_test_db`] connects to `OPENCOUCH_TEST_DATABASE_URL` (default
//! `postgres://postgres@127.0.0.1:5432/postgres`), creates
//! `opencouch_test_<random>` and drops it (with `FORCE`) when the returned
//! [`PgTestDb`] is dropped, even when the test panics. When the server is
//! unreachable: with `CI=true` the helper **panics** (CI must not silently skip
//! the Postgres suite); otherwise it prints
//! `skipping Postgres contract tests: …` and returns `None`.

use std::str::FromStr;
use std::time::Duration;

use std::collections::BTreeMap;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, PgConnection, PgPool, Row, SqlitePool};

/// Environment variable naming the admin database URL.
pub const TEST_DATABASE_URL_ENV: &str = "OPENCOUCH_TEST_DATABASE_URL";
/// Default admin database URL.
pub const DEFAULT_TEST_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// A fresh database, dropped on drop.
#[derive(Debug)]
pub struct PgTestDb {
    admin: PgConnectOptions,
    name: String,
    url: String,
}

impl PgTestDb {
    /// URL of the fresh database.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Database name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Drops the database now (`WITH (FORCE)`, ending its connections), as
    /// an operator who drops it under a running server would. Dropping the
    /// value later is then a no-op.
    pub async fn drop_database(&self) -> Result<(), String> {
        let mut conn = PgConnection::connect_with(&self.admin)
            .await
            .map_err(|e| e.to_string())?;
        let sql = format!("DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)", self.name);
        sqlx::query(&sql)
            .execute(&mut conn)
            .await
            .map_err(|e| e.to_string())?;
        let _ = conn.close().await;
        Ok(())
    }
}

/// Replaces the database part of a `postgres://` URL.
fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let authority_start = base.find("://").map_or(0, |i| i + 3);
    let prefix = match base[authority_start..].find('/') {
        Some(slash) => &base[..authority_start + slash],
        None => base,
    };
    match query {
        Some(q) => format!("{prefix}/{name}?{q}"),
        None => format!("{prefix}/{name}"),
    }
}

fn unreachable(reason: String) -> Option<PgTestDb> {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("Postgres is required in CI but unreachable: {reason}");
    }
    eprintln!("skipping Postgres contract tests: {reason}");
    None
}

/// Creates a fresh test database, or `None` (with a notice) when Postgres is
/// unreachable outside CI. Panics when unreachable and `CI=true`.
pub async fn pg_test_db() -> Option<PgTestDb> {
    match try_pg_test_db().await {
        Ok(db) => Some(db),
        Err(reason) => unreachable(reason),
    }
}

/// Creates a fresh test database; `Err` says why Postgres is unusable (no
/// CI policy applied: for benchmarks and tools that always skip).
pub async fn try_pg_test_db() -> Result<PgTestDb, String> {
    let admin_url = std::env::var(TEST_DATABASE_URL_ENV)
        .unwrap_or_else(|_| DEFAULT_TEST_DATABASE_URL.to_owned());
    let admin = PgConnectOptions::from_str(&admin_url)
        .map_err(|e| format!("invalid {TEST_DATABASE_URL_ENV}: {e}"))?;
    let mut conn = tokio::time::timeout(Duration::from_secs(5), PgConnection::connect_with(&admin))
        .await
        .map_err(|_| "connection timed out after 5 s".to_owned())?
        .map_err(|e| e.to_string())?;
    let name = format!("opencouch_test_{}", uuid::Uuid::new_v4().simple());
    sqlx::query(&format!("CREATE DATABASE \"{name}\""))
        .execute(&mut conn)
        .await
        .map_err(|e| format!("cannot create a test database: {e}"))?;
    let _ = conn.close().await;
    let url = with_database(&admin_url, &name);
    Ok(PgTestDb { admin, name, url })
}

impl Drop for PgTestDb {
    fn drop(&mut self) {
        let admin = self.admin.clone();
        let name = self.name.clone();
        // A separate thread with its own runtime works from sync and async
        // contexts alike, including during a panic.
        let handle = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async move {
                if let Ok(pool) = PgPoolOptions::new()
                    .max_connections(1)
                    .connect_with(admin)
                    .await
                {
                    let sql = format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)");
                    if let Err(e) = sqlx::query(&sql).execute(&pool).await {
                        eprintln!("could not drop test database {name}: {e}");
                    }
                    pool.close().await;
                }
            });
        });
        let _ = handle.join();
    }
}

/// What a table of the schema holds, for the forget-me tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableRole {
    /// Rows that belong to an owner: forget-me must leave none of theirs
    /// (the crisis log keeps its rows with the user id cleared).
    Owner,
    /// Holds no owner data, for the given reason.
    Exempt(&'static str),
}

/// Every table of the SQLite and PostgreSQL schemas and what it holds. The
/// forget-me tests walk the database catalog and fail on a table missing
/// here, so whoever adds a table decides whether forget-me must clear it
/// (and makes `OwnerStore::delete_owner` do so).
pub const SCHEMA_TABLES: &[(&str, TableRole)] = &[
    ("thread_state", TableRole::Owner),
    ("transcript", TableRole::Owner),
    ("active_sessions", TableRole::Owner),
    ("voice_finalization_status", TableRole::Owner),
    ("memory_records", TableRole::Owner),
    ("memory_revisions", TableRole::Owner),
    ("session_feedback", TableRole::Owner),
    ("api_users", TableRole::Owner),
    ("crisis_log", TableRole::Owner),
    ("channel_chats", TableRole::Owner),
    ("safety_plans", TableRole::Owner),
    (
        "channel_cursors",
        TableRole::Exempt("one update offset per channel (a number), no owner"),
    ),
    (
        "memory_revision_clock",
        TableRole::Exempt("one counter for the whole table, no owner"),
    ),
    (
        "_sqlx_migrations",
        TableRole::Exempt("the applied migrations: versions, names, checksums"),
    ),
    (
        "sqlite_sequence",
        TableRole::Exempt("SQLite's AUTOINCREMENT counters, by table name"),
    ),
];

fn classified(table: &str) -> Result<(), String> {
    if SCHEMA_TABLES.iter().any(|(t, _)| *t == table) {
        Ok(())
    } else {
        Err(format!(
            "table {table} is not in opencouch_store::testing::SCHEMA_TABLES: say whether it \
             holds owner data (and if so, make OwnerStore::delete_owner clear it)"
        ))
    }
}

fn quoted(ident: &str) -> String {
    format!("\"{}\"", ident.replace('"', "\"\""))
}

/// For every table of the SQLite database (from `sqlite_master`), how many
/// rows have `needle` in any column (from `pragma_table_xinfo`, generated
/// columns included), read as text. `Err` names a table missing from
/// [`SCHEMA_TABLES`] or a failed query.
pub async fn sqlite_rows_mentioning(
    pool: &SqlitePool,
    needle: &str,
) -> Result<BTreeMap<String, u64>, String> {
    let err = |e: sqlx::Error| e.to_string();
    let tables: Vec<String> =
        sqlx::query_scalar("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
            .fetch_all(pool)
            .await
            .map_err(err)?;
    let mut out = BTreeMap::new();
    for table in tables {
        classified(&table)?;
        let columns: Vec<String> = sqlx::query_scalar("SELECT name FROM pragma_table_xinfo(?1)")
            .bind(&table)
            .fetch_all(pool)
            .await
            .map_err(err)?;
        let cond: Vec<String> = columns
            .iter()
            .map(|c| format!("instr(CAST({} AS TEXT), ?1) > 0", quoted(c)))
            .collect();
        let sql = format!(
            "SELECT COUNT(*) FROM {} WHERE {}",
            quoted(&table),
            cond.join(" OR ")
        );
        let n: i64 = sqlx::query(&sql)
            .bind(needle)
            .fetch_one(pool)
            .await
            .and_then(|r| r.try_get(0))
            .map_err(err)?;
        out.insert(table, u64::try_from(n).unwrap_or(0));
    }
    Ok(out)
}

/// [`sqlite_rows_mentioning`] for PostgreSQL: every base table of the
/// current schema (`information_schema.tables`), every column
/// (`information_schema.columns`) cast to text.
pub async fn pg_rows_mentioning(
    pool: &PgPool,
    needle: &str,
) -> Result<BTreeMap<String, u64>, String> {
    let err = |e: sqlx::Error| e.to_string();
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables \
         WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' ORDER BY 1",
    )
    .fetch_all(pool)
    .await
    .map_err(err)?;
    let mut out = BTreeMap::new();
    for table in tables {
        classified(&table)?;
        let columns: Vec<String> = sqlx::query_scalar(
            "SELECT column_name::text FROM information_schema.columns \
             WHERE table_schema = current_schema() AND table_name = $1",
        )
        .bind(&table)
        .fetch_all(pool)
        .await
        .map_err(err)?;
        let cond: Vec<String> = columns
            .iter()
            .map(|c| format!("strpos(CAST({} AS TEXT), $1) > 0", quoted(c)))
            .collect();
        let sql = format!(
            "SELECT COUNT(*) FROM {} WHERE {}",
            quoted(&table),
            cond.join(" OR ")
        );
        let n: i64 = sqlx::query(&sql)
            .bind(needle)
            .fetch_one(pool)
            .await
            .and_then(|r| r.try_get(0))
            .map_err(err)?;
        out.insert(table, u64::try_from(n).unwrap_or(0));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn database_is_replaced() {
        let cases = [
            (
                "postgres://postgres@127.0.0.1:5432/postgres",
                "postgres://postgres@127.0.0.1:5432/x",
            ),
            (
                "postgres://u:p@h/db?sslmode=disable",
                "postgres://u:p@h/x?sslmode=disable",
            ),
            ("postgres://h:5432", "postgres://h:5432/x"),
        ];
        for (input, want) in cases {
            assert_eq!(with_database(input, "x"), want, "{input}");
        }
    }
}
