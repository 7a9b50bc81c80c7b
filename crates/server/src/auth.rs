//! Users, bearer tokens, owners and per-owner rate limits.
//!
//! Tokens are 32 random bytes (hex) from the OS CSPRNG, printed once; only
//! their SHA-256 is stored, in the `api_users` table of the configured
//! store (SQLite or PostgreSQL, so several instances on one database share
//! users). The owner of every request comes from the token, never from a
//! request field. A legacy `users.json` in the data directory (written by
//! earlier builds) is imported once and renamed to `users.json.imported`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
    /// Reading or renaming the legacy users file failed.
    #[error("legacy users file: {0}")]
    LegacyIo(#[from] std::io::Error),
    /// The legacy users file is not valid.
    #[error("legacy users file is not valid JSON: {0}")]
    LegacyFormat(#[from] serde_json::Error),
}

/// One user as stored (re-exported from the store).
pub type UserRecord = ApiUser;

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
    pub fn new(store: Arc<dyn UserStore>) -> Self {
        UserDirectory { store }
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
    pub async fn list(&self) -> Result<Vec<ApiUser>, UserError> {
        Ok(self.store.list_users().await?)
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
    pub async fn verify(&self, token: &str) -> Result<Option<String>, StoreError> {
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
    /// The users could not be read.
    #[error(transparent)]
    Users(#[from] UserError),
}

/// Chooses the auth mode for a listen address: tokens when users exist,
/// local mode on loopback without users, otherwise an error.
///
/// The mode is chosen once, at start-up: a user added later is honoured
/// (tokens are checked per request) only by a server that started with
/// users; a local-mode server keeps serving only loopback until restarted.
///
/// # Errors
/// [`BindError::OpenWithoutUsers`], or a store failure.
pub async fn auth_mode_for(addr: SocketAddr, users: UserDirectory) -> Result<AuthMode, BindError> {
    if users.has_active_users().await? {
        return Ok(AuthMode::Tokens(users));
    }
    if addr.ip().is_loopback() {
        Ok(AuthMode::Local)
    } else {
        Err(BindError::OpenWithoutUsers(addr))
    }
}

/// The bearer token of a request: `Authorization: Bearer TOKEN`, the
/// scheme matched case-insensitively (RFC 9110). `None` when absent, empty
/// or another scheme.
pub fn bearer_token(headers: &axum::http::HeaderMap) -> Option<&str> {
    let value = headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .trim();
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Most buckets a limiter holds. Idle buckets are dropped by
/// [`RateLimiter::prune`] on a periodic tick, never on the request path; if
/// new clients fill the map between two ticks, a further new key is refused
/// (with a short wait) until the next prune: known clients keep their
/// buckets, and memory stays bounded (about 100 bytes a bucket).
pub const MAX_BUCKETS: usize = 100_000;

/// What a new key is told to wait when the limiter is full.
const FULL_WAIT: Duration = Duration::from_secs(1);

/// A token bucket per key (owner or client address): `per_minute` requests,
/// refilled continuously.
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

    /// Takes one token for `key`; false when the bucket is empty.
    pub fn allow(&self, key: &str, now: Instant) -> bool {
        self.take(key, now).is_ok()
    }

    /// Takes one token for `key`, or says how long until one is available.
    ///
    /// # Errors
    /// The wait when the bucket is empty (or a new key finds the limiter
    /// full, see [`MAX_BUCKETS`]).
    pub fn take(&self, key: &str, now: Instant) -> Result<(), Duration> {
        self.with_bucket(key, now, true)
    }

    /// Whether `key` has a token left, without taking it.
    ///
    /// # Errors
    /// The wait when the bucket is empty.
    pub fn check(&self, key: &str, now: Instant) -> Result<(), Duration> {
        self.with_bucket(key, now, false)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (f64, Instant)>> {
        // Buckets only: a poisoned lock still holds usable numbers.
        self.buckets
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn with_bucket(&self, key: &str, now: Instant, take: bool) -> Result<(), Duration> {
        if self.per_minute == 0 {
            return Ok(());
        }
        let cap = f64::from(self.per_minute);
        let per_sec = cap / 60.0;
        let mut buckets = self.lock();
        if !buckets.contains_key(key) {
            // A new client: a full bucket, which a mere check need not store.
            if !take {
                return Ok(());
            }
            if buckets.len() >= MAX_BUCKETS {
                return Err(FULL_WAIT);
            }
            buckets.insert(key.to_owned(), (cap, now));
        }
        let Some((tokens, last)) = buckets.get_mut(key) else {
            return Ok(());
        };
        let elapsed = now.saturating_duration_since(*last).as_secs_f64();
        *tokens = (*tokens + elapsed * per_sec).min(cap);
        *last = now;
        if *tokens >= 1.0 {
            if take {
                *tokens -= 1.0;
            }
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - *tokens) / per_sec))
        }
    }

    /// Drops the buckets that have refilled by `now` (a full bucket is the
    /// same as none); returns how many are left. Called on a periodic tick
    /// (every [`crate::LIMITER_PRUNE_INTERVAL`] while serving), so no request
    /// ever pays for a sweep of the map.
    pub fn prune(&self, now: Instant) -> usize {
        if self.per_minute == 0 {
            return 0;
        }
        let cap = f64::from(self.per_minute);
        let per_sec = cap / 60.0;
        let mut buckets = self.lock();
        buckets.retain(|_, (tokens, last)| {
            *tokens + now.saturating_duration_since(*last).as_secs_f64() * per_sec < cap
        });
        buckets.len()
    }

    /// Buckets held now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no bucket is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// How long a token that failed verification is remembered.
pub const FAILED_TOKEN_TTL: Duration = Duration::from_secs(10);
/// How many failed tokens are remembered at most.
const FAILED_TOKENS_MAX: usize = 4096;

/// Remembers tokens that failed verification for [`FAILED_TOKEN_TTL`], so a
/// client repeating a bad or revoked token does not cost a database lookup
/// per request.
///
/// Only failures are cached: a valid token is checked against the store on
/// every request, so `opencouch users revoke` takes effect on the very next
/// request of every instance sharing the database. A cached failure cannot
/// hide a valid token: new tokens are random (a server never saw them
/// before), and a revoked token never becomes valid again (re-adding a name
/// issues a new token).
#[derive(Debug, Default)]
pub struct TokenCache {
    failed: Mutex<HashMap<String, Instant>>,
}

impl TokenCache {
    /// The owner for `token` (`None` when unknown or revoked): from the
    /// store, unless the token failed within the last [`FAILED_TOKEN_TTL`].
    ///
    /// # Errors
    /// Store failures (never cached).
    pub async fn verify(
        &self,
        users: &UserDirectory,
        token: &str,
        now: Instant,
    ) -> Result<Option<String>, StoreError> {
        let hash = hash_token(token);
        if self.failed_recently(&hash, now) {
            return Ok(None);
        }
        let owner = users
            .store
            .active_user_by_token(&hash)
            .await?
            .map(|u| u.name);
        if owner.is_none() {
            self.remember_failure(hash, now);
        }
        Ok(owner)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        self.failed
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn failed_recently(&self, hash: &str, now: Instant) -> bool {
        self.lock()
            .get(hash)
            .is_some_and(|at| now.saturating_duration_since(*at) < FAILED_TOKEN_TTL)
    }

    fn remember_failure(&self, hash: String, now: Instant) {
        let mut failed = self.lock();
        if failed.len() >= FAILED_TOKENS_MAX {
            failed.retain(|_, at| now.saturating_duration_since(*at) < FAILED_TOKEN_TTL);
            if failed.len() >= FAILED_TOKENS_MAX {
                failed.clear();
            }
        }
        failed.insert(hash, now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn directory() -> UserDirectory {
        UserDirectory::new(opencouch_store::Stores::in_memory().users)
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

    #[tokio::test]
    async fn loopback_without_users_is_local_and_open_address_refuses() {
        let lo: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let lo6: SocketAddr = "[::1]:8080".parse().unwrap();
        let open: SocketAddr = "0.0.0.0:8080".parse().unwrap();
        let users = directory();
        for addr in [lo, lo6] {
            assert!(matches!(
                auth_mode_for(addr, users.clone()).await,
                Ok(AuthMode::Local)
            ));
        }
        let err = auth_mode_for(open, users.clone()).await.unwrap_err();
        assert!(err.to_string().contains("refusing"));
        users.add("bob", Utc::now()).await.unwrap();
        for addr in [lo, open] {
            assert!(matches!(
                auth_mode_for(addr, users.clone()).await,
                Ok(AuthMode::Tokens(_))
            ));
        }
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
        assert!(RateLimiter::new(0).allow("a", t0), "0 disables limiting");
    }

    #[test]
    fn an_empty_bucket_says_when_to_retry_and_check_takes_nothing() {
        let rl = RateLimiter::new(60);
        let t0 = Instant::now();
        for _ in 0..60 {
            assert!(rl.check("a", t0).is_ok());
            rl.take("a", t0).unwrap();
        }
        let wait = rl.take("a", t0).unwrap_err();
        assert!(
            wait > Duration::from_millis(900) && wait <= Duration::from_secs(1),
            "{wait:?}"
        );
        assert_eq!(rl.check("a", t0), Err(wait));
        assert!(rl.take("a", t0 + Duration::from_secs(1)).is_ok());
    }

    #[test]
    fn idle_buckets_are_pruned_on_the_tick_not_on_the_request_path() {
        let rl = RateLimiter::new(60);
        let t0 = Instant::now();
        for i in 0..1000 {
            rl.take(&format!("k{i}"), t0).unwrap();
        }
        rl.take("busy", t0).unwrap();
        rl.take("busy", t0).unwrap();
        assert!(rl.check("never-seen", t0).is_ok());
        assert_eq!(rl.len(), 1001, "a check stores nothing; nothing pruned yet");
        // One second later every one-token bucket has refilled; `busy`
        // (two tokens) has not.
        assert_eq!(rl.prune(t0 + Duration::from_secs(1)), 1);
        assert_eq!(rl.len(), 1);
        assert_eq!(rl.prune(t0 + Duration::from_secs(2)), 0);
        assert!(rl.is_empty());
    }

    #[test]
    fn a_full_limiter_refuses_new_keys_but_serves_known_ones() {
        let rl = RateLimiter::new(60);
        let t0 = Instant::now();
        for i in 0..MAX_BUCKETS {
            rl.take(&format!("k{i}"), t0).unwrap();
        }
        assert_eq!(rl.take("newcomer", t0), Err(FULL_WAIT));
        assert!(rl.check("newcomer", t0).is_ok(), "a check never stores");
        assert!(rl.take("k7", t0).is_ok(), "known clients keep working");
        rl.prune(t0 + Duration::from_secs(1));
        assert!(rl.take("newcomer", t0 + Duration::from_secs(1)).is_ok());
    }

    #[test]
    fn addresses_of_one_slash_64_share_one_bucket() {
        use std::net::IpAddr;
        let rl = RateLimiter::new(30);
        let t0 = Instant::now();
        let key = |ip: &str| {
            let ip: IpAddr = ip.parse().unwrap();
            match crate::conn::client_prefix(ip) {
                IpAddr::V6(p) => format!("{p}/64"),
                v4 => v4.to_string(),
            }
        };
        // 1,000 addresses of 2001:db8:1:2::/64, one request each: 30 pass.
        let passed = (0..1000u32)
            .filter(|i| {
                rl.allow(
                    &key(&format!("2001:db8:1:2:{:x}::{:x}", i >> 8, i & 0xff)),
                    t0,
                )
            })
            .count();
        assert_eq!(passed, 30);
        assert_eq!(rl.len(), 1);
        assert!(rl.allow(&key("2001:db8:1:3::1"), t0), "another /64");
        // IPv4: every address is its own client.
        let v4 = (0..100u8)
            .filter(|i| rl.allow(&key(&format!("10.0.0.{i}")), t0))
            .count();
        assert_eq!(v4, 100);
    }

    #[test]
    fn bearer_scheme_is_case_insensitive() {
        use axum::http::{HeaderMap, HeaderValue, header::AUTHORIZATION};
        for (value, want) in [
            ("Bearer abc", Some("abc")),
            ("bearer abc", Some("abc")),
            ("BEARER  abc ", Some("abc")),
            ("Basic abc", None),
            ("Bearer ", None),
            ("Bearer", None),
            ("Bearerabc", None),
        ] {
            let mut h = HeaderMap::new();
            h.insert(AUTHORIZATION, HeaderValue::from_static(value));
            assert_eq!(bearer_token(&h), want, "{value:?}");
        }
        assert_eq!(bearer_token(&HeaderMap::new()), None);
    }

    #[tokio::test]
    async fn failed_tokens_are_cached_and_valid_ones_never() {
        let stores = opencouch_store::Stores::in_memory();
        let users = UserDirectory::new(stores.users.clone());
        let token = users.add("alice", Utc::now()).await.unwrap();
        let cache = TokenCache::default();
        let t0 = Instant::now();
        assert_eq!(
            cache.verify(&users, &token, t0).await.unwrap().as_deref(),
            Some("alice")
        );
        assert_eq!(cache.verify(&users, "bad", t0).await.unwrap(), None);
        assert!(cache.failed_recently(&hash_token("bad"), t0));
        assert!(!cache.failed_recently(&hash_token("bad"), t0 + FAILED_TOKEN_TTL));
        // Revocation: the very next check fails (successes are not cached).
        users.revoke("alice", Utc::now()).await.unwrap();
        assert_eq!(cache.verify(&users, &token, t0).await.unwrap(), None);
    }
}
