//! Active-session rows and the pure session-status rule.
//!
//! Rules (inventory §8):
//! * the inactivity timeout defaults to [`DEFAULT_SESSION_TIMEOUT`] (20 min);
//! * a missing or unparseable `last_active_at` counts as expired;
//! * the exact boundary (`now - last_active_at == timeout`) counts as expired;
//! * timestamps carrying a UTC offset are converted to UTC before comparing;
//!   a timestamp *without* an offset is unparseable here (the original raised
//!   on a naive/aware mismatch), so it counts as expired.
//!
//! Status precedence: absent → interrupted → expired_unfinalized →
//! rotation_required → active. An interrupted session needs finalization
//! whether or not it has also expired.

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Default inactivity timeout: 20 minutes.
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::minutes(20);

/// `finalize_required_reason` value the stores set when a row's payload
/// (the session buffer) cannot be read.
pub const REASON_UNREADABLE_PAYLOAD: &str = "unreadable_payload";

/// `finalize_required_reason` value for a turn that was interrupted.
pub const REASON_INTERRUPTED: &str = "interrupted";

/// One thread's active session (the row in `active_sessions`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActiveSession {
    /// The thread this session belongs to.
    pub thread_id: String,
    /// When the session started.
    pub started_at: DateTime<Utc>,
    /// Last activity; `None` when missing or unreadable (counts as expired).
    pub last_active_at: Option<DateTime<Utc>>,
    /// Index of the first transcript entry of this session.
    pub transcript_start_index: u64,
    /// Highest crisis level seen in this session (0–3).
    pub max_crisis_level: u8,
    /// The session memory buffer (held candidates, approach counts), owned by
    /// the memory layer.
    pub session_buffer: Value,
    /// Set once the active transcript reaches the rotation soft limit.
    pub rotate_after_this_turn: bool,
    /// Why the session must be finalized before new turns (e.g.
    /// [`REASON_INTERRUPTED`], [`REASON_UNREADABLE_PAYLOAD`]).
    pub finalize_required_reason: Option<String>,
}

impl ActiveSession {
    /// A fresh session starting at `now` whose transcript begins at
    /// `transcript_start_index`.
    pub fn start(
        thread_id: impl Into<String>,
        now: DateTime<Utc>,
        transcript_start_index: u64,
    ) -> Self {
        ActiveSession {
            thread_id: thread_id.into(),
            started_at: now,
            last_active_at: Some(now),
            transcript_start_index,
            max_crisis_level: 0,
            session_buffer: Value::Object(Default::default()),
            rotate_after_this_turn: false,
            finalize_required_reason: None,
        }
    }
}

/// The lifecycle status of a thread's session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionStatus {
    /// No active session row.
    Absent,
    /// A live session.
    Active,
    /// Inactive for at least the timeout; must be finalized.
    ExpiredUnfinalized,
    /// A turn was interrupted or the row is unreadable; must be finalized.
    Interrupted,
    /// The transcript reached the soft limit; rotate after this turn.
    RotationRequired,
}

impl SessionStatus {
    /// Canonical snake_case spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            SessionStatus::Absent => "absent",
            SessionStatus::Active => "active",
            SessionStatus::ExpiredUnfinalized => "expired_unfinalized",
            SessionStatus::Interrupted => "interrupted",
            SessionStatus::RotationRequired => "rotation_required",
        }
    }
}

/// Parses a stored timestamp leniently: RFC 3339 with an offset, converted to
/// UTC; anything else (garbage, no offset) is `None`.
pub fn parse_timestamp(raw: Option<&str>) -> Option<DateTime<Utc>> {
    raw.and_then(|s| DateTime::parse_from_rfc3339(s.trim()).ok())
        .map(|t| t.with_timezone(&Utc))
}

/// Whether a session last active at `last_active_at` has expired at `now`.
/// Missing counts as expired; the boundary counts as expired.
pub fn is_expired(
    last_active_at: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
    timeout: Duration,
) -> bool {
    match last_active_at {
        None => true,
        Some(t) => now - t >= timeout,
    }
}

/// The status of `session` at `now` (pure; see the module docs).
pub fn session_status(
    session: Option<&ActiveSession>,
    now: DateTime<Utc>,
    timeout: Duration,
) -> SessionStatus {
    let Some(s) = session else {
        return SessionStatus::Absent;
    };
    if s.finalize_required_reason.is_some() {
        return SessionStatus::Interrupted;
    }
    if is_expired(s.last_active_at, now, timeout) {
        return SessionStatus::ExpiredUnfinalized;
    }
    if s.rotate_after_this_turn {
        return SessionStatus::RotationRequired;
    }
    SessionStatus::Active
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        parse_timestamp(Some(s)).expect("valid test timestamp")
    }

    #[test]
    fn status_table() {
        let now = at("2026-01-01T12:00:00Z");
        let t = DEFAULT_SESSION_TIMEOUT;
        // (name, last_active_at raw, rotate, finalize reason, expected)
        type Case<'a> = (
            &'a str,
            Option<&'a str>,
            bool,
            Option<&'a str>,
            SessionStatus,
        );
        let cases: &[Case<'_>] = &[
            (
                "fresh",
                Some("2026-01-01T11:59:00Z"),
                false,
                None,
                SessionStatus::Active,
            ),
            (
                "one second before boundary",
                Some("2026-01-01T11:40:01Z"),
                false,
                None,
                SessionStatus::Active,
            ),
            (
                "exact boundary is expired",
                Some("2026-01-01T11:40:00Z"),
                false,
                None,
                SessionStatus::ExpiredUnfinalized,
            ),
            (
                "long ago",
                Some("2025-12-31T00:00:00Z"),
                false,
                None,
                SessionStatus::ExpiredUnfinalized,
            ),
            (
                "missing timestamp",
                None,
                false,
                None,
                SessionStatus::ExpiredUnfinalized,
            ),
            (
                "garbage timestamp",
                Some("yesterday-ish"),
                false,
                None,
                SessionStatus::ExpiredUnfinalized,
            ),
            (
                "naive timestamp",
                Some("2026-01-01T11:59:00"),
                false,
                None,
                SessionStatus::ExpiredUnfinalized,
            ),
            // 13:50+02:00 is 11:50Z: ten minutes ago, so active.
            (
                "offset respected (active)",
                Some("2026-01-01T13:50:00+02:00"),
                false,
                None,
                SessionStatus::Active,
            ),
            // 07:30-04:00 is 11:30Z: thirty minutes ago, so expired.
            (
                "offset respected (expired)",
                Some("2026-01-01T07:30:00-04:00"),
                false,
                None,
                SessionStatus::ExpiredUnfinalized,
            ),
            (
                "rotation",
                Some("2026-01-01T11:59:00Z"),
                true,
                None,
                SessionStatus::RotationRequired,
            ),
            (
                "expired beats rotation",
                Some("2026-01-01T11:00:00Z"),
                true,
                None,
                SessionStatus::ExpiredUnfinalized,
            ),
            (
                "interrupted",
                Some("2026-01-01T11:59:00Z"),
                false,
                Some(REASON_INTERRUPTED),
                SessionStatus::Interrupted,
            ),
            (
                "unreadable payload",
                Some("2026-01-01T11:59:00Z"),
                false,
                Some(REASON_UNREADABLE_PAYLOAD),
                SessionStatus::Interrupted,
            ),
            (
                "interrupted beats expired",
                None,
                true,
                Some(REASON_INTERRUPTED),
                SessionStatus::Interrupted,
            ),
        ];
        for (name, raw, rotate, reason, want) in cases {
            let mut s = ActiveSession::start("t", now, 0);
            s.last_active_at = parse_timestamp(*raw);
            s.rotate_after_this_turn = *rotate;
            s.finalize_required_reason = reason.map(str::to_owned);
            assert_eq!(session_status(Some(&s), now, t), *want, "{name}");
        }
        assert_eq!(session_status(None, now, t), SessionStatus::Absent);
    }

    #[test]
    fn custom_timeout_boundary() {
        let now = at("2026-01-01T12:00:00Z");
        let five = Duration::minutes(5);
        assert!(is_expired(Some(at("2026-01-01T11:55:00Z")), now, five));
        assert!(!is_expired(Some(at("2026-01-01T11:55:00.001Z")), now, five));
    }
}
