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
use opencouch_safety::eval::{DataFormat, EvalReport, Gold, MissReport, parse_cases};
use opencouch_safety::{GateOptions, classify_pair, classify_with};

use crate::out::{out, outln};

/// Whether to use the semantic signal (the gate's learned layer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SemanticChoice {
    /// On (it is built in): report without and with it.
    Auto,
    /// The same as auto.
    On,
    /// Off (the rules only).
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
    /// Write one JSON line per case, in input order: {id, gold, level,
    /// level_without_semantic, confidence, classifier_path, layer,
    /// semantic_level, semantic_p_flag, semantic_p_escalate}
    #[arg(long, value_name = "OUT.jsonl")]
    pub predictions: Option<PathBuf>,
    /// The semantic signal (the gate's built-in learned layer): auto, on or off
    #[arg(long, value_enum, default_value = "auto")]
    pub semantic: SemanticChoice,
    /// With --format esconv: print the text of each escalated turn (off by
    /// default: the listing names conversation and turn ids only)
    #[arg(long)]
    pub show_text: bool,
    /// Classifier mode. Filled from the global `--mode` flag by the caller
    /// (`deterministic` when unset); `hybrid`/`auto` need a configured model.
    #[arg(skip)]
    pub mode: Option<RuntimeMode>,
}

fn parse_format(s: &str) -> Result<DataFormat, String> {
    s.parse::<DataFormat>().map_err(|e| e.to_string())
}

/// One classification.
struct Verdict {
    level: u8,
    confidence: &'static str,
    path: &'static str,
    layer: &'static str,
    signals: Vec<&'static str>,
    learned: Option<opencouch_safety::learned::LearnedScore>,
}

/// Runs the evaluation and prints the report to stdout. Deterministic mode
/// classifies every case twice, without and with the learned layer, and
/// prints both; hybrid (or auto with a model configured) runs the runtime's
/// hybrid gate against the configured model, with the learned layer unless
/// `--semantic off`.
pub fn run(args: &EvalCrisisArgs, settings: &opencouch_config::Settings) -> anyhow::Result<()> {
    let mode = match args.mode.unwrap_or(RuntimeMode::Deterministic) {
        RuntimeMode::Auto => settings.effective_mode(),
        m => m,
    };
    let semantic = args.semantic != SemanticChoice::Off;
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
        )
        .with_semantic(semantic);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?;
        hybrid = Some((gate, rt));
    }
    let verdict = |c: opencouch_safety::Classification| {
        let mut signals = c.matched_families.clone();
        signals.extend(c.constructs.iter().copied());
        Verdict {
            level: c.assessment.level.get(),
            confidence: c.assessment.confidence.as_str(),
            path: c.path.as_str(),
            layer: c.layer.as_str(),
            signals,
            learned: c.learned,
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
    let bar = if cases.len() >= 500 && hybrid.is_some() {
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
    let mut raised = [0usize; 3];
    let two_passes = hybrid.is_none() && semantic;
    // ESConv: each conversation's earlier seeker turns carry the level the
    // gate gave them, as the runtime's transcript does.
    let conversational = args.format == DataFormat::Esconv;
    let mut levels_so_far: (String, Vec<u8>) = (String::new(), Vec::new());
    let mut escalated: Vec<String> = Vec::new();
    for case in &cases {
        let mut case_history;
        let case = if conversational {
            let conv = case.id.split(':').next().unwrap_or("").to_owned();
            if levels_so_far.0 != conv {
                levels_so_far = (conv, Vec::new());
            }
            case_history = case.clone();
            let mut it = levels_so_far.1.iter();
            for m in case_history.history.iter_mut().filter(|m| m.is_user()) {
                m.crisis_level = it.next().copied();
            }
            &case_history
        } else {
            case
        };
        let (base, v) = match &hybrid {
            Some((gate, rt)) => {
                let g = rt.block_on(gate.assess(&case.history, &case.message));
                let v = Verdict {
                    level: g.assessment().level.get(),
                    confidence: g.assessment().confidence.as_str(),
                    path: g.path().as_str(),
                    layer: g.layer(),
                    signals: Vec::new(),
                    learned: g.semantic().map(|s| s.score),
                };
                (v.level, v)
            }
            None if two_passes => {
                // One reading of the message, classified without and with
                // the learned layer.
                let (without, with) = classify_pair(&case.history, &case.message);
                (without.assessment.level.get(), verdict(with))
            }
            None => {
                let c = classify_with(&case.history, &case.message, GateOptions { learned: false });
                let v = verdict(c);
                (v.level, v)
            }
        };
        if v.level > base {
            raised[usize::from(v.level.min(2))] += 1;
        }
        without.add(case.gold, base);
        with.add(case.gold, v.level);
        if conversational {
            levels_so_far.1.push(v.level);
            if v.level >= 2 {
                let mut line = format!(
                    "  {} level {} layer {} signals [{}]",
                    case.id,
                    v.level,
                    v.layer,
                    v.signals.join(", ")
                );
                if args.show_text {
                    line.push_str(&format!("\n      {}", case.message.replace('\n', " ")));
                }
                escalated.push(line);
            }
        }
        misses.record(case, v.level, v.layer, &v.signals);
        if let Some(w) = out.as_mut() {
            let gold = match case.gold {
                Gold::Level(l) => serde_json::json!(l),
                Gold::LevelIn(bits) => serde_json::json!(
                    (0u8..4)
                        .filter(|l| bits & (1 << l) != 0)
                        .collect::<Vec<_>>()
                ),
                Gold::Binary(b) => serde_json::json!(b),
                Gold::Unlabeled => serde_json::Value::Null,
            };
            let line = serde_json::json!({
                "id": case.id,
                "gold": gold,
                "level": v.level,
                "level_without_semantic": base,
                "confidence": v.confidence,
                "classifier_path": v.path,
                "layer": v.layer,
                "semantic_level": v.learned.map(|s| s.level),
                "semantic_p_flag": v.learned.map(|s| s.p_flag),
                "semantic_p_escalate": v.learned.map(|s| s.p_escalate),
            });
            writeln!(w, "{line}").context("cannot write predictions")?;
        }
        if let Some(b) = &bar {
            b.inc(1);
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
        "crisis gate evaluation: {} cases, format {:?}, mode {}, semantic signal (learned layer) {}",
        cases.len(),
        args.format,
        mode,
        if semantic { "on" } else { "off" }
    )?;
    if two_passes {
        outln!("=== without the learned layer")?;
        out!("{}", without.render())?;
        outln!("=== with the learned layer")?;
        out!("{}", with.render())?;
        outln!(
            "learned layer raised {} cases to 1 and {} to 2",
            raised[1],
            raised[2],
        )?;
    } else {
        out!("{}", with.render())?;
    }
    out!("{}", misses.render())?;
    if conversational {
        outln!(
            "escalated seeker turns (level >= 2): {} of {} ({:.3}%)",
            escalated.len(),
            cases.len(),
            escalated.len() as f64 * 100.0 / cases.len().max(1) as f64
        )?;
        for line in &escalated {
            outln!("{line}")?;
        }
    }
    outln!(
        "throughput: {:.0} cases/s ({:.1} ms total{})",
        cases.len() as f64 / elapsed.as_secs_f64().max(1e-9),
        elapsed.as_secs_f64() * 1e3,
        if two_passes { ", both passes" } else { "" }
    )?;
    Ok(())
}
