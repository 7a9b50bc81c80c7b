//! `opencouch eval routing`: measures the layered intent reading (phrase
//! rules first, then the intent layer) on a labelled JSON Lines file in the
//! frozen intent set's format (`{id, message, intent, context}`, e.g.
//! `crates/runtime/tests/data/intent_frozen.jsonl`).
//!
//! Prints per-intent precision and recall with the rules alone and with the
//! intent layer behind them, the confusion matrix (off-diagonal cells), the
//! misses by deciding layer and the exercise exits that should not have
//! happened. The file is read by path and never copied; only ids, intent
//! names and counts are printed, never message text.

use std::path::PathBuf;

use anyhow::Context;
use opencouch_runtime::intent::eval::{IntentReport, Layers, evaluate, parse_set, render};

use crate::out::outln;

/// Arguments of `opencouch eval routing`.
#[derive(clap::Args, Debug, Clone)]
pub struct EvalRoutingArgs {
    /// Labelled input file, JSON Lines {id, message, intent, context}
    /// (read by path; never copied)
    #[arg(long, value_name = "FILE")]
    pub data: PathBuf,
    /// Also list every miss by id (gold → got, deciding layer)
    #[arg(long)]
    pub misses: bool,
}

fn confusion(report: &IntentReport) -> std::io::Result<()> {
    outln!("confusion (gold → read as: rows), off the diagonal:")?;
    for ((gold, got), n) in &report.confusion {
        if gold != got {
            outln!("  {:<34} → {:<34} {n}", gold.as_str(), got.as_str())?;
        }
    }
    Ok(())
}

/// Runs the evaluation and prints the report to stdout.
pub fn run(args: &EvalRoutingArgs) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&args.data)
        .with_context(|| format!("reading {}", args.data.display()))?;
    let rows = parse_set(&text).map_err(|e| anyhow::anyhow!("{}: {e}", args.data.display()))?;
    let before = evaluate(&rows, Layers::RulesOnly);
    let after = evaluate(&rows, Layers::RulesThenLearned);
    outln!("{} rows from {}", rows.len(), args.data.display())?;
    outln!("\n== phrase rules only ==")?;
    outln!("{}", render(&before))?;
    outln!("== phrase rules, then the intent layer ==")?;
    outln!("{}", render(&after))?;
    confusion(&after)?;
    if !after.false_exits.is_empty() {
        outln!("false exercise exits: {}", after.false_exits.join(", "))?;
    }
    if args.misses {
        outln!("misses (id: gold → got, layer):")?;
        for m in &after.misses {
            outln!("  {}: {} → {} ({})", m.id, m.gold, m.got, m.layer)?;
        }
    }
    Ok(())
}
