//! Measuring the gate: dataset readers (RFC 4180 CSV, JSONL), a 4×4
//! confusion matrix, precision/recall/F1 at two operating points and a
//! dedupe helper. Pure: callers read files and pass the text in.

use std::collections::{BTreeMap, HashSet};

use serde::{Deserialize, Serialize};

use crate::error::SafetyError;
use opencouch_core::Message;

/// Parses RFC 4180 CSV: comma separated, fields optionally quoted, `""`
/// inside quotes is a literal quote, quoted fields may contain newlines.
/// CRLF and LF line endings are accepted. Empty lines are skipped.
pub fn parse_csv(input: &str) -> Result<Vec<Vec<String>>, SafetyError> {
    let mut rows = Vec::new();
    let mut row: Vec<String> = Vec::new();
    let mut field = String::new();
    let mut in_quotes = false;
    let mut field_started = false;
    let mut line = 1usize;
    let mut chars = input.chars().peekable();
    while let Some(c) = chars.next() {
        if in_quotes {
            match c {
                '"' if chars.peek() == Some(&'"') => {
                    chars.next();
                    field.push('"');
                }
                '"' => in_quotes = false,
                '\n' => {
                    line += 1;
                    field.push(c);
                }
                _ => field.push(c),
            }
            continue;
        }
        match c {
            '"' if !field_started => {
                in_quotes = true;
                field_started = true;
            }
            ',' => {
                row.push(std::mem::take(&mut field));
                field_started = false;
            }
            '\r' if chars.peek() == Some(&'\n') => {}
            '\n' => {
                line += 1;
                if field_started || !field.is_empty() || !row.is_empty() {
                    row.push(std::mem::take(&mut field));
                    rows.push(std::mem::take(&mut row));
                }
                field_started = false;
            }
            _ => {
                field.push(c);
                field_started = true;
            }
        }
    }
    if in_quotes {
        return Err(SafetyError::EvalInput {
            line,
            detail: "unterminated quoted field".into(),
        });
    }
    if field_started || !field.is_empty() || !row.is_empty() {
        row.push(field);
        rows.push(row);
    }
    Ok(rows)
}

/// Input formats understood by the evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DataFormat {
    /// One JSON object per line: `{id, history, message, level?}`, or the
    /// original project's case file (a JSON array of `{id, history, message,
    /// expected_level | expected_level_in, expected_needs_crisis_response,
    /// expected_needs_clarification, notes}`); `kind` and `lang` are kept
    /// for grouping misses.
    Jsonl,
    /// CSV `tweet,intention` (1 = positive). Deduplicated by text.
    Twitter,
    /// CSV `"",text,class` (`suicide` = positive).
    Kaggle,
    /// CSV with `text` and `label` columns; every row is a negative for
    /// escalation (measures over-escalation).
    Dreaddit,
    /// ESConv emotional-support conversations, one JSON object per line
    /// with `dialog: [{speaker: usr|sys, text}]`: every seeker (`usr`) turn
    /// is a case, with its own conversation so far as history, and a
    /// negative for escalation (ordinary support talk: measures false
    /// alarms). Case ids are `CONVERSATION:TURN` (1-based line, 0-based turn).
    Esconv,
}

impl std::str::FromStr for DataFormat {
    type Err = SafetyError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "jsonl" => Ok(DataFormat::Jsonl),
            "twitter" => Ok(DataFormat::Twitter),
            "kaggle" => Ok(DataFormat::Kaggle),
            "dreaddit" => Ok(DataFormat::Dreaddit),
            "esconv" => Ok(DataFormat::Esconv),
            _ => Err(SafetyError::EvalInput {
                line: 0,
                detail: "format must be jsonl, twitter, kaggle, dreaddit or esconv".into(),
            }),
        }
    }
}

/// The gold label of one case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Gold {
    /// An exact level 0–3 (JSONL with `level` or `expected_level`).
    Level(u8),
    /// Any of a set of levels (bit `l` set = level `l` accepted), from
    /// `expected_level_in`.
    LevelIn(u8),
    /// Binary label: positive (at risk) or negative.
    Binary(bool),
    /// No label (JSONL without `level`): predictions only.
    Unlabeled,
}

/// One evaluation case.
#[derive(Debug, Clone)]
pub struct EvalCase {
    /// Case id (from the file, or the 1-based row number).
    pub id: String,
    /// Conversation before the message.
    pub history: Vec<Message>,
    /// The message to classify.
    pub message: String,
    /// The gold label.
    pub gold: Gold,
    /// Expected `needs_crisis_response` flag, when the file states it.
    pub expect_crisis: Option<bool>,
    /// Expected `needs_clarification` flag, when the file states it.
    pub expect_clarification: Option<bool>,
    /// A grouping label from the file (`kind`), if any.
    pub kind: Option<String>,
}

impl EvalCase {
    /// Whether `level` satisfies every expectation of the case (level or
    /// level set, and both flags when stated); `None` for binary or
    /// unlabeled cases.
    pub fn passes(&self, level: u8) -> Option<bool> {
        let level_ok = match self.gold {
            Gold::Level(g) => g == level,
            Gold::LevelIn(mask) => mask & (1 << level.min(3)) != 0,
            Gold::Binary(_) | Gold::Unlabeled => return None,
        };
        let crisis_ok = self.expect_crisis.is_none_or(|e| e == (level >= 2));
        let clar_ok = self.expect_clarification.is_none_or(|e| e == (level == 1));
        Some(level_ok && crisis_ok && clar_ok)
    }
}

#[derive(Deserialize)]
struct JsonlCase {
    #[serde(default)]
    id: Option<serde_json::Value>,
    #[serde(default)]
    history: Vec<JsonlTurn>,
    message: String,
    #[serde(default, alias = "expected_level")]
    level: Option<u8>,
    #[serde(default)]
    expected_level_in: Option<Vec<u8>>,
    #[serde(default)]
    expected_needs_crisis_response: Option<bool>,
    #[serde(default)]
    expected_needs_clarification: Option<bool>,
    #[serde(default)]
    kind: Option<String>,
}

#[derive(Deserialize)]
struct JsonlTurn {
    role: String,
    content: String,
}

/// Parses evaluation input in `format`. Twitter rows are deduplicated by
/// normalized text (first occurrence kept).
pub fn parse_cases(format: DataFormat, input: &str) -> Result<Vec<EvalCase>, SafetyError> {
    match format {
        DataFormat::Jsonl => parse_jsonl(input),
        DataFormat::Twitter => {
            let cases = csv_cases(input, &["tweet", "text"], &["intention", "label"], |v| {
                v.trim() == "1"
            })?;
            Ok(dedupe(cases, |c| c.message.as_str()))
        }
        DataFormat::Kaggle => csv_cases(input, &["text"], &["class"], |v| v.trim() == "suicide"),
        DataFormat::Dreaddit => csv_cases(input, &["text"], &[], |_| false),
        DataFormat::Esconv => parse_esconv(input),
    }
}

#[derive(Deserialize)]
struct EsconvConversation {
    dialog: Vec<EsconvTurn>,
}

#[derive(Deserialize)]
struct EsconvTurn {
    speaker: String,
    text: String,
}

fn parse_esconv(input: &str) -> Result<Vec<EvalCase>, SafetyError> {
    let mut cases = Vec::new();
    for (n, line) in input.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let conv: EsconvConversation =
            serde_json::from_str(line).map_err(|e| SafetyError::EvalInput {
                line: n + 1,
                detail: format!("not an ESConv conversation: {e}"),
            })?;
        let mut history: Vec<Message> = Vec::new();
        for (t, turn) in conv.dialog.into_iter().enumerate() {
            match turn.speaker.as_str() {
                "usr" | "seeker" => {
                    cases.push(EvalCase {
                        id: format!("{}:{t}", n + 1),
                        history: history.clone(),
                        message: turn.text.clone(),
                        gold: Gold::Binary(false),
                        expect_crisis: None,
                        expect_clarification: None,
                        kind: None,
                    });
                    history.push(Message::user(turn.text));
                }
                "sys" | "supporter" => history.push(Message::assistant(turn.text)),
                other => {
                    return Err(SafetyError::EvalInput {
                        line: n + 1,
                        detail: format!("turn {t}: unknown speaker {other:?} (usr or sys)"),
                    });
                }
            }
        }
    }
    Ok(cases)
}

fn parse_jsonl(input: &str) -> Result<Vec<EvalCase>, SafetyError> {
    // The original project's files are one JSON array; ours are JSONL.
    if input.trim_start().starts_with('[') {
        let values: Vec<serde_json::Value> =
            serde_json::from_str(input).map_err(|e| SafetyError::EvalInput {
                line: e.line(),
                detail: format!("invalid JSON case array: {e}"),
            })?;
        let mut out = Vec::with_capacity(values.len());
        for (i, v) in values.into_iter().enumerate() {
            let c: JsonlCase = serde_json::from_value(v).map_err(|e| SafetyError::EvalInput {
                line: i + 1,
                detail: format!("invalid case {}: {e}", i + 1),
            })?;
            out.push(json_case(c, i + 1)?);
        }
        return Ok(out);
    }
    let mut out = Vec::new();
    for (i, line) in input.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let c: JsonlCase = serde_json::from_str(line).map_err(|e| SafetyError::EvalInput {
            line: i + 1,
            detail: format!("invalid JSON case: {e}"),
        })?;
        out.push(json_case(c, i + 1)?);
    }
    Ok(out)
}

fn json_case(c: JsonlCase, line: usize) -> Result<EvalCase, SafetyError> {
    let bad = |detail: &str| SafetyError::EvalInput {
        line,
        detail: detail.into(),
    };
    let mut history = Vec::new();
    for t in c.history {
        history.push(match t.role.as_str() {
            "user" => Message::user(t.content),
            "assistant" => Message::assistant(t.content),
            _ => return Err(bad("role must be user or assistant")),
        });
    }
    if c.level.is_some_and(|l| l > 3) {
        return Err(bad("level must be 0-3"));
    }
    let gold = match (c.level, &c.expected_level_in) {
        (Some(l), _) => Gold::Level(l),
        (None, Some(set)) => {
            if set.is_empty() || set.iter().any(|l| *l > 3) {
                return Err(bad("expected_level_in must list levels 0-3"));
            }
            Gold::LevelIn(set.iter().fold(0u8, |m, l| m | (1 << l)))
        }
        (None, None) => Gold::Unlabeled,
    };
    let id = match c.id {
        Some(serde_json::Value::String(s)) => s,
        Some(v) => v.to_string(),
        None => line.to_string(),
    };
    Ok(EvalCase {
        id,
        history,
        message: c.message,
        gold,
        expect_crisis: c.expected_needs_crisis_response,
        expect_clarification: c.expected_needs_clarification,
        kind: c.kind,
    })
}

fn csv_cases(
    input: &str,
    text_cols: &[&str],
    label_cols: &[&str],
    positive: impl Fn(&str) -> bool,
) -> Result<Vec<EvalCase>, SafetyError> {
    let rows = parse_csv(input)?;
    let Some((header, body)) = rows.split_first() else {
        return Ok(Vec::new());
    };
    let find = |names: &[&str]| {
        header
            .iter()
            .position(|h| names.iter().any(|n| h.trim().eq_ignore_ascii_case(n)))
    };
    let text_idx = find(text_cols).ok_or_else(|| SafetyError::EvalInput {
        line: 1,
        detail: format!("missing column {}", text_cols[0]),
    })?;
    let label_idx = if label_cols.is_empty() {
        None
    } else {
        Some(find(label_cols).ok_or_else(|| SafetyError::EvalInput {
            line: 1,
            detail: format!("missing column {}", label_cols[0]),
        })?)
    };
    let mut out = Vec::with_capacity(body.len());
    for (i, row) in body.iter().enumerate() {
        let Some(text) = row.get(text_idx) else {
            return Err(SafetyError::EvalInput {
                line: i + 2,
                detail: "row has too few fields".into(),
            });
        };
        let gold = match label_idx {
            Some(li) => Gold::Binary(positive(row.get(li).map(String::as_str).unwrap_or(""))),
            None => Gold::Binary(false),
        };
        out.push(EvalCase {
            id: (i + 1).to_string(),
            history: Vec::new(),
            message: text.clone(),
            gold,
            expect_crisis: None,
            expect_clarification: None,
            kind: None,
        });
    }
    Ok(out)
}

/// Keeps the first item for each key (whitespace-collapsed, lowercased).
pub fn dedupe<T>(items: Vec<T>, key: impl Fn(&T) -> &str) -> Vec<T> {
    let mut seen = HashSet::new();
    items
        .into_iter()
        .filter(|it| {
            let k = key(it)
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
                .to_lowercase();
            seen.insert(k)
        })
        .collect()
}

/// Counts for one binary operating point.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct BinaryMetrics {
    /// True positives.
    pub tp: usize,
    /// False positives.
    pub fp: usize,
    /// False negatives.
    pub fn_: usize,
    /// True negatives.
    pub tn: usize,
}

impl BinaryMetrics {
    /// Adds one prediction.
    pub fn add(&mut self, gold: bool, predicted: bool) {
        match (gold, predicted) {
            (true, true) => self.tp += 1,
            (false, true) => self.fp += 1,
            (true, false) => self.fn_ += 1,
            (false, false) => self.tn += 1,
        }
    }
    /// tp / (tp + fp), 0 when undefined.
    pub fn precision(&self) -> f64 {
        ratio(self.tp, self.tp + self.fp)
    }
    /// tp / (tp + fn), 0 when undefined.
    pub fn recall(&self) -> f64 {
        ratio(self.tp, self.tp + self.fn_)
    }
    /// Harmonic mean of precision and recall.
    pub fn f1(&self) -> f64 {
        let (p, r) = (self.precision(), self.recall());
        if p + r == 0.0 {
            0.0
        } else {
            2.0 * p * r / (p + r)
        }
    }
    /// Share of gold negatives predicted positive.
    pub fn false_positive_rate(&self) -> f64 {
        ratio(self.fp, self.fp + self.tn)
    }
}

fn ratio(a: usize, b: usize) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

/// The evaluation report: a confusion matrix of gold class × predicted
/// level and the two operating points.
#[derive(Debug, Clone, Default, Serialize)]
pub struct EvalReport {
    /// Gold class labels, one per matrix row ("0".."3", or "negative"/"positive").
    pub gold_labels: Vec<String>,
    /// `matrix[gold][predicted level]`.
    pub matrix: Vec<[usize; 4]>,
    /// Flagged = predicted level ≥ 1 (gold positive = level ≥ 1 or positive label).
    pub flagged: BinaryMetrics,
    /// Escalated = predicted level ≥ 2 (gold positive = level ≥ 2 or positive label).
    pub escalated: BinaryMetrics,
    /// Cases whose predicted level equals an exact gold level.
    pub exact_matches: usize,
    /// Cases with an exact gold level.
    pub exact_total: usize,
    /// Cases with no label.
    pub unlabeled: usize,
}

impl EvalReport {
    /// An empty report for binary or level gold labels.
    pub fn new(levels: bool) -> Self {
        let gold_labels: Vec<String> = if levels {
            (0..4).map(|l| l.to_string()).collect()
        } else {
            vec!["negative".into(), "positive".into()]
        };
        EvalReport {
            matrix: vec![[0; 4]; gold_labels.len()],
            gold_labels,
            ..Default::default()
        }
    }

    /// Adds one prediction.
    pub fn add(&mut self, gold: Gold, predicted: u8) {
        let p = usize::from(predicted.min(3));
        match gold {
            Gold::Level(g) => {
                let g = g.min(3);
                if self.matrix.len() == 4 {
                    self.matrix[usize::from(g)][p] += 1;
                }
                self.flagged.add(g >= 1, p >= 1);
                self.escalated.add(g >= 2, p >= 2);
                self.exact_total += 1;
                if usize::from(g) == p {
                    self.exact_matches += 1;
                }
            }
            Gold::LevelIn(mask) => {
                // Scored against the lowest accepted level for the matrix and
                // the operating points; exact match means "in the set".
                let g = (0..4u8).find(|l| mask & (1 << l) != 0).unwrap_or(0);
                if self.matrix.len() == 4 {
                    self.matrix[usize::from(g)][p] += 1;
                }
                self.flagged.add(g >= 1, p >= 1);
                self.escalated.add(g >= 2, p >= 2);
                self.exact_total += 1;
                if mask & (1 << p) != 0 {
                    self.exact_matches += 1;
                }
            }
            Gold::Binary(pos) => {
                if self.matrix.len() == 2 {
                    self.matrix[usize::from(pos)][p] += 1;
                }
                self.flagged.add(pos, p >= 1);
                self.escalated.add(pos, p >= 2);
            }
            Gold::Unlabeled => self.unlabeled += 1,
        }
    }

    /// Share of each gold class predicted flagged (≥1) and escalated (≥2).
    pub fn shares(&self) -> Vec<(String, usize, f64, f64)> {
        self.gold_labels
            .iter()
            .zip(&self.matrix)
            .map(|(label, row)| {
                let n: usize = row.iter().sum();
                (
                    label.clone(),
                    n,
                    ratio(row[1] + row[2] + row[3], n),
                    ratio(row[2] + row[3], n),
                )
            })
            .collect()
    }

    /// A plain-text rendering of the report.
    pub fn render(&self) -> String {
        let mut s = String::new();
        s.push_str("confusion matrix (rows: gold, columns: predicted level)\n");
        s.push_str(&format!(
            "{:>10} {:>8} {:>8} {:>8} {:>8}\n",
            "gold", "0", "1", "2", "3"
        ));
        for (label, row) in self.gold_labels.iter().zip(&self.matrix) {
            s.push_str(&format!(
                "{:>10} {:>8} {:>8} {:>8} {:>8}\n",
                label, row[0], row[1], row[2], row[3]
            ));
        }
        for (name, m) in [
            ("flagged (>=1)", &self.flagged),
            ("escalated (>=2)", &self.escalated),
        ] {
            s.push_str(&format!(
                "{name:<16} precision {:.3}  recall {:.3}  f1 {:.3}  (tp {} fp {} fn {} tn {})\n",
                m.precision(),
                m.recall(),
                m.f1(),
                m.tp,
                m.fp,
                m.fn_,
                m.tn
            ));
        }
        s.push_str("share per gold class: class, n, flagged, escalated\n");
        for (label, n, f, e) in self.shares() {
            s.push_str(&format!("{label:>10} {n:>8} {f:>8.3} {e:>8.3}\n"));
        }
        if self.exact_total > 0 {
            s.push_str(&format!(
                "exact level match: {}/{} ({:.3})\n",
                self.exact_matches,
                self.exact_total,
                ratio(self.exact_matches, self.exact_total)
            ));
        }
        if self.unlabeled > 0 {
            s.push_str(&format!("unlabeled cases: {}\n", self.unlabeled));
        }
        s
    }
}

/// Under- and over-detections counted per group.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct MissCount {
    /// Predicted below the gold level (or a positive not flagged).
    pub under: usize,
    /// Predicted above the gold level (or a negative escalated).
    pub over: usize,
}

/// Misses grouped by the deciding layer, by the phrase families and grammar
/// constructs that fired (or `(none)`), and by the case file's `kind`.
/// Never holds case text.
#[derive(Debug, Clone, Default, Serialize)]
pub struct MissReport {
    /// All misses.
    pub total: MissCount,
    /// By the layer that decided the level.
    pub by_layer: BTreeMap<String, MissCount>,
    /// By family or construct name; `(none)` when nothing fired.
    pub by_signal: BTreeMap<String, MissCount>,
    /// By the case's `kind` label, when the file has one.
    pub by_kind: BTreeMap<String, MissCount>,
    /// Cases meeting every stated expectation (level or level set, flags).
    pub checks_passed: usize,
    /// Cases with level expectations.
    pub checks_total: usize,
    /// Ids of failed cases (level expectations), in input order.
    pub failed_ids: Vec<String>,
}

impl MissReport {
    /// Records one prediction: `layer` decided it, `signals` are the names
    /// of the families and constructs that fired.
    pub fn record(&mut self, case: &EvalCase, predicted: u8, layer: &str, signals: &[&str]) {
        if let Some(pass) = case.passes(predicted) {
            self.checks_total += 1;
            if pass {
                self.checks_passed += 1;
            } else {
                self.failed_ids.push(case.id.clone());
            }
        }
        let (under, over) = match case.gold {
            Gold::Level(g) => (predicted < g, predicted > g),
            Gold::LevelIn(mask) => {
                let lo = (0..4u8).find(|l| mask & (1 << l) != 0).unwrap_or(0);
                let hi = (0..4u8).rev().find(|l| mask & (1 << l) != 0).unwrap_or(3);
                (predicted < lo, predicted > hi)
            }
            Gold::Binary(pos) => (pos && predicted == 0, !pos && predicted >= 2),
            Gold::Unlabeled => (false, false),
        };
        if !under && !over {
            return;
        }
        let bump = |m: &mut MissCount| {
            if under {
                m.under += 1;
            } else {
                m.over += 1;
            }
        };
        bump(&mut self.total);
        bump(self.by_layer.entry(layer.to_owned()).or_default());
        if signals.is_empty() {
            bump(self.by_signal.entry("(none)".to_owned()).or_default());
        }
        for s in signals {
            bump(self.by_signal.entry((*s).to_owned()).or_default());
        }
        if let Some(k) = &case.kind {
            bump(self.by_kind.entry(k.clone()).or_default());
        }
    }

    /// A plain-text rendering (groups sorted by size).
    pub fn render(&self) -> String {
        let mut s = String::new();
        if self.checks_total > 0 {
            s.push_str(&format!(
                "case expectations met (level and flags): {}/{}\n",
                self.checks_passed, self.checks_total
            ));
        }
        s.push_str(&format!(
            "misses: {} under-detected, {} over-escalated\n",
            self.total.under, self.total.over
        ));
        for (title, map) in [
            ("by deciding layer", &self.by_layer),
            ("by family or construct", &self.by_signal),
            ("by case kind", &self.by_kind),
        ] {
            if map.is_empty() {
                continue;
            }
            s.push_str(&format!("misses {title}: name, under, over\n"));
            let mut rows: Vec<_> = map.iter().collect();
            rows.sort_by(|a, b| {
                (b.1.under + b.1.over)
                    .cmp(&(a.1.under + a.1.over))
                    .then(a.0.cmp(b.0))
            });
            for (name, m) in rows {
                s.push_str(&format!("  {name:<32} {:>6} {:>6}\n", m.under, m.over));
            }
        }
        if !self.failed_ids.is_empty() {
            let shown: Vec<&str> = self
                .failed_ids
                .iter()
                .take(40)
                .map(String::as_str)
                .collect();
            s.push_str(&format!(
                "failed case ids ({}): {}{}\n",
                self.failed_ids.len(),
                shown.join(" "),
                if self.failed_ids.len() > shown.len() {
                    " …"
                } else {
                    ""
                }
            ));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_handles_quotes_doubled_quotes_and_newlines() {
        let rows = parse_csv("a,b,c\r\n\"x, y\",\"say \"\"hi\"\"\",\"line1\nline2\"\nplain,,end\n")
            .unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[1], vec!["x, y", "say \"hi\"", "line1\nline2"]);
        assert_eq!(rows[2], vec!["plain", "", "end"]);
        assert!(parse_csv("\"open").is_err());
    }

    #[test]
    fn formats_parse_labels() {
        let tw = parse_cases(
            DataFormat::Twitter,
            "tweet,intention\nhello there,0\nhello  there,1\nsad,1\n",
        )
        .unwrap();
        assert_eq!(tw.len(), 2, "duplicate text removed");
        assert_eq!(tw[1].gold, Gold::Binary(true));
        let kg = parse_cases(
            DataFormat::Kaggle,
            "\"\",\"text\",\"class\"\n\"1\",\"a\",\"suicide\"\n\"2\",\"b\",\"non-suicide\"\n",
        )
        .unwrap();
        assert_eq!(kg[0].gold, Gold::Binary(true));
        assert_eq!(kg[1].gold, Gold::Binary(false));
        let dr = parse_cases(DataFormat::Dreaddit, ",id,text,label\n0,x,\"t\",1\n").unwrap();
        assert_eq!(dr[0].gold, Gold::Binary(false));
        let js = parse_cases(
            DataFormat::Jsonl,
            "{\"id\":\"a\",\"history\":[{\"role\":\"user\",\"content\":\"x\"}],\"message\":\"m\",\"level\":2}\n{\"message\":\"n\"}\n",
        )
        .unwrap();
        assert_eq!(js[0].gold, Gold::Level(2));
        assert_eq!(js[0].history.len(), 1);
        assert_eq!(js[1].gold, Gold::Unlabeled);
        assert!(parse_cases(DataFormat::Jsonl, "{\"message\":\"n\",\"level\":7}").is_err());
    }

    #[test]
    fn metrics_at_two_operating_points() {
        let mut r = EvalReport::new(false);
        r.add(Gold::Binary(true), 2);
        r.add(Gold::Binary(true), 1);
        r.add(Gold::Binary(false), 0);
        r.add(Gold::Binary(false), 2);
        assert_eq!(r.flagged.recall(), 1.0);
        assert_eq!(r.escalated.recall(), 0.5);
        assert_eq!(r.escalated.precision(), 0.5);
        assert_eq!(r.flagged.false_positive_rate(), 0.5);
        assert!((r.escalated.f1() - 0.5).abs() < 1e-9);
        let shares = r.shares();
        assert_eq!(shares[1], ("positive".to_string(), 2, 1.0, 0.5));
        let mut l = EvalReport::new(true);
        l.add(Gold::Level(3), 3);
        l.add(Gold::Level(1), 2);
        assert_eq!(l.exact_matches, 1);
        assert_eq!(l.matrix[1][2], 1);
        assert!(l.render().contains("exact level match: 1/2"));
    }

    #[test]
    fn original_case_format_and_miss_groups() {
        let input = r#"[
          {"id": "a", "history": [], "message": "m1", "expected_level": 2,
           "expected_needs_crisis_response": true, "expected_needs_clarification": false, "notes": "x"},
          {"id": "b", "history": [{"role": "user", "content": "h"}], "message": "m2",
           "expected_level_in": [0, 1], "kind": "idiom"}
        ]"#;
        let cases = parse_cases(DataFormat::Jsonl, input).unwrap();
        assert_eq!(cases.len(), 2);
        assert_eq!(cases[0].gold, Gold::Level(2));
        assert_eq!(cases[0].expect_crisis, Some(true));
        assert_eq!(cases[1].gold, Gold::LevelIn(0b11));
        assert_eq!(cases[0].passes(2), Some(true));
        assert_eq!(cases[0].passes(3), Some(false));
        assert_eq!(cases[1].passes(1), Some(true));
        assert_eq!(cases[1].passes(2), Some(false));
        let mut m = MissReport::default();
        m.record(&cases[0], 0, "none", &[]);
        m.record(&cases[1], 2, "lexicon", &["clear_self_harm"]);
        m.record(&cases[1], 0, "none", &[]);
        assert_eq!(m.total, MissCount { under: 1, over: 1 });
        assert_eq!(m.by_signal["(none)"].under, 1);
        assert_eq!(m.by_signal["clear_self_harm"].over, 1);
        assert_eq!(m.by_kind["idiom"].over, 1);
        assert_eq!((m.checks_passed, m.checks_total), (1, 3));
        let text = m.render();
        assert!(text.contains("by deciding layer") && text.contains("failed case ids (2): a b"));
        assert!(
            parse_cases(
                DataFormat::Jsonl,
                r#"[{"message": "x", "expected_level_in": [5]}]"#
            )
            .is_err()
        );
    }
}
