//! Bearer tokens, owners and per-owner rate limits over the service's
//! account directory ([`UserDirectory`]). The owner of every request comes
//! from the token, never from a request field.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub use opencouch_runtime::service::{
    LEGACY_USERS_FILE, LEGACY_USERS_IMPORTED, LOCAL_OWNER, LegacyImport, UserDirectory, UserError,
    UserRecord, hash_token, new_token, valid_name,
};

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
///
/// It also remembers, for [`KNOWN_GOOD_TTL`], which tokens checked out, by
/// hash: such a token is still verified against the store on every request
/// (revocation stays immediate), but the per-address limit for requests
/// without a valid token does not stand in its way ([`Self::known_good`]),
/// so an anonymous client at the same address (or behind the same proxy)
/// cannot lock a valid user out.
#[derive(Debug, Default)]
pub struct TokenCache {
    failed: Mutex<HashMap<String, Instant>>,
    good: Mutex<HashMap<String, Instant>>,
}

/// How long a token that checked out counts as known (see
/// [`TokenCache::known_good`]).
pub const KNOWN_GOOD_TTL: Duration = Duration::from_secs(600);

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
    ) -> Result<Option<String>, UserError> {
        let hash = hash_token(token);
        if self.failed_recently(&hash, now) {
            return Ok(None);
        }
        let owner = users.verify(token).await?;
        match owner {
            None => {
                self.good_lock().remove(&hash);
                self.remember_failure(hash, now);
            }
            Some(_) => self.remember_good(hash, now),
        }
        Ok(owner)
    }

    /// Whether `token` checked out within [`KNOWN_GOOD_TTL`] (it is still
    /// verified against the store before it is used). A guessed token is
    /// never known: only a verification that succeeded records one.
    pub fn known_good(&self, token: &str, now: Instant) -> bool {
        let hash = hash_token(token);
        self.good_lock()
            .get(&hash)
            .is_some_and(|at| now.saturating_duration_since(*at) < KNOWN_GOOD_TTL)
    }

    fn good_lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        self.good
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn remember_good(&self, hash: String, now: Instant) {
        let mut good = self.good_lock();
        if good.len() >= FAILED_TOKENS_MAX {
            good.retain(|_, at| now.saturating_duration_since(*at) < KNOWN_GOOD_TTL);
            if good.len() >= FAILED_TOKENS_MAX {
                good.clear();
            }
        }
        good.insert(hash, now);
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
        UserDirectory::in_memory()
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
        users.add("bob", chrono::Utc::now()).await.unwrap();
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
        let users = directory();
        let token = users.add("alice", chrono::Utc::now()).await.unwrap();
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
        users.revoke("alice", chrono::Utc::now()).await.unwrap();
        assert_eq!(cache.verify(&users, &token, t0).await.unwrap(), None);
    }
}
