//! Per-thread turn serialization and the global sweeper lock.
//!
//! * In-process: one async mutex per thread id, so two tasks in one process
//!   never interleave turns on a thread.
//! * PostgreSQL (several server processes on one database): while holding
//!   the in-process mutex, the guard also takes a session-level advisory lock
//!   `pg_advisory_lock(1, hashtext(thread_id))` on a dedicated connection from
//!   a separate small pool and keeps that connection for the guard's life.
//!   The two-key form keeps thread locks (namespace 1) apart from global
//!   locks such as the sweeper's (namespace 2). Acquisition polls
//!   `pg_try_advisory_lock` with a short backoff, so cancelling the waiting
//!   future (e.g. a timeout) never leaves a half-acquired lock behind.
//!
//! While a thread guard is held, the PostgreSQL store runs that thread's
//! turn queries (load, session row, one-statement commit) on the guard's
//! connection instead of a pooled one of its own (see [`HeldConns`]): one
//! connection per turn instead of one per store call, and no pool
//! hand-over (with sqlx's ping on every returned connection) in between.
//!
//! Release: [`ThreadGuard::release`] unlocks and returns the connection;
//! dropping the guard unlocks on a spawned task, and without a runtime the
//! connection is closed, which ends the server session and frees the lock.
//! Either way the in-process mutex is released only after the advisory
//! unlock, so the next turn on the thread in this process waits on the
//! mutex (woken at once) and finds the advisory lock free, instead of
//! polling it while the unlock is still in flight.

use std::collections::HashMap;
use std::sync::{Arc, Mutex as StdMutex, Weak};
use std::time::Duration;

use sqlx::pool::PoolConnection;
use sqlx::{PgPool, Postgres};
use tokio::sync::{Mutex, OwnedMutexGuard};

use crate::error::StoreResult;

const THREAD_NAMESPACE: i32 = 1;
const GLOBAL_NAMESPACE: i32 = 2;
const PRUNE_ABOVE: usize = 1024;

/// Name of the session sweeper's global lock.
pub const SWEEPER_LOCK: &str = "opencouch:session-sweeper";

type LocalMap = Arc<StdMutex<HashMap<String, Weak<Mutex<()>>>>>;

/// The connection a held thread lock pins; `None` once the lock is being
/// released. Lent to the store's queries on that thread (see [`HeldConns`]).
pub(crate) type HeldConn = Arc<Mutex<Option<PoolConnection<Postgres>>>>;

/// The connections this process's held thread locks pin, by thread id,
/// shared between a [`ThreadLocks`] and the PostgreSQL store it was made
/// for. The store runs a query on a thread whose lock is held here on the
/// lock's connection (one statement at a time, through the mutex), so a
/// turn needs one connection, not one per store call. An entry is added
/// when the advisory lock is granted and removed before it is released.
#[derive(Clone, Default)]
pub(crate) struct HeldConns(Arc<StdMutex<HashMap<String, HeldConn>>>);

impl HeldConns {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, HeldConn>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The connection holding `thread_id`'s lock, if this process holds it.
    pub(crate) fn get(&self, thread_id: &str) -> Option<HeldConn> {
        self.map().get(thread_id).cloned()
    }

    fn insert(&self, thread_id: &str, conn: HeldConn) {
        self.map().insert(thread_id.to_owned(), conn);
    }

    fn remove(&self, thread_id: &str) {
        self.map().remove(thread_id);
    }
}

impl std::fmt::Debug for HeldConns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeldConns")
            .field("held", &self.map().len())
            .finish()
    }
}

/// Hands out per-thread guards (and global named guards).
#[derive(Clone, Default)]
pub struct ThreadLocks {
    threads: LocalMap,
    globals: LocalMap,
    pg: Option<PgPool>,
    held: HeldConns,
}

impl std::fmt::Debug for ThreadLocks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadLocks")
            .field("cross_process", &self.pg.is_some())
            .finish()
    }
}

fn local_mutex(map: &LocalMap, key: &str) -> Arc<Mutex<()>> {
    let mut map = map.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(existing) = map.get(key).and_then(Weak::upgrade) {
        return existing;
    }
    if map.len() > PRUNE_ABOVE {
        map.retain(|_, w| w.strong_count() > 0);
    }
    let fresh = Arc::new(Mutex::new(()));
    map.insert(key.to_owned(), Arc::downgrade(&fresh));
    fresh
}

impl ThreadLocks {
    /// In-process locks only (memory and SQLite backends: one process owns
    /// the file).
    pub fn in_process() -> Self {
        Self::default()
    }

    /// In-process locks plus PostgreSQL advisory locks taken on connections
    /// of `lock_pool` (keep it separate from the query pool, so waiting
    /// turns cannot starve commits).
    pub fn with_postgres(lock_pool: PgPool) -> Self {
        Self::with_postgres_sharing(lock_pool, HeldConns::default())
    }

    /// [`Self::with_postgres`], publishing each held thread lock's
    /// connection in `held` (the store's).
    pub(crate) fn with_postgres_sharing(lock_pool: PgPool, held: HeldConns) -> Self {
        ThreadLocks {
            pg: Some(lock_pool),
            held,
            ..Self::default()
        }
    }

    /// Whether the locks also serialize across processes.
    pub fn is_cross_process(&self) -> bool {
        self.pg.is_some()
    }

    /// Waits for exclusive use of `thread_id`.
    pub async fn lock_thread(&self, thread_id: &str) -> StoreResult<ThreadGuard> {
        let local = local_mutex(&self.threads, thread_id).lock_owned().await;
        let pg = match &self.pg {
            None => None,
            Some(pool) => Some(
                acquire_pg(pool, THREAD_NAMESPACE, thread_id, true, Some(&self.held))
                    .await?
                    .ok_or_else(|| {
                        crate::error::StoreError::Invalid(
                            "advisory lock polling ended without the lock",
                        )
                    })?,
            ),
        };
        Ok(ThreadGuard {
            local: Some(local),
            pg,
        })
    }

    /// Tries once to take the global lock `name` (e.g. [`SWEEPER_LOCK`]);
    /// `None` when another task or process holds it.
    pub async fn try_lock_global(&self, name: &str) -> StoreResult<Option<ThreadGuard>> {
        let Ok(local) = local_mutex(&self.globals, name).try_lock_owned() else {
            return Ok(None);
        };
        let pg = match &self.pg {
            None => None,
            Some(pool) => match acquire_pg(pool, GLOBAL_NAMESPACE, name, false, None).await? {
                Some(held) => Some(held),
                None => return Ok(None),
            },
        };
        Ok(Some(ThreadGuard {
            local: Some(local),
            pg,
        }))
    }
}

async fn acquire_pg(
    pool: &PgPool,
    namespace: i32,
    key: &str,
    wait: bool,
    share: Option<&HeldConns>,
) -> StoreResult<Option<PgHeld>> {
    // If this future is cancelled while a lock query is in flight, the
    // server may grant the lock to a connection nobody holds any more: the
    // guard closes such a connection instead of returning it to the pool.
    let mut pending = Pending(Some(pool.acquire().await?));
    let mut backoff = Duration::from_millis(2);
    loop {
        let conn = pending
            .0
            .as_mut()
            .ok_or(crate::error::StoreError::Invalid("lock connection missing"))?;
        let got: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1, hashtext($2))")
            .bind(namespace)
            .bind(key)
            .fetch_one(&mut **conn)
            .await?;
        if got {
            let conn: HeldConn = Arc::new(Mutex::new(pending.0.take()));
            if let Some(share) = share {
                share.insert(key, conn.clone());
            }
            return Ok(Some(PgHeld {
                conn: Some(conn),
                namespace,
                key: key.to_owned(),
                shared: share.cloned(),
            }));
        }
        if !wait {
            // Clean "not granted": the connection goes back to the pool.
            drop(pending.0.take());
            return Ok(None);
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_millis(50));
    }
}

/// A lock connection whose lock state is unknown until disarmed.
struct Pending(Option<PoolConnection<Postgres>>);

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some(conn) = self.0.as_mut() {
            conn.close_on_drop();
        }
    }
}

struct PgHeld {
    /// `None` once released.
    conn: Option<HeldConn>,
    namespace: i32,
    key: String,
    /// Where `conn` is published (thread locks only).
    shared: Option<HeldConns>,
}

const UNLOCK_SQL: &str = "SELECT pg_advisory_unlock($1, hashtext($2))";

/// How long a background unlock may take before its connection is closed
/// instead (closing ends the server session, which frees the lock).
const UNLOCK_TIMEOUT: Duration = Duration::from_secs(5);

impl PgHeld {
    /// Stops lending the connection and takes it back (waiting for a
    /// statement in flight on it); `None` when already released.
    fn withdraw(&mut self) -> Option<HeldConn> {
        if let Some(shared) = &self.shared {
            shared.remove(&self.key);
        }
        self.conn.take()
    }

    async fn release(mut self) -> StoreResult<()> {
        let Some(slot) = self.withdraw() else {
            return Ok(());
        };
        let taken = slot.lock().await.take();
        if let Some(mut conn) = taken {
            let res = sqlx::query(UNLOCK_SQL)
                .bind(self.namespace)
                .bind(&self.key)
                .execute(&mut *conn)
                .await;
            if res.is_err() {
                // Closing the connection ends the session, which frees the lock.
                conn.close_on_drop();
            }
            res?;
        }
        Ok(())
    }

    /// Unlocks on a spawned task, then drops `local` (the in-process mutex
    /// guard of the same lock, if any). Without a runtime the connection is
    /// closed, which frees the lock, and `local` is dropped at once.
    fn release_in_background(&mut self, local: Option<OwnedMutexGuard<()>>) {
        let Some(slot) = self.withdraw() else {
            return;
        };
        let namespace = self.namespace;
        let key = std::mem::take(&mut self.key);
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(async move {
                    let taken = slot.lock().await.take();
                    if let Some(mut conn) = taken {
                        let unlock = sqlx::query(UNLOCK_SQL)
                            .bind(namespace)
                            .bind(&key)
                            .execute(&mut *conn);
                        if !matches!(
                            tokio::time::timeout(UNLOCK_TIMEOUT, unlock).await,
                            Ok(Ok(_))
                        ) {
                            tracing::warn!("advisory unlock failed; closing the lock connection");
                            conn.close_on_drop();
                        }
                    }
                    drop(local);
                });
            }
            Err(_) => {
                // No statement can be in flight without a runtime.
                if let Ok(mut taken) = slot.try_lock()
                    && let Some(conn) = taken.take()
                {
                    drop(conn.detach());
                }
            }
        }
    }
}

impl Drop for PgHeld {
    fn drop(&mut self) {
        self.release_in_background(None);
    }
}

/// Exclusive use of one thread (or one global name) until dropped or
/// [`released`](ThreadGuard::release).
pub struct ThreadGuard {
    // Released in this order: the advisory lock first, then the local
    // mutex, so a local waiter never races a still-held server lock.
    pg: Option<PgHeld>,
    local: Option<OwnedMutexGuard<()>>,
}

impl std::fmt::Debug for ThreadGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadGuard")
            .field("cross_process", &self.pg.is_some())
            .finish()
    }
}

impl ThreadGuard {
    /// Whether this guard also holds a PostgreSQL advisory lock.
    pub fn is_cross_process(&self) -> bool {
        self.pg.is_some()
    }

    /// Releases the guard, waiting for the advisory unlock to finish.
    pub async fn release(mut self) -> StoreResult<()> {
        if let Some(pg) = self.pg.take() {
            pg.release().await?;
        }
        Ok(())
    }
}

impl Drop for ThreadGuard {
    fn drop(&mut self) {
        let local = self.local.take();
        match self.pg.take() {
            // The local mutex travels with the unlock and is released after it.
            Some(mut pg) => pg.release_in_background(local),
            None => drop(local),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn in_process_lock_serializes_one_thread_only() {
        let locks = ThreadLocks::in_process();
        let a = locks.lock_thread("a").await.expect("lock a");
        // A different thread id is independent.
        let b = tokio::time::timeout(Duration::from_millis(200), locks.lock_thread("b")).await;
        assert!(b.is_ok(), "other thread must not block");
        // The same id waits until the first guard is gone.
        let waiting = tokio::time::timeout(Duration::from_millis(50), locks.lock_thread("a")).await;
        assert!(waiting.is_err(), "second lock on the same thread must wait");
        drop(a);
        let again = tokio::time::timeout(Duration::from_millis(200), locks.lock_thread("a")).await;
        assert!(again.is_ok(), "lock is free after drop");
    }

    #[tokio::test]
    async fn global_lock_is_exclusive() {
        let locks = ThreadLocks::in_process();
        let first = locks
            .try_lock_global(SWEEPER_LOCK)
            .await
            .expect("try")
            .expect("free");
        assert!(
            locks
                .try_lock_global(SWEEPER_LOCK)
                .await
                .expect("try")
                .is_none()
        );
        first.release().await.expect("release");
        assert!(
            locks
                .try_lock_global(SWEEPER_LOCK)
                .await
                .expect("try")
                .is_some()
        );
    }
}
