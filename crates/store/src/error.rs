//! The store error type.

use crate::codec::CodecError;

/// Why a store operation failed. Messages never contain stored content
/// (message text, memory values, crisis reasons).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database driver reported an error (connection, constraint, I/O).
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// Applying the embedded migrations failed.
    #[error("schema migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// A state snapshot could not be decoded or encoded.
    #[error(transparent)]
    Codec(#[from] CodecError),
    /// A stored row holds a value this build cannot read. Names the table and
    /// column only.
    #[error("corrupt stored value in {table}.{column}")]
    Corrupt {
        /// Table name.
        table: &'static str,
        /// Column name.
        column: &'static str,
    },
    /// A record with the same identity already exists.
    #[error("{what} already exists")]
    Conflict {
        /// What kind of record collided, e.g. `memory record`.
        what: &'static str,
    },
    /// An argument was outside the accepted range.
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    /// Creating the database directory or file failed.
    #[error("filesystem error: {0}")]
    Io(#[from] std::io::Error),
}

impl StoreError {
    pub(crate) fn corrupt(table: &'static str, column: &'static str) -> Self {
        StoreError::Corrupt { table, column }
    }

    /// Whether the error may go away on its own: a connection that dropped
    /// or was refused, a pool that timed out, a busy or locked database, a
    /// serialization failure or deadlock. Never a decoding problem, a
    /// conflict, a bad argument or a failed migration. The runtime's retry
    /// policy retries only these.
    pub fn is_transient(&self) -> bool {
        match self {
            StoreError::Io(io) => transient_io(io.kind()),
            StoreError::Database(db) => transient_db(db),
            StoreError::Migrate(_)
            | StoreError::Codec(_)
            | StoreError::Corrupt { .. }
            | StoreError::Conflict { .. }
            | StoreError::Invalid(_) => false,
        }
    }
}

fn transient_io(kind: std::io::ErrorKind) -> bool {
    use std::io::ErrorKind as K;
    matches!(
        kind,
        K::ConnectionRefused
            | K::ConnectionReset
            | K::ConnectionAborted
            | K::NotConnected
            | K::BrokenPipe
            | K::TimedOut
            | K::Interrupted
            | K::WouldBlock
            | K::UnexpectedEof
    )
}

fn transient_db(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(io) => transient_io(io.kind()),
        sqlx::Error::PoolTimedOut | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => {
            // PostgreSQL: serialization failure, deadlock, admin shutdown,
            // cannot connect now, connection exceptions (08…). SQLite:
            // busy (5), locked (6).
            let code = db.code();
            let code = code.as_deref().unwrap_or_default();
            matches!(code, "40001" | "40P01" | "57P01" | "57P03" | "5" | "6")
                || code.starts_with("08")
        }
        _ => false,
    }
}

/// Result alias for store operations.
pub type StoreResult<T> = Result<T, StoreError>;
