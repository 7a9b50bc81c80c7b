//! The [`Embedder`] contract (remote API or local model) and
//! [`embed_for_storage`], which embeds texts to store beside records.

use async_trait::async_trait;

use opencouch_store::Embedding;

/// Why an embedding call failed. Never carries the embedded text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("embedding failed: {0}")]
pub struct EmbedError(pub String);

/// A text-embedding provider (remote API or local model).
#[async_trait]
pub trait Embedder: Send + Sync {
    /// Embeds each text; one vector per input, in order.
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError>;
    /// The model id stored with each vector.
    fn model_id(&self) -> &str;
    /// The vector dimension.
    fn dimension(&self) -> usize;
    /// How much this provider's ranking counts in the fusion, relative to
    /// the lexical list (weight 1). Providers whose ranking was measured to
    /// be weaker than lexical recall on conversational memory declare less
    /// (see `docs/benchmarks.md`); unmeasured providers count equally.
    fn rrf_weight(&self) -> f64 {
        1.0
    }
}

/// Embeds texts for storage alongside records.
///
/// # Errors
/// The embedder's error, or a count mismatch.
pub async fn embed_for_storage(
    embedder: &dyn Embedder,
    texts: &[String],
) -> Result<Vec<Embedding>, EmbedError> {
    let vectors = embedder.embed(texts).await?;
    if vectors.len() != texts.len() {
        return Err(EmbedError(
            "embedder returned a different number of vectors".to_owned(),
        ));
    }
    Ok(vectors
        .into_iter()
        .map(|values| Embedding {
            model: embedder.model_id().to_owned(),
            values,
        })
        .collect())
}
