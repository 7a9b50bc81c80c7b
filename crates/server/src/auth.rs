//! Users, bearer tokens, owners and per-owner rate limits.
//!
//! Tokens are 32 random bytes (hex) from the OS CSPRNG, printed once; only
//! their SHA-256 is stored, in `users.json` under the data directory. The
//! owner of every request comes from the token, never from a request field.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Instant, SystemTime};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The owner id used in single-user local mode.
pub const LOCAL_OWNER: &str = "local";

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
    /// Reading or writing the users file failed.
    #[error("users file: {0}")]
    Io(#[from] std::io::Error),
    /// The users file is not valid.
    #[error("users file is not valid JSON: {0}")]
    Format(#[from] serde_json::Error),
}

/// One stored user.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserRecord {
    /// The user name, also the owner id.
    pub name: String,
    /// Hex SHA-256 of the token.
    pub token_sha256: String,
    /// When the user was added.
    pub created_at: DateTime<Utc>,
    /// When the token was revoked (revoked users cannot sign in).
    #[serde(default)]
    pub revoked_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct UsersFile {
    users: Vec<UserRecord>,
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

/// The users file: add, list, revoke (CLI) and verify (server).
#[derive(Debug)]
pub struct UserDirectory {
    path: PathBuf,
    cache: Mutex<Cache>,
}

#[derive(Debug, Default)]
struct Cache {
    modified: Option<SystemTime>,
    by_hash: HashMap<String, String>,
}

impl UserDirectory {
    /// The directory stored at `path` (the file may not exist yet).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        UserDirectory {
            path: path.into(),
            cache: Mutex::new(Cache::default()),
        }
    }

    /// The default location: `users.json` in the data directory.
    pub fn in_data_dir(dir: &Path) -> Self {
        Self::new(dir.join("users.json"))
    }

    /// The file path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn read(&self) -> Result<UsersFile, UserError> {
        match std::fs::read(&self.path) {
            Ok(bytes) => Ok(serde_json::from_slice(&bytes)?),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(UsersFile::default()),
            Err(e) => Err(e.into()),
        }
    }

    fn write(&self, file: &UsersFile) -> Result<(), UserError> {
        if let Some(parent) = self.path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let tmp = self.path.with_extension("json.tmp");
        std::fs::write(&tmp, serde_json::to_vec_pretty(file)?)?;
        restrict_permissions(&tmp)?;
        std::fs::rename(&tmp, &self.path)?;
        Ok(())
    }

    /// Adds a user and returns the token (shown once, never stored).
    ///
    /// # Errors
    /// Invalid or taken name, random source or file failure.
    pub fn add(&self, name: &str, now: DateTime<Utc>) -> Result<String, UserError> {
        if !valid_name(name) {
            return Err(UserError::InvalidName);
        }
        let mut file = self.read()?;
        if file
            .users
            .iter()
            .any(|u| u.name == name && u.revoked_at.is_none())
        {
            return Err(UserError::Exists);
        }
        let token = new_token()?;
        file.users.push(UserRecord {
            name: name.to_owned(),
            token_sha256: hash_token(&token),
            created_at: now,
            revoked_at: None,
        });
        self.write(&file)?;
        Ok(token)
    }

    /// All users, revoked ones included.
    ///
    /// # Errors
    /// File failures.
    pub fn list(&self) -> Result<Vec<UserRecord>, UserError> {
        Ok(self.read()?.users)
    }

    /// Revokes the active user `name`.
    ///
    /// # Errors
    /// [`UserError::Unknown`] or file failures.
    pub fn revoke(&self, name: &str, now: DateTime<Utc>) -> Result<(), UserError> {
        let mut file = self.read()?;
        let user = file
            .users
            .iter_mut()
            .find(|u| u.name == name && u.revoked_at.is_none())
            .ok_or(UserError::Unknown)?;
        user.revoked_at = Some(now);
        self.write(&file)
    }

    /// Whether any active user exists.
    ///
    /// # Errors
    /// File failures.
    pub fn has_active_users(&self) -> Result<bool, UserError> {
        Ok(self.read()?.users.iter().any(|u| u.revoked_at.is_none()))
    }

    /// The owner for a presented token, re-reading the file when it
    /// changed (so a revocation takes effect without a restart).
    pub fn verify(&self, token: &str) -> Option<String> {
        let modified = std::fs::metadata(&self.path)
            .and_then(|m| m.modified())
            .ok();
        let mut cache = self.cache.lock().ok()?;
        if cache.modified != modified || modified.is_none() {
            let by_hash = match self.read() {
                Ok(file) => file
                    .users
                    .into_iter()
                    .filter(|u| u.revoked_at.is_none())
                    .map(|u| (u.token_sha256, u.name))
                    .collect(),
                Err(e) => {
                    tracing::error!(error = %e, "cannot read the users file; rejecting tokens");
                    HashMap::new()
                }
            };
            cache.by_hash = by_hash;
            cache.modified = modified;
        }
        cache.by_hash.get(&hash_token(token)).cloned()
    }
}

#[cfg(unix)]
fn restrict_permissions(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
}

#[cfg(not(unix))]
fn restrict_permissions(_path: &Path) -> std::io::Result<()> {
    Ok(())
}

/// How requests are authenticated.
#[derive(Debug)]
pub enum AuthMode {
    /// No users, loopback only: every request is the owner [`LOCAL_OWNER`].
    Local,
    /// Bearer tokens checked against the user directory.
    Tokens(UserDirectory),
}

/// Why the server refuses to start.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    /// Non-loopback address and no users.
    #[error(
        "refusing to listen on {0} without users: anyone on the network could read conversations. \
         Add a user with `opencouch users add NAME`, or listen on 127.0.0.1"
    )]
    OpenWithoutUsers(SocketAddr),
    /// The users file could not be read.
    #[error(transparent)]
    Users(#[from] UserError),
}

/// Chooses the auth mode for a listen address: tokens when users exist,
/// local mode on loopback without users, otherwise an error.
///
/// # Errors
/// [`BindError::OpenWithoutUsers`], or a users-file failure.
pub fn auth_mode_for(addr: SocketAddr, users: UserDirectory) -> Result<AuthMode, BindError> {
    if users.has_active_users()? {
        return Ok(AuthMode::Tokens(users));
    }
    if addr.ip().is_loopback() {
        Ok(AuthMode::Local)
    } else {
        Err(BindError::OpenWithoutUsers(addr))
    }
}

/// A token bucket per owner: `per_minute` requests, refilled continuously.
#[derive(Debug)]
pub struct RateLimiter {
    per_minute: u32,
    buckets: Mutex<HashMap<String, (f64, Instant)>>,
}

impl RateLimiter {
    /// A limiter; 0 disables limiting.
    pub fn new(per_minute: u32) -> Self {
        RateLimiter {
            per_minute,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one token for `owner`; false when the bucket is empty.
    pub fn allow(&self, owner: &str, now: Instant) -> bool {
        if self.per_minute == 0 {
            return true;
        }
        let Ok(mut buckets) = self.buckets.lock() else {
            return false;
        };
        let cap = f64::from(self.per_minute);
        let (tokens, last) = buckets.entry(owner.to_owned()).or_insert((cap, now));
        let elapsed = now.saturating_duration_since(*last).as_secs_f64();
        *tokens = (*tokens + elapsed * cap / 60.0).min(cap);
        *last = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

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

    #[test]
    fn add_verify_revoke_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let users = UserDirectory::in_data_dir(dir.path());
        assert!(!users.has_active_users().unwrap());
        let token = users.add("alice", Utc::now()).unwrap();
        assert_eq!(token.len(), 64);
        assert!(matches!(
            users.add("alice", Utc::now()),
            Err(UserError::Exists)
        ));
        let raw = std::fs::read_to_string(users.path()).unwrap();
        assert!(!raw.contains(&token), "the token itself is never stored");
        assert_eq!(users.verify(&token).as_deref(), Some("alice"));
        assert_eq!(users.verify("wrong"), None);
        std::thread::sleep(Duration::from_millis(20));
        users.revoke("alice", Utc::now()).unwrap();
        // A fresh directory sees the revocation regardless of mtime granularity.
        assert_eq!(UserDirectory::in_data_dir(dir.path()).verify(&token), None);
        assert!(matches!(
            users.revoke("alice", Utc::now()),
            Err(UserError::Unknown)
        ));
    }

    #[test]
    fn loopback_without_users_is_local_and_open_address_refuses() {
        let dir = tempfile::tempdir().unwrap();
        let lo: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let open: SocketAddr = "0.0.0.0:8080".parse().unwrap();
        assert!(matches!(
            auth_mode_for(lo, UserDirectory::in_data_dir(dir.path())),
            Ok(AuthMode::Local)
        ));
        let err = auth_mode_for(open, UserDirectory::in_data_dir(dir.path())).unwrap_err();
        assert!(err.to_string().contains("refusing"));
        UserDirectory::in_data_dir(dir.path())
            .add("bob", Utc::now())
            .unwrap();
        assert!(matches!(
            auth_mode_for(open, UserDirectory::in_data_dir(dir.path())),
            Ok(AuthMode::Tokens(_))
        ));
    }

    #[test]
    fn bucket_limits_and_refills() {
        let rl = RateLimiter::new(2);
        let t0 = Instant::now();
        assert!(rl.allow("a", t0));
        assert!(rl.allow("a", t0));
        assert!(!rl.allow("a", t0));
        assert!(rl.allow("b", t0), "buckets are per owner");
        assert!(rl.allow("a", t0 + Duration::from_secs(30)));
    }
}
