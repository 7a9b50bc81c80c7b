//! `opencouch eval crisis`: measures the crisis gate on a labelled file.
//!
//! The file is read by path and never copied; only aggregate numbers are
//! printed (no case text), and `--predictions` writes ids, levels and layer
//! names only. Every metric is printed without and with the semantic signal
//! when the signal is on, and the misses are grouped by the layer that
//! decided, by the families and grammar constructs that fired, and by the
//! case file's `kind`.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, bail};
use opencouch_core::RuntimeMode;
use opencouch_runtime::semantic::SemanticSignal;
use opencouch_safety::classify;
use opencouch_safety::eval::{DataFormat, EvalReport, Gold, MissReport, parse_cases};

use crate::out::{out, outln};

/// Whether to use the semantic signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SemanticChoice {
    /// On when the local embedding model is installed.
    Auto,
    /// On; fail when the model is missing.
    On,
    /// Off (the deterministic layers only).
    Off,
}

/// Arguments of `opencouch eval crisis`.
#[derive(clap::Args, Debug, Clone)]
pub struct EvalCrisisArgs {
    /// Labelled input file (read by path; never copied)
    #[arg(long, value_name = "FILE")]
    pub data: PathBuf,
    /// Input format: jsonl (ours, or the original project's JSON case
    /// array with expected_level / expected_level_in / flag expectations),
    /// twitter, kaggle or dreaddit
    #[arg(long, value_name = "FORMAT", value_parser = parse_format)]
    pub format: DataFormat,
    /// Write one JSON line per case, in input order: {id, level,
    /// level_without_semantic, confidence, classifier_path, layer,
    /// semantic_level, semantic_construct}
    #[arg(long, value_name = "OUT.jsonl")]
    pub predictions: Option<PathBuf>,
    /// The semantic signal (local embeddings): auto, on or off
    #[arg(long, value_enum, default_value = "auto")]
    pub semantic: SemanticChoice,
    /// Classifier mode. Filled from the global `--mode` flag by the caller
    /// (`deterministic` when unset); `hybrid`/`auto` need a configured model.
    #[arg(skip)]
    pub mode: Option<RuntimeMode>,
}

fn parse_format(s: &str) -> Result<DataFormat, String> {
    s.parse::<DataFormat>().map_err(|e| e.to_string())
}

/// One classification before the semantic signal.
struct Verdict {
    level: u8,
    confidence: &'static str,
    path: &'static str,
    layer: &'static str,
    signals: Vec<&'static str>,
}

/// Messages scored together (one embedding batch stream).
const SEMANTIC_BATCH: usize = 64;

/// Runs the evaluation and prints the report to stdout. Hybrid (or auto
/// with a model configured) runs the runtime's hybrid gate against the
/// configured model; the semantic signal is then applied on top of the
/// gate's level (it can only raise it).
pub fn run(args: &EvalCrisisArgs, settings: &opencouch_config::Settings) -> anyhow::Result<()> {
    let mode = match args.mode.unwrap_or(RuntimeMode::Deterministic) {
        RuntimeMode::Auto => settings.effective_mode(),
        m => m,
    };
    let mut hybrid = None;
    if mode == RuntimeMode::Hybrid {
        if !settings.model_configured() {
            bail!("hybrid evaluation needs a configured model (OPENAI_API_KEY or OPENAI_BASE_URL)");
        }
        let mut s = settings.clone();
        s.mode = RuntimeMode::Hybrid;
        let model = opencouch_runtime::model_from_settings(&s)?
            .ok_or_else(|| anyhow::anyhow!("no model could be built from the settings"))?;
        let gate = opencouch_runtime::CrisisGate::hybrid(
            model,
            std::time::Duration::from_secs(s.model_timeout_secs),
        );
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?;
        hybrid = Some((gate, rt));
    }
    let semantic = match args.semantic {
        SemanticChoice::Off => None,
        choice => match SemanticSignal::from_settings(settings) {
            // Loaded up front, so a model that fails to load is reported
            // here (and `auto` evaluates without it) rather than mid-run.
            (Some(s), _) => match s.load_now() {
                Ok(()) => Some(s),
                Err(e) if choice == SemanticChoice::On => {
                    bail!("semantic signal requested but the model failed to load: {e}")
                }
                Err(e) => {
                    eprintln!("semantic signal off: the model failed to load: {e}");
                    None
                }
            },
            (None, status) if choice == SemanticChoice::On => {
                bail!("semantic signal requested but {}", status.describe())
            }
            (None, status) => {
                eprintln!("semantic signal {}", status.describe());
                None
            }
        },
    };
    let classify_case = |history: &[opencouch_core::Message], message: &str| -> Verdict {
        match &hybrid {
            Some((gate, rt)) => {
                let v = rt.block_on(gate.assess(history, message));
                Verdict {
                    level: v.assessment().level.get(),
                    confidence: v.assessment().confidence.as_str(),
                    path: v.path().as_str(),
                    layer: "hybrid_gate",
                    signals: Vec::new(),
                }
            }
            None => {
                let c = classify(history, message);
                let mut signals = c.matched_families.clone();
                signals.extend(c.constructs.iter().copied());
                Verdict {
                    level: c.assessment.level.get(),
                    confidence: c.assessment.confidence.as_str(),
                    path: c.path.as_str(),
                    layer: c.layer.as_str(),
                    signals,
                }
            }
        }
    };
    let input = std::fs::read_to_string(&args.data)
        .with_context(|| format!("cannot read evaluation data {}", args.data.display()))?;
    let cases = parse_cases(args.format, &input).context("cannot parse evaluation data")?;
    drop(input);
    let levels = args.format == DataFormat::Jsonl
        && cases
            .iter()
            .any(|c| matches!(c.gold, Gold::Level(_) | Gold::LevelIn(_)));
    let mut without = EvalReport::new(levels);
    let mut with = EvalReport::new(levels);
    let mut misses = MissReport::default();
    let mut out = match &args.predictions {
        Some(p) => Some(std::io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("cannot create {}", p.display()))?,
        )),
        None => None,
    };
    let bar = if cases.len() >= 500 || semantic.is_some() {
        let b = indicatif::ProgressBar::new(cases.len() as u64);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{bar:40} {pos}/{len} cases ({per_sec}, eta {eta})",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        Some(b)
    } else {
        None
    };
    let started = std::time::Instant::now();
    let mut semantic_ms = 0.0f64;
    let mut raised = [0usize; 3];
    for group in cases.chunks(SEMANTIC_BATCH) {
        let scores = match &semantic {
            Some(s) => {
                let t = std::time::Instant::now();
                let msgs: Vec<&str> = group.iter().map(|c| c.message.as_str()).collect();
                let scores = s
                    .assess_many_blocking(&msgs)
                    .map_err(|e| anyhow::anyhow!("semantic signal failed: {e}"))?;
                semantic_ms += t.elapsed().as_secs_f64() * 1000.0;
                Some(scores)
            }
            None => None,
        };
        for (i, case) in group.iter().enumerate() {
            let v = classify_case(&case.history, &case.message);
            let sem = scores.as_ref().map(|s| &s[i]);
            let sem_level = sem.map_or(0, |s| s.level());
            let level = v.level.max(sem_level);
            if level > v.level {
                raised[usize::from(level.min(2))] += 1;
            }
            without.add(case.gold, v.level);
            with.add(case.gold, level);
            let (layer, mut signals) = if level > v.level {
                ("semantic", v.signals.clone())
            } else {
                (v.layer, v.signals.clone())
            };
            if level > v.level
                && let Some(s) = sem
            {
                signals.push(construct_name(&s.construct));
            }
            misses.record(case, level, layer, &signals);
            if let Some(w) = out.as_mut() {
                let line = serde_json::json!({
                    "id": case.id,
                    "level": level,
                    "level_without_semantic": v.level,
                    "confidence": v.confidence,
                    "classifier_path": v.path,
                    "layer": layer,
                    "semantic_level": sem.map(|s| s.level()),
                    "semantic_construct": sem.map(|s| s.construct.clone()),
                });
                writeln!(w, "{line}").context("cannot write predictions")?;
            }
            if let Some(b) = &bar {
                b.inc(1);
            }
        }
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    if let Some(mut w) = out {
        w.flush().context("cannot write predictions")?;
    }
    let elapsed = started.elapsed();
    outln!(
        "crisis gate evaluation: {} cases, format {:?}, mode {}, semantic signal {}",
        cases.len(),
        args.format,
        mode,
        if semantic.is_some() { "on" } else { "off" }
    )?;
    if semantic.is_some() {
        outln!("=== without the semantic signal")?;
        out!("{}", without.render())?;
        outln!("=== with the semantic signal")?;
        out!("{}", with.render())?;
        outln!(
            "semantic signal raised {} cases to 1 and {} to 2; {:.2} ms per case for embedding and scoring",
            raised[1],
            raised[2],
            semantic_ms / cases.len().max(1) as f64
        )?;
    } else {
        out!("{}", without.render())?;
    }
    out!("{}", misses.render())?;
    outln!(
        "throughput: {:.0} cases/s ({:.1} ms total)",
        cases.len() as f64 / elapsed.as_secs_f64().max(1e-9),
        elapsed.as_secs_f64() * 1e3
    )?;
    Ok(())
}

/// Construct names come from the exemplar file; the miss report wants a
/// `&'static str`, so each of the dozen names is interned once.
fn construct_name(name: &str) -> &'static str {
    use std::collections::HashMap;
    use std::sync::{LazyLock, Mutex};
    static NAMES: LazyLock<Mutex<HashMap<String, &'static str>>> =
        LazyLock::new(|| Mutex::new(HashMap::new()));
    let Ok(mut map) = NAMES.lock() else {
        return "semantic";
    };
    map.entry(name.to_owned())
        .or_insert_with(|| Box::leak(format!("semantic:{name}").into_boxed_str()))
}
