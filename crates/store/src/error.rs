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
}

/// Result alias for store operations.
pub type StoreResult<T> = Result<T, StoreError>;
