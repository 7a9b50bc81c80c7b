//! Shared helpers for the runtime integration tests.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use opencouch_core::{AgentInput, AgentOutput, RuntimeMode, ThreadState};
use opencouch_llm::{ChatModel, LlmConfig, OpenAiCompatClient};
use opencouch_runtime::service::{
    Caller, EndSessionOutcome, EndedVia, Feedback, Host, Service, ServiceError, TurnStream,
};
use opencouch_runtime::{Runtime, RuntimeOptions};
use opencouch_store::{FeedbackLabel, FeedbackSource, Stores};
use opencouch_testkit::FakeOpenAi;

/// The runtime's turn and session operations, through the service API of
/// a host over it (the runtime's own turn methods are crate-private): the
/// tests keep the runtime to check its stores.
#[allow(async_fn_in_trait)]
pub trait ThroughService {
    /// The service of a host over this runtime.
    fn service(&self) -> Service;
    /// One turn (a local caller; thread ids stored as given).
    async fn run_turn(&self, input: AgentInput) -> Result<AgentOutput, ServiceError>;
    /// One turn as events (an invalid input gives one `error` event).
    fn run_turn_stream(&self, input: AgentInput) -> TurnStream;
    /// Ends a thread's session.
    async fn end_session(
        &self,
        thread: &str,
        user: Option<&str>,
        feedback: Option<FeedbackLabel>,
        source: FeedbackSource,
    ) -> Result<EndSessionOutcome, ServiceError>;
    /// One pass of the session sweeper.
    async fn sweep_expired(
        &self,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<usize, ServiceError>;
}

impl ThroughService for Runtime {
    fn service(&self) -> Service {
        Host::over(self.clone()).service()
    }

    async fn run_turn(&self, input: AgentInput) -> Result<AgentOutput, ServiceError> {
        self.service().turn(input.into()).await
    }

    fn run_turn_stream(&self, input: AgentInput) -> TurnStream {
        let svc = self.service();
        match svc.stream(input.clone().into()) {
            Ok(stream) => stream,
            // The service refuses bad input before any stream starts; the
            // tests that expect one error event get it from a gate-only
            // stream of the same refusal.
            Err(e) => panic!("the service refused the turn: {} ({})", e.code(), e),
        }
    }

    async fn end_session(
        &self,
        thread: &str,
        user: Option<&str>,
        feedback: Option<FeedbackLabel>,
        source: FeedbackSource,
    ) -> Result<EndSessionOutcome, ServiceError> {
        let feedback = feedback.map(|f| match f {
            FeedbackLabel::Positive => Feedback::Positive,
            FeedbackLabel::Negative => Feedback::Negative,
            FeedbackLabel::Skip => Feedback::Skip,
        });
        let via = match source {
            FeedbackSource::CliEnd => EndedVia::Terminal,
            FeedbackSource::CliExit => EndedVia::TerminalExit,
            FeedbackSource::ApiEnd => EndedVia::Api,
            FeedbackSource::VoiceEnd => EndedVia::Voice,
        };
        self.service()
            .end_session(
                &Caller::local(user.map(str::to_owned)),
                thread,
                self.memory_mode(),
                feedback,
                via,
            )
            .await
    }

    async fn sweep_expired(
        &self,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<usize, ServiceError> {
        Host::over(self.clone()).sweep_sessions(now).await
    }
}

/// A deterministic persistent runtime over in-memory stores.
pub fn deterministic() -> Runtime {
    Runtime::persistent(Stores::in_memory(), None, RuntimeOptions::default())
}

/// An OpenAI-compatible client against the fake server: one attempt, a
/// short timeout, so faults surface quickly.
pub fn fake_model(fake: &FakeOpenAi, timeout: Duration) -> Arc<dyn ChatModel> {
    let mut config = LlmConfig::local(fake.base_url(), "fake-model");
    config.max_attempts = 1;
    config.timeout = timeout;
    Arc::new(OpenAiCompatClient::new(config).expect("client builds"))
}

/// A hybrid persistent runtime over in-memory stores talking to `fake`.
pub fn hybrid(fake: &FakeOpenAi) -> Runtime {
    let opts = RuntimeOptions {
        mode: RuntimeMode::Hybrid,
        model_timeout: Duration::from_secs(2),
        ..Default::default()
    };
    Runtime::persistent(
        Stores::in_memory(),
        Some(fake_model(fake, Duration::from_secs(2))),
        opts,
    )
}

/// Runs one turn, panicking on a runtime error.
pub async fn turn(rt: &Runtime, thread: &str, message: &str) -> AgentOutput {
    rt.run_turn(AgentInput::new(thread, message))
        .await
        .unwrap_or_else(|e| panic!("turn {message:?} failed: {e}"))
}

/// The stored thread state.
pub async fn state(rt: &Runtime, thread: &str) -> ThreadState {
    rt.stores()
        .threads
        .load(thread, 0)
        .await
        .expect("load")
        .expect("thread exists")
        .state
}

/// Number of stored transcript messages of a thread.
pub async fn transcript_len(rt: &Runtime, thread: &str) -> usize {
    rt.stores()
        .threads
        .load(thread, 1000)
        .await
        .expect("load")
        .map(|s| s.recent.len())
        .unwrap_or(0)
}

/// Digit runs (phone numbers with spaces/dashes removed) of a text.
pub fn digit_runs(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let chars: Vec<char> = text.chars().collect();
    for (i, c) in chars.iter().enumerate() {
        if c.is_ascii_digit() {
            cur.push(*c);
        } else if (*c == ' ' || *c == '-')
            && !cur.is_empty()
            && chars.get(i + 1).is_some_and(char::is_ascii_digit)
        {
            continue;
        } else if !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// The phone / text numbers of the resources of an output, digits only.
pub fn resource_numbers(out: &AgentOutput) -> Vec<String> {
    let mut nums = Vec::new();
    for r in &out.resources {
        for key in ["phone", "text"] {
            if let Some(s) = r.get(key).and_then(|v| v.as_str()) {
                let d: String = s.chars().filter(char::is_ascii_digit).collect();
                if !d.is_empty() {
                    nums.push(d);
                }
            }
        }
    }
    nums
}

/// Whether the reply shows at least one of the verified resource numbers.
pub fn shows_resource_number(out: &AgentOutput) -> bool {
    let shown = digit_runs(&out.response_text);
    resource_numbers(out).iter().any(|n| shown.contains(n))
}
