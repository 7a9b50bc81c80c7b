//! The narrow handles a stage may use: the chat model (with its per-call
//! bound) and the memory side (store, embedder, index cache, policy model).
//! The drivers build them from the runtime; stages never see the runtime
//! itself, only the ports their step needs.

use std::sync::Arc;
use std::time::Duration;

use opencouch_core::MemoryMode;
use opencouch_llm::ChatModel;
use opencouch_memory::Embedder;
use opencouch_memory::assist::PolicyModel;
use opencouch_store::{MemoryStore, SafetyPlanStore};

/// A shared embedding provider.
pub type EmbedderHandle = Arc<dyn Embedder>;

/// The chat model a stage may call (none in deterministic mode) and the
/// bound on each structured call.
#[derive(Clone)]
pub struct ModelPort {
    model: Option<Arc<dyn ChatModel>>,
    timeout: Duration,
}

impl ModelPort {
    /// A port over `model` (`None`: deterministic).
    pub fn new(model: Option<Arc<dyn ChatModel>>, timeout: Duration) -> Self {
        ModelPort { model, timeout }
    }

    /// The model, if there is one.
    pub fn get(&self) -> Option<&dyn ChatModel> {
        self.model.as_deref()
    }

    /// Whether a model is configured.
    pub fn is_some(&self) -> bool {
        self.model.is_some()
    }

    /// The bound on one structured model call.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }
}

/// The memory side of a runtime. Cheap to clone (every field is shared).
#[derive(Clone)]
pub struct MemoryPorts {
    /// Incognito or persistent: every memory write checks it.
    pub mode: MemoryMode,
    /// The one memory record store.
    pub store: Arc<dyn MemoryStore>,
    /// Embeddings for retrieval and stored records (never in incognito).
    pub embedder: Option<EmbedderHandle>,
    /// Prepared semantic indexes per owner, checked against the store's
    /// namespace revision on every turn.
    pub index_cache: Arc<opencouch_memory::IndexCache>,
    /// The write policy's model side (hybrid mode, persistent memory only).
    pub policy_model: Option<Arc<dyn PolicyModel>>,
    /// The person's safety plans (persistent memory only: an incognito
    /// runtime has none, so it can never write one).
    pub safety_plans: Option<Arc<dyn SafetyPlanStore>>,
}

impl MemoryPorts {
    /// Ports over `store` with no embedder and no policy model.
    pub fn new(mode: MemoryMode, store: Arc<dyn MemoryStore>) -> Self {
        MemoryPorts {
            mode,
            store,
            embedder: None,
            index_cache: Arc::default(),
            policy_model: None,
            safety_plans: None,
        }
    }

    /// Whether this is an incognito runtime (nothing durable is written).
    pub fn incognito(&self) -> bool {
        self.mode == MemoryMode::Incognito
    }
}

/// What a specialist stage gets: the model and the memory side.
#[derive(Clone)]
pub struct Ports {
    pub model: ModelPort,
    pub memory: MemoryPorts,
}

impl Ports {
    /// The memory mode of the turn.
    pub fn memory_mode(&self) -> MemoryMode {
        self.memory.mode
    }
}
