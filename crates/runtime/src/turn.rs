//! The turn driver: the only code besides the service API that holds the
//! [`Runtime`]. It does the I/O of a turn in order and leaves every decision
//! to a stage that sees only what it needs:
//!
//! 1. lock the thread → load the effective state (the service validated
//!    the input and chose this runtime by its memory mode)
//! 2. **crisis gate** (never skipped, fails closed)
//! 3. level 0 only: triage ([`crate::triage`])
//! 4. route plan (pure: [`crate::plan::resolve`])
//! 5. memory load, only on routes that need it
//! 6. the specialist (its input carries the gate verdict; it sees [`Ports`])
//! 7. fold the outcome into the state ([`crate::steps`], pure), commit
//!    transcript + state + session in one transaction, then the after-commit
//!    jobs: background memory extraction (hybrid mode) and the crisis log
//!    (bounded, never fails the turn); then send what of the reply was not
//!    streamed yet
//!
//! **Invariants:**
//! * a therapeutic reply streams while the model writes it (through the
//!   checks of [`crate::reply`]); every other reply is sent whole after the
//!   commit. `response_ready` and `done` come only after the commit, so an
//!   acknowledged turn is never lost (`saved: true`);
//! * a turn is committed whole or not at all: when its consumer goes away
//!   (a client disconnects, the future of [`Runtime::run_turn`] is dropped)
//!   before the commit, a turn below crisis level stops at once (the model
//!   request is dropped) and writes nothing; a crisis turn (level ≥ 2,
//!   which includes every turn inside an open episode) always runs to the
//!   end, commit and crisis log included;
//! * a crisis reply never depends on storage: if the thread cannot be loaded
//!   the message is still assessed (without history) and a level ≥ 2 message
//!   gets the deterministic crisis reply; if the commit fails after a crisis
//!   reply was built, the reply is still delivered. Both say `saved: false`.
//! * a level ≥ 2 turn opens a crisis episode in the thread state; while it
//!   is open the gate keeps every follow-up at level 2 or above (crisis
//!   specialist, crisis log) until the person says they are safe or a calm
//!   stretch passes (`opencouch_safety::episode`); session end clears it.
//!
//! [`Ports`]: crate::ports::Ports

use std::time::Instant;

use chrono::Utc;
use opencouch_core::{
    AgentInput, AgentOutput, Diagnostics, Message, ResponseStyle, ResponseType, Route,
    SessionAction, Stage, StreamEvent, ThreadState,
};
use opencouch_store::{
    ActiveSession, SessionStatus, SessionWrite, StoreError, TurnCommit, TurnLoad, session_status,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::audit;
use crate::gate::GateVerdict;
use crate::plan;
use crate::reply::{EventSink, TurnStream};
use crate::runtime::{Runtime, RuntimeError};
use crate::spans;
use crate::specialists::{self, CrisisInfo, EpisodeTurn, SpecialistInput};
use crate::steps::{self, Answered};
use tracing::{Instrument, Span};

impl Runtime {
    /// Runs one turn and returns its output after the turn is committed.
    /// The turn runs in its own task: dropping this future cancels a turn
    /// below crisis level before its commit (nothing is written) and never
    /// a crisis turn.
    pub(crate) async fn run_turn(&self, input: AgentInput) -> Result<AgentOutput, RuntimeError> {
        let span = spans::turn(&input);
        self.spawn_turn(span, move |rt, sink| async move {
            execute(&rt, input, &sink).await
        })
        .await
    }

    /// Runs one turn as a stream of events: statuses, chunks,
    /// `response_ready`, then `done` (or one `error`) last. The turn runs in
    /// its own task; dropping the stream before the turn's commit cancels a
    /// turn below crisis level (nothing is written) and never a crisis turn.
    pub(crate) fn run_turn_stream(&self, input: AgentInput) -> TurnStream {
        let span = spans::turn(&input);
        self.spawn_stream(span, move |rt, sink| async move {
            execute(&rt, input, &sink).await
        })
    }

    /// Runs a turn when storage is already known to be unavailable (for
    /// example a server that could not verify the caller because its user
    /// store is down). Nothing is read or written: the message goes through
    /// the crisis gate with no history, a level ≥ 2 message gets the
    /// deterministic crisis reply with verified resources (`saved: false`),
    /// and anything else fails with `error` (a crisis reply never depends
    /// on storage; nothing else is promised without it).
    pub(crate) async fn run_turn_without_storage(
        &self,
        input: AgentInput,
        error: StoreError,
    ) -> Result<AgentOutput, RuntimeError> {
        let span = spans::turn(&input);
        self.spawn_turn(span, move |rt, sink| async move {
            execute_without_storage(&rt, input, &sink, error).await
        })
        .await
    }

    /// [`Runtime::run_turn_without_storage`] as a stream of events.
    pub(crate) fn run_turn_stream_without_storage(
        &self,
        input: AgentInput,
        error: StoreError,
    ) -> TurnStream {
        let span = spans::turn(&input);
        self.spawn_stream(span, move |rt, sink| async move {
            execute_without_storage(&rt, input, &sink, error).await
        })
    }

    /// Runs a turn in its own task; dropping the returned future cancels
    /// the turn's token. The task counts as a running turn until it ends.
    async fn spawn_turn<F, Fut>(&self, span: Span, run: F) -> Result<AgentOutput, RuntimeError>
    where
        F: FnOnce(Runtime, EventSink) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<AgentOutput, RuntimeError>> + Send + 'static,
    {
        let cancel = CancellationToken::new();
        let _cancel_on_drop = cancel.clone().drop_guard();
        let running = self.inner.turns.start();
        let sink = EventSink::silent(cancel).tracked(self.inner.turns.clone());
        let task = tokio::spawn(run(self.clone(), sink).instrument(span));
        let result = task.await.unwrap_or(Err(RuntimeError::Aborted));
        running.report(result.as_ref(), self.memory_mode());
        result
    }

    /// Runs a turn in its own task whose events go straight to the returned
    /// stream: one task and one bounded channel between the turn and its
    /// consumer. The task counts as a running turn until it ends.
    fn spawn_stream<F, Fut>(&self, span: Span, run: F) -> TurnStream
    where
        F: FnOnce(Runtime, EventSink) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<AgentOutput, RuntimeError>> + Send + 'static,
    {
        let (tx, rx) = mpsc::channel::<StreamEvent>(64);
        let runtime = self.clone();
        let cancel = CancellationToken::new();
        let sink = EventSink::new(tx.clone(), cancel.clone()).tracked(self.inner.turns.clone());
        let running = self.inner.turns.start();
        let mode = self.memory_mode();
        tokio::spawn(async move {
            let result = run(runtime, sink).await;
            running.report(result.as_ref(), mode);
            let last = match result {
                Ok(output) => StreamEvent::Done {
                    output: Box::new(output),
                },
                Err(e) => {
                    // The cause goes to the log; the event carries the
                    // service's code and words (never store details).
                    let e = crate::service::error::ServiceError::from(e);
                    if e.code() != crate::error::ErrorCode::Cancelled {
                        tracing::error!(code = %e.code(), error = ?e.cause(), "streamed turn failed");
                    }
                    StreamEvent::Error {
                        code: e.code().as_str().to_owned(),
                        message: e.message().to_owned(),
                    }
                }
            };
            let _ = tx.send(last).await;
            drop(running);
        }.instrument(span));
        TurnStream::new(rx, cancel)
    }
}

fn ms(since: Instant) -> f64 {
    (since.elapsed().as_secs_f64() * 1000.0 * 1000.0).round() / 1000.0
}

/// What the storage phase before the gate produced.
pub(crate) struct Loaded {
    pub(crate) guard: opencouch_store::ThreadGuard,
    pub(crate) now: chrono::DateTime<Utc>,
    pub(crate) state: ThreadState,
    pub(crate) active: ActiveSession,
    pub(crate) first_turn_of_session: bool,
    /// This session's recent messages, oldest first.
    pub(crate) session_history: Vec<Message>,
}

/// Step 1: lock the thread and load its effective state (the snapshot plus
/// this session's recent transcript window), finalizing an expired or
/// interrupted session first. Every error here is a storage error.
pub(crate) async fn load(rt: &Runtime, input: &AgentInput) -> Result<Loaded, RuntimeError> {
    let inner = &rt.inner;
    let guard = inner.stores.lock_thread(&input.thread_id).await?;
    let now = Utc::now();
    // Snapshot, window and session row: one read on the SQL backends.
    let TurnLoad {
        snapshot,
        session: row,
    } = crate::retry::retry(crate::retry::IoStage::StoreRead, || {
        inner
            .stores
            .load_turn(&input.thread_id, inner.opts.recent_window)
    })
    .await?;
    let (mut state, history): (ThreadState, Vec<Message>) = match snapshot {
        Some(s) => (s.state, s.recent.into_iter().map(|e| e.message).collect()),
        None => (
            ThreadState::new(&input.thread_id, input.channel),
            Vec::new(),
        ),
    };
    if state.user_id.is_none() {
        state.user_id = input.user_id.clone();
    }
    state.channel = input.channel;

    // Session bookkeeping: an expired or interrupted session is finalized
    // (which also closes any crisis episode it held) before the new turn
    // starts a fresh one.
    let mut session = match session_status(row.as_ref(), now, inner.opts.session_timeout) {
        SessionStatus::Active | SessionStatus::RotationRequired => row,
        SessionStatus::ExpiredUnfinalized | SessionStatus::Interrupted => {
            crate::session::finalize_locked(rt, &mut state, None, None).await?;
            None
        }
        SessionStatus::Absent => None,
    };
    let first_turn_of_session = session.is_none();
    let active = session
        .take()
        .unwrap_or_else(|| ActiveSession::start(&input.thread_id, now, state.message_count));
    if first_turn_of_session {
        state.session_progress = Default::default();
    }
    // Only this session's messages are context for the turn.
    let session_history =
        steps::session_window(&history, state.message_count, active.transcript_start_index);
    Ok(Loaded {
        guard,
        now,
        state,
        active,
        first_turn_of_session,
        session_history,
    })
}

/// What the storage phase came to within the crisis bound.
enum Loading {
    /// The load finished (in time, or after the bound for a message below
    /// crisis level, which waits on).
    Loaded(Box<Result<Loaded, RuntimeError>>),
    /// Storage stalled past the bound and the message is a crisis: it is
    /// answered now, unsaved.
    StalledCrisis,
}

/// Step 1 under the crisis bound: when the thread lock or the load takes
/// longer than `storage_crisis_bound` (a held lock, a long migration, a
/// stuck transaction), the message is assessed without history and
/// without the model; a crisis message does not wait for storage, anything
/// else waits on.
async fn load_within_bound(rt: &Runtime, input: &AgentInput) -> Loading {
    let loading = load(rt, input);
    tokio::pin!(loading);
    tokio::select! {
        biased;
        loaded = &mut loading => Loading::Loaded(Box::new(loaded)),
        () = tokio::time::sleep(rt.inner.opts.storage_crisis_bound) => {
            let quick = rt.inner.gate.assess_without_model(&[], &input.message).await;
            if quick.assessment().level.needs_crisis_response() {
                tracing::warn!(
                    bound_ms = rt.inner.opts.storage_crisis_bound.as_millis() as u64,
                    "storage stalled past the crisis bound; answering the crisis first"
                );
                Loading::StalledCrisis
            } else {
                Loading::Loaded(Box::new(loading.await))
            }
        }
    }
}

/// Why a crisis turn goes out unsaved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unsaved {
    /// Storage failed (or is known to be unavailable).
    Failed,
    /// Storage stalled past the crisis bound: nothing after the gate may
    /// wait, the model included.
    Stalled,
}

/// Runs one turn end to end.
pub(crate) async fn execute(
    rt: &Runtime,
    input: AgentInput,
    events: &EventSink,
) -> Result<AgentOutput, RuntimeError> {
    let started = Instant::now();
    let inner = &rt.inner;

    // 1. Effective state. A crisis reply never depends on storage: when the
    // thread cannot be locked or read, the message still goes through the
    // gate (see `unsaved_crisis_turn`).
    let Loaded {
        guard,
        now,
        mut state,
        mut active,
        first_turn_of_session,
        session_history,
    } = match load_within_bound(rt, &input).await {
        Loading::Loaded(loaded) => match *loaded {
            Ok(loaded) => loaded,
            Err(RuntimeError::Store(e)) => {
                return unsaved_crisis_turn(rt, &input, events, started, e, Unsaved::Failed).await;
            }
            Err(e) => return Err(e),
        },
        Loading::StalledCrisis => {
            let e = StoreError::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "storage did not answer within the crisis bound",
            ));
            return unsaved_crisis_turn(rt, &input, events, started, e, Unsaved::Stalled).await;
        }
    };
    let mut diagnostics = Diagnostics::new();

    // 2. Crisis gate: never skipped. An open crisis episode keeps the
    // verdict at level 2 or above until the person says they are safe.
    events.status(Stage::CrisisGate).await;
    let open_episode = state.crisis_episode.clone();
    let gate = spans::Stage::start("crisis_gate", "crisis_gate_ms");
    let verdict = (inner.gate)
        .assess_in_episode(&session_history, &input.message, open_episode.as_ref())
        .instrument(gate.span())
        .await;
    gate.outcome(verdict.layer());
    // The gate times itself (the verdict's `crisis_gate_ms`): the span
    // carries that same figure.
    gate.end_measured(verdict.elapsed_ms());
    let level = verdict.assessment().level;
    if level.needs_crisis_response() {
        events.mark_crisis();
        spans::mark_crisis(level.get());
    }
    let decision = verdict.episode().copied();
    steps::gate_diagnostics(&mut diagnostics, &verdict);
    steps::episode_diagnostics(&mut diagnostics, decision.as_ref(), level);

    // 3–6: triage, route plan, memory and the specialist. A turn below
    // crisis level stops here when its consumer goes away (dropping the
    // model request; nothing is written); a crisis turn always goes on.
    let episode = match (&open_episode, &decision) {
        (Some(episode), Some(decision)) => Some(EpisodeTurn { episode, decision }),
        _ => None,
    };
    let reply = events.reply(steps::closing_prefix(decision.as_ref()));
    let answer = answer(
        rt,
        &input,
        events,
        Question {
            verdict: &verdict,
            decision: decision.as_ref(),
            episode,
            state: &state,
            history: &session_history,
            first_turn_of_session,
            reply: &reply,
            started,
        },
        &mut diagnostics,
    );
    // Content capture (operator's opt-in) never for a crisis or an
    // incognito turn.
    let capture = !level.needs_crisis_response()
        && input.memory_mode == opencouch_core::MemoryMode::Persistent;
    let answer = opencouch_llm::trace::capture_scope(capture, answer);
    let cancellable = !level.needs_crisis_response();
    let Answer {
        triage,
        route_plan,
        stage: session_stage,
        mut outcome,
    } = if cancellable {
        tokio::select! {
            biased;
            () = events.cancelled() => return Err(cancelled()),
            answer = answer => answer,
        }
    } else {
        answer.await
    };
    diagnostics.merge(outcome.diagnostics.clone());
    outcome.text = steps::with_closing_acknowledgement(&outcome.text, decision.as_ref());
    if let Some(shown) = &outcome.shown_text {
        outcome.shown_text = Some(steps::with_closing_acknowledgement(
            shown,
            decision.as_ref(),
        ));
    }
    safety_plan_offer(
        rt,
        &input,
        &state,
        decision.as_ref(),
        &route_plan,
        &mut outcome,
    )
    .await;

    // 7. Fold the outcome into the state, the memory buffer and the session
    // row (all pure), then commit.
    events.status(Stage::Finalize).await;
    let answered = Answered {
        input: &input,
        verdict: &verdict,
        plan: &route_plan,
        triage: triage.as_ref(),
        outcome: &outcome,
        now,
    };
    let messages_before = state.message_count;
    steps::apply_to_state(&mut state, &answered);
    state.session_progress.stage = Some(session_stage);
    let finished = crate::memory::FinishedTurn {
        input: &input,
        plan: &route_plan,
        level,
        outcome: &outcome,
        history: &session_history,
        turn_index: state.turn_count,
    };
    let memory_after = crate::memory::after_turn(&inner.ports.memory, &finished, &mut active);
    diagnostics.merge(memory_after.diagnostics);
    let soft_limit = inner.opts.transcript_soft_limit;
    let session_action = steps::update_session_row(
        &mut active,
        now,
        level,
        messages_before,
        soft_limit,
        outcome.style,
    );
    let session_id = audit::session_id(&active);
    diagnostics.set("turn_total_ms", ms(started));
    if cancellable && events.is_cancelled() {
        return Err(cancelled());
    }
    state.diagnostics = diagnostics.clone();
    let commit = TurnCommit {
        append: steps::transcript_messages(&answered, Utc::now()),
        state,
        session: SessionWrite::Upsert(active),
        at: Utc::now(),
    };
    // A crisis reply is delivered even when the commit fails (flagged as
    // not saved), and does not wait for a commit that stalls past the
    // crisis bound; any other turn waits for its commit and fails as before.
    let mut guard = Some(guard);
    let saved = if level.needs_crisis_response() {
        match crisis_commit(rt, commit, messages_before, &mut guard).await {
            CrisisCommit::Saved => true,
            CrisisCommit::Failed => {
                diagnostics.set("storage_status", "commit_failed");
                false
            }
            CrisisCommit::Pending => {
                diagnostics.set("storage_status", "commit_pending");
                false
            }
        }
    } else {
        let stage = spans::Stage::start("commit", "commit_ms");
        commit_turn(inner.stores.threads.clone(), commit, messages_before)
            .instrument(stage.span())
            .await?;
        stage.end(&mut diagnostics);
        true
    };

    // After the commit: background memory extraction (the reply does not
    // wait; still under the thread lock, so a privacy request drops pending
    // jobs before any of them can write), then the crisis log (level ≥ 2,
    // bounded, never fails the turn).
    if saved {
        if memory_after.discard_pending {
            crate::extraction::discard(&inner.extractor.jobs, &input.thread_id);
        }
        if let Some(job) = memory_after.job {
            crate::extraction::spawn(&inner.extractor, job);
        }
    }
    if let Some(info) = &outcome.crisis {
        events.status(Stage::CrisisLog).await;
        let stage = spans::Stage::start("crisis_log", "crisis_log_ms");
        let status = capture_crisis(rt, &input, &session_id, &verdict, info, outcome.style)
            .instrument(stage.span())
            .await;
        stage.outcome(status);
        stage.end(&mut diagnostics);
        diagnostics.set("crisis_log_status", status);
    }
    drop(guard);

    let output = steps::output(
        &answered,
        session_action,
        diagnostics,
        saved,
        memory_after.extraction_eligible,
    );
    let output = deliver(events, output, &reply.sent(), started).await;
    spans::finish_turn(&output);
    tracing::info!(
        route = route_plan.kind.route().as_str(),
        plan = route_plan.kind.as_str(),
        crisis_level = level.get(),
        saved,
        total_ms = ms(started),
        "turn finished"
    );
    Ok(output)
}

/// How a crisis turn's commit came out within the crisis bound.
enum CrisisCommit {
    /// Committed.
    Saved,
    /// The commit failed: the reply goes out unsaved.
    Failed,
    /// The commit stalled past the bound: the reply goes out now (not
    /// confirmed saved) while the commit goes on in the background.
    Pending,
}

/// Commits a crisis turn without letting a stalled store hold its reply:
/// past `storage_crisis_bound` the commit goes on in its own task, which
/// keeps the thread lock (taken from `guard`) and counts as a running
/// crisis turn, so a graceful stop waits for it and no other turn on the
/// thread interleaves with it.
async fn crisis_commit(
    rt: &Runtime,
    commit: TurnCommit,
    loaded: u64,
    guard: &mut Option<opencouch_store::ThreadGuard>,
) -> CrisisCommit {
    let inner = &rt.inner;
    let threads = inner.stores.threads.clone();
    let mut committing = tokio::spawn(
        async move { commit_turn(threads, commit, loaded).await }.instrument(tracing::info_span!(
            "stage",
            "otel.name" = "commit",
            "opencouch.stage" = "commit"
        )),
    );
    let outcome = tokio::select! {
        biased;
        done = &mut committing => Some(done),
        () = tokio::time::sleep(inner.opts.storage_crisis_bound) => None,
    };
    match outcome {
        Some(Ok(Ok(_))) => CrisisCommit::Saved,
        Some(Ok(Err(e))) => {
            tracing::error!(error = %e, "commit failed; delivering the crisis reply unsaved");
            CrisisCommit::Failed
        }
        Some(Err(_)) => {
            tracing::error!("the commit task stopped; delivering the crisis reply unsaved");
            CrisisCommit::Failed
        }
        None => {
            tracing::warn!(
                "commit stalled past the crisis bound; delivering the crisis reply first"
            );
            let running = inner.turns.start();
            let crisis = inner.turns.crisis();
            let held = guard.take();
            tokio::spawn(async move {
                let _keep = (running, crisis, held);
                match committing.await {
                    Ok(Ok(_)) => tracing::info!("the stalled crisis commit landed"),
                    Ok(Err(e)) => tracing::error!(error = %e, "the stalled crisis commit failed"),
                    Err(_) => tracing::error!("the stalled crisis commit task stopped"),
                }
            });
            CrisisCommit::Pending
        }
    }
}

/// The turn's commit under the retry policy (`crate::retry`): a transient
/// failure is retried once, and only when the store proves the first
/// attempt was not applied: the thread's stored transcript length (its
/// snapshot's version) is still `loaded`, the length this turn read under
/// the thread lock, which no other turn can change meanwhile. A failure
/// that is not transient, or a proof that cannot be read, fails as before.
async fn commit_turn(
    threads: std::sync::Arc<dyn opencouch_store::ThreadStore>,
    commit: TurnCommit,
    loaded: u64,
) -> Result<opencouch_store::CommitOutcome, StoreError> {
    use crate::retry::{IoStage, RETRY_WAIT, Retry, policy};
    let first = threads.commit_turn(commit.clone()).await;
    let e = match first {
        Ok(done) => return Ok(done),
        Err(e) => e,
    };
    let again = matches!(policy(IoStage::Commit), Retry::WhenNotApplied(n) if n > 1);
    if !again || !e.is_transient() {
        return Err(e);
    }
    let stored = match threads.load(&commit.state.thread_id, 1).await {
        Ok(snapshot) => snapshot.map_or(0, |s| s.state.message_count),
        Err(read) => {
            tracing::warn!(error = %read, "commit failed and its outcome cannot be read; not retrying");
            return Err(e);
        }
    };
    if stored != loaded {
        tracing::warn!("commit failed but the thread changed; not retrying");
        return Err(e);
    }
    tracing::warn!(error = %e, "commit failed before it was applied; retrying once");
    tokio::time::sleep(RETRY_WAIT).await;
    threads.commit_turn(commit).await
}

/// What the answering part of a turn (steps 3–6) starts from.
struct Question<'a> {
    verdict: &'a GateVerdict,
    decision: Option<&'a opencouch_safety::episode::FollowUpDecision>,
    episode: Option<EpisodeTurn<'a>>,
    state: &'a ThreadState,
    history: &'a [Message],
    first_turn_of_session: bool,
    reply: &'a crate::reply::ReplyOut,
    /// When the turn started (the crisis bound counts from here).
    started: Instant,
}

/// What it produced.
struct Answer {
    triage: Option<crate::triage::TriageDecision>,
    route_plan: plan::RoutePlan,
    /// The session stage inferred for the turn.
    stage: opencouch_core::state::SessionStage,
    outcome: specialists::SpecialistOutcome,
}

/// Steps 3–6: triage (level 0 only), the route plan, memory (only where
/// the route needs it, never in incognito) and the specialist. Reads only;
/// dropping it mid-way leaves nothing behind.
async fn answer(
    rt: &Runtime,
    input: &AgentInput,
    events: &EventSink,
    q: Question<'_>,
    diagnostics: &mut Diagnostics,
) -> Answer {
    let inner = &rt.inner;
    let level = q.verdict.assessment().level;
    // The safety plan's flow and requests are the app's, decided before
    // triage (no model), below the clarification level only.
    let plan_turn = !level.needs_crisis_response()
        && !level.needs_clarification()
        && crate::safety_plan::takes_turn(q.state, &input.message);
    let triage = if !plan_turn && steps::needs_triage(level, q.decision) {
        events.status(Stage::Triage).await;
        let stage = spans::Stage::start("triage", "triage_ms");
        let (decision, triage_diag) =
            crate::triage::decide(&inner.ports.model, q.state, q.history, &input.message)
                .instrument(stage.span())
                .await;
        diagnostics.merge(triage_diag);
        stage.end(diagnostics);
        Some(decision)
    } else {
        None
    };
    let stage = spans::Stage::start("plan", "plan_ms");
    let exercise_active = q.state.exercise_state.is_some();
    let route_plan = if plan_turn {
        plan::safety_plan(exercise_active)
    } else {
        plan::resolve(q.verdict, triage.as_ref(), exercise_active)
    };
    steps::plan_diagnostics(diagnostics, &route_plan);
    stage.outcome(route_plan.kind.as_str());
    stage.end(diagnostics);
    events.status(route_plan.kind.stage()).await;

    // Where the session is in its arc (pure; see `session_stage`).
    let session_stage = crate::session_stage::infer(&crate::session_stage::StageCues {
        previous: q.state.session_progress.stage,
        turn: q.state.session_progress.turn_count + 1,
        message: &input.message,
        level,
        exercise: q.state.exercise_state.is_some()
            || route_plan.kind == plan::PlanKind::GuidedExercise,
        style: route_plan.style,
        model: triage.as_ref().and_then(|t| t.session_stage),
    });
    diagnostics.set("session_stage", session_stage.stage.as_str());
    diagnostics.set("session_stage_cue", session_stage.cue.as_str());

    let memory = if route_plan.kind.loads_memory() {
        let stage = spans::Stage::start("retrieval", "retrieval_ms");
        let loaded = crate::memory::load_for_turn(
            &inner.ports.memory,
            input,
            &input.message,
            q.first_turn_of_session,
        )
        .instrument(stage.span())
        .await;
        diagnostics.merge(loaded.diagnostics.clone());
        if let Some(path) = loaded.diagnostics.get_str("retrieval_path") {
            stage.outcome(path);
        }
        stage.end(diagnostics);
        Some(loaded)
    } else {
        None
    };

    if route_plan.kind.specialist_stage() != route_plan.kind.stage() {
        events.status(route_plan.kind.specialist_stage()).await;
    }
    // A crisis reply shows the person's own safety plan, read within what
    // is left of the crisis bound (past it the reply goes out without).
    let own_plan = if route_plan.kind == plan::PlanKind::CrisisResponse {
        let left = inner
            .opts
            .storage_crisis_bound
            .saturating_sub(q.started.elapsed());
        crate::safety_plan::load_for_crisis(
            inner.ports.memory.safety_plans.as_ref(),
            input.owner_id(),
            left,
            diagnostics,
        )
        .await
    } else {
        None
    };
    let spec_input = SpecialistInput {
        verdict: q.verdict,
        plan: &route_plan,
        triage: triage.as_ref(),
        state: q.state,
        history: q.history,
        input,
        memory: memory.as_ref(),
        episode: q.episode,
        reply: q.reply,
        own_plan: own_plan.as_ref(),
        stage: Some(session_stage.stage),
    };
    let stage = spans::Stage::start("specialist", "specialist_ms");
    let mut outcome = specialists::run(&inner.ports, spec_input)
        .instrument(stage.span())
        .await;
    if let Some(plan) = &own_plan
        && outcome.crisis.is_some()
        && let Some((shown, stored)) =
            crate::safety_plan::with_plan(&outcome.text, plan, &outcome.resources)
    {
        outcome.text = stored;
        outcome.shown_text = Some(shown);
        diagnostics.set("safety_plan", "shown");
    }
    stage.outcome(outcome.style.as_str());
    stage.end(diagnostics);
    Answer {
        triage,
        route_plan,
        stage: session_stage.stage,
        outcome,
    }
}

/// The safety plan's offer on the turn that closes a crisis episode (when
/// the person's plan has a gap and memory is persistent), and the end of an
/// offer the person did not take up.
async fn safety_plan_offer(
    rt: &Runtime,
    input: &AgentInput,
    state: &ThreadState,
    decision: Option<&opencouch_safety::episode::FollowUpDecision>,
    route_plan: &plan::RoutePlan,
    outcome: &mut specialists::SpecialistOutcome,
) {
    use crate::safety_plan::{FLOW_KEY, Flow};
    if route_plan.kind == plan::PlanKind::SafetyPlan {
        return;
    }
    let closes = decision.is_some_and(|d| d.close.is_some());
    let offer = if closes {
        crate::safety_plan::offer(
            rt.inner.ports.memory.safety_plans.as_ref(),
            input.owner_id(),
        )
        .await
    } else {
        None
    };
    match offer {
        Some(text) => {
            outcome.text = format!("{}\n\n{text}", outcome.text.trim_end());
            if let Some(shown) = &mut outcome.shown_text {
                *shown = format!("{}\n\n{text}", shown.trim_end());
            }
            outcome
                .progress_extra
                .insert(FLOW_KEY.to_owned(), Flow::value(Some(Flow::Offered)));
        }
        None if Flow::of(state).is_some() => {
            outcome
                .progress_extra
                .insert(FLOW_KEY.to_owned(), Flow::value(None));
        }
        None => {}
    }
}

/// A turn below crisis level whose consumer went away before its commit.
fn cancelled() -> RuntimeError {
    tracing::info!("turn cancelled before its commit: its consumer went away; nothing was written");
    RuntimeError::Cancelled
}

/// Writes the crisis-log record of a crisis turn within the runtime's
/// bound; returns `captured`, `timeout` or `failed`.
async fn capture_crisis(
    rt: &Runtime,
    input: &AgentInput,
    session_id: &str,
    verdict: &GateVerdict,
    info: &CrisisInfo,
    style: ResponseStyle,
) -> &'static str {
    let user = input.user_id.as_deref();
    let record = audit::crisis_record(
        rt.memory_mode(),
        user,
        session_id,
        verdict,
        info,
        style,
        Utc::now(),
    );
    audit::append_crisis(
        &*rt.inner.stores.crisis,
        &record,
        rt.inner.opts.crisis_log_timeout,
    )
    .await
}

/// Sends what of the reply was not streamed yet (`shown` was), then
/// `response_ready`, and stamps the total time.
async fn deliver(
    events: &EventSink,
    output: AgentOutput,
    shown: &str,
    started: Instant,
) -> AgentOutput {
    events.deliver_text(&output.response_text, shown).await;
    events
        .send(StreamEvent::ResponseReady {
            output: Box::new(output.clone()),
        })
        .await;
    let mut output = output;
    output.diagnostics.set("turn_total_ms", ms(started));
    output
}

/// A turn when storage is already known to be unavailable: the same path
/// as a failed load (nothing is read or written).
pub(crate) async fn execute_without_storage(
    rt: &Runtime,
    input: AgentInput,
    events: &EventSink,
    error: opencouch_store::StoreError,
) -> Result<AgentOutput, RuntimeError> {
    let started = Instant::now();
    unsaved_crisis_turn(rt, &input, events, started, error, Unsaved::Failed).await
}

/// Storage failed before the gate could read the thread (lock, snapshot,
/// session row). The message is still assessed, with no history and no
/// crisis episode, because neither could be read: an episode follow-up such
/// as "I'm in the UK" then reads as level 0, which is why this path is only
/// the floor of what we promise, not the normal one. A level ≥ 2 message
/// gets the deterministic crisis reply with verified resources (no model
/// wording: nothing after the gate may be needed), the crisis log is tried
/// (bounded), and the output says the turn was not saved. Any other message
/// fails with the storage error, as before.
async fn unsaved_crisis_turn(
    rt: &Runtime,
    input: &AgentInput,
    events: &EventSink,
    started: Instant,
    error: opencouch_store::StoreError,
    why: Unsaved,
) -> Result<AgentOutput, RuntimeError> {
    tracing::error!(error = %error, "storage failed before the crisis gate; assessing without history");
    events.status(Stage::CrisisGate).await;
    let verdict = match why {
        Unsaved::Failed => rt.inner.gate.assess(&[], &input.message).await,
        Unsaved::Stalled => {
            rt.inner
                .gate
                .assess_without_model(&[], &input.message)
                .await
        }
    };
    let level = verdict.assessment().level;
    if !level.needs_crisis_response() {
        return Err(RuntimeError::Store(error));
    }
    events.mark_crisis();
    spans::mark_crisis(level.get());
    let mut diagnostics = Diagnostics::new();
    steps::gate_diagnostics(&mut diagnostics, &verdict);
    diagnostics.set(
        "storage_status",
        match why {
            Unsaved::Failed => "load_failed",
            Unsaved::Stalled => "stalled",
        },
    );
    diagnostics.set("route_plan", plan::PlanKind::CrisisResponse.as_str());
    events.status(Stage::CrisisResponse).await;
    let outcome = specialists::deterministic_crisis(&verdict, &input.message);
    diagnostics.merge(outcome.diagnostics.clone());
    if let Some(info) = &outcome.crisis {
        events.status(Stage::CrisisLog).await;
        // No session could be read: the log gets a per-thread placeholder
        // session id (hashed like every other).
        let session_id = format!("{}:unsaved", input.thread_id);
        let status = capture_crisis(rt, input, &session_id, &verdict, info, outcome.style).await;
        diagnostics.set("crisis_log_status", status);
    }
    let output = AgentOutput {
        thread_id: input.thread_id.clone(),
        response_text: outcome.text.clone(),
        response_type: ResponseType::Crisis,
        route: Route::Crisis,
        response_style: outcome.style,
        therapeutic_approach: None,
        session_action: SessionAction::None,
        crisis: verdict.assessment().clone(),
        resources: outcome.resources.clone(),
        mode: outcome.style,
        mode_type: opencouch_core::ModeType::Crisis,
        mode_source: opencouch_core::ModeSource::CrisisGate,
        should_persist_memory: false,
        diagnostics,
        saved: false,
    };
    let output = deliver(events, output, "", started).await;
    spans::finish_turn(&output);
    tracing::info!(
        crisis_level = level.get(),
        saved = false,
        total_ms = ms(started),
        "crisis turn answered without storage"
    );
    Ok(output)
}
