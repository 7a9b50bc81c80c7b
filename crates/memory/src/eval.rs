//! LoCoMo retrieval evaluation: recall@k of the evidence turns.
//!
//! Every turn of a conversation becomes one memory record ([`turn_record`]:
//! the utterance as primary text, the turn it answers as context, the
//! session date); each QA question (category 5, adversarial, is skipped) is
//! a query; recall@k is the share of the question's evidence turns
//! (`dia_id`s) found in the top k, averaged per category and overall. Data
//! is read from a path given at run time and never copied into the
//! repository; per-question predictions (question, retrieved turn ids) are
//! written only where the caller asks.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

use opencouch_store::Embedding;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::retrieval::{EmbedError, Embedder, MemoryIndex, SEMANTIC_SEARCH_LIMIT, SearchMode};

/// The adversarial category, excluded from recall.
pub const SKIPPED_CATEGORY: u8 = 5;

/// An evaluation failure.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    /// A file could not be read.
    #[error("cannot read {path}: {reason}")]
    Io {
        /// The path.
        path: PathBuf,
        /// OS error text.
        reason: String,
    },
    /// A file is not LoCoMo JSON.
    #[error("{path} is not a LoCoMo conversation file: {reason}")]
    Format {
        /// The path.
        path: PathBuf,
        /// What was wrong (no dataset text).
        reason: String,
    },
    /// No conversation files were found.
    #[error("no LoCoMo .json files under {0}")]
    Empty(PathBuf),
    /// The retriever needs an embedder.
    #[error("the {0:?} retriever needs an embedding model")]
    EmbedderRequired(SearchMode),
    /// Embedding failed.
    #[error(transparent)]
    Embed(#[from] EmbedError),
}

/// One dialogue turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LocomoTurn {
    /// Turn id, e.g. `D3:7`.
    pub dia_id: String,
    /// Speaker name.
    pub speaker: String,
    /// Utterance.
    pub text: String,
    /// Image caption shared with the turn, if any.
    pub caption: Option<String>,
    /// Session number.
    pub session: u32,
    /// The session's date ("8 May 2023"), when the file gives one.
    #[serde(default)]
    pub date: Option<String>,
}

impl LocomoTurn {
    /// The text indexed for the turn: "Speaker: text [image: caption]".
    pub fn record_text(&self) -> String {
        match &self.caption {
            Some(c) => format!("{}: {} [image: {c}]", self.speaker, self.text),
            None => format!("{}: {}", self.speaker, self.text),
        }
    }
}

/// One QA item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LocomoQa {
    /// Question.
    pub question: String,
    /// Evidence turn ids.
    pub evidence: Vec<String>,
    /// 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial.
    pub category: u8,
}

/// One conversation with its questions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LocomoConversation {
    /// File stem or `sample_id`.
    pub sample_id: String,
    /// Turns in session order.
    pub turns: Vec<LocomoTurn>,
    /// Questions.
    pub qa: Vec<LocomoQa>,
}

/// The date part of a LoCoMo session timestamp: "1:56 pm on 8 May, 2023"
/// → "8 May 2023" (other spellings are kept as given, trimmed).
pub fn session_date(raw: &str) -> String {
    let date = raw.rsplit_once(" on ").map_or(raw, |(_, d)| d);
    date.replace(',', "")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

fn evidence_ids(v: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let mut push = |s: &str| {
        for part in s.split([';', ',', ' ']) {
            let p = part.trim();
            if p.starts_with('D') && p.contains(':') {
                out.push(p.to_owned());
            }
        }
    };
    match v {
        Value::Array(items) => items.iter().filter_map(Value::as_str).for_each(&mut push),
        Value::String(s) => push(s),
        _ => {}
    }
    out
}

fn parse_conversation(
    sample_id: String,
    conv: &Value,
    qa: &Value,
) -> Result<LocomoConversation, String> {
    let obj = conv.as_object().ok_or("conversation is not an object")?;
    let mut sessions: Vec<(u32, &Vec<Value>)> = obj
        .iter()
        .filter_map(|(k, v)| {
            let n = k.strip_prefix("session_")?.parse::<u32>().ok()?;
            Some((n, v.as_array()?))
        })
        .collect();
    sessions.sort_by_key(|(n, _)| *n);
    let mut turns = Vec::new();
    for (session, items) in sessions {
        let date = obj
            .get(&format!("session_{session}_date_time"))
            .and_then(Value::as_str)
            .map(session_date);
        for t in items {
            let (Some(dia_id), Some(text)) = (
                t.get("dia_id").and_then(Value::as_str),
                t.get("text").and_then(Value::as_str),
            ) else {
                continue;
            };
            turns.push(LocomoTurn {
                dia_id: dia_id.to_owned(),
                speaker: t
                    .get("speaker")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                text: text.to_owned(),
                caption: t
                    .get("blip_caption")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                session,
                date: date.clone(),
            });
        }
    }
    let qa = qa
        .as_array()
        .ok_or("qa is not a list")?
        .iter()
        .filter_map(|q| {
            Some(LocomoQa {
                question: q.get("question")?.as_str()?.to_owned(),
                evidence: evidence_ids(q.get("evidence").unwrap_or(&Value::Null)),
                category: u8::try_from(q.get("category")?.as_u64()?).ok()?,
            })
        })
        .collect();
    Ok(LocomoConversation {
        sample_id,
        turns,
        qa,
    })
}

fn parse_file(path: &Path) -> Result<Vec<LocomoConversation>, EvalError> {
    let text = std::fs::read_to_string(path).map_err(|e| EvalError::Io {
        path: path.to_owned(),
        reason: e.to_string(),
    })?;
    let v: Value = serde_json::from_str(&text).map_err(|e| EvalError::Format {
        path: path.to_owned(),
        reason: format!("invalid JSON at line {}", e.line()),
    })?;
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let fmt = |reason: String| EvalError::Format {
        path: path.to_owned(),
        reason,
    };
    match &v {
        // One conversation per file: sessions at the top level, with `qa`.
        Value::Object(o) if o.contains_key("qa") && !o.contains_key("conversation") => {
            Ok(vec![parse_conversation(stem, &v, &v["qa"]).map_err(fmt)?])
        }
        // {sample_id, conversation, qa}
        Value::Object(o) if o.contains_key("conversation") => {
            let id = o
                .get("sample_id")
                .and_then(Value::as_str)
                .map_or(stem, str::to_owned);
            Ok(vec![
                parse_conversation(id, &v["conversation"], &v["qa"]).map_err(fmt)?,
            ])
        }
        // The original locomo10.json: a list of {sample_id, conversation, qa}.
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, it)| {
                let id = it
                    .get("sample_id")
                    .and_then(Value::as_str)
                    .map_or_else(|| format!("{stem}-{i}"), str::to_owned);
                parse_conversation(
                    id,
                    it.get("conversation").unwrap_or(&Value::Null),
                    it.get("qa").unwrap_or(&Value::Null),
                )
                .map_err(fmt)
            })
            .collect(),
        _ => Err(fmt(
            "expected an object with `qa` or a list of samples".to_owned()
        )),
    }
}

/// Loads one LoCoMo file or every `*.json` file of a directory (sorted).
///
/// # Errors
/// [`EvalError`] for unreadable or malformed files, or an empty directory.
pub fn load_locomo(path: &Path) -> Result<Vec<LocomoConversation>, EvalError> {
    if path.is_dir() {
        let rd = std::fs::read_dir(path).map_err(|e| EvalError::Io {
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
        let mut files: Vec<PathBuf> = rd
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        files.sort();
        if files.is_empty() {
            return Err(EvalError::Empty(path.to_owned()));
        }
        let mut out = Vec::new();
        for f in files {
            out.extend(parse_file(&f)?);
        }
        Ok(out)
    } else {
        parse_file(path)
    }
}

/// Recall of one category.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct CategoryScore {
    /// Questions scored.
    pub questions: usize,
    /// Mean share of evidence turns in the top k.
    pub recall: f64,
    /// Share of questions with at least one evidence turn in the top k.
    pub hit_rate: f64,
}

/// One question's result (ids only).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prediction {
    /// Conversation id (the file stem, or the `sample_id` of a combined file).
    pub conversation: String,
    /// The question asked.
    pub question: String,
    /// Index of the question in the conversation's `qa`.
    pub question_index: usize,
    /// Category.
    pub category: u8,
    /// Evidence turn ids.
    pub evidence: Vec<String>,
    /// Retrieved turn ids, best first.
    pub retrieved: Vec<String>,
    /// Recall@k of this question.
    pub recall: f64,
}

/// The evaluation result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalReport {
    /// k.
    pub k: usize,
    /// Retriever.
    pub retriever: SearchMode,
    /// Per category (5 excluded).
    pub per_category: BTreeMap<u8, CategoryScore>,
    /// Over all scored questions.
    pub overall: CategoryScore,
    /// Median search latency per query, excluding the query embedding (ms).
    pub search_p50_ms: f64,
    /// Time spent embedding turns and questions (s).
    pub embed_seconds: f64,
    /// Texts embedded.
    pub embedded_texts: usize,
    /// Per-question results.
    pub predictions: Vec<Prediction>,
}

impl EvalReport {
    /// A compact JSON summary (no predictions).
    pub fn summary_json(&self) -> Value {
        json!({
            "k": self.k,
            "retriever": self.retriever,
            "overall": self.overall,
            "per_category": self.per_category,
            "search_p50_ms": self.search_p50_ms,
            "embed_seconds": self.embed_seconds,
            "embedded_texts": self.embedded_texts,
        })
    }
}

/// recall@k of `retrieved` against `evidence` (0 when there is no evidence).
pub fn recall_at_k(evidence: &[String], retrieved: &[String], k: usize) -> f64 {
    let ev: HashSet<&String> = evidence.iter().collect();
    if ev.is_empty() {
        return 0.0;
    }
    let top: HashSet<&String> = retrieved.iter().take(k).collect();
    ev.iter().filter(|e| top.contains(*e)).count() as f64 / ev.len() as f64
}

fn mean_scores(preds: &[&Prediction]) -> CategoryScore {
    if preds.is_empty() {
        return CategoryScore::default();
    }
    let n = preds.len() as f64;
    CategoryScore {
        questions: preds.len(),
        recall: preds.iter().map(|p| p.recall).sum::<f64>() / n,
        hit_rate: preds.iter().filter(|p| p.recall > 0.0).count() as f64 / n,
    }
}

/// How far an evaluation run is: `done` of `total` work units (one per
/// text embedded and one per question searched).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EvalProgress {
    /// Units finished.
    pub done: u64,
    /// Units in the whole run.
    pub total: u64,
}

/// Texts embedded per call, so progress moves during long embedding runs.
const EMBED_CHUNK: usize = 64;

/// The memory record indexed for turn `i`: the utterance (primary text),
/// the turn it answers (the previous turn of the same session) as context,
/// and the session date, the way a stored memory carries its provenance.
pub fn turn_record(turns: &[LocomoTurn], i: usize) -> Value {
    let t = &turns[i];
    let mut v = json!({"text": t.record_text()});
    if let Some(prev) = i.checked_sub(1).map(|p| &turns[p])
        && prev.session == t.session
    {
        v["context"] = Value::String(prev.record_text());
    }
    if let Some(d) = &t.date {
        v["date"] = Value::String(d.clone());
    }
    v
}

async fn embed_chunked(
    embedder: &dyn Embedder,
    texts: &[String],
    done: &mut u64,
    total: u64,
    progress: &mut dyn FnMut(EvalProgress),
) -> Result<Vec<Vec<f32>>, EvalError> {
    let mut out = Vec::with_capacity(texts.len());
    for chunk in texts.chunks(EMBED_CHUNK) {
        let vectors = embedder.embed(chunk).await?;
        if vectors.len() != chunk.len() {
            return Err(EvalError::Embed(EmbedError(
                "embedder returned a different number of vectors".to_owned(),
            )));
        }
        out.extend(vectors);
        *done += chunk.len() as u64;
        progress(EvalProgress { done: *done, total });
    }
    Ok(out)
}

/// Runs the evaluation with one retriever, the way per-turn retrieval runs:
/// each list keeps [`SEMANTIC_SEARCH_LIMIT`] candidates, fused by RRF
/// (k = 60, the dense list weighted by [`Embedder::rrf_weight`]), cut to k.
/// Turns are embedded as their utterance text (`Speaker: text`), questions
/// as asked. `progress` is called as work completes.
///
/// # Errors
/// [`EvalError::EmbedderRequired`] for embedding/hybrid without an embedder;
/// [`EvalError::Embed`] when embedding fails.
pub async fn evaluate(
    conversations: &[LocomoConversation],
    k: usize,
    retriever: SearchMode,
    embedder: Option<&dyn Embedder>,
    progress: &mut dyn FnMut(EvalProgress),
) -> Result<EvalReport, EvalError> {
    let embedder = match (retriever, embedder) {
        (SearchMode::Token, _) => None,
        (_, Some(e)) => Some(e),
        (mode, None) => return Err(EvalError::EmbedderRequired(mode)),
    };
    let scored = |c: &LocomoConversation| {
        c.qa.iter()
            .filter(|q| q.category != SKIPPED_CATEGORY && !q.evidence.is_empty())
            .count()
    };
    let total: u64 = conversations
        .iter()
        .map(|c| {
            let embeds = if embedder.is_some() {
                c.turns.len() + scored(c)
            } else {
                0
            };
            (embeds + scored(c)) as u64
        })
        .sum();
    let mut done = 0u64;
    let mut predictions = Vec::new();
    let mut times = Vec::new();
    let mut embed_seconds = 0.0;
    let mut embedded_texts = 0;
    for conv in conversations {
        let values: Vec<Value> = (0..conv.turns.len())
            .map(|i| turn_record(&conv.turns, i))
            .collect();
        let questions: Vec<(usize, &LocomoQa)> = conv
            .qa
            .iter()
            .enumerate()
            .filter(|(_, q)| q.category != SKIPPED_CATEGORY && !q.evidence.is_empty())
            .collect();
        let (turn_vecs, query_vecs) = match embedder {
            Some(e) => {
                let started = Instant::now();
                let texts: Vec<String> = conv.turns.iter().map(LocomoTurn::record_text).collect();
                let qs: Vec<String> = questions.iter().map(|(_, q)| q.question.clone()).collect();
                let tv = embed_chunked(e, &texts, &mut done, total, progress).await?;
                let qv = embed_chunked(e, &qs, &mut done, total, progress).await?;
                embed_seconds += started.elapsed().as_secs_f64();
                embedded_texts += texts.len() + qs.len();
                let stored: Vec<Embedding> = tv
                    .into_iter()
                    .map(|values| Embedding {
                        model: e.model_id().to_owned(),
                        values,
                    })
                    .collect();
                (Some(stored), Some(qv))
            }
            None => (None, None),
        };
        let model = embedder.map(|e| (e.model_id(), e.dimension()));
        let index = MemoryIndex::build(
            values
                .iter()
                .enumerate()
                .map(|(i, v)| (v, turn_vecs.as_ref().and_then(|t| t.get(i)))),
            model,
        )
        .with_dense_weight(embedder.map_or(1.0, |e| e.rrf_weight()));
        for (qi, (index_in_qa, q)) in questions.iter().enumerate() {
            let qv = query_vecs
                .as_ref()
                .and_then(|v| v.get(qi))
                .map(Vec::as_slice);
            let started = Instant::now();
            let hits = index.search_pool(&q.question, qv, retriever, SEMANTIC_SEARCH_LIMIT, k);
            times.push(started.elapsed().as_secs_f64() * 1000.0);
            let retrieved: Vec<String> = hits
                .iter()
                .map(|h| conv.turns[h.index].dia_id.clone())
                .collect();
            predictions.push(Prediction {
                conversation: conv.sample_id.clone(),
                question: q.question.clone(),
                question_index: *index_in_qa,
                category: q.category,
                recall: recall_at_k(&q.evidence, &retrieved, k),
                evidence: q.evidence.clone(),
                retrieved,
            });
            done += 1;
            if done.is_multiple_of(16) || done == total {
                progress(EvalProgress { done, total });
            }
        }
    }
    let mut per_category = BTreeMap::new();
    let cats: std::collections::BTreeSet<u8> = predictions.iter().map(|p| p.category).collect();
    for c in cats {
        let preds: Vec<&Prediction> = predictions.iter().filter(|p| p.category == c).collect();
        per_category.insert(c, mean_scores(&preds));
    }
    let overall = mean_scores(&predictions.iter().collect::<Vec<_>>());
    times.sort_by(f64::total_cmp);
    let search_p50_ms = times.get(times.len() / 2).copied().unwrap_or(0.0);
    Ok(EvalReport {
        k,
        retriever,
        per_category,
        overall,
        search_p50_ms,
        embed_seconds,
        embedded_texts,
        predictions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Value {
        // A synthetic conversation in the per-file LoCoMo shape (no dataset text).
        json!({
            "speaker_a": "Ann", "speaker_b": "Bo",
            "session_1_date_time": "1 May 2023",
            "session_1": [
                {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a grey kitten called Pixel"},
                {"speaker": "Bo", "dia_id": "D1:2", "text": "Lovely! I started pottery classes on Tuesdays"}
            ],
            "session_2": [
                {"speaker": "Ann", "dia_id": "D2:1", "text": "Pixel knocked my plant over", "blip_caption": "a photo of a cat"},
                {"speaker": "Bo", "dia_id": "D2:2", "text": "My pottery teacher praised my bowl"}
            ],
            "qa": [
                {"question": "What is the name of Ann's kitten?", "answer": "Pixel", "evidence": ["D1:1"], "category": 4},
                {"question": "What classes did Bo start?", "answer": 7, "evidence": ["D1:2; D2:2"], "category": 1},
                {"question": "What did Bo adopt?", "evidence": ["D1:1"], "category": 5, "adversarial_answer": "x"}
            ]
        })
    }

    fn write(dir: &Path, name: &str, v: &Value) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, v.to_string()).unwrap();
        p
    }

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("oc-mem-eval-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn loads_all_three_shapes() {
        let d = tmpdir("shapes");
        let per_file = write(&d, "a.json", &sample());
        let wrapped =
            json!({"sample_id": "w1", "conversation": sample(), "qa": sample()["qa"].clone()});
        write(&d, "b.json", &wrapped);
        write(&d, "c.json", &json!([wrapped.clone(), wrapped]));
        let one = load_locomo(&per_file).unwrap();
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].sample_id, "a");
        assert_eq!(one[0].turns.len(), 4);
        assert_eq!(one[0].turns[2].session, 2);
        assert_eq!(
            one[0].qa[1].evidence,
            vec!["D1:2", "D2:2"],
            "joined evidence is split"
        );
        let all = load_locomo(&d).unwrap();
        assert_eq!(all.len(), 4);
        assert_eq!(all[1].sample_id, "w1");
        std::fs::write(d.join("bad.json"), "{\"nope\": 1}").unwrap();
        assert!(matches!(
            load_locomo(&d.join("bad.json")),
            Err(EvalError::Format { .. })
        ));
        assert!(matches!(
            load_locomo(&d.join("missing.json")),
            Err(EvalError::Io { .. })
        ));
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn session_date_table() {
        let cases = [
            ("1:56 pm on 8 May, 2023", "8 May 2023"),
            ("11:01 am on 17 December, 2022", "17 December 2022"),
            ("8 May 2023", "8 May 2023"),
            ("  sometime  ", "sometime"),
        ];
        for (raw, want) in cases {
            assert_eq!(session_date(raw), want, "{raw}");
        }
    }

    #[test]
    fn turn_records_carry_context_and_date() {
        let d = tmpdir("records");
        let mut v = sample();
        v["session_2_date_time"] = json!("2:00 pm on 3 June, 2023");
        let convs = load_locomo(&write(&d, "a.json", &v)).unwrap();
        let turns = &convs[0].turns;
        let first = turn_record(turns, 0);
        assert!(
            first.get("context").is_none(),
            "nothing before the first turn"
        );
        assert_eq!(first["date"], "1 May 2023");
        let second = turn_record(turns, 1);
        assert_eq!(second["context"], turns[0].record_text());
        let third = turn_record(turns, 2);
        assert!(
            third.get("context").is_none(),
            "context stays within a session"
        );
        assert_eq!(third["date"], "3 June 2023");
        assert!(
            third["text"]
                .as_str()
                .unwrap()
                .contains("[image: a photo of a cat]")
        );
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn recall_at_k_table() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(recall_at_k(&s(&["a"]), &s(&["b", "a"]), 2), 1.0);
        assert_eq!(recall_at_k(&s(&["a"]), &s(&["b", "a"]), 1), 0.0);
        assert_eq!(recall_at_k(&s(&["a", "c"]), &s(&["c", "x"]), 5), 0.5);
        assert_eq!(recall_at_k(&[], &s(&["c"]), 5), 0.0);
    }

    #[tokio::test]
    async fn token_evaluation_skips_adversarial() {
        let d = tmpdir("eval");
        let convs = load_locomo(&write(&d, "a.json", &sample())).unwrap();
        let r = evaluate(&convs, 2, SearchMode::Token, None, &mut |_| {})
            .await
            .unwrap();
        assert_eq!(r.overall.questions, 2);
        assert!(!r.per_category.contains_key(&5));
        assert_eq!(r.per_category[&4].recall, 1.0, "kitten question finds D1:1");
        assert_eq!(
            r.per_category[&1].recall, 1.0,
            "pottery question finds both turns"
        );
        assert!(r.summary_json()["overall"]["recall"].as_f64().is_some());
        let p = &r.predictions[0];
        assert_eq!(p.conversation, "a");
        assert_eq!(p.question, "What is the name of Ann's kitten?");
        assert_eq!(p.retrieved.first().map(String::as_str), Some("D1:1"));
        let line = serde_json::to_value(p).unwrap();
        for key in ["conversation", "question", "retrieved"] {
            assert!(line.get(key).is_some(), "{key}");
        }
        // Progress ends at the total: one unit per scored question.
        let mut last = None;
        evaluate(&convs, 2, SearchMode::Token, None, &mut |p| last = Some(p))
            .await
            .unwrap();
        assert_eq!(last, Some(EvalProgress { done: 2, total: 2 }));
        assert!(matches!(
            evaluate(&convs, 2, SearchMode::Hybrid, None, &mut |_| {}).await,
            Err(EvalError::EmbedderRequired(SearchMode::Hybrid))
        ));
        std::fs::remove_dir_all(&d).ok();
    }
}
