//! Audit records: the crisis-log record of a level ≥ 2 turn and the
//! session-feedback record, built by pure functions, and their bounded
//! appends (an audit write never fails a turn or a session end). Neither
//! record holds message text; session ids are hashed by the store.

use std::time::Duration;

use chrono::{DateTime, Utc};
use opencouch_core::{MemoryMode, ResponseStyle};
use opencouch_store::{
    ActiveSession, CrisisLog, CrisisRecord, FeedbackLabel, FeedbackRecord, FeedbackSource,
    FeedbackStore,
};

use crate::gate::GateVerdict;
use crate::stage::CrisisInfo;

/// The session id used for hashing in audit records: thread + start time.
pub fn session_id(active: &ActiveSession) -> String {
    format!(
        "{}:{}",
        active.thread_id,
        active.started_at.timestamp_millis()
    )
}

/// The crisis-log record of a crisis turn. The user id is kept only in
/// persistent mode.
pub(crate) fn crisis_record(
    memory_mode: MemoryMode,
    user_id: Option<&str>,
    session_id: &str,
    verdict: &GateVerdict,
    info: &CrisisInfo,
    style: ResponseStyle,
    at: DateTime<Utc>,
) -> CrisisRecord {
    let user = match memory_mode {
        MemoryMode::Incognito => None,
        MemoryMode::Persistent => user_id.map(str::to_owned),
    };
    let a = verdict.assessment();
    let mut record = CrisisRecord::crisis_response(
        Some(session_id),
        user,
        at,
        a.level,
        verdict.path(),
        a.reason.clone(),
    );
    record.override_kind = verdict.override_kind();
    record.response_node_completed = true;
    record.llm_failure_occurred = info.llm_failure || verdict.llm_failure();
    record.response_style = Some(style);
    record.resource_lookup_status = info.lookup_status;
    record.resource_count = info.resource_count;
    record.tool_calls = info.tool_calls.clone();
    record.response_path = info.response_path;
    record.fallback_reason = info.fallback_reason.clone();
    record.normalized()
}

/// Appends a crisis record within `bound`. Never fails: returns
/// `captured`, `timeout` or `failed` for the turn's diagnostics.
pub(crate) async fn append_crisis(
    log: &dyn CrisisLog,
    record: &CrisisRecord,
    bound: Duration,
) -> &'static str {
    // Retried once on a transient error, inside the same bound (a duplicate
    // audit row is better than a missing one).
    let append = crate::retry::retry(crate::retry::IoStage::CrisisLogAppend, || {
        log.append(record)
    });
    // `opencouch_queue_depth{queue="crisis_log"}` while it runs.
    let _running = opencouch_core::telemetry::crisis_log_write_started();
    let outcome = match tokio::time::timeout(bound, append).await {
        Ok(Ok(_)) => "captured",
        Ok(Err(e)) => {
            tracing::error!(error = %e, "crisis log append failed");
            "failed"
        }
        Err(_) => {
            tracing::error!("crisis log append timed out");
            "timeout"
        }
    };
    opencouch_core::telemetry::record_crisis_log_write(outcome);
    outcome
}

/// The bound on the feedback write at session end.
pub(crate) const FEEDBACK_TIMEOUT: Duration = Duration::from_millis(500);

/// The feedback record of a session end. The user id is kept only in
/// persistent mode; CLI end is the default source.
pub(crate) fn feedback_record(
    memory_mode: MemoryMode,
    user_id: Option<&str>,
    session_id: &str,
    label: FeedbackLabel,
    user_turns: u64,
    source: Option<FeedbackSource>,
    at: DateTime<Utc>,
) -> FeedbackRecord {
    let user = match memory_mode {
        MemoryMode::Incognito => None,
        MemoryMode::Persistent => user_id.map(str::to_owned),
    };
    FeedbackRecord::new(
        Some(session_id),
        user,
        at,
        label,
        user_turns,
        source.unwrap_or(FeedbackSource::CliEnd),
    )
}

/// Appends a feedback record within `bound`; whether it was recorded.
pub(crate) async fn append_feedback(
    store: &dyn FeedbackStore,
    record: &FeedbackRecord,
    bound: Duration,
) -> bool {
    match tokio::time::timeout(bound, store.append(record)).await {
        Ok(Ok(())) => true,
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "session feedback not recorded");
            false
        }
        Err(_) => {
            tracing::warn!("session feedback write timed out");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opencouch_core::{Confidence, CrisisAssessment, CrisisLevel, ResourceLookupStatus};
    use opencouch_store::ResponsePath;

    fn info() -> CrisisInfo {
        CrisisInfo {
            response_path: ResponsePath::Deterministic,
            lookup_status: ResourceLookupStatus::Found,
            resource_count: 2,
            tool_calls: vec!["lookup_crisis_resources".into()],
            fallback_reason: None,
            llm_failure: false,
            country_code: Some("GB".into()),
        }
    }

    #[test]
    fn records_keep_the_user_only_in_persistent_mode() {
        let verdict = GateVerdict::for_tests(CrisisAssessment::new(
            CrisisLevel::IMMINENT,
            Confidence::High,
            "test",
        ));
        let at = Utc::now();
        let cases = [
            (MemoryMode::Persistent, Some("u1"), Some("u1")),
            (MemoryMode::Incognito, Some("u1"), None),
            (MemoryMode::Persistent, None, None),
        ];
        for (mode, user, expected) in cases {
            let r = crisis_record(
                mode,
                user,
                "t:1",
                &verdict,
                &info(),
                ResponseStyle::CrisisResponse,
                at,
            );
            assert_eq!(r.user_id_or_null.as_deref(), expected, "{mode:?}");
            assert_eq!(r.resource_count, 2);
            let f = feedback_record(mode, user, "t:1", FeedbackLabel::Positive, 3, None, at);
            assert_eq!(f.user_id_or_null.as_deref(), expected, "{mode:?}");
            assert_eq!(f.source, FeedbackSource::CliEnd);
        }
    }

    #[test]
    fn session_id_is_thread_and_start() {
        let at = DateTime::from_timestamp_millis(1_700_000_000_123).unwrap();
        let row = ActiveSession::start("t1", at, 0);
        assert_eq!(session_id(&row), "t1:1700000000123");
    }
}
