//! The deterministic extractor: explicit self-statements and stated
//! preferences matched by the patterns of `data/extract_patterns.toml`.

use std::sync::OnceLock;

use regex::Regex;
use serde::Deserialize;

use super::candidate::{
    CandidateBody, MemoryCandidate, PolicyAction, ProceduralCandidate, SemanticCandidate,
};
use super::clamps::any_phrase;
use crate::lexicon::{fold, lexicon};
use crate::types::{EntityRef, EntityType, FactCategory, MAX_QUOTE_CHARS, Predicate};

pub(super) const PATTERNS_TOML: &str = include_str!("../../data/extract_patterns.toml");

#[derive(Debug, Deserialize)]
pub(super) struct SemanticPatternDef {
    pub(super) id: String,
    pub(super) pattern: String,
    pub(super) category: FactCategory,
    pub(super) predicate: Predicate,
    pub(super) object_type: EntityType,
    pub(super) object: String,
    #[serde(default)]
    pub(super) capitalize: Vec<String>,
    pub(super) confidence: f32,
    #[allow(dead_code)]
    pub(super) example: String,
}

#[derive(Debug, Deserialize)]
pub(super) struct ProceduralPatternDef {
    pub(super) id: String,
    pub(super) pattern: String,
    pub(super) rule: String,
    #[serde(default)]
    pub(super) capitalize: Vec<String>,
    #[allow(dead_code)]
    pub(super) example: String,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct PatternFile {
    #[serde(default)]
    pub(super) semantic: Vec<SemanticPatternDef>,
    #[serde(default)]
    pub(super) procedural: Vec<ProceduralPatternDef>,
}

pub(super) struct Compiled {
    pub(super) file: PatternFile,
    pub(super) semantic: Vec<Regex>,
    pub(super) procedural: Vec<Regex>,
}

pub(super) fn compile(text: &str) -> Result<Compiled, String> {
    let file: PatternFile = toml::from_str(text).map_err(|e| e.to_string())?;
    let semantic = file
        .semantic
        .iter()
        .map(|p| Regex::new(&p.pattern).map_err(|_| p.id.clone()))
        .collect::<Result<_, _>>()?;
    let procedural = file
        .procedural
        .iter()
        .map(|p| Regex::new(&p.pattern).map_err(|_| p.id.clone()))
        .collect::<Result<_, _>>()?;
    Ok(Compiled {
        file,
        semantic,
        procedural,
    })
}

fn patterns() -> &'static Compiled {
    static P: OnceLock<Compiled> = OnceLock::new();
    P.get_or_init(|| {
        compile(PATTERNS_TOML).unwrap_or_else(|e| {
            tracing::error!(pattern = %e, "extractor patterns failed to load; deterministic extraction disabled");
            Compiled { file: PatternFile::default(), semantic: Vec::new(), procedural: Vec::new() }
        })
    })
}

fn fill(template: &str, caps: &regex::Captures<'_>, capitalize: &[String]) -> String {
    let mut out = template.to_owned();
    for name in caps_names(template) {
        let raw = caps
            .name(&name)
            .map(|m| m.as_str().trim())
            .unwrap_or_default();
        let value = if capitalize.contains(&name) {
            capitalize_first(raw)
        } else {
            raw.to_lowercase()
        };
        out = out.replace(&format!("{{{name}}}"), &value);
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

pub(super) fn caps_names(template: &str) -> Vec<String> {
    template
        .split('{')
        .skip(1)
        .filter_map(|s| s.split_once('}').map(|(n, _)| n.to_owned()))
        .collect()
}

fn capitalize_first(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f
            .to_uppercase()
            .chain(c.flat_map(char::to_lowercase))
            .collect(),
        None => String::new(),
    }
}

/// Truncates to at most 280 characters on a character boundary.
pub fn clip_quote(text: &str) -> String {
    let t = text.trim();
    if t.chars().count() <= MAX_QUOTE_CHARS {
        t.to_owned()
    } else {
        t.chars().take(MAX_QUOTE_CHARS).collect()
    }
}

/// The sentence of `text` around byte offset `at`.
fn sentence_at(text: &str, at: usize) -> &str {
    let start = text[..at].rfind(['.', '!', '?', '\n']).map_or(0, |i| i + 1);
    let end = text[at..]
        .find(['.', '!', '?', '\n'])
        .map_or(text.len(), |i| at + i + 1);
    text[start..end].trim()
}

/// Deterministic extraction of explicit self-statements and stated
/// preferences (deterministic mode). Proposals still go through
/// [`apply_hard_clamps`](super::apply_hard_clamps).
pub fn extract_candidates(message: &str, turn_index: u64) -> Vec<MemoryCandidate> {
    let p = patterns();
    let durable = any_phrase(&fold(message), &lexicon().policy.durable);
    let mut out = Vec::new();
    for (def, re) in p.file.semantic.iter().zip(&p.semantic) {
        for caps in re.captures_iter(message) {
            let Some(m) = caps.get(0) else { continue };
            let object = fill(&def.object, &caps, &def.capitalize);
            let Ok(object) = EntityRef::new(def.object_type, &object) else {
                continue;
            };
            out.push(MemoryCandidate {
                body: CandidateBody::Semantic(SemanticCandidate {
                    category: def.category,
                    subject: EntityRef::user(),
                    predicate: def.predicate,
                    object,
                    confidence: def.confidence,
                }),
                action: PolicyAction::CommitAtSessionEnd,
                evidence_quote: clip_quote(sentence_at(message, m.start())),
                turn_index,
                explicit_memory_request: false,
            });
        }
    }
    for (def, re) in p.file.procedural.iter().zip(&p.procedural) {
        if let Some(caps) = re.captures(message) {
            let Some(m) = caps.get(0) else { continue };
            out.push(MemoryCandidate {
                body: CandidateBody::Procedural(ProceduralCandidate {
                    rule: fill(&def.rule, &caps, &def.capitalize),
                    explicit: true,
                    safety_conflict: false,
                }),
                action: if durable {
                    PolicyAction::CommitNow
                } else {
                    PolicyAction::CommitAtSessionEnd
                },
                evidence_quote: clip_quote(sentence_at(message, m.start())),
                turn_index,
                explicit_memory_request: false,
            });
        }
    }
    out
}
