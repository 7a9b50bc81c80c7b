//! The curated crisis-resource directory and the location reader.
//!
//! Location comes only from the user's own words (a deterministic
//! gazetteer), never from IP or a third party's location. Every number
//! shown to a user comes verbatim from `data/crisis_resources.toml`.

use std::collections::HashMap;
use std::sync::LazyLock;

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
use opencouch_core::{Message, ResourceLookupStatus};
use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::error::SafetyError;
use crate::language::Lang;
use crate::normalize::normalize;

const RESOURCES_TOML: &str = include_str!("../data/crisis_resources.toml");
const GAZETTEER_TOML: &str = include_str!("../data/gazetteer.toml");

/// At most this many resources are returned by a lookup.
pub const MAX_RESOURCES: usize = 5;
/// How many earlier user turns are searched for a stated location.
pub const LOCATION_USER_TURNS: usize = 3;

/// What kind of service a resource is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ResourceKind {
    /// A phone line (may also take texts or chats).
    CrisisLine,
    /// A text-only service.
    TextLine,
    /// An international directory of helplines.
    Directory,
}

/// One verified entry of the directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CrisisResource {
    /// Stable id, e.g. `us-988`.
    pub id: String,
    /// ISO 3166 alpha-2 code, or `INTL` for international directories.
    pub country: String,
    /// Service name as the service writes it.
    pub name: String,
    /// Kind of service.
    pub kind: ResourceKind,
    /// Phone number, exactly as published.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phone: Option<String>,
    /// Number that accepts text messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Keyword to text, if the service asks for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text_keyword: Option<String>,
    /// Web chat address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat_url: Option<String>,
    /// The service's web site.
    pub url: String,
    /// Language codes served.
    pub languages: Vec<String>,
    /// Opening hours.
    pub hours: String,
    /// Public page the entry was taken from.
    pub source_url: String,
    /// Date the entry was recorded (YYYY-MM-DD).
    pub recorded: String,
    /// How the entry was recorded and verified.
    pub source_note: String,
}

/// A country of the directory with its general emergency number.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Country {
    /// ISO 3166 alpha-2 code.
    pub code: String,
    /// English name.
    pub name: String,
    /// World region.
    pub region: String,
    /// General emergency number.
    pub emergency: String,
    /// Other emergency numbers worth knowing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub emergency_note: Option<String>,
}

/// The whole directory as loaded.
#[derive(Debug, Clone, Deserialize)]
pub struct Directory {
    /// Date the file was recorded.
    pub recorded: String,
    /// Countries with an emergency number.
    pub country: Vec<Country>,
    /// Crisis lines and international directories.
    pub resource: Vec<CrisisResource>,
}

#[derive(Deserialize)]
struct RawGazetteer {
    places: HashMap<String, Vec<String>>,
    #[serde(default)]
    names: HashMap<String, String>,
}

struct Gazetteer {
    matcher: AhoCorasick,
    codes: Vec<String>,
    names: HashMap<String, String>,
}

/// Loads the embedded directory.
pub fn load_directory() -> Result<Directory, SafetyError> {
    toml::from_str(RESOURCES_TOML).map_err(|e| SafetyError::Data {
        file: "crisis_resources.toml",
        detail: e.to_string(),
    })
}

fn load_gazetteer() -> Result<Gazetteer, SafetyError> {
    let raw: RawGazetteer = toml::from_str(GAZETTEER_TOML).map_err(|e| SafetyError::Data {
        file: "gazetteer.toml",
        detail: e.to_string(),
    })?;
    let mut patterns = Vec::new();
    let mut codes = Vec::new();
    let mut keys: Vec<_> = raw.places.keys().cloned().collect();
    keys.sort();
    for code in keys {
        for place in &raw.places[&code] {
            patterns.push(format!(" {} ", normalize(place)));
            codes.push(code.clone());
        }
    }
    let matcher = AhoCorasickBuilder::new()
        .match_kind(MatchKind::LeftmostLongest)
        .build(&patterns)
        .map_err(|e| SafetyError::Data {
            file: "gazetteer.toml",
            detail: e.to_string(),
        })?;
    Ok(Gazetteer {
        matcher,
        codes,
        names: raw.names,
    })
}

static DIRECTORY: LazyLock<Result<Directory, SafetyError>> = LazyLock::new(load_directory);
static GAZETTEER: LazyLock<Result<Gazetteer, SafetyError>> = LazyLock::new(load_gazetteer);
static REFUSAL: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(
        r"(?x)
        \b(?:rather\ not|prefer\ not\ to|don't\ want\ to|won't|not\ going\ to|can't|not\ comfortable)\ 
          (?:say|tell|share|give|disclose|saying|telling|sharing)
          (?:\ you|\ that)?(?:\ where|\ my\ location|\ my\ country|\ the\ location)
        | \bnone\ of\ your\ business\b
        | \bnot\ telling\ (?:you\ )?where\b
        | \b(?:i'd|i\ would)\ rather\ not\ say\b
        | \bkeep\ my\ location\ private\b",
    )
    .ok()
});

/// The directory, or the load error (tested never to occur).
pub fn directory() -> Result<&'static Directory, &'static SafetyError> {
    DIRECTORY.as_ref()
}

/// A location read from the user's own words.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LocationResult {
    /// `found`, `no_location` or `location_refused`.
    pub status: ResourceLookupStatus,
    /// ISO 3166 alpha-2 code when found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub country_code: Option<String>,
}

impl LocationResult {
    /// No location was given.
    pub fn none() -> Self {
        LocationResult {
            status: ResourceLookupStatus::NoLocation,
            country_code: None,
        }
    }

    /// A known country code.
    pub fn country(code: &str) -> Self {
        LocationResult {
            status: ResourceLookupStatus::Found,
            country_code: Some(code.to_ascii_uppercase()),
        }
    }
}

/// First-person cues that must come right before a place name.
const LOCATION_CUES: &[&str] = &[
    "i'm in",
    "i live in",
    "i'm from",
    "living in",
    "based in",
    "here in",
    "i'm currently in",
    "currently in",
    "we live in",
    "located in",
    "i'm staying in",
    "staying in",
    "i'm at",
    "i'm",
    "i'm in the",
    "i live in the",
    "i'm from the",
    "here in the",
    "live in",
    "from",
    "in",
    "it's",
    "country is",
    "i'm located in",
];

/// Words that make a place somebody else's.
const THIRD_PARTY: &[&str] = &[
    " my friend",
    " my sister",
    " my brother",
    " my mom",
    " my mum",
    " my dad",
    " my mother",
    " my father",
    " my son",
    " my daughter",
    " my partner",
    " my cousin",
    " he ",
    " she ",
    " they ",
    " his ",
    " her ",
    " someone",
    " my boyfriend",
    " my girlfriend",
    " my wife",
    " my husband",
    " went to",
    " trip to",
    " visit",
    " vacation",
    " holiday",
];

fn location_in(text: &str) -> Option<String> {
    let Ok(g) = GAZETTEER.as_ref() else {
        return None;
    };
    let norm = normalize(text);
    let clean: String = norm
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || c == '\'' {
                c
            } else {
                ' '
            }
        })
        .collect();
    let padded = format!(
        " {} ",
        clean.split_whitespace().collect::<Vec<_>>().join(" ")
    );
    let words = padded.split_whitespace().count();
    for m in g.matcher.find_iter(&padded) {
        let before = padded[..m.start()].trim_end();
        let before_window: String = before
            .chars()
            .rev()
            .take(30)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        let before_window = format!(" {before_window} ");
        if THIRD_PARTY.iter().any(|t| before_window.contains(t)) {
            continue;
        }
        let cue = LOCATION_CUES.iter().any(|c| {
            before.ends_with(c) && {
                let rest = &before[..before.len() - c.len()];
                rest.is_empty() || rest.ends_with(' ')
            }
        });
        if cue || words <= 4 {
            return Some(g.codes[m.pattern().as_usize()].clone());
        }
    }
    None
}

/// Reads the user's own stated location from the current message, then
/// from the last [`LOCATION_USER_TURNS`] user turns (newest first). A
/// refusal ("I'd rather not say where I am") in the current message wins.
pub fn extract_location(history: &[Message], message: &str) -> LocationResult {
    let norm = normalize(message);
    if REFUSAL.as_ref().is_some_and(|r| r.is_match(&norm)) {
        return LocationResult {
            status: ResourceLookupStatus::LocationRefused,
            country_code: None,
        };
    }
    if let Some(code) = location_in(message) {
        return LocationResult::country(&code);
    }
    for m in history
        .iter()
        .rev()
        .filter(|m| m.is_user())
        .take(LOCATION_USER_TURNS)
    {
        let n = normalize(&m.content);
        if REFUSAL.as_ref().is_some_and(|r| r.is_match(&n)) {
            return LocationResult {
                status: ResourceLookupStatus::LocationRefused,
                country_code: None,
            };
        }
        if let Some(code) = location_in(&m.content) {
            return LocationResult::country(&code);
        }
    }
    LocationResult::none()
}

/// The result of a resource lookup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ResourceLookup {
    /// Outcome.
    pub status: ResourceLookupStatus,
    /// Country the resources are for, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub country_code: Option<String>,
    /// Country name, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub country_name: Option<String>,
    /// At most [`MAX_RESOURCES`] verified entries.
    pub resources: Vec<CrisisResource>,
    /// What to do in immediate danger (uses only directory numbers).
    pub emergency_advice: String,
    /// Set when no country was known and the lines were chosen for the
    /// countries where the person's language is spoken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by_language: Option<Lang>,
}

/// The international directory entries (the fallback for any location).
pub fn international_directory() -> Vec<CrisisResource> {
    directory()
        .map(|d| {
            d.resource
                .iter()
                .filter(|r| r.country == "INTL")
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

const GENERIC_EMERGENCY: &str = "If you are in immediate danger, call your local emergency number now or go to the nearest emergency department.";

/// Looks up verified resources for a location. Unknown or missing
/// location: generic emergency advice plus the international directory.
pub fn lookup(location: &LocationResult) -> ResourceLookup {
    let Ok(dir) = directory() else {
        return ResourceLookup {
            status: ResourceLookupStatus::LookupError,
            country_code: None,
            country_name: None,
            resources: Vec::new(),
            emergency_advice: GENERIC_EMERGENCY.into(),
            by_language: None,
        };
    };
    let intl: Vec<CrisisResource> = dir
        .resource
        .iter()
        .filter(|r| r.country == "INTL")
        .cloned()
        .collect();
    let fallback =
        |status: ResourceLookupStatus, code: Option<String>, name: Option<String>| ResourceLookup {
            status,
            country_code: code,
            country_name: name,
            resources: intl.iter().take(MAX_RESOURCES).cloned().collect(),
            emergency_advice: GENERIC_EMERGENCY.into(),
            by_language: None,
        };
    match (location.status, &location.country_code) {
        (ResourceLookupStatus::Found, Some(code)) => {
            let code = code.to_ascii_uppercase();
            let Some(country) = dir.country.iter().find(|c| c.code == code) else {
                let name = GAZETTEER
                    .as_ref()
                    .ok()
                    .and_then(|g| g.names.get(&code).cloned());
                return fallback(ResourceLookupStatus::NoVerifiedResults, Some(code), name);
            };
            let mut resources: Vec<CrisisResource> = dir
                .resource
                .iter()
                .filter(|r| r.country == code)
                .take(MAX_RESOURCES - 1)
                .cloned()
                .collect();
            if resources.is_empty() {
                return fallback(
                    ResourceLookupStatus::NoVerifiedResults,
                    Some(code),
                    Some(country.name.clone()),
                );
            }
            if let Some(first) = intl.first() {
                resources.push(first.clone());
            }
            let mut advice = format!(
                "If you are in immediate danger, call {} now (the emergency number in {}) or go to the nearest emergency department.",
                country.emergency, country.name
            );
            if let Some(note) = &country.emergency_note {
                advice.push_str(&format!(" Other emergency numbers: {note}."));
            }
            ResourceLookup {
                status: ResourceLookupStatus::Found,
                country_code: Some(code),
                country_name: Some(country.name.clone()),
                resources,
                emergency_advice: advice,
                by_language: None,
            }
        }
        (ResourceLookupStatus::LocationRefused, _) => {
            fallback(ResourceLookupStatus::LocationRefused, None, None)
        }
        (ResourceLookupStatus::NotAttempted, _) => {
            fallback(ResourceLookupStatus::NotAttempted, None, None)
        }
        _ => fallback(ResourceLookupStatus::NoLocation, None, None),
    }
}

/// Like [`lookup`], but when no country is known (no location given, or not
/// attempted) and the person writes in another language than English, the
/// lines are those of the countries where that language is spoken (verified
/// entries that serve the language), followed by the international
/// directory. A known country, a refusal or English leave [`lookup`]'s answer
/// unchanged. The status stays `no_location`, so the reply still asks which
/// country the person is in.
pub fn lookup_with_language(location: &LocationResult, lang: Lang) -> ResourceLookup {
    let base = lookup(location);
    let unknown = matches!(
        base.status,
        ResourceLookupStatus::NoLocation | ResourceLookupStatus::NotAttempted
    );
    if !unknown || lang == Lang::En {
        return base;
    }
    let Ok(dir) = directory() else {
        return base;
    };
    let mut resources: Vec<CrisisResource> = Vec::new();
    for code in lang.countries() {
        if let Some(r) = dir
            .resource
            .iter()
            .find(|r| r.country == *code && r.languages.iter().any(|l| l == lang.code()))
        {
            resources.push(r.clone());
        }
        if resources.len() >= MAX_RESOURCES - 1 {
            break;
        }
    }
    if resources.is_empty() {
        return base;
    }
    resources.extend(base.resources.into_iter().take(1));
    ResourceLookup {
        resources,
        by_language: Some(lang),
        ..base
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn language_lookup_offers_that_languages_countries_when_no_country_is_known() {
        for lang in [Lang::Es, Lang::Fr, Lang::De, Lang::Pt, Lang::It] {
            let l = lookup_with_language(&LocationResult::none(), lang);
            assert_eq!(l.status, ResourceLookupStatus::NoLocation, "{lang:?}");
            assert_eq!(l.by_language, Some(lang));
            let national: Vec<_> = l
                .resources
                .iter()
                .filter(|r| r.kind != ResourceKind::Directory)
                .collect();
            assert!(!national.is_empty(), "{lang:?} has national lines");
            for r in &national {
                assert!(lang.countries().contains(&r.country), "{lang:?} {}", r.id);
                assert!(
                    r.languages.iter().any(|c| c == lang.code()),
                    "{lang:?} {}",
                    r.id
                );
            }
            assert!(
                l.resources
                    .iter()
                    .any(|r| r.kind == ResourceKind::Directory)
            );
            assert!(l.resources.len() <= MAX_RESOURCES);
        }
        // A known country wins; English changes nothing.
        let gb = lookup_with_language(&LocationResult::country("GB"), Lang::Es);
        assert_eq!(gb.by_language, None);
        assert_eq!(gb.country_code.as_deref(), Some("GB"));
        assert_eq!(
            lookup_with_language(&LocationResult::none(), Lang::En),
            lookup(&LocationResult::none())
        );
    }

    fn plausible_number(n: &str) -> bool {
        let digits = n.chars().filter(|c| c.is_ascii_digit()).count();
        n.chars()
            .all(|c| c.is_ascii_digit() || matches!(c, ' ' | '+' | '-'))
            && (3..=15).contains(&digits)
            && n.len() <= 20
            && n.starts_with(|c: char| c.is_ascii_digit() || c == '+')
    }

    #[test]
    fn every_entry_is_sourced_dated_and_plausible() {
        let dir = load_directory().unwrap();
        let date = Regex::new(r"^\d{4}-\d{2}-\d{2}$").unwrap();
        assert!(date.is_match(&dir.recorded));
        let mut ids = std::collections::HashSet::new();
        for r in &dir.resource {
            assert!(ids.insert(r.id.clone()), "duplicate id {}", r.id);
            assert!(r.source_url.starts_with("https://"), "{} source", r.id);
            assert!(r.url.starts_with("https://"), "{} url", r.id);
            assert!(date.is_match(&r.recorded), "{} date", r.id);
            assert!(r.source_note.contains("recorded"), "{} note", r.id);
            assert!(
                !r.name.trim().is_empty() && !r.hours.trim().is_empty() && !r.languages.is_empty()
            );
            for n in [&r.phone, &r.text].into_iter().flatten() {
                assert!(plausible_number(n), "{} number {n}", r.id);
            }
            match r.kind {
                ResourceKind::Directory => assert_eq!(r.country, "INTL"),
                ResourceKind::CrisisLine => assert!(r.phone.is_some(), "{} needs a phone", r.id),
                ResourceKind::TextLine => assert!(r.text.is_some(), "{} needs a text number", r.id),
            }
            if r.country != "INTL" {
                assert!(
                    dir.country.iter().any(|c| c.code == r.country),
                    "{} country",
                    r.id
                );
            }
        }
        for c in &dir.country {
            assert!(plausible_number(&c.emergency), "{} emergency", c.code);
            assert!(
                dir.resource.iter().any(|r| r.country == c.code),
                "{} has no line",
                c.code
            );
        }
        assert!(
            dir.country.len() >= 25,
            "only {} countries",
            dir.country.len()
        );
        for code in [
            "US", "CA", "GB", "IE", "AU", "NZ", "ZA", "DE", "FR", "IT", "ES", "NL", "PL", "IN",
            "JP", "BR", "MX",
        ] {
            assert!(dir.country.iter().any(|c| c.code == code), "{code} missing");
        }
        assert!(!international_directory().is_empty());
    }

    #[test]
    fn location_table() {
        let cases: &[(&str, Option<&str>, ResourceLookupStatus)] = &[
            ("I'm in Germany", Some("DE"), ResourceLookupStatus::Found),
            (
                "i live in toronto and i can't cope",
                Some("CA"),
                ResourceLookupStatus::Found,
            ),
            ("UK", Some("GB"), ResourceLookupStatus::Found),
            ("i'm australian", Some("AU"), ResourceLookupStatus::Found),
            (
                "my sister lives in france",
                None,
                ResourceLookupStatus::NoLocation,
            ),
            ("can you help us", None, ResourceLookupStatus::NoLocation),
            (
                "I'd rather not say where I am",
                None,
                ResourceLookupStatus::LocationRefused,
            ),
            ("i feel awful", None, ResourceLookupStatus::NoLocation),
        ];
        for (msg, code, status) in cases {
            let r = extract_location(&[], msg);
            assert_eq!(r.status, *status, "{msg}");
            assert_eq!(r.country_code.as_deref(), *code, "{msg}");
        }
        let history = vec![
            Message::user("i'm from new zealand"),
            Message::assistant("thanks"),
        ];
        assert_eq!(
            extract_location(&history, "it's bad tonight")
                .country_code
                .as_deref(),
            Some("NZ")
        );
    }

    #[test]
    fn lookup_statuses() {
        let us = lookup(&LocationResult::country("us"));
        assert_eq!(us.status, ResourceLookupStatus::Found);
        assert!(us.resources.len() <= MAX_RESOURCES);
        assert!(
            us.resources
                .iter()
                .any(|r| r.phone.as_deref() == Some("988"))
        );
        assert!(us.emergency_advice.contains("911"));
        let none = lookup(&LocationResult::none());
        assert_eq!(none.status, ResourceLookupStatus::NoLocation);
        assert!(
            none.resources
                .iter()
                .all(|r| r.kind == ResourceKind::Directory)
        );
        let cn = lookup(&LocationResult::country("CN"));
        assert_eq!(cn.status, ResourceLookupStatus::NoVerifiedResults);
        assert_eq!(cn.country_name.as_deref(), Some("China"));
        let refused = lookup(&LocationResult {
            status: ResourceLookupStatus::LocationRefused,
            country_code: None,
        });
        assert_eq!(refused.status, ResourceLookupStatus::LocationRefused);
    }
}
