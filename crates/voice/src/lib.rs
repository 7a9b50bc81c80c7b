//! The voice channel: Realtime (speech-to-speech) sessions on top of the
//! runtime's service API, with nothing HTTP-server-specific (the routes are
//! in `crates/server/src/voice.rs`).
//!
//! [`Voice`] mints a session's ephemeral client secret with the session
//! configuration ([`session`]: model, instructions with a bounded memory
//! context, transcription, server VAD, voice, the memory mode's tools;
//! [`client`]: the `client_secrets` call, GA and beta answers), runs the
//! session's function calls and turn policy through the service, records
//! each finished exchange as a turn of the thread, and queues the post-turn
//! safety audit ([`audit`]). Crisis handling is the app's: the gate runs on
//! every user transcript as it is recorded (and on the policy call before a
//! response), and a crisis gets the deterministic crisis reply with verified
//! resources from the app, whatever the live model says.

pub mod audit;
pub mod client;
pub mod session;

use std::time::Duration;

use opencouch_config::{Secret, Settings};
use opencouch_core::MemoryMode;
use opencouch_runtime::service::{
    Caller, EndSessionOutcome, EndedVia, Feedback, Service, ServiceError, VoiceCall, VoiceCrisis,
    VoicePolicy, VoiceRecorded, VoiceToolCall, VoiceTurn,
};
use serde_json::Value;

pub use audit::{AuditJob, AuditLimits, AuditStats, Auditor};
pub use client::{MintError, Minted, RealtimeClient};
pub use session::{SessionSpec, VoiceSettings};

/// Longest wait for the Realtime endpoint to mint a secret.
const MINT_TIMEOUT: Duration = Duration::from_secs(15);

/// Why a voice operation failed.
#[derive(Debug, thiserror::Error)]
pub enum VoiceError {
    /// No Realtime endpoint is configured.
    #[error(
        "voice is not configured: set realtime_base_url (OPENCOUCH_REALTIME_BASE_URL) or an API key (OPENCOUCH_API_KEY)"
    )]
    NotConfigured,
    /// A request value is not acceptable (the message says which).
    #[error("{0}")]
    Invalid(String),
    /// The service refused or failed (its code says which).
    #[error(transparent)]
    Service(#[from] ServiceError),
    /// The Realtime endpoint failed.
    #[error(transparent)]
    Upstream(#[from] MintError),
}

/// A session to mint.
#[derive(Debug, Clone)]
pub struct SessionRequest {
    pub thread_id: String,
    pub memory_mode: MemoryMode,
    /// One of the ten voices; the configured one when `None`.
    pub assistant_voice: Option<String>,
}

/// A minted session: what the page needs to connect, and nothing of the
/// server's key.
#[derive(Debug, Clone, PartialEq)]
pub struct MintedSession {
    /// The ephemeral `ek_…` secret.
    pub client_secret: String,
    pub expires_at: Option<u64>,
    pub thread_id: String,
    pub memory_mode: MemoryMode,
    /// The session configuration sent upstream.
    pub session_config: Value,
}

/// The turn policy with any audit notice for the thread.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyAnswer {
    pub policy: VoicePolicy,
    /// Set when an earlier turn of this thread was flagged by the audit:
    /// the verified resources to show now.
    pub audit_notice: Option<VoiceCrisis>,
}

/// A recorded turn with any audit notice for the thread.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordAnswer {
    pub recorded: VoiceRecorded,
    pub audit_notice: Option<VoiceCrisis>,
}

/// The voice channel over one service.
pub struct Voice {
    service: Service,
    settings: VoiceSettings,
    key: Option<Secret>,
    client: RealtimeClient,
    auditor: Auditor,
}

impl std::fmt::Debug for Voice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Voice")
            .field("settings", &self.settings)
            .field("auditor", &self.auditor)
            .finish_non_exhaustive()
    }
}

impl Voice {
    /// The channel over `service` with the voice settings of `settings`
    /// (starts the auditor: needs a Tokio runtime).
    pub fn new(service: Service, settings: &Settings) -> Self {
        Self::with_parts(
            service.clone(),
            VoiceSettings::from_settings(settings),
            settings.api_key.clone(),
            AuditLimits::default(),
        )
    }

    /// The channel from its parts (tests use other audit limits).
    pub fn with_parts(
        service: Service,
        settings: VoiceSettings,
        key: Option<Secret>,
        limits: AuditLimits,
    ) -> Self {
        let auditor = Auditor::start(audit::service_check(service.clone()), limits);
        Voice {
            service,
            settings,
            key,
            client: RealtimeClient::new(MINT_TIMEOUT),
            auditor,
        }
    }

    /// The Realtime base URL the page connects to (`{base}/realtime/calls`),
    /// `None` when voice is not configured.
    pub fn realtime_base(&self) -> Option<&str> {
        self.settings.realtime_base.as_deref()
    }

    /// The auditor's counters.
    pub fn audit_stats(&self) -> AuditStats {
        self.auditor.stats()
    }

    /// Mints a session for `caller`'s thread.
    ///
    /// # Errors
    /// [`VoiceError::NotConfigured`], an unknown voice, the service's
    /// errors (thread id, storage), the endpoint's failures.
    pub async fn session(
        &self,
        caller: &Caller,
        req: SessionRequest,
    ) -> Result<MintedSession, VoiceError> {
        let base = self.realtime_base().ok_or(VoiceError::NotConfigured)?;
        let voice = req
            .assistant_voice
            .clone()
            .unwrap_or_else(|| self.settings.voice.clone());
        if !session::is_voice(&voice) {
            return Err(VoiceError::Invalid(
                "assistant_voice must be one of alloy, ash, ballad, coral, echo, sage, shimmer, verse, marin, cedar"
                    .to_owned(),
            ));
        }
        // Checks the thread id (and the owner) before anything is sent.
        self.service
            .thread(caller, req.memory_mode, &req.thread_id)
            .await?;
        let memory = self
            .service
            .voice_memory_bootstrap(caller, req.memory_mode)
            .await?;
        let spec = SessionSpec {
            model: self.settings.model.clone(),
            transcription_model: self.settings.transcription_model.clone(),
            voice,
            instructions: session::instructions(req.memory_mode, &memory),
            tools: self.service.voice_tools(req.memory_mode),
            secret_ttl_secs: self.settings.secret_ttl_secs,
        };
        let owner = match caller {
            Caller::Account(o) => o.clone(),
            Caller::Local { user } => user.clone().unwrap_or_else(|| req.thread_id.clone()),
            Caller::GateOnly(_) => req.thread_id.clone(),
        };
        let minted = self
            .client
            .mint(
                base,
                self.key.as_ref().map(Secret::expose),
                &client::safety_identifier(&owner),
                &spec.client_secret_body(),
            )
            .await
            .inspect_err(|e| tracing::warn!(error = %e, "minting a voice session failed"))?;
        Ok(MintedSession {
            client_secret: minted.value,
            expires_at: minted.expires_at,
            thread_id: req.thread_id,
            memory_mode: req.memory_mode,
            session_config: spec.session(),
        })
    }

    /// Runs one function call of the session.
    ///
    /// # Errors
    /// The service's errors (an unknown tool is `invalid_input`).
    pub async fn tool(&self, caller: &Caller, call: VoiceToolCall) -> Result<Value, VoiceError> {
        Ok(self.service.voice_tool(caller, call).await?)
    }

    /// The route for the person's latest words, and any audit notice.
    ///
    /// # Errors
    /// The service's errors.
    pub async fn policy(
        &self,
        caller: &Caller,
        thread: &str,
        mode: MemoryMode,
        user_text: &str,
    ) -> Result<PolicyAnswer, VoiceError> {
        let policy = self
            .service
            .voice_policy(caller, thread, mode, user_text)
            .await?;
        let audit_notice = self
            .auditor
            .take_notice(&audit::notice_key(caller, thread, mode));
        Ok(PolicyAnswer {
            policy,
            audit_notice,
        })
    }

    /// Records a finished exchange and queues its safety audit.
    ///
    /// # Errors
    /// The service's errors.
    pub async fn record(
        &self,
        caller: &Caller,
        turn: VoiceTurn,
    ) -> Result<RecordAnswer, VoiceError> {
        let key = audit::notice_key(caller, &turn.thread_id, turn.memory_mode);
        let job = AuditJob {
            caller: caller.clone(),
            thread_id: turn.thread_id.clone(),
            memory_mode: turn.memory_mode,
            user_text: turn.user_text.clone(),
            assistant_text: turn.assistant_text.clone(),
            answered_on_crisis: false,
        };
        let recorded = self.service.voice_record(caller, turn).await?;
        let audit_notice = self.auditor.take_notice(&key);
        self.auditor.submit(AuditJob {
            answered_on_crisis: recorded.crisis.is_some(),
            ..job
        });
        Ok(RecordAnswer {
            recorded,
            audit_notice,
        })
    }

    /// Ends the thread's session through the same path as text (summary,
    /// memory promotion, feedback), ended via voice: the feedback's source
    /// is `voice_end` and the thread's voice finalization status is kept.
    ///
    /// # Errors
    /// The service's errors.
    pub async fn end(
        &self,
        caller: &Caller,
        thread: &str,
        mode: MemoryMode,
        feedback: Option<Feedback>,
    ) -> Result<EndSessionOutcome, VoiceError> {
        Ok(self
            .service
            .end_session(caller, thread, mode, feedback, EndedVia::Voice)
            .await?)
    }

    /// Stops the auditor: waits up to `wait` for queued and running checks,
    /// drops (and counts) the rest.
    pub async fn shutdown(&self, wait: Duration) -> AuditStats {
        self.auditor.shutdown(wait).await
    }
}

/// The recorded calls of a turn from `(name, status)` pairs as the page
/// sends them; an unknown status is refused.
///
/// # Errors
/// [`VoiceError::Invalid`] naming the allowed statuses.
pub fn parse_calls<'a>(
    pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<Vec<VoiceCall>, VoiceError> {
    pairs
        .into_iter()
        .map(|(name, status)| {
            let status =
                opencouch_runtime::service::VoiceCallStatus::parse(status).ok_or_else(|| {
                    VoiceError::Invalid(
                        "tool_calls[].status must be started, completed or failed".to_owned(),
                    )
                })?;
            Ok(VoiceCall {
                name: name.to_owned(),
                status,
            })
        })
        .collect()
}
