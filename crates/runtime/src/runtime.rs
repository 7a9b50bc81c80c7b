//! The [`Runtime`]: one object per memory mode holding what turns need
//! (options, stores, the crisis gate, the model and memory ports, the
//! extraction registry). Channels reach it through [`crate::service`]; the
//! drivers ([`crate::turn`] for a turn, [`crate::session`] for session end)
//! add its turn and session methods. Nothing below the drivers sees it.

use std::sync::Arc;
use std::time::Duration;

use opencouch_config::Settings;
use opencouch_core::{MemoryMode, RuntimeMode};
use opencouch_llm::{ChatModel, LlmConfig, OpenAiCompatClient, TierModels};
use opencouch_store::{Backend, EphemeralStores, PgStores, SqliteStores, Stores};

pub use crate::error::RuntimeError;
use crate::extraction::{Extractor, FlushOutcome};
use crate::gate::CrisisGate;
use crate::policy_model::LlmPolicyModel;
use crate::ports::{EmbedderHandle, MemoryPorts, ModelPort, Ports};
use crate::tracker::TurnTracker;
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
    /// How long a turn waits for storage (its thread lock and load) before
    /// the crisis gate assesses the message without it: a crisis message
    /// is answered within this bound however long the database stalls.
    pub storage_crisis_bound: Duration,
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
            storage_crisis_bound: Duration::from_secs(2),
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
            storage_crisis_bound: Duration::from_secs(2),
            extraction_settle_timeout: Duration::from_secs(s.model_timeout_secs)
                .min(Duration::from_secs(10)),
        }
    }
}

pub(crate) struct Inner {
    pub(crate) opts: RuntimeOptions,
    pub(crate) stores: Stores,
    pub(crate) gate: CrisisGate,
    /// What the stages get: the model and the memory side.
    pub(crate) ports: Ports,
    /// Whether the gate's semantic signal (the learned layer) is on.
    pub(crate) semantic: bool,
    /// In-flight background memory extraction.
    pub(crate) extractor: Extractor,
    /// Running turns (shared by a host's two runtimes).
    pub(crate) turns: Arc<TurnTracker>,
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
            .field("memory_mode", &self.inner.ports.memory_mode())
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
        let mut stores = stores;
        stores.memory = crate::counted::CountedMemory::wrap(stores.memory);
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
        let mut memory = MemoryPorts::new(memory_mode, stores.memory.clone());
        memory.policy_model = policy_model;
        if memory_mode == MemoryMode::Persistent {
            memory.safety_plans = Some(stores.safety_plans.clone());
        }
        let ports = Ports {
            model: ModelPort::new(model, opts.model_timeout),
            memory,
        };
        Runtime::assemble(opts, stores, gate, ports, true, Arc::default())
    }

    /// The runtime over these parts (the extraction registry is new).
    fn assemble(
        opts: RuntimeOptions,
        stores: Stores,
        gate: CrisisGate,
        ports: Ports,
        semantic: bool,
        turns: Arc<TurnTracker>,
    ) -> Self {
        let extractor = Extractor {
            jobs: Arc::default(),
            stores: stores.clone(),
            memory: ports.memory.clone(),
        };
        Runtime {
            inner: Arc::new(Inner {
                opts,
                stores,
                gate,
                ports,
                extractor,
                semantic,
                turns,
            }),
        }
    }

    /// Turns the crisis gate's semantic signal (the learned layer, on by
    /// default) on or off.
    pub fn with_semantic(self, on: bool) -> Self {
        let i = &self.inner;
        Runtime::assemble(
            i.opts.clone(),
            i.stores.clone(),
            i.gate.clone().with_semantic(on),
            i.ports.clone(),
            on,
            i.turns.clone(),
        )
    }

    /// Where the crisis gate's semantic signal stands.
    pub fn semantic_status(&self) -> Option<crate::semantic::SemanticStatus> {
        Some(crate::semantic::SemanticStatus::of(self.inner.semantic))
    }

    /// Whether the crisis gate's semantic signal is on.
    pub fn semantic_on(&self) -> bool {
        self.semantic_status().is_some_and(|s| s.is_on())
    }

    /// Attaches an embedding provider for hybrid memory retrieval (ignored
    /// in incognito, which never embeds anything).
    pub fn with_embedder(self, embedder: EmbedderHandle) -> Self {
        let i = &self.inner;
        let mut ports = i.ports.clone();
        ports.memory.embedder = (!ports.memory.incognito()).then_some(embedder);
        ports.memory.index_cache = Arc::default();
        Runtime::assemble(
            i.opts.clone(),
            i.stores.clone(),
            i.gate.clone(),
            ports,
            i.semantic,
            i.turns.clone(),
        )
    }

    /// The same runtime counting its turns in `turns` (a host's two
    /// runtimes share one tracker). Everything else, the extraction
    /// registry included, is shared with `self`.
    pub(crate) fn with_turns(self, turns: Arc<TurnTracker>) -> Self {
        let i = &self.inner;
        Runtime {
            inner: Arc::new(Inner {
                opts: i.opts.clone(),
                stores: i.stores.clone(),
                gate: i.gate.clone(),
                ports: i.ports.clone(),
                semantic: i.semantic,
                extractor: i.extractor.clone(),
                turns,
            }),
        }
    }

    /// Builds the runtime the settings describe: SQLite (default) or
    /// PostgreSQL for persistent mode, in-memory for incognito; the
    /// OpenAI-compatible client when a model is configured.
    pub async fn from_settings(
        settings: &Settings,
        memory_mode: MemoryMode,
    ) -> Result<Self, RuntimeError> {
        Self::from_settings_on(settings, memory_mode, false).await
    }

    /// [`Runtime::from_settings`], with persistent mode over process
    /// memory when `in_memory` (benchmarks).
    pub(crate) async fn from_settings_on(
        settings: &Settings,
        memory_mode: MemoryMode,
        in_memory: bool,
    ) -> Result<Self, RuntimeError> {
        let opts = RuntimeOptions::from_settings(settings);
        let model = model_from_settings(settings)?;
        let runtime = match memory_mode {
            MemoryMode::Incognito => Runtime::incognito(EphemeralStores::new(), model, opts),
            MemoryMode::Persistent if in_memory => {
                Runtime::persistent(Stores::in_memory(), model, opts)
            }
            MemoryMode::Persistent => {
                Runtime::persistent(open_stores(settings).await?, model, opts)
            }
        };
        // The crisis gate's rule data and learned layer, the prompts, the
        // exercises and the reply wording are embedded: a failure to load
        // them is a start-up error, not a quieter gate.
        check_embedded_data()?;
        // The local embedding model serves memory retrieval only (checked
        // here, loaded on the first turn that retrieves).
        Ok(match crate::embeddings::from_settings(settings) {
            Some(e) => runtime.with_embedder(e),
            None => runtime,
        })
    }

    /// The effective mode (deterministic or hybrid).
    pub fn mode(&self) -> RuntimeMode {
        self.inner.opts.mode
    }

    /// Incognito or persistent.
    pub fn memory_mode(&self) -> MemoryMode {
        self.inner.ports.memory_mode()
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

    /// The ports the specialists see (the model and the memory side).
    pub fn ports(&self) -> &crate::ports::Ports {
        &self.inner.ports
    }

    /// The memory side (store, embedder, policy model) the memory-control
    /// service and tools work over.
    pub fn memory_ports(&self) -> &MemoryPorts {
        &self.inner.ports.memory
    }

    /// The memory-control service over this runtime's memory store.
    pub fn memory_control(&self) -> opencouch_memory::control::MemoryControlService {
        crate::memory::control_service(&self.inner.ports.memory)
    }

    /// Background memory-extraction jobs not yet applied.
    pub fn pending_memory_extractions(&self) -> usize {
        self.inner.extractor.jobs.pending()
    }

    /// Waits up to `timeout` for background memory extraction to finish,
    /// then settles what is left under each thread's lock (their candidates
    /// if ready, else the deterministic extractor) so nothing is lost.
    /// Call it before shutting down; it is cheap when nothing is pending.
    pub async fn flush_memory_extraction(&self, timeout: Duration) -> FlushOutcome {
        self.inner.extractor.flush(timeout).await
    }

    /// Background memory extraction jobs not yet applied, settled or
    /// discarded.
    pub(crate) fn extraction_pending(&self) -> usize {
        self.inner.extractor.jobs.pending()
    }
}

/// Checks every embedded data file (crisis gate, crisis texts, reply
/// wording and summary topics, prompts, exercises) once; a broken build refuses to start instead of degrading.
pub fn check_embedded_data() -> Result<(), RuntimeError> {
    opencouch_safety::check_data().map_err(|e| RuntimeError::Data(e.to_string()))?;
    opencouch_safety::plan::load_plan_texts().map_err(|e| RuntimeError::Data(e.to_string()))?;
    crate::replies::check().map_err(|e| RuntimeError::Data(format!("replies.toml: {e}")))?;
    crate::summary::check_topics()
        .map_err(|e| RuntimeError::Data(format!("summary_topics.toml: {e}")))?;
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
    let client = OpenAiCompatClient::new(llm_config(settings))
        .map_err(|e| RuntimeError::Model(e.to_string()))?;
    Ok(Some(Arc::new(client)))
}

/// The model client's configuration from the settings (base URL, key,
/// tier models, timeouts and caps).
pub(crate) fn llm_config(settings: &Settings) -> LlmConfig {
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
    config.max_event_bytes = cap_bytes(settings.model_max_event_bytes);
    config.max_response_bytes = cap_bytes(settings.model_max_response_bytes);
    config
}

/// A byte cap from the settings (validated to at most 256 MiB) as a `usize`.
fn cap_bytes(v: u64) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}

/// Opens (and migrates) the durable stores the settings describe.
pub async fn open_stores(settings: &Settings) -> Result<Stores, RuntimeError> {
    if settings.uses_postgres() {
        let url = settings.database_url.as_ref().map_or("", |u| u.expose());
        Ok(PgStores::connect(url).await?.into_stores())
    } else {
        Ok(SqliteStores::open(&settings.sqlite_path())
            .await?
            .into_stores())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn model_byte_cap_defaults_are_the_clients_own() {
        let settings = opencouch_config::Settings::default();
        let client = opencouch_llm::LlmConfig::default();
        assert_eq!(
            super::cap_bytes(settings.model_max_event_bytes),
            client.max_event_bytes
        );
        assert_eq!(
            super::cap_bytes(settings.model_max_response_bytes),
            client.max_response_bytes
        );
    }
}
