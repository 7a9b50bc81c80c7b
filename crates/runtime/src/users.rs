//! Accounts: users and their bearer tokens, the directory every channel
//! that serves more than one person checks (the HTTP API today, Telegram's
//! allow-list next).
//!
//! Tokens are 32 random bytes (hex) from the OS CSPRNG, printed once; only
//! their SHA-256 is stored, in the `api_users` table of the configured
//! store (SQLite or PostgreSQL, so several instances on one database share
//! users). A legacy `users.json` in the data directory (written by earlier
//! builds) is imported once and renamed to `users.json.imported`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use opencouch_store::{ApiUser, StoreError, UserStore};
use serde::Deserialize;
use sha2::{Digest, Sha256};

/// The owner id used in single-user local mode.
pub const LOCAL_OWNER: &str = "local";

/// File name of the legacy users file in the data directory.
pub const LEGACY_USERS_FILE: &str = "users.json";
/// What the legacy file is renamed to once imported.
pub const LEGACY_USERS_IMPORTED: &str = "users.json.imported";

/// Errors of the user directory.
#[derive(Debug, thiserror::Error)]
pub enum UserError {
    /// A name outside `[a-z0-9_-]{1,32}` (or the reserved name).
    #[error("user names are 1-32 characters of a-z, 0-9, '-' or '_' (and not \"local\")")]
    InvalidName,
    /// The name is taken by an active user.
    #[error("a user with that name already exists")]
    Exists,
    /// No active user with that name.
    #[error("no active user with that name")]
    Unknown,
    /// The OS random source failed.
    #[error("could not read the system random source")]
    Random,
    /// The store failed.
    #[error("user store: {0}")]
    Store(#[from] StoreError),
    /// The store could not be opened.
    #[error("could not open the store: {0}")]
    Open(String),
    /// Reading or renaming the legacy users file failed.
    #[error("legacy users file: {0}")]
    LegacyIo(#[from] std::io::Error),
    /// The legacy users file is not valid.
    #[error("legacy users file is not valid JSON: {0}")]
    LegacyFormat(#[from] serde_json::Error),
}

/// One user as listed (never the token or its hash).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserRecord {
    /// The user name (the owner id of everything they keep).
    pub name: String,
    /// When the user was added.
    pub created_at: DateTime<Utc>,
    /// When the token was revoked, if it was.
    pub revoked_at: Option<DateTime<Utc>>,
}

/// Hex SHA-256 of a token.
pub fn hash_token(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// A new random token: 32 bytes from the OS CSPRNG, hex encoded.
///
/// # Errors
/// [`UserError::Random`] when the OS source fails.
pub fn new_token() -> Result<String, UserError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|_| UserError::Random)?;
    Ok(hex::encode(bytes))
}

/// Whether a user name is acceptable (it becomes part of storage keys).
pub fn valid_name(name: &str) -> bool {
    (1..=32).contains(&name.len())
        && name != LOCAL_OWNER
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

/// The legacy `users.json` layout.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct LegacyFile {
    users: Vec<ApiUser>,
}

/// What [`UserDirectory::import_legacy`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LegacyImport {
    /// Rows written to the store.
    pub imported: usize,
    /// Rows already there (same token hash) or not importable.
    pub skipped: usize,
    /// Where the file was moved, when there was one.
    pub renamed_to: Option<PathBuf>,
}

/// Users and tokens over a [`UserStore`]: add, list, revoke (CLI) and
/// verify (server). Every check reads the store, so a revocation takes
/// effect at once on every instance sharing the database.
#[derive(Clone)]
pub struct UserDirectory {
    store: Arc<dyn UserStore>,
}

impl std::fmt::Debug for UserDirectory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserDirectory").finish_non_exhaustive()
    }
}

impl UserDirectory {
    /// The directory over a store (usually `stores.users`).
    pub(crate) fn new(store: Arc<dyn UserStore>) -> Self {
        UserDirectory { store }
    }

    /// A directory over process memory (tests, a throwaway local run).
    pub fn in_memory() -> Self {
        UserDirectory::new(opencouch_store::Stores::in_memory().users)
    }

    /// The directory of the store the settings describe (opened and
    /// migrated), with a legacy `users.json` imported first (once).
    ///
    /// # Errors
    /// The store cannot be opened, or the legacy import failed.
    pub async fn open(
        settings: &opencouch_config::Settings,
    ) -> Result<(UserDirectory, LegacyImport), UserError> {
        let stores = crate::runtime::open_stores(settings)
            .await
            .map_err(|e| UserError::Open(e.to_string()))?;
        let dir = UserDirectory::new(stores.users.clone());
        let imported = dir.import_legacy(&settings.resolved_data_dir()).await?;
        Ok((dir, imported))
    }

    /// Adds a user and returns the token (shown once, never stored).
    ///
    /// # Errors
    /// Invalid or taken name, random source or store failure.
    pub async fn add(&self, name: &str, now: DateTime<Utc>) -> Result<String, UserError> {
        if !valid_name(name) {
            return Err(UserError::InvalidName);
        }
        let token = new_token()?;
        let user = ApiUser {
            name: name.to_owned(),
            token_sha256: hash_token(&token),
            created_at: now,
            revoked_at: None,
        };
        match self.store.add_user(&user).await {
            Ok(()) => Ok(token),
            Err(StoreError::Conflict { .. }) => Err(UserError::Exists),
            Err(e) => Err(e.into()),
        }
    }

    /// All users, revoked ones included.
    ///
    /// # Errors
    /// Store failures.
    pub async fn list(&self) -> Result<Vec<UserRecord>, UserError> {
        Ok(self
            .store
            .list_users()
            .await?
            .into_iter()
            .map(|u| UserRecord {
                name: u.name,
                created_at: u.created_at,
                revoked_at: u.revoked_at,
            })
            .collect())
    }

    /// Revokes the active user `name`.
    ///
    /// # Errors
    /// [`UserError::Unknown`] or store failures.
    pub async fn revoke(&self, name: &str, now: DateTime<Utc>) -> Result<(), UserError> {
        if self.store.revoke_user(name, now).await? {
            Ok(())
        } else {
            Err(UserError::Unknown)
        }
    }

    /// Whether any active user exists.
    ///
    /// # Errors
    /// Store failures.
    pub async fn has_active_users(&self) -> Result<bool, UserError> {
        Ok(self.store.has_active_users().await?)
    }

    /// The owner for a presented token (`None` for an unknown or revoked
    /// token).
    ///
    /// # Errors
    /// Store failures (the request is answered 503, not 401).
    pub async fn verify(&self, token: &str) -> Result<Option<String>, UserError> {
        Ok(self
            .store
            .active_user_by_token(&hash_token(token))
            .await?
            .map(|u| u.name))
    }

    /// Imports a legacy `users.json` from `data_dir` once: every row whose
    /// token hash is not in the store yet is added (revoked rows stay
    /// revoked), then the file is renamed to `users.json.imported` so it is
    /// never read again. No file: nothing to do.
    ///
    /// # Errors
    /// An unreadable or invalid file, or a store failure (the file then
    /// stays in place, so the import is retried on the next start).
    pub async fn import_legacy(&self, data_dir: &Path) -> Result<LegacyImport, UserError> {
        let path = data_dir.join(LEGACY_USERS_FILE);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(LegacyImport::default());
            }
            Err(e) => return Err(e.into()),
        };
        let file: LegacyFile = serde_json::from_slice(&bytes)?;
        let mut out = LegacyImport::default();
        for user in &file.users {
            if !valid_name(&user.name) {
                out.skipped += 1;
                continue;
            }
            match self.store.add_user(user).await {
                Ok(()) => out.imported += 1,
                Err(StoreError::Conflict { .. } | StoreError::Invalid(_)) => out.skipped += 1,
                Err(e) => return Err(e.into()),
            }
        }
        let target = data_dir.join(LEGACY_USERS_IMPORTED);
        std::fs::rename(&path, &target)?;
        out.renamed_to = Some(target);
        tracing::info!(
            imported = out.imported,
            skipped = out.skipped,
            "imported the legacy users file into the store"
        );
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn directory() -> UserDirectory {
        UserDirectory::in_memory()
    }

    #[test]
    fn names_are_validated() {
        for (name, ok) in [
            ("alice", true),
            ("a-b_9", true),
            ("", false),
            ("Alice", false),
            ("a:b", false),
            ("local", false),
            (&"x".repeat(33), false),
        ] {
            assert_eq!(valid_name(name), ok, "{name}");
        }
    }

    #[tokio::test]
    async fn add_verify_revoke_round_trip() {
        let stores = opencouch_store::Stores::in_memory();
        let users = UserDirectory::new(stores.users.clone());
        assert!(!users.has_active_users().await.unwrap());
        let token = users.add("alice", Utc::now()).await.unwrap();
        assert_eq!(token.len(), 64);
        assert!(matches!(
            users.add("alice", Utc::now()).await,
            Err(UserError::Exists)
        ));
        assert!(matches!(
            users.add("Alice!", Utc::now()).await,
            Err(UserError::InvalidName)
        ));
        let stored = stores.users.list_users().await.unwrap();
        assert_eq!(stored.len(), 1);
        assert_eq!(stored[0].token_sha256, hash_token(&token));
        assert_ne!(
            stored[0].token_sha256, token,
            "the token itself is never stored"
        );
        assert_eq!(
            users.verify(&token).await.unwrap().as_deref(),
            Some("alice")
        );
        assert_eq!(users.verify("wrong").await.unwrap(), None);
        users.revoke("alice", Utc::now()).await.unwrap();
        assert_eq!(users.verify(&token).await.unwrap(), None);
        assert!(matches!(
            users.revoke("alice", Utc::now()).await,
            Err(UserError::Unknown)
        ));
        // Re-adding a revoked name issues a new token for the same owner.
        let again = users.add("alice", Utc::now()).await.unwrap();
        assert_ne!(again, token);
        assert_eq!(
            users.verify(&again).await.unwrap().as_deref(),
            Some("alice")
        );
    }

    #[tokio::test]
    async fn legacy_file_is_imported_once_and_renamed() {
        let dir = tempfile::tempdir().unwrap();
        let users = directory();
        assert_eq!(
            users.import_legacy(dir.path()).await.unwrap(),
            LegacyImport::default(),
            "no file: nothing to do"
        );
        let (t1, t2) = ("token-one", "token-two");
        let file = serde_json::json!({"users": [
            {"name": "alice", "token_sha256": hash_token(t1), "created_at": "2026-01-01T00:00:00Z"},
            {"name": "bob", "token_sha256": hash_token(t2), "created_at": "2026-01-01T00:00:00Z",
             "revoked_at": "2026-01-02T00:00:00Z"},
            {"name": "Bad Name", "token_sha256": hash_token("x"), "created_at": "2026-01-01T00:00:00Z"},
        ]});
        std::fs::write(dir.path().join(LEGACY_USERS_FILE), file.to_string()).unwrap();
        let out = users.import_legacy(dir.path()).await.unwrap();
        assert_eq!((out.imported, out.skipped), (2, 1));
        assert!(!dir.path().join(LEGACY_USERS_FILE).exists());
        assert!(dir.path().join(LEGACY_USERS_IMPORTED).exists());
        assert_eq!(users.verify(t1).await.unwrap().as_deref(), Some("alice"));
        assert_eq!(
            users.verify(t2).await.unwrap(),
            None,
            "revoked stays revoked"
        );
        // A second start finds no file.
        assert_eq!(
            users.import_legacy(dir.path()).await.unwrap(),
            LegacyImport::default()
        );
        // A broken file is an error and stays in place.
        std::fs::write(dir.path().join(LEGACY_USERS_FILE), "{not json").unwrap();
        assert!(matches!(
            users.import_legacy(dir.path()).await,
            Err(UserError::LegacyFormat(_))
        ));
        assert!(dir.path().join(LEGACY_USERS_FILE).exists());
    }
}
