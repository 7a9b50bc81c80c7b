//! The [`Runtime`]: one object per memory mode that runs turns, streams
//! them and ends sessions. Binaries and servers hold one and call
//! [`Runtime::run_turn`], [`Runtime::run_turn_stream`] and
//! [`Runtime::end_session`]; the pipeline itself is in [`crate::turn`].

use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use opencouch_config::Settings;
use opencouch_core::{AgentInput, AgentOutput, MemoryMode, RuntimeMode, StreamEvent};
use opencouch_llm::{ChatModel, LlmConfig, OpenAiCompatClient, TierModels};
use opencouch_store::{Backend, EphemeralStores, PgStores, SqliteStores, StoreError, Stores};
use tokio::sync::mpsc;

use crate::extraction::ExtractionJobs;
use crate::gate::CrisisGate;
use crate::memory::EmbedderHandle;
use crate::policy_model::LlmPolicyModel;
use opencouch_memory::assist::PolicyModel;

/// Tunables of a runtime (usually derived from [`Settings`]).
#[derive(Debug, Clone)]
pub struct RuntimeOptions {
    /// `Deterministic` or `Hybrid` (`Auto` is resolved before construction).
    pub mode: RuntimeMode,
    /// Inactivity that ends a session.
    pub session_timeout: chrono::Duration,
    /// Session transcript length (messages) after which it rotates.
    pub transcript_soft_limit: u64,
    /// Transcript entries loaded per turn.
    pub recent_window: usize,
    /// Bound on each model call made by the gate and triage.
    pub model_timeout: Duration,
    /// Longest accepted message in characters.
    pub max_message_chars: usize,
    /// Bound on the crisis-log write.
    pub crisis_log_timeout: Duration,
    /// How long session end waits for the thread's in-flight background
    /// memory extraction (hybrid mode) before using the deterministic
    /// extractor for it.
    pub extraction_settle_timeout: Duration,
}

impl Default for RuntimeOptions {
    fn default() -> Self {
        RuntimeOptions {
            mode: RuntimeMode::Deterministic,
            session_timeout: chrono::Duration::minutes(20),
            transcript_soft_limit: 240,
            recent_window: 12,
            model_timeout: Duration::from_secs(30),
            max_message_chars: 8000,
            crisis_log_timeout: Duration::from_millis(250),
            extraction_settle_timeout: Duration::from_secs(10),
        }
    }
}

impl RuntimeOptions {
    /// Options from settings (mode resolved).
    pub fn from_settings(s: &Settings) -> Self {
        RuntimeOptions {
            mode: s.effective_mode(),
            session_timeout: chrono::Duration::minutes(
                i64::try_from(s.session_timeout_minutes).unwrap_or(20),
            ),
            transcript_soft_limit: s.transcript_soft_limit,
            recent_window: 12,
            model_timeout: Duration::from_secs(s.model_timeout_secs),
            max_message_chars: s.max_message_chars,
            crisis_log_timeout: Duration::from_millis(250),
            extraction_settle_timeout: Duration::from_secs(s.model_timeout_secs)
                .min(Duration::from_secs(10)),
        }
    }
}

/// Why a turn or session operation failed. Turns degrade instead of
/// failing wherever they can; these are the cases they cannot.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("invalid input: {0}")]
    InvalidInput(&'static str),
    #[error("message is longer than {max} characters")]
    MessageTooLong { max: usize },
    #[error("storage error: {0}")]
    Store(#[from] StoreError),
    #[error("model configuration error: {0}")]
    Model(String),
    #[error("the turn task stopped unexpectedly")]
    Aborted,
    #[error("embedded data is invalid: {0}")]
    Data(String),
}

impl RuntimeError {
    /// A stable code for APIs and stream error events.
    pub fn code(&self) -> &'static str {
        match self {
            RuntimeError::InvalidInput(_) => "invalid_input",
            RuntimeError::MessageTooLong { .. } => "message_too_long",
            RuntimeError::Store(_) => "storage_unavailable",
            RuntimeError::Model(_) => "model_configuration",
            RuntimeError::Aborted | RuntimeError::Data(_) => "internal",
        }
    }
}

pub(crate) struct Inner {
    pub(crate) opts: RuntimeOptions,
    pub(crate) stores: Stores,
    pub(crate) memory_mode: MemoryMode,
    pub(crate) model: Option<Arc<dyn ChatModel>>,
    pub(crate) gate: CrisisGate,
    /// The gate's semantic signal, kept here too for status reports.
    pub(crate) semantic: Option<Arc<crate::semantic::SemanticSignal>>,
    pub(crate) embedder: Option<EmbedderHandle>,
    /// The write policy's model side (hybrid mode, persistent memory only).
    pub(crate) policy_model: Option<Arc<dyn PolicyModel>>,
    /// In-flight background memory extraction.
    pub(crate) extractions: Arc<ExtractionJobs>,
    /// Prepared semantic-memory indexes per owner, checked against the
    /// store's namespace revision on every turn.
    pub(crate) index_cache: Arc<opencouch_memory::IndexCache>,
}

/// Runs turns for one memory mode. Cheap to clone.
#[derive(Clone)]
pub struct Runtime {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("mode", &self.inner.opts.mode)
            .field("memory_mode", &self.inner.memory_mode)
            .field("backend", &self.inner.stores.backend())
            .finish()
    }
}

impl Runtime {
    /// A persistent runtime over any store bundle. `model` is used only in
    /// hybrid mode.
    pub fn persistent(
        stores: Stores,
        model: Option<Arc<dyn ChatModel>>,
        opts: RuntimeOptions,
    ) -> Self {
        Self::build(stores, MemoryMode::Persistent, model, opts)
    }

    /// An incognito runtime. It takes [`EphemeralStores`], which can only
    /// hold in-memory backends, so an incognito runtime cannot be built with
    /// a durable store: the type system enforces it.
    pub fn incognito(
        stores: EphemeralStores,
        model: Option<Arc<dyn ChatModel>>,
        opts: RuntimeOptions,
    ) -> Self {
        Self::build(stores.stores().clone(), MemoryMode::Incognito, model, opts)
    }

    fn build(
        stores: Stores,
        memory_mode: MemoryMode,
        model: Option<Arc<dyn ChatModel>>,
        opts: RuntimeOptions,
    ) -> Self {
        let model = if opts.mode == RuntimeMode::Deterministic {
            None
        } else {
            model
        };
        let mut opts = opts;
        if model.is_none() {
            opts.mode = RuntimeMode::Deterministic;
        }
        let gate = match &model {
            Some(m) => CrisisGate::hybrid(m.clone(), opts.model_timeout),
            None => CrisisGate::deterministic(),
        };
        let policy_model = match (&model, memory_mode) {
            (Some(m), MemoryMode::Persistent) => {
                Some(Arc::new(LlmPolicyModel::new(m.clone(), opts.model_timeout))
                    as Arc<dyn PolicyModel>)
            }
            _ => None,
        };
        Runtime {
            inner: Arc::new(Inner {
                opts,
                stores,
                memory_mode,
                model,
                gate,
                semantic: None,
                embedder: None,
                policy_model,
                extractions: Arc::default(),
                index_cache: Arc::default(),
            }),
        }
    }

    /// Attaches the crisis gate's semantic signal (both memory modes: the
    /// embedding is computed in-process and never stored).
    pub fn with_semantic(self, signal: Arc<crate::semantic::SemanticSignal>) -> Self {
        let i = &self.inner;
        let inner = Inner {
            opts: i.opts.clone(),
            stores: i.stores.clone(),
            memory_mode: i.memory_mode,
            model: i.model.clone(),
            gate: i.gate.clone().with_semantic(signal.clone()),
            semantic: Some(signal),
            embedder: i.embedder.clone(),
            policy_model: i.policy_model.clone(),
            extractions: i.extractions.clone(),
            index_cache: Arc::default(),
        };
        Runtime {
            inner: Arc::new(inner),
        }
    }

    /// Whether the crisis gate's semantic signal is on: attached, and its
    /// model loaded or not loaded yet (a failed load turns it off).
    pub fn semantic_on(&self) -> bool {
        self.semantic_status().is_some_and(|s| s.is_on())
    }

    /// Attaches an embedding provider for hybrid memory retrieval (ignored
    /// in incognito, which never embeds anything).
    pub fn with_embedder(self, embedder: EmbedderHandle) -> Self {
        let i = &self.inner;
        let embedder = if i.memory_mode == MemoryMode::Incognito {
            None
        } else {
            Some(embedder)
        };
        let inner = Inner {
            opts: i.opts.clone(),
            stores: i.stores.clone(),
            memory_mode: i.memory_mode,
            model: i.model.clone(),
            gate: i.gate.clone(),
            semantic: i.semantic.clone(),
            embedder,
            policy_model: i.policy_model.clone(),
            extractions: i.extractions.clone(),
            index_cache: Arc::default(),
        };
        Runtime {
            inner: Arc::new(inner),
        }
    }

    /// Builds the runtime the settings describe: SQLite (default) or
    /// PostgreSQL for persistent mode, in-memory for incognito; the
    /// OpenAI-compatible client when a model is configured.
    pub async fn from_settings(
        settings: &Settings,
        memory_mode: MemoryMode,
    ) -> Result<Self, RuntimeError> {
        let opts = RuntimeOptions::from_settings(settings);
        let model = model_from_settings(settings)?;
        let runtime = match memory_mode {
            MemoryMode::Incognito => Runtime::incognito(EphemeralStores::new(), model, opts),
            MemoryMode::Persistent => {
                Runtime::persistent(open_stores(settings).await?, model, opts)
            }
        };
        // The local model is checked here, loaded on first use (once per
        // process) and shared by the crisis gate's semantic signal and
        // memory retrieval.
        let (semantic, _status) = crate::semantic::SemanticSignal::from_settings(settings);
        let embedder = match &semantic {
            Some(s) => Some(Arc::new(s.embedder().clone()) as EmbedderHandle),
            None => crate::memory::embedder_from_settings(settings),
        };
        let runtime = match embedder {
            Some(e) => runtime.with_embedder(e),
            None => runtime,
        };
        Ok(match semantic {
            Some(s) => runtime.with_semantic(s),
            None => runtime,
        })
    }

    /// The effective mode (deterministic or hybrid).
    pub fn mode(&self) -> RuntimeMode {
        self.inner.opts.mode
    }

    /// Incognito or persistent.
    pub fn memory_mode(&self) -> MemoryMode {
        self.inner.memory_mode
    }

    /// The stores (for admin commands and the API).
    pub fn stores(&self) -> &Stores {
        &self.inner.stores
    }

    /// The options in force.
    pub fn options(&self) -> &RuntimeOptions {
        &self.inner.opts
    }

    /// A short description of where data goes.
    pub fn storage_label(&self) -> &'static str {
        match self.inner.stores.backend() {
            Backend::Memory => "in memory (nothing is written to disk)",
            Backend::Sqlite => "SQLite file",
            Backend::Postgres => "PostgreSQL",
        }
    }

    /// Runs one turn and returns its output after the turn is committed.
    pub async fn run_turn(&self, input: AgentInput) -> Result<AgentOutput, RuntimeError> {
        crate::turn::execute(self, input, &crate::turn::EventSink::none()).await
    }

    /// Runs one turn as a stream of events: statuses, chunks,
    /// `response_ready`, then `done` (or one `error`) last. The turn runs in
    /// its own task, so a dropped stream never leaves a turn half-written.
    pub fn run_turn_stream(
        &self,
        input: AgentInput,
    ) -> impl Stream<Item = StreamEvent> + Send + 'static {
        self.spawn_stream(
            move |rt, sink| async move { crate::turn::execute(&rt, input, &sink).await },
        )
    }

    /// Runs a turn when storage is already known to be unavailable (for
    /// example a server that could not verify the caller because its user
    /// store is down). Nothing is read or written: the message goes through
    /// the crisis gate with no history, a level ≥ 2 message gets the
    /// deterministic crisis reply with verified resources (`saved: false`),
    /// and anything else fails with `error` (a crisis reply never depends
    /// on storage; nothing else is promised without it).
    pub async fn run_turn_without_storage(
        &self,
        input: AgentInput,
        error: StoreError,
    ) -> Result<AgentOutput, RuntimeError> {
        crate::turn::execute_without_storage(self, input, &crate::turn::EventSink::none(), error)
            .await
    }

    /// [`Runtime::run_turn_without_storage`] as a stream of events.
    pub fn run_turn_stream_without_storage(
        &self,
        input: AgentInput,
        error: StoreError,
    ) -> impl Stream<Item = StreamEvent> + Send + 'static {
        self.spawn_stream(move |rt, sink| async move {
            crate::turn::execute_without_storage(&rt, input, &sink, error).await
        })
    }

    fn spawn_stream<F, Fut>(&self, run: F) -> impl Stream<Item = StreamEvent> + Send + 'static
    where
        F: FnOnce(Runtime, crate::turn::EventSink) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<AgentOutput, RuntimeError>> + Send + 'static,
    {
        let (tx, rx) = mpsc::channel::<StreamEvent>(64);
        let runtime = self.clone();
        tokio::spawn(async move {
            let sink = crate::turn::EventSink::new(tx.clone());
            let result = run(runtime, sink).await;
            let last = match result {
                Ok(output) => StreamEvent::Done {
                    output: Box::new(output),
                },
                Err(e) => StreamEvent::Error {
                    code: e.code().to_owned(),
                    message: e.to_string(),
                },
            };
            let _ = tx.send(last).await;
        });
        futures::stream::unfold(
            rx,
            |mut rx| async move { rx.recv().await.map(|ev| (ev, rx)) },
        )
    }
}

/// Checks every embedded data file (crisis rules and directory, prompts,
/// exercises) once; a broken build refuses to start instead of degrading.
pub fn check_embedded_data() -> Result<(), RuntimeError> {
    opencouch_safety::rules::rules().map_err(|e| RuntimeError::Data(e.to_string()))?;
    opencouch_safety::resources::directory().map_err(|e| RuntimeError::Data(e.to_string()))?;
    opencouch_safety::plan::load_plan_texts().map_err(|e| RuntimeError::Data(e.to_string()))?;
    opencouch_prompts::check_data().map_err(|e| RuntimeError::Data(e.to_string()))?;
    opencouch_exercises::check_builtin_data().map_err(RuntimeError::Data)?;
    Ok(())
}

/// The chat model the settings describe, if any (and if the mode uses one).
pub fn model_from_settings(
    settings: &Settings,
) -> Result<Option<Arc<dyn ChatModel>>, RuntimeError> {
    if settings.effective_mode() == RuntimeMode::Deterministic {
        return Ok(None);
    }
    let mut config = LlmConfig::openai(settings.api_key.as_ref().map(|k| k.expose().to_owned()));
    config.base_url = settings.base_url.clone();
    config.require_key = settings.base_url == opencouch_config::DEFAULT_BASE_URL;
    config.models = TierModels {
        control: settings.control_model.clone(),
        fast: settings.fast_model.clone(),
        quality: settings.quality_model.clone(),
    };
    config.timeout = Duration::from_secs(settings.model_timeout_secs);
    config.max_attempts = settings.model_max_attempts;
    let client = OpenAiCompatClient::new(config).map_err(|e| RuntimeError::Model(e.to_string()))?;
    Ok(Some(Arc::new(client)))
}

/// Opens (and migrates) the durable stores the settings describe.
pub async fn open_stores(settings: &Settings) -> Result<Stores, RuntimeError> {
    if settings.uses_postgres() {
        let url = settings.database_url.as_deref().unwrap_or_default();
        Ok(PgStores::connect(url).await?.into_stores())
    } else {
        Ok(SqliteStores::open(&settings.sqlite_path())
            .await?
            .into_stores())
    }
}
