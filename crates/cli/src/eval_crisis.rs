//! `opencouch eval crisis`: measures the crisis gate on a labelled file.
//!
//! The file is read by path and never copied; only aggregate numbers are
//! printed (no case text), and `--predictions` writes ids and levels only.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, bail};
use opencouch_core::RuntimeMode;
use opencouch_safety::classify;
use opencouch_safety::eval::{DataFormat, EvalReport, Gold, parse_cases};

/// Arguments of `opencouch eval crisis`.
#[derive(clap::Args, Debug, Clone)]
pub struct EvalCrisisArgs {
    /// Labelled input file (read by path; never copied)
    #[arg(long, value_name = "FILE")]
    pub data: PathBuf,
    /// Input format: jsonl | twitter | kaggle | dreaddit
    #[arg(long, value_name = "FORMAT", value_parser = parse_format)]
    pub format: DataFormat,
    /// Write one JSON line per case, in input order: {id, level, confidence, classifier_path}
    #[arg(long, value_name = "OUT.jsonl")]
    pub predictions: Option<PathBuf>,
    /// Classifier mode. Filled from the global `--mode` flag by the caller
    /// (`deterministic` when unset); `hybrid`/`auto` need a configured model.
    #[arg(skip)]
    pub mode: Option<RuntimeMode>,
}

fn parse_format(s: &str) -> Result<DataFormat, String> {
    s.parse::<DataFormat>().map_err(|e| e.to_string())
}

/// One classification: level, confidence and classifier path.
type Verdict = (u8, &'static str, &'static str);

/// Runs the evaluation and prints the report to stdout. Hybrid (or auto
/// with a model configured) runs the runtime's hybrid gate against the
/// configured model.
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
    let classify_case = |history: &[opencouch_core::Message], message: &str| -> Verdict {
        match &hybrid {
            Some((gate, rt)) => {
                let v = rt.block_on(gate.assess(history, message));
                (
                    v.assessment().level.get(),
                    v.assessment().confidence.as_str(),
                    v.path().as_str(),
                )
            }
            None => {
                let c = classify(history, message);
                (
                    c.assessment.level.get(),
                    c.assessment.confidence.as_str(),
                    c.path.as_str(),
                )
            }
        }
    };
    let input = std::fs::read_to_string(&args.data)
        .with_context(|| format!("cannot read evaluation data {}", args.data.display()))?;
    let cases = parse_cases(args.format, &input).context("cannot parse evaluation data")?;
    drop(input);
    let levels =
        args.format == DataFormat::Jsonl && cases.iter().any(|c| matches!(c.gold, Gold::Level(_)));
    let mut report = EvalReport::new(levels);
    let mut out = match &args.predictions {
        Some(p) => Some(std::io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("cannot create {}", p.display()))?,
        )),
        None => None,
    };
    let bar = if cases.len() >= 500 {
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
    for case in &cases {
        let (level, confidence, path) = classify_case(&case.history, &case.message);
        report.add(case.gold, level);
        if let Some(w) = out.as_mut() {
            let line = serde_json::json!({
                "id": case.id,
                "level": level,
                "confidence": confidence,
                "classifier_path": path,
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
    println!(
        "crisis gate evaluation: {} cases, format {:?}, mode {}",
        cases.len(),
        args.format,
        mode
    );
    print!("{}", report.render());
    println!(
        "throughput: {:.0} cases/s ({:.1} ms total)",
        cases.len() as f64 / elapsed.as_secs_f64().max(1e-9),
        elapsed.as_secs_f64() * 1e3
    );
    Ok(())
}
