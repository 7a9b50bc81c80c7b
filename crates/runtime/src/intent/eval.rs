//! Measuring the layered intent reading on a labelled set (the frozen intent
//! set, `tests/data/intent_frozen.jsonl`): per-intent precision and recall,
//! the confusion matrix, the misses by deciding layer, and the exercise
//! exits that should not have happened. Used by the tests and by
//! `opencouch eval routing`; no text is logged.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Intent, IntentContext, IntentDecision, IntentLayerKind, decide_chat, decide_exercise};

/// One labelled message.
#[derive(Debug, Clone, Deserialize)]
pub struct LabelledMessage {
    /// Row id.
    pub id: String,
    /// The message as typed.
    pub message: String,
    /// The expected intent.
    pub intent: Intent,
    /// Where it is sent.
    pub context: IntentContext,
}

/// Which layers may decide (the rules alone give the "before" numbers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layers {
    /// The phrase rules only; anything else falls back.
    RulesOnly,
    /// The phrase rules, then the learned layer.
    RulesThenLearned,
}

/// Per-intent counts.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct IntentCounts {
    /// Rows labelled with this intent.
    pub gold: usize,
    /// Rows read as this intent.
    pub predicted: usize,
    /// Rows labelled and read as this intent.
    pub correct: usize,
}

impl IntentCounts {
    /// Recall (1 when there are no gold rows).
    pub fn recall(&self) -> f64 {
        if self.gold == 0 {
            1.0
        } else {
            self.correct as f64 / self.gold as f64
        }
    }

    /// Precision (1 when nothing was predicted).
    pub fn precision(&self) -> f64 {
        if self.predicted == 0 {
            1.0
        } else {
            self.correct as f64 / self.predicted as f64
        }
    }
}

/// One miss (ids only: no message text).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Miss {
    pub id: String,
    pub gold: Intent,
    pub got: Intent,
    pub layer: IntentLayerKind,
}

/// The report over a labelled set.
#[derive(Debug, Clone, Default)]
pub struct IntentReport {
    /// Rows read.
    pub rows: usize,
    /// Rows read correctly.
    pub correct: usize,
    /// Counts per intent.
    pub per_intent: BTreeMap<Intent, IntentCounts>,
    /// `(gold, predicted) → rows`.
    pub confusion: BTreeMap<(Intent, Intent), usize>,
    /// Rows decided per layer.
    pub by_layer: BTreeMap<IntentLayerKind, usize>,
    /// Every miss.
    pub misses: Vec<Miss>,
    /// Exercise rows not labelled as a stop that were read as one (a
    /// running exercise would have ended).
    pub false_exits: Vec<String>,
}

impl IntentReport {
    /// Accuracy over every row.
    pub fn accuracy(&self) -> f64 {
        self.correct as f64 / self.rows.max(1) as f64
    }

    /// The lowest per-intent recall and its intent.
    pub fn min_recall(&self) -> Option<(Intent, f64)> {
        self.per_intent
            .iter()
            .map(|(i, c)| (*i, c.recall()))
            .min_by(|a, b| a.1.total_cmp(&b.1))
    }

    /// Misses per deciding layer.
    pub fn misses_by_layer(&self) -> BTreeMap<IntentLayerKind, usize> {
        let mut m = BTreeMap::new();
        for miss in &self.misses {
            *m.entry(miss.layer).or_insert(0) += 1;
        }
        m
    }
}

/// The step a message is answered on in the set: the frozen set's exercise
/// rows answer a step that asks the person to name things (5-4-3-2-1).
fn items_step() -> Option<&'static opencouch_exercises::Step> {
    opencouch_exercises::Catalog::builtin()
        .get("grounding_5_4_3_2_1")
        .and_then(|e| e.step(0))
}

/// Reads one message with the given layers.
pub fn decide(row: &LabelledMessage, layers: Layers) -> IntentDecision {
    let d = match row.context {
        IntentContext::Exercise => decide_exercise(&row.message, items_step()),
        IntentContext::Chat => decide_chat(&row.message, None),
    };
    if layers == Layers::RulesOnly && d.layer == IntentLayerKind::Learned {
        return IntentDecision {
            intent: match row.context {
                IntentContext::Exercise => Intent::ExerciseAnswer,
                IntentContext::Chat => Intent::None,
            },
            layer: IntentLayerKind::Fallback,
            confidence: None,
        };
    }
    d
}

/// Parses a JSON Lines set.
///
/// # Errors
/// A line that is not a labelled message (its number, never its text).
pub fn parse_set(text: &str) -> Result<Vec<LabelledMessage>, String> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(n, l)| serde_json::from_str(l).map_err(|e| format!("line {}: {e}", n + 1)))
        .collect()
}

/// Measures `rows`.
pub fn evaluate(rows: &[LabelledMessage], layers: Layers) -> IntentReport {
    let mut r = IntentReport::default();
    for row in rows {
        let d = decide(row, layers);
        r.rows += 1;
        *r.by_layer.entry(d.layer).or_insert(0) += 1;
        r.per_intent.entry(row.intent).or_default().gold += 1;
        r.per_intent.entry(d.intent).or_default().predicted += 1;
        *r.confusion.entry((row.intent, d.intent)).or_insert(0) += 1;
        if d.intent == row.intent {
            r.correct += 1;
            if let Some(c) = r.per_intent.get_mut(&row.intent) {
                c.correct += 1;
            }
        } else {
            r.misses.push(Miss {
                id: row.id.clone(),
                gold: row.intent,
                got: d.intent,
                layer: d.layer,
            });
            if row.context == IntentContext::Exercise && d.intent.leaves_exercise() {
                r.false_exits.push(row.id.clone());
            }
        }
    }
    r
}

/// A plain-text table of the report (per intent: gold rows, precision,
/// recall).
pub fn render(report: &IntentReport) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<34} {:>5} {:>9} {:>7}",
        "intent", "rows", "precision", "recall"
    );
    for (i, c) in &report.per_intent {
        let _ = writeln!(
            out,
            "{:<34} {:>5} {:>9.3} {:>7.3}",
            i.as_str(),
            c.gold,
            c.precision(),
            c.recall()
        );
    }
    let _ = writeln!(
        out,
        "accuracy {:.3} ({}/{}); false exercise exits: {}",
        report.accuracy(),
        report.correct,
        report.rows,
        report.false_exits.len()
    );
    let layers: Vec<String> = report
        .by_layer
        .iter()
        .map(|(l, n)| format!("{l} {n}"))
        .collect();
    let misses: Vec<String> = report
        .misses_by_layer()
        .iter()
        .map(|(l, n)| format!("{l} {n}"))
        .collect();
    let _ = writeln!(
        out,
        "decided by: {}; misses by layer: {}",
        layers.join(", "),
        misses.join(", ")
    );
    out
}
