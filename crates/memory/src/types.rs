//! The three memory layers: semantic facts, episodic session arcs and the
//! procedural profile, plus the owner and kind that scope every record.
//!
//! Constructors validate the documented limits and return a typed
//! [`TypeError`]; errors never echo the offending text.

use chrono::{DateTime, Utc};
use opencouch_core::{Approach, string_enum};
use serde::{Deserialize, Serialize};

/// Maximum length (in characters) of an evidence quote or a procedural rule.
pub const MAX_QUOTE_CHARS: usize = 280;
/// Maximum length (in characters) of a session-arc summary.
pub const MAX_SUMMARY_CHARS: usize = 600;
/// Maximum length (in characters) of each end of a mood arc.
pub const MAX_MOOD_CHARS: usize = 40;
/// Maximum number of primary themes of a session arc.
pub const MAX_THEMES: usize = 3;
/// The write-policy version stamped on records written by this crate.
pub const POLICY_VERSION: &str = "oc-memory-1";

/// A value that breaks one of the documented limits of a memory type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TypeError {
    /// A text field is empty (after trimming) or longer than allowed.
    #[error("{field} must be 1..={max} characters")]
    TextLength {
        /// Field name.
        field: &'static str,
        /// Maximum characters allowed.
        max: usize,
    },
    /// An optional text field is longer than allowed.
    #[error("{field} must be at most {max} characters")]
    TooLong {
        /// Field name.
        field: &'static str,
        /// Maximum characters allowed.
        max: usize,
    },
    /// A list has too many entries.
    #[error("{field} holds at most {max} entries")]
    TooMany {
        /// Field name.
        field: &'static str,
        /// Maximum entries allowed.
        max: usize,
    },
    /// A number is outside its range.
    #[error("{field} is out of range")]
    OutOfRange {
        /// Field name.
        field: &'static str,
    },
    /// A procedural rule is not written in the second person.
    #[error("a procedural rule must be written in the second person (\"You …\")")]
    NotSecondPerson,
    /// Neither a user id nor a thread id was given.
    #[error("memory owner missing: neither a user id nor a thread id")]
    OwnerMissing,
}

/// The three memory layers; with the owner id it forms a namespace. The
/// store's kind: one type names a layer everywhere.
pub use opencouch_store::MemoryKind;

string_enum! {
    /// What a semantic fact is about.
    pub enum FactCategory: "fact_category" {
        Loss = "loss",
        Preference = "preference",
        CopingStrategy = "coping_strategy",
        Relationship = "relationship",
        Trigger = "trigger",
        Goal = "goal",
        Context = "context",
    }
}

string_enum! {
    /// The type of one end of a fact triple.
    pub enum EntityType: "entity_type" {
        User = "User",
        Person = "Person",
        Concern = "Concern",
        Event = "Event",
        CopingStrategy = "CopingStrategy",
        Goal = "Goal",
        Session = "Session",
        Turn = "Turn",
    }
}

string_enum! {
    /// The relation of a fact triple.
    pub enum Predicate: "predicate" {
        Knows = "KNOWS",
        WorriesAbout = "WORRIES_ABOUT",
        Experienced = "EXPERIENCED",
        Uses = "USES",
        Wants = "WANTS",
        ParticipatedIn = "PARTICIPATED_IN",
        MentionedIn = "MENTIONED_IN",
    }
}

string_enum! {
    /// When a record was written.
    pub enum WriteTiming: "write_timing" { Immediate = "immediate", SessionEnd = "session_end", Promotion = "promotion" }
}

string_enum! {
    /// Where a procedural rule came from.
    pub enum RuleSource: "rule_source" { ExplicitUser = "explicit_user", Consolidation = "consolidation", Manual = "manual" }
}

/// The owner of a memory namespace: the user id when known, else the
/// thread (session) id.
///
/// # Errors
/// [`TypeError::OwnerMissing`] when both are absent or blank.
pub fn owner_id(user_id: Option<&str>, thread_id: Option<&str>) -> Result<String, TypeError> {
    [user_id, thread_id]
        .into_iter()
        .flatten()
        .map(str::trim)
        .find(|s| !s.is_empty())
        .map(str::to_owned)
        .ok_or(TypeError::OwnerMissing)
}

fn check_text(field: &'static str, text: &str, max: usize) -> Result<String, TypeError> {
    let t = text.trim();
    let n = t.chars().count();
    if n == 0 || n > max {
        return Err(TypeError::TextLength { field, max });
    }
    Ok(t.to_owned())
}

fn check_unit(field: &'static str, v: f32) -> Result<f32, TypeError> {
    if v.is_finite() && (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(TypeError::OutOfRange { field })
    }
}

/// One end of a fact triple.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
pub struct EntityRef {
    /// The entity type.
    #[serde(rename = "type")]
    pub entity_type: EntityType,
    /// A human-readable identifier (a name, a concern, "user").
    pub identifier: String,
}

impl EntityRef {
    /// A new entity reference; the identifier is trimmed and must not be empty.
    ///
    /// # Errors
    /// [`TypeError::TextLength`] for a blank or over-long identifier.
    pub fn new(entity_type: EntityType, identifier: &str) -> Result<Self, TypeError> {
        Ok(EntityRef {
            entity_type,
            identifier: check_text("identifier", identifier, MAX_QUOTE_CHARS)?,
        })
    }

    /// The user themself.
    pub fn user() -> Self {
        EntityRef {
            entity_type: EntityType::User,
            identifier: "user".to_owned(),
        }
    }

    /// The identifier lowercased with whitespace collapsed, for slot and
    /// duplicate comparisons.
    pub fn normalized_identifier(&self) -> String {
        normalize_space_lower(&self.identifier)
    }
}

pub(crate) fn normalize_space_lower(s: &str) -> String {
    s.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

/// The fields needed to create a [`SemanticFact`].
#[derive(Debug, Clone, PartialEq)]
pub struct NewFact {
    /// Category.
    pub category: FactCategory,
    /// Subject of the triple.
    pub subject: EntityRef,
    /// Predicate of the triple.
    pub predicate: Predicate,
    /// Object of the triple.
    pub object: EntityRef,
    /// The user's own words supporting the fact (1–280 characters).
    pub evidence_quote: String,
    /// Confidence in [0, 1].
    pub confidence: f32,
    /// Session the evidence came from.
    pub source_session_id: Option<String>,
    /// Turn index the evidence came from.
    pub source_turn_index: Option<u64>,
    /// How the fact is being written.
    pub write_timing: WriteTiming,
    /// Why the policy allowed the write (a short code, no user text).
    pub write_reason: String,
}

/// A semantic fact: a subject–predicate–object triple with its evidence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SemanticFact {
    /// Stable id.
    pub id: String,
    /// Category.
    pub category: FactCategory,
    /// Subject.
    pub subject: EntityRef,
    /// Predicate.
    pub predicate: Predicate,
    /// Object.
    pub object: EntityRef,
    /// The user's words (1–280 characters).
    pub evidence_quote: String,
    /// Confidence in [0, 1].
    pub confidence: f32,
    /// Source session.
    #[serde(default)]
    pub source_session_id: Option<String>,
    /// Source turn index.
    #[serde(default)]
    pub source_turn_index: Option<u64>,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Last time retrieval used or a duplicate confirmed the fact.
    #[serde(default)]
    pub last_referenced_at: Option<DateTime<Utc>>,
    /// Set when the fact was retired.
    #[serde(default)]
    pub dormant_at: Option<DateTime<Utc>>,
    /// Id of the fact that replaced this one.
    #[serde(default)]
    pub superseded_by: Option<String>,
    /// Whether the user can see (and so rely on) the fact.
    pub user_visible: bool,
    /// How it was written.
    pub write_timing: WriteTiming,
    /// Why it was written (a short code).
    pub write_reason: String,
    /// Write-policy version.
    pub policy_version: String,
}

impl SemanticFact {
    /// Validates and builds a visible fact with a fresh id.
    ///
    /// # Errors
    /// A [`TypeError`] for an evidence quote outside 1–280 characters or a
    /// confidence outside [0, 1].
    pub fn new(f: NewFact, now: DateTime<Utc>) -> Result<Self, TypeError> {
        Ok(SemanticFact {
            id: uuid::Uuid::new_v4().to_string(),
            category: f.category,
            subject: f.subject,
            predicate: f.predicate,
            object: f.object,
            evidence_quote: check_text("evidence_quote", &f.evidence_quote, MAX_QUOTE_CHARS)?,
            confidence: check_unit("confidence", f.confidence)?,
            source_session_id: f.source_session_id,
            source_turn_index: f.source_turn_index,
            created_at: now,
            last_referenced_at: None,
            dormant_at: None,
            superseded_by: None,
            user_visible: true,
            write_timing: f.write_timing,
            write_reason: f.write_reason,
            policy_version: POLICY_VERSION.to_owned(),
        })
    }

    /// Visible, not dormant and not superseded.
    pub fn is_active(&self) -> bool {
        self.user_visible && self.dormant_at.is_none() && self.superseded_by.is_none()
    }

    /// A short human-readable line (used when listing memory to its owner).
    pub fn preview(&self) -> String {
        self.evidence_quote.clone()
    }
}

/// How the person's mood moved through a session.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MoodArc {
    /// Mood at the start (≤40 characters).
    pub opened: String,
    /// Mood at the end (≤40 characters).
    pub closed: String,
}

/// Approach-specific context of a session, one shape per modality.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "modality", rename_all = "snake_case")]
pub enum ApproachContext {
    /// Cognitive behavioural therapy.
    Cbt {
        /// The thought that was examined.
        #[serde(default)]
        thought_examined: Option<String>,
        /// A small action step agreed.
        #[serde(default)]
        action_step: Option<String>,
        /// The CBT tool used.
        #[serde(default)]
        tool_used: Option<String>,
    },
    /// Motivational interviewing.
    Mi {
        /// Stage of readiness to change.
        #[serde(default)]
        readiness_stage: Option<String>,
        /// Themes of change talk.
        #[serde(default)]
        change_talk_themes: Vec<String>,
        /// Themes of sustain talk.
        #[serde(default)]
        sustain_talk_themes: Vec<String>,
    },
    /// Acceptance and commitment therapy.
    Act {
        /// Values named.
        #[serde(default)]
        values_identified: Vec<String>,
        /// Fusion patterns noticed.
        #[serde(default)]
        fusion_patterns: Vec<String>,
        /// Committed action.
        #[serde(default)]
        committed_action: Option<String>,
    },
    /// Grief support.
    Grief {
        /// Who was lost.
        #[serde(default)]
        person_lost: Option<String>,
        /// Relationship to them.
        #[serde(default)]
        relationship: Option<String>,
        /// Time since the loss.
        #[serde(default)]
        time_since_loss: Option<String>,
    },
    /// Interpersonal therapy.
    Ipt {
        /// Problem area.
        #[serde(default)]
        problem_area: Option<String>,
        /// Key relationship.
        #[serde(default)]
        key_relationship: Option<String>,
        /// Planned communication step.
        #[serde(default)]
        communication_step_planned: Option<String>,
    },
    /// Dialectical behaviour therapy skills.
    Dbt {
        /// Skills used.
        #[serde(default)]
        skills_used: Vec<String>,
        /// Primary skills domain.
        #[serde(default)]
        primary_domain: Option<String>,
    },
    /// Psychological first aid.
    Pfa {
        /// Type of crisis.
        #[serde(default)]
        crisis_type: Option<String>,
        /// Whether the person was connected with support.
        #[serde(default)]
        support_connected: Option<bool>,
    },
}

/// The fields needed to create a [`SessionArc`].
#[derive(Debug, Clone, PartialEq)]
pub struct NewSessionArc {
    /// Session id.
    pub session_id: String,
    /// Session start.
    pub started_at: DateTime<Utc>,
    /// Session end.
    pub ended_at: DateTime<Utc>,
    /// Number of turns.
    pub turn_count: u64,
    /// Up to 3 themes.
    pub primary_themes: Vec<String>,
    /// Summary, 1–600 characters.
    pub summary: String,
    /// Mood at start and end.
    pub mood_arc: MoodArc,
    /// Threads left open.
    pub open_loops: Vec<String>,
    /// Threads resolved.
    pub resolved_threads: Vec<String>,
    /// Dominant approach.
    pub approach_used: Option<Approach>,
    /// Approach-specific context.
    pub approach_context: Option<ApproachContext>,
    /// Highest crisis level seen in the session (0–3).
    pub crisis_level_max: u8,
}

/// An episodic record: what one session was about, written at session end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SessionArc {
    /// Stable id.
    pub id: String,
    /// Session id.
    pub session_id: String,
    /// Session start.
    pub started_at: DateTime<Utc>,
    /// Session end.
    pub ended_at: DateTime<Utc>,
    /// Duration in whole seconds.
    pub duration_seconds: i64,
    /// Number of turns.
    pub turn_count: u64,
    /// Up to 3 themes.
    pub primary_themes: Vec<String>,
    /// Summary (1–600 characters).
    pub summary: String,
    /// Mood arc.
    pub mood_arc: MoodArc,
    /// Open loops.
    #[serde(default)]
    pub open_loops: Vec<String>,
    /// Resolved threads.
    #[serde(default)]
    pub resolved_threads: Vec<String>,
    /// Dominant approach.
    #[serde(default)]
    pub approach_used: Option<Approach>,
    /// Approach-specific context.
    #[serde(default)]
    pub approach_context: Option<ApproachContext>,
    /// Highest crisis level of the session (0–3).
    pub crisis_level_max: u8,
    /// Guided exercises completed in the session (catalog ids, in order).
    #[serde(default)]
    pub exercises_completed: Vec<String>,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Last time retrieval used the arc.
    #[serde(default)]
    pub last_referenced_at: Option<DateTime<Utc>>,
    /// Visible to the user.
    pub user_visible: bool,
    /// Always `session_end`.
    pub write_timing: WriteTiming,
    /// Write-policy version.
    pub policy_version: String,
}

impl SessionArc {
    /// Validates and builds an arc with a fresh id.
    ///
    /// # Errors
    /// A [`TypeError`] for more than 3 themes, a summary outside 1–600
    /// characters, a mood longer than 40 characters, a crisis level above 3
    /// or an end before the start.
    pub fn new(a: NewSessionArc, now: DateTime<Utc>) -> Result<Self, TypeError> {
        if a.primary_themes.len() > MAX_THEMES {
            return Err(TypeError::TooMany {
                field: "primary_themes",
                max: MAX_THEMES,
            });
        }
        for (field, mood) in [
            ("mood_arc.opened", &a.mood_arc.opened),
            ("mood_arc.closed", &a.mood_arc.closed),
        ] {
            if mood.chars().count() > MAX_MOOD_CHARS {
                return Err(TypeError::TooLong {
                    field,
                    max: MAX_MOOD_CHARS,
                });
            }
        }
        if a.crisis_level_max > 3 {
            return Err(TypeError::OutOfRange {
                field: "crisis_level_max",
            });
        }
        if a.ended_at < a.started_at {
            return Err(TypeError::OutOfRange { field: "ended_at" });
        }
        Ok(SessionArc {
            id: uuid::Uuid::new_v4().to_string(),
            duration_seconds: (a.ended_at - a.started_at).num_seconds(),
            summary: check_text("summary", &a.summary, MAX_SUMMARY_CHARS)?,
            session_id: a.session_id,
            started_at: a.started_at,
            ended_at: a.ended_at,
            turn_count: a.turn_count,
            primary_themes: a.primary_themes,
            mood_arc: a.mood_arc,
            open_loops: a.open_loops,
            resolved_threads: a.resolved_threads,
            approach_used: a.approach_used,
            approach_context: a.approach_context,
            crisis_level_max: a.crisis_level_max,
            exercises_completed: Vec::new(),
            created_at: now,
            last_referenced_at: None,
            user_visible: true,
            write_timing: WriteTiming::SessionEnd,
            policy_version: POLICY_VERSION.to_owned(),
        })
    }
}

/// One style rule of the procedural profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProceduralRule {
    /// Stable id.
    pub id: String,
    /// The rule, second person, ≤280 characters ("You prefer …").
    pub rule: String,
    /// Up to 3 supporting quotes.
    #[serde(default)]
    pub evidence: Vec<String>,
    /// Confidence in [0, 1].
    pub confidence: f32,
    /// When it was added.
    pub added_at: DateTime<Utc>,
    /// Where it came from.
    pub source: RuleSource,
    /// Set when retired.
    #[serde(default)]
    pub dormant_at: Option<DateTime<Utc>>,
    /// Id of the rule that replaced this one.
    #[serde(default)]
    pub superseded_by: Option<String>,
    /// How it was written.
    pub write_timing: WriteTiming,
    /// Why it was written (a short code).
    pub write_reason: String,
    /// Write-policy version.
    pub policy_version: String,
}

impl ProceduralRule {
    /// Validates and builds a rule with a fresh id.
    ///
    /// # Errors
    /// [`TypeError::TextLength`] outside 1–280 characters,
    /// [`TypeError::NotSecondPerson`] unless it starts with "You".
    pub fn new(
        rule: &str,
        evidence: Vec<String>,
        source: RuleSource,
        write_timing: WriteTiming,
        write_reason: &str,
        now: DateTime<Utc>,
    ) -> Result<Self, TypeError> {
        let rule = check_text("rule", rule, MAX_QUOTE_CHARS)?;
        let lower = rule.to_lowercase();
        if !(lower.starts_with("you ") || lower.starts_with("you'") || lower.starts_with("your ")) {
            return Err(TypeError::NotSecondPerson);
        }
        Ok(ProceduralRule {
            id: uuid::Uuid::new_v4().to_string(),
            rule,
            evidence: evidence.into_iter().take(3).collect(),
            confidence: 1.0,
            added_at: now,
            source,
            dormant_at: None,
            superseded_by: None,
            write_timing,
            write_reason: write_reason.to_owned(),
            policy_version: POLICY_VERSION.to_owned(),
        })
    }

    /// Not dormant and not superseded.
    pub fn is_active(&self) -> bool {
        self.dormant_at.is_none() && self.superseded_by.is_none()
    }
}

/// The single procedural document of an owner.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProceduralProfile {
    /// Whether past sessions may be brought up unprompted (default off).
    #[serde(default)]
    pub proactive_recall_enabled: bool,
    /// Current rules.
    #[serde(default)]
    pub rules: Vec<ProceduralRule>,
    /// Retired rules.
    #[serde(default)]
    pub archived_rules: Vec<ProceduralRule>,
    /// Last consolidation time.
    #[serde(default)]
    pub last_consolidated_at: Option<DateTime<Utc>>,
}

impl ProceduralProfile {
    /// The active rules, in order.
    pub fn active_rules(&self) -> impl Iterator<Item = &ProceduralRule> {
        self.rules.iter().filter(|r| r.is_active())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fact(quote: &str, confidence: f32) -> Result<SemanticFact, TypeError> {
        SemanticFact::new(
            NewFact {
                category: FactCategory::Relationship,
                subject: EntityRef::user(),
                predicate: Predicate::Knows,
                object: EntityRef::new(EntityType::Person, "Sarah")?,
                evidence_quote: quote.to_owned(),
                confidence,
                source_session_id: None,
                source_turn_index: Some(1),
                write_timing: WriteTiming::Promotion,
                write_reason: "test".into(),
            },
            Utc::now(),
        )
    }

    #[test]
    fn fact_limits() {
        let long = "x".repeat(281);
        let cases: &[(&str, f32, bool)] = &[
            ("my sister is Sarah", 0.9, true),
            ("", 0.9, false),
            ("   ", 0.5, false),
            (&long, 0.5, false),
            ("ok", 1.5, false),
        ];
        for (q, c, ok) in cases {
            assert_eq!(fact(q, *c).is_ok(), *ok, "quote len {} conf {c}", q.len());
        }
        assert!(fact(&"x".repeat(280), 0.0).is_ok());
    }

    #[test]
    fn fact_activity() {
        let mut f = fact("my sister is Sarah", 0.9).unwrap();
        assert!(f.is_active());
        f.superseded_by = Some("x".into());
        assert!(!f.is_active());
        f.superseded_by = None;
        f.dormant_at = Some(Utc::now());
        assert!(!f.is_active());
        f.dormant_at = None;
        f.user_visible = false;
        assert!(!f.is_active());
    }

    #[test]
    fn triple_serializes_with_original_spellings() {
        let f = fact("my sister is Sarah", 0.9).unwrap();
        let v = serde_json::to_value(&f).unwrap();
        assert_eq!(v["predicate"], "KNOWS");
        assert_eq!(v["object"]["type"], "Person");
        assert_eq!(v["category"], "relationship");
        let back: SemanticFact = serde_json::from_value(v).unwrap();
        assert_eq!(back, f);
    }

    fn arc(themes: usize, summary: &str, mood: &str, level: u8) -> Result<SessionArc, TypeError> {
        let now = Utc::now();
        SessionArc::new(
            NewSessionArc {
                session_id: "s1".into(),
                started_at: now - chrono::Duration::minutes(10),
                ended_at: now,
                turn_count: 4,
                primary_themes: (0..themes).map(|i| format!("theme {i}")).collect(),
                summary: summary.into(),
                mood_arc: MoodArc {
                    opened: mood.into(),
                    closed: "calmer".into(),
                },
                open_loops: vec![],
                resolved_threads: vec![],
                approach_used: Some(Approach::Cbt),
                approach_context: Some(ApproachContext::Cbt {
                    thought_examined: Some("I always fail".into()),
                    action_step: None,
                    tool_used: None,
                }),
                crisis_level_max: level,
            },
            now,
        )
    }

    #[test]
    fn arc_limits() {
        assert_eq!(
            arc(3, "talked about work", "anxious", 1)
                .unwrap()
                .duration_seconds,
            600
        );
        assert_eq!(
            arc(4, "s", "a", 0),
            Err(TypeError::TooMany {
                field: "primary_themes",
                max: 3
            })
        );
        assert!(matches!(
            arc(1, "", "a", 0),
            Err(TypeError::TextLength {
                field: "summary",
                ..
            })
        ));
        assert!(arc(1, &"s".repeat(600), "a", 0).is_ok());
        assert!(arc(1, &"s".repeat(601), "a", 0).is_err());
        assert!(matches!(
            arc(1, "s", &"m".repeat(41), 0),
            Err(TypeError::TooLong { .. })
        ));
        assert!(arc(1, "s", &"m".repeat(40), 0).is_ok());
        assert_eq!(
            arc(1, "s", "m", 4),
            Err(TypeError::OutOfRange {
                field: "crisis_level_max"
            })
        );
    }

    #[test]
    fn approach_context_is_tagged_by_modality() {
        let a = arc(1, "s", "m", 0).unwrap();
        let v = serde_json::to_value(&a).unwrap();
        assert_eq!(v["approach_context"]["modality"], "cbt");
        let back: SessionArc = serde_json::from_value(v).unwrap();
        assert_eq!(back, a);
    }

    #[test]
    fn rule_limits_and_profile_default() {
        let now = Utc::now();
        let ok = |r: &str| {
            ProceduralRule::new(
                r,
                vec![],
                RuleSource::ExplicitUser,
                WriteTiming::Immediate,
                "t",
                now,
            )
        };
        assert!(ok("You prefer short answers.").is_ok());
        assert_eq!(
            ok("I prefer short answers.").unwrap_err(),
            TypeError::NotSecondPerson
        );
        assert!(ok("").is_err());
        assert!(ok(&format!("You {}", "x".repeat(277))).is_err());
        let p = ProceduralProfile::default();
        assert!(!p.proactive_recall_enabled, "proactive recall defaults off");
        let p: ProceduralProfile = serde_json::from_str("{}").unwrap();
        assert!(!p.proactive_recall_enabled);
    }

    #[test]
    fn owner_prefers_user_id() {
        assert_eq!(owner_id(Some("u1"), Some("t1")).unwrap(), "u1");
        assert_eq!(owner_id(Some(" "), Some("t1")).unwrap(), "t1");
        assert_eq!(owner_id(None, Some("t1")).unwrap(), "t1");
        assert_eq!(owner_id(None, None), Err(TypeError::OwnerMissing));
    }
}
