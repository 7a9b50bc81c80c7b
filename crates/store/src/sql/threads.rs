//! Threads and sessions on SQL: the [`ThreadStore`] and [`SessionStore`]
//! implementations for every [`SqlBackend`] (snapshots, transcript rows,
//! thread listing, active-session rows).

use std::sync::LazyLock;

use async_trait::async_trait;
use opencouch_core::{Message, ResponseStyle, Role, Route};
use serde_json::Value;

use super::{
    Arg, AtEnd, Conn, SqlBackend, SqlRow, Stmt, opt_enum, parse_enum, to_i64, to_limit, to_u64,
};
use crate::codec::encode_state;
use crate::error::{StoreError, StoreResult};
use crate::records::{
    CommitOutcome, SessionWrite, ThreadCursor, ThreadPage, ThreadSnapshot, ThreadSummary,
    TranscriptEntry, TurnCommit, TurnLoad,
};
use crate::session::{ActiveSession, REASON_UNREADABLE_PAYLOAD};
use crate::traits::{SessionStore, ThreadStore};

const TRANSCRIPT_COLUMNS: &str = "idx, role, content, route, response_style, crisis_level, at";

/// The columns of [`load_sql`]'s three row kinds, each with the type a
/// `NULL` standing in for it in the other kinds' rows is cast to
/// (PostgreSQL resolves a `UNION`'s column types pairwise, so two untyped
/// `NULL`s would become `text`; SQLite ignores the cast of a `NULL`).
const SNAPSHOT_PART: [(&str, &str); 2] = [("value", "JSONB"), ("message_count", "BIGINT")];
const SESSION_PART: [(&str, &str); 8] = [
    ("thread_id", "TEXT"),
    ("started_at", "TIMESTAMPTZ"),
    ("last_active_at", "TIMESTAMPTZ"),
    ("transcript_start_index", "BIGINT"),
    ("max_crisis_level", "SMALLINT"),
    ("session_buffer", "JSONB"),
    ("rotate_after_this_turn", "BOOLEAN"),
    ("finalize_required_reason", "TEXT"),
];
const WINDOW_PART: [(&str, &str); 7] = [
    ("idx", "BIGINT"),
    ("role", "TEXT"),
    ("content", "TEXT"),
    ("route", "TEXT"),
    ("response_style", "TEXT"),
    ("crisis_level", "SMALLINT"),
    ("at", "TIMESTAMPTZ"),
];

/// Row kinds of [`load_sql`] (its `part` column).
const PART_SNAPSHOT: i64 = 0;
const PART_SESSION: i64 = 1;
const PART_WINDOW: i64 = 2;

/// `load` in one statement (one round trip instead of two, or three with
/// the session row): parameters are the thread id and the window size. It
/// returns the snapshot row (`part` 0: `value` and the `message_count`
/// column), the active-session row when `with_session` (`part` 1), and the
/// last transcript rows below the snapshot's `message_count` (`part` 2, in
/// no particular order). One statement reads one consistent state, so the
/// window always matches the snapshot.
pub(crate) fn load_sql(with_session: bool) -> String {
    let mut parts: Vec<(i64, &[(&str, &str)])> = vec![(PART_SNAPSHOT, &SNAPSHOT_PART)];
    if with_session {
        parts.push((PART_SESSION, &SESSION_PART));
    }
    parts.push((PART_WINDOW, &WINDOW_PART));
    let select = |part: i64| {
        let mut cols = vec![format!("CAST({part} AS BIGINT) AS part")];
        for (kind, columns) in &parts {
            for (name, ty) in columns.iter() {
                cols.push(if *kind == part {
                    (*name).to_owned()
                } else {
                    format!("CAST(NULL AS {ty}) AS {name}")
                });
            }
        }
        format!("SELECT {}", cols.join(", "))
    };
    let mut sql = format!(
        "{} FROM thread_state WHERE thread_id = $1",
        select(PART_SNAPSHOT)
    );
    if with_session {
        sql.push_str(&format!(
            " UNION ALL {} FROM active_sessions WHERE thread_id = $1",
            select(PART_SESSION)
        ));
    }
    sql.push_str(&format!(
        " UNION ALL SELECT * FROM ({} FROM transcript WHERE thread_id = $1 AND idx < \
         (SELECT message_count FROM thread_state WHERE thread_id = $1) ORDER BY idx DESC LIMIT $2) AS w",
        select(PART_WINDOW)
    ));
    sql
}

/// Runs [`load_sql`] and decodes its rows: the snapshot with its window (as
/// `load` returns it) and, when `with_session`, the active-session row.
async fn load_in_one<B: SqlBackend>(
    backend: &B,
    thread_id: &str,
    recent: usize,
    with_session: bool,
) -> StoreResult<TurnLoad> {
    let mut conn = backend.turn_conn(thread_id).await?;
    static LOAD_SQL: LazyLock<[String; 2]> = LazyLock::new(|| [load_sql(false), load_sql(true)]);
    let stmt = Stmt::new(LOAD_SQL[usize::from(with_session)].as_str())
        .bind(thread_id)
        .bind(to_limit(recent));
    let rows = B::fetch_all_in(&mut conn, stmt).await?;
    let (mut snapshot, mut session, mut window) = (None, None, Vec::new());
    for row in rows {
        match row.int("part")? {
            PART_SNAPSHOT => snapshot = Some(row),
            PART_SESSION => session = Some(row),
            _ => window.push(row),
        }
    }
    // Decoded in `load`'s order (snapshot, then window), then the session.
    let snapshot = match snapshot {
        None => None,
        Some(row) => {
            let state = row.state("value")?;
            let count = to_i64(state.message_count)?;
            // The window was cut at the `message_count` column, which
            // `commit_turn` keeps equal to the snapshot's own count; should
            // they differ, the window is read again at the snapshot's count
            // (what `load` promises).
            let recent = if row.int("message_count")? == count {
                let mut recent = window
                    .iter()
                    .map(transcript_entry)
                    .collect::<StoreResult<Vec<_>>>()?;
                recent.sort_by_key(|e| e.index);
                recent
            } else {
                window_below::<B>(&mut conn, thread_id, recent, count).await?
            };
            Some(ThreadSnapshot { state, recent })
        }
    };
    let session = session.as_ref().map(session_from_row).transpose()?;
    Ok(TurnLoad { snapshot, session })
}

/// The last `recent` transcript rows below index `end`, oldest first.
async fn window_below<B: SqlBackend>(
    conn: &mut Conn<B>,
    thread_id: &str,
    recent: usize,
    end: i64,
) -> StoreResult<Vec<TranscriptEntry>> {
    let stmt = Stmt::new(format!(
        "SELECT {TRANSCRIPT_COLUMNS} FROM transcript WHERE thread_id = $1 AND idx < $3 \
         ORDER BY idx DESC LIMIT $2"
    ))
    .bind(thread_id)
    .bind(to_limit(recent))
    .bind(end);
    oldest_first(B::fetch_all_in(conn, stmt).await?)
}

fn transcript_entry(row: &impl SqlRow) -> StoreResult<TranscriptEntry> {
    const T: &str = "transcript";
    Ok(TranscriptEntry {
        index: to_u64(row.int("idx")?, T, "idx")?,
        message: Message {
            role: parse_enum::<Role>(&row.text("role")?, T, "role")?,
            content: row.text("content")?,
            route: opt_enum::<Route>(row.opt_text("route")?, T, "route")?,
            response_style: opt_enum::<ResponseStyle>(
                row.opt_text("response_style")?,
                T,
                "response_style",
            )?,
            crisis_level: row.level(T, "crisis_level")?,
            at: row.opt_ts(T, "at")?,
        },
    })
}

/// Transcript rows read newest first, returned oldest first.
fn oldest_first(rows: Vec<impl SqlRow>) -> StoreResult<Vec<TranscriptEntry>> {
    let mut out = rows
        .iter()
        .map(transcript_entry)
        .collect::<StoreResult<Vec<_>>>()?;
    out.reverse();
    Ok(out)
}

async fn upsert_session<B: SqlBackend>(conn: &mut Conn<B>, s: &ActiveSession) -> StoreResult<()> {
    let stmt = Stmt::new(
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
    .bind(Arg::Level(Some(s.max_crisis_level.min(3))))
    .bind(&s.session_buffer)
    .bind(s.rotate_after_this_turn)
    .bind(&s.finalize_required_reason);
    B::execute_in(conn, stmt).await?;
    Ok(())
}

fn session_from_row(row: &impl SqlRow) -> StoreResult<ActiveSession> {
    const T: &str = "active_sessions";
    let mut reason = row.opt_text("finalize_required_reason")?;
    let session_buffer = match row.lenient_json("session_buffer")? {
        Some(v) => v,
        None => {
            reason = Some(REASON_UNREADABLE_PAYLOAD.to_owned());
            Value::Null
        }
    };
    Ok(ActiveSession {
        thread_id: row.text("thread_id")?,
        started_at: row.ts(T, "started_at")?,
        last_active_at: row.lenient_ts("last_active_at")?,
        transcript_start_index: to_u64(
            row.int("transcript_start_index")?,
            T,
            "transcript_start_index",
        )?,
        max_crisis_level: row.level(T, "max_crisis_level")?.unwrap_or(0),
        session_buffer,
        rotate_after_this_turn: row.flag("rotate_after_this_turn")?,
        finalize_required_reason: reason,
    })
}

/// The thread listing query: parameters are the owner (when `by_owner`),
/// the cursor's time and thread id (when `after`), then the row limit.
/// Thread ids compare in byte order (`byte_order` is the backend's
/// [`SqlBackend::BYTE_ORDER`]), as in the indexes
/// `thread_state_owner_updated_idx` (one owner) and
/// `thread_state_updated_id_idx` (every owner), so either serves a page
/// without a sort.
pub(crate) fn thread_page_sql(byte_order: &str, by_owner: bool, after: bool) -> String {
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
            "updated_at <= {at} AND (updated_at < {at} OR thread_id{byte_order} > {id})"
        ));
    }
    format!(
        "SELECT thread_id, turn_count, message_count, updated_at FROM thread_state WHERE {} \
         ORDER BY updated_at DESC, thread_id{byte_order} ASC LIMIT {}",
        filter.join(" AND "),
        param(),
    )
}

#[async_trait]
impl<B: SqlBackend> ThreadStore for B {
    async fn load(&self, thread_id: &str, recent: usize) -> StoreResult<Option<ThreadSnapshot>> {
        Ok(load_in_one(self, thread_id, recent, false).await?.snapshot)
    }

    async fn load_with_session(
        &self,
        thread_id: &str,
        recent: usize,
    ) -> StoreResult<Option<TurnLoad>> {
        Ok(Some(load_in_one(self, thread_id, recent, true).await?))
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
        // One statement when the dialect has the form and the transcript
        // ends where the snapshot says (the usual case under the thread
        // lock); otherwise the transaction below, which appends at the
        // actual end.
        if B::COMMIT_AT_END
            && let Ok(first) = i64::try_from(state.message_count)
            && let Some(count) = first.checked_add(append.len() as i64)
        {
            // (The transaction sets its own count if this does not commit.)
            state.message_count = count as u64;
            let snapshot = encode_state(&state)?;
            let done = self
                .commit_at_end(AtEnd {
                    thread_id: &state.thread_id,
                    first,
                    append: &append,
                    at,
                    turn_count: to_i64(state.turn_count)?,
                    message_count: count,
                    snapshot: &snapshot,
                    session: &session,
                })
                .await?;
            if done {
                return Ok(CommitOutcome {
                    first_index: first as u64,
                    message_count: count as u64,
                });
            }
        }
        let mut tx = self.begin_write().await?;
        let stmt = Stmt::new(
            "SELECT COALESCE(MAX(idx) + 1, 0) AS next_idx FROM transcript WHERE thread_id = $1",
        )
        .bind(&state.thread_id);
        let next = B::fetch_one_in(&mut tx, stmt).await?.int("next_idx")?;
        if !append.is_empty() {
            B::insert_transcript(&mut tx, &state.thread_id, next, &append).await?;
        }
        let first_index = to_u64(next, "transcript", "idx")?;
        let message_count = first_index + append.len() as u64;
        state.message_count = message_count;
        let snapshot = encode_state(&state)?;
        let stmt = Stmt::new(
            "INSERT INTO thread_state (thread_id, updated_at, turn_count, message_count, value) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (thread_id) DO UPDATE SET updated_at = excluded.updated_at, \
             turn_count = excluded.turn_count, message_count = excluded.message_count, value = excluded.value",
        )
        .bind(&state.thread_id)
        .bind(at)
        .bind(to_i64(state.turn_count)?)
        .bind(to_i64(message_count)?)
        .bind(&snapshot);
        B::execute_in(&mut tx, stmt).await?;
        match &session {
            SessionWrite::Keep => {}
            SessionWrite::Upsert(s) => upsert_session::<B>(&mut tx, s).await?,
            SessionWrite::Clear => {
                let stmt = Stmt::new("DELETE FROM active_sessions WHERE thread_id = $1")
                    .bind(&state.thread_id);
                B::execute_in(&mut tx, stmt).await?;
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
        let stmt = Stmt::new(format!(
            "SELECT {TRANSCRIPT_COLUMNS} FROM transcript WHERE thread_id = $1 AND idx < $2 ORDER BY idx DESC LIMIT $3"
        ))
        .bind(thread_id)
        .bind(before)
        .bind(to_limit(limit));
        oldest_first(self.fetch_all(stmt).await?)
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
        let mut stmt = Stmt::new(thread_page_sql(
            B::BYTE_ORDER,
            owner.is_some(),
            after.is_some(),
        ));
        if let Some(owner) = owner {
            stmt = stmt.bind(owner);
        }
        if let Some(c) = after {
            stmt = stmt.bind(c.updated_at).bind(&c.thread_id);
        }
        let stmt = stmt.bind(to_limit(limit.saturating_add(1)));
        let rows = self
            .fetch_all(stmt)
            .await?
            .iter()
            .map(|r| {
                Ok(ThreadSummary {
                    thread_id: r.text("thread_id")?,
                    turn_count: to_u64(r.int("turn_count")?, T, "turn_count")?,
                    message_count: to_u64(r.int("message_count")?, T, "message_count")?,
                    updated_at: r.ts(T, "updated_at")?,
                })
            })
            .collect::<StoreResult<Vec<_>>>()?;
        Ok(ThreadPage::from_rows(rows, limit))
    }

    async fn delete_thread(&self, thread_id: &str) -> StoreResult<bool> {
        let mut tx = self.begin_write().await?;
        for sql in [
            "DELETE FROM transcript WHERE thread_id = $1",
            "DELETE FROM active_sessions WHERE thread_id = $1",
        ] {
            B::execute_in(&mut tx, Stmt::new(sql).bind(thread_id)).await?;
        }
        let stmt = Stmt::new("DELETE FROM thread_state WHERE thread_id = $1").bind(thread_id);
        let gone = B::execute_in(&mut tx, stmt).await?;
        tx.commit().await?;
        Ok(gone > 0)
    }
}

#[async_trait]
impl<B: SqlBackend> SessionStore for B {
    async fn get(&self, thread_id: &str) -> StoreResult<Option<ActiveSession>> {
        let stmt = Stmt::new("SELECT * FROM active_sessions WHERE thread_id = $1").bind(thread_id);
        let mut conn = self.turn_conn(thread_id).await?;
        let row = B::fetch_optional_in(&mut conn, stmt).await?;
        row.as_ref().map(session_from_row).transpose()
    }

    async fn put(&self, session: &ActiveSession) -> StoreResult<()> {
        let mut conn = self.pool().acquire().await?;
        upsert_session::<B>(&mut conn, session).await
    }

    async fn mark_finalize_required(&self, thread_id: &str, reason: &str) -> StoreResult<bool> {
        let stmt = Stmt::new(
            "UPDATE active_sessions SET finalize_required_reason = $2 WHERE thread_id = $1",
        )
        .bind(thread_id)
        .bind(reason);
        Ok(self.execute(stmt).await? > 0)
    }

    async fn clear(&self, thread_id: &str) -> StoreResult<bool> {
        let stmt = Stmt::new("DELETE FROM active_sessions WHERE thread_id = $1").bind(thread_id);
        Ok(self.execute(stmt).await? > 0)
    }

    async fn list(&self) -> StoreResult<Vec<ActiveSession>> {
        let stmt = Stmt::new("SELECT * FROM active_sessions ORDER BY thread_id");
        let rows = self.fetch_all(stmt).await?;
        rows.iter().map(session_from_row).collect()
    }

    async fn count(&self) -> StoreResult<u64> {
        let stmt = Stmt::new("SELECT COUNT(*) AS n FROM active_sessions");
        let n = self.fetch_one(stmt).await?.int("n")?;
        to_u64(n, "active_sessions", "count")
    }
}
