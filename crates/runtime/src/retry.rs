//! The one retry policy of every I/O stage, declared here and nowhere else.
//!
//! Defense in depth, as in the original ("every I/O stage has
//! `RetryPolicy(max_attempts=2)`"): each stage already degrades on its own
//! (no memory, the deterministic reply, the unsaved crisis path), and a
//! single transient failure (a dropped connection, a busy database, a 429
//! or 5xx from the model) should not even get that far. At most
//! [`MAX_ATTEMPTS`] attempts, only on a transient error, after a short
//! wait. [`POLICY`] is the table; [`policy`] reads it; [`retry`] runs an
//! operation under it.
//!
//! | stage | retried | how |
//! |---|---|---|
//! | model call | yes | by the model client (`opencouch_llm`: connection errors, 429, 5xx; `model_max_attempts`, default 2) |
//! | embedding | yes | by the embedding client, the same rule |
//! | store read (thread lock's load, snapshot, session row) | yes | [`retry`] here |
//! | memory read (retrieval) | yes | [`retry`] here |
//! | crisis-log append | yes | [`retry`], inside the crisis-log bound |
//! | background extraction (its session re-read) | yes | [`retry`] here; the model call as above |
//! | commit | only when not applied | re-read the thread: its transcript length (the snapshot's version) still equals the length the turn loaded under the thread lock, so nothing was written; then once more |
//! | session finalization | no | it runs again on the next turn or sweep |

use std::future::Future;
use std::time::Duration;

use opencouch_store::StoreError;

/// The most attempts any stage makes.
pub const MAX_ATTEMPTS: u32 = 2;

/// The wait before a second attempt.
pub const RETRY_WAIT: Duration = Duration::from_millis(50);

/// An I/O stage of a turn (or of the work after it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IoStage {
    /// A chat-model call (gate, triage, specialist, summary, policy model).
    ModelCall,
    /// An embedding call.
    Embedding,
    /// The turn's load: the thread snapshot, its window, the session row.
    StoreRead,
    /// Memory retrieval's reads.
    MemoryRead,
    /// The crisis-log append of a crisis turn.
    CrisisLogAppend,
    /// Background memory extraction (its session re-read).
    BackgroundExtraction,
    /// The turn's commit transaction.
    Commit,
    /// Session finalization.
    SessionFinalize,
}

impl IoStage {
    /// Every stage.
    pub const ALL: [IoStage; 8] = [
        IoStage::ModelCall,
        IoStage::Embedding,
        IoStage::StoreRead,
        IoStage::MemoryRead,
        IoStage::CrisisLogAppend,
        IoStage::BackgroundExtraction,
        IoStage::Commit,
        IoStage::SessionFinalize,
    ];

    /// Its name (logs, diagnostics).
    pub const fn as_str(self) -> &'static str {
        match self {
            IoStage::ModelCall => "model_call",
            IoStage::Embedding => "embedding",
            IoStage::StoreRead => "store_read",
            IoStage::MemoryRead => "memory_read",
            IoStage::CrisisLogAppend => "crisis_log_append",
            IoStage::BackgroundExtraction => "background_extraction",
            IoStage::Commit => "commit",
            IoStage::SessionFinalize => "session_finalize",
        }
    }
}

/// How a stage retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// Up to this many attempts on a transient error, here.
    Attempts(u32),
    /// Up to this many attempts, by the model or embedding client itself
    /// (configured with `model_max_attempts`, whose default is this).
    ByClient(u32),
    /// Again only when the store proves the first attempt was not applied.
    WhenNotApplied(u32),
    /// Never.
    Never,
}

/// The policy of every stage.
pub const POLICY: [(IoStage, Retry); 8] = [
    (IoStage::ModelCall, Retry::ByClient(MAX_ATTEMPTS)),
    (IoStage::Embedding, Retry::ByClient(MAX_ATTEMPTS)),
    (IoStage::StoreRead, Retry::Attempts(MAX_ATTEMPTS)),
    (IoStage::MemoryRead, Retry::Attempts(MAX_ATTEMPTS)),
    (IoStage::CrisisLogAppend, Retry::Attempts(MAX_ATTEMPTS)),
    (IoStage::BackgroundExtraction, Retry::Attempts(MAX_ATTEMPTS)),
    (IoStage::Commit, Retry::WhenNotApplied(MAX_ATTEMPTS)),
    (IoStage::SessionFinalize, Retry::Never),
];

/// The policy of `stage`.
pub fn policy(stage: IoStage) -> Retry {
    POLICY
        .iter()
        .find(|(s, _)| *s == stage)
        .map_or(Retry::Never, |(_, r)| *r)
}

/// How many attempts [`retry`] makes for `stage` (1 for a stage it does
/// not retry itself).
fn attempts(stage: IoStage) -> u32 {
    match policy(stage) {
        Retry::Attempts(n) | Retry::WhenNotApplied(n) => n.max(1),
        Retry::ByClient(_) | Retry::Never => 1,
    }
}

/// An error that may be worth a second attempt.
pub trait Transient {
    /// Whether it may go away on its own.
    fn is_transient(&self) -> bool;
}

impl Transient for StoreError {
    fn is_transient(&self) -> bool {
        StoreError::is_transient(self)
    }
}

impl Transient for opencouch_memory::MemoryError {
    fn is_transient(&self) -> bool {
        match self {
            opencouch_memory::MemoryError::Store(e) => e.is_transient(),
            opencouch_memory::MemoryError::Decode { .. } => false,
        }
    }
}

impl Transient for opencouch_memory::retrieval::RetrievalError {
    fn is_transient(&self) -> bool {
        match self {
            opencouch_memory::retrieval::RetrievalError::Backend(e) => e.is_transient(),
        }
    }
}

/// Whether a store error is worth a second attempt
/// ([`StoreError::is_transient`]).
pub fn is_transient(e: &StoreError) -> bool {
    e.is_transient()
}

/// Runs `op` under `stage`'s policy: again after [`RETRY_WAIT`] when it
/// failed with a transient error and attempts remain. A stage the policy
/// does not retry here runs once.
///
/// # Errors
/// The last attempt's error.
pub async fn retry<T, E, F, Fut>(stage: IoStage, mut op: F) -> Result<T, E>
where
    E: Transient + std::fmt::Display,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let max = attempts(stage);
    let mut attempt = 1;
    loop {
        match op().await {
            Ok(v) => return Ok(v),
            Err(e) if attempt < max && e.is_transient() => {
                tracing::warn!(
                    stage = stage.as_str(),
                    attempt,
                    error = %e,
                    "transient store error; retrying"
                );
                attempt += 1;
                tokio::time::sleep(RETRY_WAIT).await;
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    fn refused() -> StoreError {
        StoreError::Io(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "down",
        ))
    }

    /// Which stages retry, and how, pinned: a change to the policy is a
    /// change to this table.
    #[test]
    fn the_policy_pins_which_stages_retry() {
        let want = [
            ("model_call", Retry::ByClient(2)),
            ("embedding", Retry::ByClient(2)),
            ("store_read", Retry::Attempts(2)),
            ("memory_read", Retry::Attempts(2)),
            ("crisis_log_append", Retry::Attempts(2)),
            ("background_extraction", Retry::Attempts(2)),
            ("commit", Retry::WhenNotApplied(2)),
            ("session_finalize", Retry::Never),
        ];
        assert_eq!(POLICY.len(), IoStage::ALL.len());
        for ((stage, retry), (name, want)) in POLICY.iter().zip(want) {
            assert_eq!(stage.as_str(), name);
            assert_eq!(*retry, want, "{name}");
            assert_eq!(policy(*stage), want, "{name}");
        }
        // The clients' own defaults are the policy's.
        assert_eq!(
            opencouch_llm::LlmConfig::default().max_attempts,
            MAX_ATTEMPTS
        );
        assert_eq!(
            opencouch_config::Settings::default().model_max_attempts,
            MAX_ATTEMPTS
        );
    }

    #[test]
    fn transient_errors_are_told_from_permanent_ones() {
        assert!(is_transient(&refused()));
        assert!(!is_transient(&StoreError::Invalid("bad")));
        assert!(!is_transient(&StoreError::Conflict { what: "row" }));
        assert!(!is_transient(&StoreError::Corrupt {
            table: "t",
            column: "c"
        }));
        assert!(!is_transient(&StoreError::Io(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            "no"
        ))));
    }

    async fn failing_first(
        stage: IoStage,
        error: fn() -> StoreError,
    ) -> (Result<u32, StoreError>, u32) {
        let calls = AtomicU32::new(0);
        let out = retry(stage, || {
            let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
            async move { if n == 1 { Err(error()) } else { Ok(n) } }
        })
        .await;
        (out, calls.load(Ordering::SeqCst))
    }

    #[tokio::test]
    async fn one_transient_failure_is_retried_once_where_the_policy_says() {
        for stage in IoStage::ALL {
            let (out, calls) = failing_first(stage, refused).await;
            match policy(stage) {
                Retry::Attempts(2) | Retry::WhenNotApplied(2) => {
                    assert_eq!(out.ok(), Some(2), "{}", stage.as_str());
                    assert_eq!(calls, 2);
                }
                _ => {
                    assert!(out.is_err(), "{} runs once here", stage.as_str());
                    assert_eq!(calls, 1);
                }
            }
        }
        // A permanent error is never retried.
        let (out, calls) = failing_first(IoStage::StoreRead, || StoreError::Invalid("bad")).await;
        assert!(out.is_err());
        assert_eq!(calls, 1);
        // Two transient failures in a row exhaust the two attempts.
        let calls = AtomicU32::new(0);
        let out: Result<(), StoreError> = retry(IoStage::StoreRead, || {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Err(refused()) }
        })
        .await;
        assert!(out.is_err());
        assert_eq!(calls.load(Ordering::SeqCst), MAX_ATTEMPTS);
    }
}
