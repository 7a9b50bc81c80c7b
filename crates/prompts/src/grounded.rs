//! Grounded lookup, offline provider: answers source-backed questions only
//! from a curated directory of reputable, non-crisis mental-health sources
//! (`data/grounded_resources.toml`), and the deterministic rules that decide
//! whether a message is a lookup request at all.

use std::collections::BTreeSet;
use std::sync::LazyLock;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::error::PromptError;
use crate::text::{Phrase, any_match, phrases, words};

/// Name of the tool that performs a grounded lookup.
pub const GROUNDED_LOOKUP_TOOL: &str = "answer_grounded_lookup";
/// At most this many sources are returned.
pub const MAX_SOURCES: usize = 4;
/// The answer given when nothing in the directory covers the question.
pub const NO_VERIFIED_ANSWER: &str =
    "I couldn't verify that from the sources I have, so I'd rather not guess about it.";
const NOT_ATTEMPTED_ANSWER: &str = "There was nothing to look up.";

const RESOURCES_FILE: (&str, &str) = (
    "data/grounded_resources.toml",
    include_str!("../data/grounded_resources.toml"),
);
const RULES_FILE: (&str, &str) = (
    "data/lookup_rules.toml",
    include_str!("../data/lookup_rules.toml"),
);

/// The outcome of a grounded lookup.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GroundedStatus {
    /// Nothing was looked up (empty query).
    NotAttempted,
    /// Verified sources answered the question.
    Answered,
    /// The web-search provider is not configured or reachable.
    SearchUnavailable,
    /// The web-search provider raised an error.
    SearchFailed,
    /// No verified source covers the question.
    NoVerifiedAnswer,
}

impl GroundedStatus {
    /// Canonical snake_case spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            GroundedStatus::NotAttempted => "not_attempted",
            GroundedStatus::Answered => "answered",
            GroundedStatus::SearchUnavailable => "search_unavailable",
            GroundedStatus::SearchFailed => "search_failed",
            GroundedStatus::NoVerifiedAnswer => "no_verified_answer",
        }
    }
}

/// How trustworthy the best source is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceQuality {
    /// Government or public-health body.
    Official,
    /// Established charity or professional association.
    Reputable,
    /// Anything weaker (only a web-search provider may report this).
    Weak,
    /// No source.
    None,
}

/// One source behind a grounded answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Source {
    /// Page title.
    pub title: String,
    /// Public URL.
    pub url: String,
    /// Publishing organisation.
    pub organisation: String,
    /// Where the source applies: `US`, `UK`, `AU` or `international`.
    pub region: String,
    /// Quality tier.
    pub source_quality: SourceQuality,
}

/// The result of [`grounded_lookup`] (or of a web-search provider).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroundedResult {
    /// Outcome.
    pub status: GroundedStatus,
    /// Text for the person, built only from source summaries, ending with
    /// a "Sources:" section when answered.
    pub answer: String,
    /// The sources used (empty unless answered).
    pub sources: Vec<Source>,
    /// Quality of the best source.
    pub source_quality: SourceQuality,
    /// Short machine-readable reason, safe to log (never the query).
    pub reasoning: String,
}

impl GroundedResult {
    /// A result for a provider outage or error, with no answer content.
    pub fn unavailable(status: GroundedStatus, reasoning: &str) -> Self {
        GroundedResult {
            status,
            answer: NO_VERIFIED_ANSWER.to_owned(),
            sources: Vec::new(),
            source_quality: SourceQuality::None,
            reasoning: reasoning.to_owned(),
        }
    }

    /// The tool result returned to the model for `answer_grounded_lookup`.
    pub fn as_tool_json(&self) -> Value {
        json!({
            "status": self.status.as_str(),
            "answer": self.answer,
            "sources": self.sources.iter().map(|s| json!({
                "title": s.title,
                "url": s.url,
                "organisation": s.organisation,
                "region": s.region,
                "source_quality": s.source_quality,
            })).collect::<Vec<_>>(),
            "source_quality": self.source_quality,
            "reasoning": self.reasoning,
            "instructions": "Answer only from this result. End with the Sources section. If status is not answered, say you could not verify it and do not add other claims.",
        })
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawResource {
    id: String,
    title: String,
    organisation: String,
    url: String,
    region: String,
    source_quality: SourceQuality,
    topics: Vec<String>,
    keywords: Vec<String>,
    summary: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ResourcesFile {
    resources: Vec<RawResource>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RulesFile {
    lookup_phrases: Vec<String>,
    subjective_phrases: Vec<String>,
    stopwords: Vec<String>,
}

#[derive(Debug)]
struct Entry {
    raw: RawResource,
    /// Stemmed content words of the keywords.
    keyword_terms: BTreeSet<String>,
    /// Multi-word keyword phrases (stemmed).
    keyword_phrases: Vec<Vec<String>>,
    /// Stemmed content words of title, topics and organisation.
    other_terms: BTreeSet<String>,
}

#[derive(Debug)]
struct Directory {
    entries: Vec<Entry>,
    lookup: Vec<Phrase>,
    subjective: Vec<Phrase>,
    stopwords: BTreeSet<String>,
}

/// A light, symmetric stemmer: drops a plural `s` (not `ss`).
fn stem(word: &str) -> String {
    if word.len() > 3 && word.ends_with('s') && !word.ends_with("ss") {
        word[..word.len() - 1].to_owned()
    } else {
        word.to_owned()
    }
}

fn stems(text: &str) -> Vec<String> {
    words(text).iter().map(|w| stem(w)).collect()
}

/// Words that must never appear in an entry: the directory is non-crisis.
const CRISIS_WORDS: &[&str] = &[
    "suicide",
    "suicidal",
    "crisis",
    "hotline",
    "hotlines",
    "helpline",
    "helplines",
    "lifeline",
    "samaritans",
    "988",
    "911",
    "999",
];

fn load() -> Result<Directory, PromptError> {
    let (rfile, rtext) = RULES_FILE;
    let rules: RulesFile = toml::from_str(rtext).map_err(|e| PromptError::toml(rfile, &e))?;
    let stopwords: BTreeSet<String> = rules.stopwords.iter().flat_map(|w| stems(w)).collect();
    let (file, text) = RESOURCES_FILE;
    let raw: ResourcesFile = toml::from_str(text).map_err(|e| PromptError::toml(file, &e))?;
    let mut ids = BTreeSet::new();
    let mut entries = Vec::new();
    for r in raw.resources {
        if !ids.insert(r.id.clone()) {
            return Err(PromptError::inconsistent(
                file,
                format!("duplicate id {}", r.id),
            ));
        }
        if !r.url.starts_with("https://") || r.url.contains(' ') {
            return Err(PromptError::inconsistent(
                file,
                format!("{}: url must be https", r.id),
            ));
        }
        if r.title.trim().is_empty()
            || r.summary.trim().len() < 40
            || r.keywords.is_empty()
            || r.topics.is_empty()
        {
            return Err(PromptError::inconsistent(
                file,
                format!("{}: incomplete entry", r.id),
            ));
        }
        if !matches!(
            r.source_quality,
            SourceQuality::Official | SourceQuality::Reputable
        ) {
            return Err(PromptError::inconsistent(
                file,
                format!("{}: curated entries are official or reputable", r.id),
            ));
        }
        if !matches!(r.region.as_str(), "US" | "UK" | "AU" | "international") {
            return Err(PromptError::inconsistent(
                file,
                format!("{}: unknown region", r.id),
            ));
        }
        let all = format!(
            "{} {} {} {}",
            r.title,
            r.summary,
            r.keywords.join(" "),
            r.topics.join(" ")
        )
        .to_lowercase();
        if words(&all)
            .iter()
            .any(|w| CRISIS_WORDS.contains(&w.as_str()))
        {
            return Err(PromptError::inconsistent(
                file,
                format!("{}: crisis resources do not belong here", r.id),
            ));
        }
        let content = |t: &str| {
            stems(t)
                .into_iter()
                .filter(|w| !stopwords.contains(w))
                .collect::<Vec<_>>()
        };
        let keyword_terms = r.keywords.iter().flat_map(|k| content(k)).collect();
        let keyword_phrases = r
            .keywords
            .iter()
            .map(|k| stems(k))
            .filter(|p| p.len() > 1)
            .collect();
        let other = format!("{} {} {}", r.title, r.topics.join(" "), r.organisation);
        let other_terms = content(&other).into_iter().collect();
        entries.push(Entry {
            raw: r,
            keyword_terms,
            keyword_phrases,
            other_terms,
        });
    }
    if entries.len() < 10 {
        return Err(PromptError::inconsistent(
            file,
            "the directory needs at least ten entries",
        ));
    }
    let lookup = phrases(&rules.lookup_phrases);
    let subjective = phrases(&rules.subjective_phrases);
    if lookup.iter().chain(&subjective).any(Phrase::is_empty) {
        return Err(PromptError::inconsistent(rfile, "empty phrase"));
    }
    Ok(Directory {
        entries,
        lookup,
        subjective,
        stopwords,
    })
}

static DIRECTORY: LazyLock<Result<Directory, PromptError>> = LazyLock::new(load);

/// Checks that the directory and rules load.
pub(crate) fn check() -> Result<(), PromptError> {
    DIRECTORY.as_ref().map(|_| ()).map_err(Clone::clone)
}

/// Whether `message` is a subjective question about the person's own
/// situation ("am I overreacting", "is it normal to feel …"). Such questions
/// are never routed to lookup.
pub fn is_subjective_therapy_question(message: &str) -> bool {
    DIRECTORY
        .as_ref()
        .is_ok_and(|d| any_match(&d.subjective, &words(message)))
}

/// Deterministic "hard yes" rule for grounded lookup: the message uses a
/// lookup verb or asks for research, sources or recommended reading, and
/// is not a subjective therapy question.
pub fn is_lookup_request(message: &str) -> bool {
    let Ok(d) = DIRECTORY.as_ref() else {
        return false;
    };
    let tokens = words(message);
    !any_match(&d.subjective, &tokens) && any_match(&d.lookup, &tokens)
}

fn no_answer(reasoning: &str) -> GroundedResult {
    GroundedResult::unavailable(GroundedStatus::NoVerifiedAnswer, reasoning)
}

/// Answers `query` from the curated directory only.
///
/// Entries are ranked by keyword overlap. The lookup answers only when the
/// matched entries together cover every content word of the query; a
/// partial match returns `no_verified_answer` rather than widening into
/// nearby claims. Crisis lines are never part of the directory.
pub fn grounded_lookup(query: &str) -> GroundedResult {
    let query = query.trim();
    if query.is_empty() {
        return GroundedResult {
            status: GroundedStatus::NotAttempted,
            answer: NOT_ATTEMPTED_ANSWER.to_owned(),
            sources: Vec::new(),
            source_quality: SourceQuality::None,
            reasoning: "empty_query".to_owned(),
        };
    }
    let Ok(d) = DIRECTORY.as_ref() else {
        return GroundedResult::unavailable(
            GroundedStatus::SearchUnavailable,
            "directory_unavailable",
        );
    };
    if words(query)
        .iter()
        .any(|w| CRISIS_WORDS.contains(&w.as_str()))
    {
        return no_answer("crisis_resources_not_in_directory");
    }
    let q_all = stems(query);
    let q_terms: BTreeSet<String> = q_all
        .iter()
        .filter(|w| !d.stopwords.contains(*w))
        .cloned()
        .collect();
    if q_terms.is_empty() {
        return no_answer("no_specific_terms");
    }
    let mut scored: Vec<(usize, usize, &Entry)> = d
        .entries
        .iter()
        .enumerate()
        .filter_map(|(i, e)| {
            let kw = q_terms
                .iter()
                .filter(|t| e.keyword_terms.contains(*t))
                .count();
            if kw == 0 {
                return None;
            }
            let other = q_terms
                .iter()
                .filter(|t| e.other_terms.contains(*t))
                .count();
            let phrases = e
                .keyword_phrases
                .iter()
                .filter(|p| q_all.windows(p.len()).any(|w| w == p.as_slice()))
                .count();
            Some((2 * kw + other + 3 * phrases, i, e))
        })
        .collect();
    scored.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    scored.truncate(MAX_SOURCES);
    let covered: BTreeSet<&String> = q_terms
        .iter()
        .filter(|t| {
            scored
                .iter()
                .any(|(_, _, e)| e.keyword_terms.contains(*t) || e.other_terms.contains(*t))
        })
        .collect();
    if scored.is_empty() {
        return no_answer("no_matching_source");
    }
    if covered.len() < q_terms.len() {
        return no_answer("query_not_fully_covered");
    }
    let sources: Vec<Source> = scored
        .iter()
        .map(|(_, _, e)| Source {
            title: e.raw.title.clone(),
            url: e.raw.url.clone(),
            organisation: e.raw.organisation.clone(),
            region: e.raw.region.clone(),
            source_quality: e.raw.source_quality,
        })
        .collect();
    let quality = sources
        .iter()
        .map(|s| s.source_quality)
        .min()
        .unwrap_or(SourceQuality::None);
    let mut answer = String::from("Here is what I could verify from reviewed sources:\n");
    for (_, _, e) in &scored {
        answer.push_str(&format!("\n- {}", e.raw.summary.trim()));
    }
    answer.push_str("\n\nSources:");
    for s in &sources {
        answer.push_str(&format!(
            "\n- {} ({}, {}): {}",
            s.title, s.organisation, s.region, s.url
        ));
    }
    GroundedResult {
        status: GroundedStatus::Answered,
        answer,
        sources,
        source_quality: quality,
        reasoning: "curated_directory_match".to_owned(),
    }
}

/// The function-tool definition of `answer_grounded_lookup`.
pub fn grounded_lookup_tool_spec() -> Value {
    json!({
        "name": GROUNDED_LOOKUP_TOOL,
        "description": "Answer an explicit request for current, official or source-backed information from verified sources. Call exactly once and answer only from the result.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": { "type": "string", "description": "A short, specific search query in plain words." }
            },
            "required": ["query"],
            "additionalProperties": false
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directory_loads() {
        let d = DIRECTORY.as_ref().expect("directory loads");
        assert!(d.entries.len() >= 25, "{} entries", d.entries.len());
    }

    #[test]
    fn lookup_request_table() {
        let cases: &[(&str, bool)] = &[
            ("Can you look up what the NHS says about insomnia?", true),
            ("search for breathing exercises for stress", true),
            ("google CBT worksheets", true),
            ("find official resources on grief", true),
            ("Could you find local mental health resources for me?", true),
            ("check official guidance on sleep hygiene", true),
            ("What does the research say about mindfulness?", true),
            ("Are there studies on CBT for anxiety?", true),
            ("Any sources for how stress affects the body?", true),
            ("Can you recommend a book about grief?", true),
            ("recommend a good app for meditation", true),
            ("Am I overreacting about my friend not texting back?", false),
            ("Is it normal to feel this tired after a breakup?", false),
            ("What should I do about my sister?", false),
            (
                "What should I do about my anxiety, can you look up tips?",
                false,
            ),
            ("I feel anxious today", false),
            ("I keep searching for meaning in my job", false),
            ("hello", false),
        ];
        for (msg, want) in cases {
            assert_eq!(is_lookup_request(msg), *want, "{msg}");
        }
        assert!(is_subjective_therapy_question("am I overreacting?"));
        assert!(!is_subjective_therapy_question(
            "what does the research say about CBT"
        ));
    }

    #[test]
    fn answered_lookups_cite_sources() {
        let cases: &[(&str, &str)] = &[
            (
                "what does the research say about CBT for anxiety",
                "nimh.nih.gov",
            ),
            ("look up insomnia", "nhs.uk/conditions/insomnia"),
            (
                "breathing exercises for stress",
                "breathing-exercises-for-stress",
            ),
            ("recommend a book about procrastination", "Procrastination"),
            ("grief support resources", "grief"),
            ("panic attacks", "panic"),
            ("loneliness", "loneliness"),
            (
                "WHO fact sheet on depression",
                "who.int/news-room/fact-sheets/detail/depression",
            ),
        ];
        for (q, url_part) in cases {
            let r = grounded_lookup(q);
            assert_eq!(r.status, GroundedStatus::Answered, "{q}: {}", r.reasoning);
            assert!(!r.sources.is_empty() && r.sources.len() <= MAX_SOURCES);
            assert!(
                r.sources.iter().any(|s| s.url.contains(url_part)),
                "{q}: {:?}",
                r.sources
            );
            let (body, sources) = r
                .answer
                .split_once("\n\nSources:")
                .expect("Sources: section");
            for s in &r.sources {
                assert!(sources.contains(&s.url) && sources.contains(&s.title));
            }
            assert!(body.starts_with("Here is what I could verify"));
            assert!(matches!(
                r.source_quality,
                SourceQuality::Official | SourceQuality::Reputable
            ));
        }
    }

    #[test]
    fn no_match_does_not_widen() {
        let cases: &[(&str, Option<&str>)] = &[
            (
                "does ketamine help depression",
                Some("query_not_fully_covered"),
            ),
            ("therapists in Berlin", None),
            ("local mental health services in Lagos", None),
            ("is this app clinically proven", None),
            (
                "best sleep medication dose",
                Some("query_not_fully_covered"),
            ),
            (
                "suicide hotline number",
                Some("crisis_resources_not_in_directory"),
            ),
            (
                "crisis line for my friend",
                Some("crisis_resources_not_in_directory"),
            ),
            ("the best", Some("no_specific_terms")),
            ("quantum chromodynamics", Some("no_matching_source")),
        ];
        for (q, reason) in cases {
            let r = grounded_lookup(q);
            assert_eq!(
                r.status,
                GroundedStatus::NoVerifiedAnswer,
                "{q}: {:?}",
                r.sources
            );
            if let Some(reason) = reason {
                assert_eq!(r.reasoning, *reason, "{q}");
            }
            assert_eq!(r.answer, NO_VERIFIED_ANSWER);
            assert!(r.sources.is_empty() && r.source_quality == SourceQuality::None);
            assert!(!r.answer.contains("http"));
        }
        let empty = grounded_lookup("   ");
        assert_eq!(empty.status, GroundedStatus::NotAttempted);
    }

    #[test]
    fn tool_json_shapes() {
        let v = grounded_lookup("insomnia").as_tool_json();
        assert_eq!(v["status"], "answered");
        assert_eq!(v["source_quality"], "official");
        assert!(
            v["sources"][0]["url"]
                .as_str()
                .is_some_and(|u| u.starts_with("https://"))
        );
        let v = GroundedResult::unavailable(GroundedStatus::SearchFailed, "provider_error")
            .as_tool_json();
        assert_eq!(v["status"], "search_failed");
        let spec = grounded_lookup_tool_spec();
        assert_eq!(spec["name"], GROUNDED_LOOKUP_TOOL);
        for s in [
            GroundedStatus::NotAttempted,
            GroundedStatus::SearchUnavailable,
            GroundedStatus::NoVerifiedAnswer,
        ] {
            assert_eq!(
                serde_json::to_value(s).ok(),
                Some(Value::String(s.as_str().to_owned()))
            );
        }
    }
}
