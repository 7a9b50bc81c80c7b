//! Measures the layered intent reading (phrase rules first, then the learned
//! layer) on a labelled JSON Lines file in the corpus row format
//! (`{"id", "text", "intent", "context", ...}`), e.g. the development set:
//!
//! ```sh
//! cargo run -p opencouch-runtime --example eval_intents --release -- \
//!     crates/runtime/training/dev/intent_dev.jsonl
//! ```
//!
//! Prints per intent: rows, precision and recall of the layered reading,
//! how many rows the learned layer read correctly as its top intent
//! regardless of the threshold ("top-1"), and how many fell back below the
//! threshold; then accuracy, false exercise exits and the rows per deciding
//! layer. `--misses` also prints every miss with its text (only for sets
//! you may read: never for the frozen set). `--weights FILE --settings FILE`
//! reads a layer other than the embedded one (e.g. a trial written by
//! `train_intents` with `LEARN_OUT`); the phrase rules are the same.
//!
//! Exercise rows are read as replies to the first step of 5-4-3-2-1
//! grounding (a step that asks the person to name things), as in
//! `opencouch_runtime::intent::eval`.

use std::collections::BTreeMap;

use opencouch_runtime::intent::eval::{
    IntentReport, LabelledMessage, Layers, Miss, decide, render,
};
use opencouch_runtime::intent::{
    Intent, IntentContext, IntentDecision, IntentLayer, IntentLayerKind,
};
use serde::Deserialize;

#[derive(Deserialize)]
struct Row {
    id: String,
    text: String,
    intent: Intent,
    context: IntentContext,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let mut path = None;
    let mut misses = false;
    let mut weights = None;
    let mut settings = None;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--misses" => misses = true,
            "--weights" => weights = args.next(),
            "--settings" => settings = args.next(),
            _ => path = Some(a),
        }
    }
    let path =
        path.ok_or("usage: eval_intents FILE.jsonl [--misses] [--weights F --settings F]")?;
    let text = std::fs::read_to_string(&path)?;
    let rows: Vec<LabelledMessage> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(n, l)| {
            serde_json::from_str::<Row>(l)
                .map(|r| LabelledMessage {
                    id: r.id,
                    message: r.text,
                    intent: r.intent,
                    context: r.context,
                })
                .map_err(|e| format!("line {}: {e}", n + 1))
        })
        .collect::<Result<_, _>>()?;
    let layer: &IntentLayer = match (weights, settings) {
        (Some(w), Some(s)) => Box::leak(Box::new(IntentLayer::from_parts(
            &std::fs::read(w)?,
            &std::fs::read_to_string(s)?,
        )?)),
        (None, None) => IntentLayer::embedded().map_err(|e| e.to_string())?,
        _ => return Err("--weights and --settings go together".into()),
    };
    let mut report = IntentReport::default();
    let mut top1: BTreeMap<Intent, usize> = BTreeMap::new();
    let mut fallbacks: BTreeMap<Intent, usize> = BTreeMap::new();
    let mut missed_text = Vec::new();
    for row in &rows {
        // The rules' decision; anything they leave is read by `layer`.
        let mut d = decide(row, Layers::RulesOnly);
        let score = layer.classify(row.context, &row.message);
        if score.intent == row.intent {
            *top1.entry(row.intent).or_default() += 1;
        }
        if d.layer != IntentLayerKind::Rules {
            d = if score.accepted {
                IntentDecision {
                    intent: score.intent,
                    layer: IntentLayerKind::Learned,
                    confidence: Some(score.confidence),
                }
            } else {
                *fallbacks.entry(row.intent).or_default() += 1;
                d
            };
        }
        report.rows += 1;
        *report.by_layer.entry(d.layer).or_insert(0) += 1;
        report.per_intent.entry(row.intent).or_default().gold += 1;
        report.per_intent.entry(d.intent).or_default().predicted += 1;
        *report.confusion.entry((row.intent, d.intent)).or_insert(0) += 1;
        if d.intent == row.intent {
            report.correct += 1;
            if let Some(c) = report.per_intent.get_mut(&row.intent) {
                c.correct += 1;
            }
        } else {
            report.misses.push(Miss {
                id: row.id.clone(),
                gold: row.intent,
                got: d.intent,
                layer: d.layer,
            });
            if row.context == IntentContext::Exercise && d.intent.leaves_exercise() {
                report.false_exits.push(row.id.clone());
            }
            missed_text.push(format!(
                "  {:<8} {:<32} -> {:<32} {:<8} {:>5}  {}",
                row.id,
                row.intent.as_str(),
                d.intent.as_str(),
                d.layer.as_str(),
                format!("{:.2}", score.confidence),
                row.message
            ));
        }
    }
    println!(
        "{:<34} {:>5} {:>9} {:>7} {:>6} {:>9}",
        "intent", "rows", "precision", "recall", "top-1", "fallback"
    );
    for (i, c) in &report.per_intent {
        if c.gold == 0 {
            continue;
        }
        println!(
            "{:<34} {:>5} {:>9.3} {:>7.3} {:>6.3} {:>9}",
            i.as_str(),
            c.gold,
            c.precision(),
            c.recall(),
            top1.get(i).copied().unwrap_or(0) as f64 / c.gold as f64,
            fallbacks.get(i).copied().unwrap_or(0)
        );
    }
    // The summary lines of the shared renderer (accuracy, false exits,
    // layers).
    for line in render(&report)
        .lines()
        .rev()
        .take(2)
        .collect::<Vec<_>>()
        .iter()
        .rev()
    {
        println!("{line}");
    }
    let fell: usize = fallbacks.values().sum();
    let fell_acting: usize = fallbacks
        .iter()
        .filter(|(i, _)| !matches!(i, Intent::None | Intent::ExerciseAnswer))
        .map(|(_, n)| n)
        .sum();
    let (worst, recall) = report.min_recall().unwrap_or((Intent::None, 1.0));
    println!(
        "fallbacks (below the threshold, rules silent): {fell} of {} rows ({:.1}%), {fell_acting} of them labelled with an acting intent; lowest recall {worst} {recall:.3}; thresholds accept {:.2} (in an exercise {:.2}) exit {:.2}",
        report.rows,
        100.0 * fell as f64 / report.rows.max(1) as f64,
        layer.thresholds().accept,
        layer.thresholds().accept_exercise,
        layer.thresholds().exit
    );
    if misses {
        println!("misses (id, gold -> got, layer, learned confidence, text):");
        for m in &missed_text {
            println!("{m}");
        }
    }
    Ok(())
}
