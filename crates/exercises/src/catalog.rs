//! The exercise catalog: one reviewed TOML file per exercise under
//! `catalog/`, embedded at build time, parsed and validated once.
//!
//! **Invariant:** a loaded catalog has unique exercise ids equal to their
//! file names, non-empty steps with unique ids, `1 <= min <= target` on every
//! items step, durations in 180–600 s, a default approach that is one of the
//! exercise's approach tags, and aliases that name exactly one exercise.

use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;

use opencouch_core::exercise::{
    self as machine, ExerciseState, InvalidExerciseState, StepOutcome, Transition,
};
use opencouch_core::{Approach, Channel};
use serde::{Deserialize, Serialize};

use crate::text::{find, split_words, words};

/// The embedded catalog files, in presentation order: (file stem, TOML).
const BUILTIN_SOURCES: &[(&str, &str)] = &[
    (
        "grounding_5_4_3_2_1",
        include_str!("../catalog/grounding_5_4_3_2_1.toml"),
    ),
    (
        "grounding_box_breathing",
        include_str!("../catalog/grounding_box_breathing.toml"),
    ),
    (
        "grounding_stop_technique",
        include_str!("../catalog/grounding_stop_technique.toml"),
    ),
    (
        "grounding_muscle_relaxation",
        include_str!("../catalog/grounding_muscle_relaxation.toml"),
    ),
    (
        "thought_work_simple_record",
        include_str!("../catalog/thought_work_simple_record.toml"),
    ),
    (
        "thought_work_behavioral_experiment",
        include_str!("../catalog/thought_work_behavioral_experiment.toml"),
    ),
    (
        "thought_work_continuum",
        include_str!("../catalog/thought_work_continuum.toml"),
    ),
    (
        "self_compassion_break",
        include_str!("../catalog/self_compassion_break.toml"),
    ),
    (
        "emotion_regulation_improve",
        include_str!("../catalog/emotion_regulation_improve.toml"),
    ),
    (
        "emotion_regulation_gratitude",
        include_str!("../catalog/emotion_regulation_gratitude.toml"),
    ),
    (
        "defusion_leaves_on_stream",
        include_str!("../catalog/defusion_leaves_on_stream.toml"),
    ),
    (
        "defusion_values_compass",
        include_str!("../catalog/defusion_values_compass.toml"),
    ),
    (
        "behavioral_activation_tiny_action",
        include_str!("../catalog/behavioral_activation_tiny_action.toml"),
    ),
];

/// Shortest and longest allowed exercise duration, in seconds.
pub const DURATION_RANGE: std::ops::RangeInclusive<u32> = 180..=600;

opencouch_core::string_enum! {
    /// The family an exercise belongs to.
    pub enum Category: "exercise_category" {
        Grounding = "grounding",
        ThoughtWork = "thought_work",
        EmotionRegulation = "emotion_regulation",
        ActValues = "act_values",
        Activation = "activation",
    }
}

opencouch_core::string_enum! {
    /// How well an exercise suits a channel.
    pub enum Fit: "exercise_fit" { Good = "good", Fair = "fair", Poor = "poor" }
}

opencouch_core::string_enum! {
    /// A three-step scale for intensity and cognitive load.
    pub enum Level: "exercise_level" { Low = "low", Medium = "medium", High = "high" }
}

/// How a step counts as done.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum Completion {
    /// The person names things (e.g. five things they can see). The step is
    /// complete once at least `min` distinct items are named; `target` is the
    /// number the instruction asks for.
    Items {
        /// How many items the instruction asks for.
        target: u32,
        /// How many items are enough to move on.
        min: u32,
    },
    /// The person confirms they did it ("done", "next").
    Confirmation,
    /// A reply judged against `criteria` (by the model in hybrid mode; by a
    /// substance check in deterministic mode).
    Judged {
        /// What a reply must show, in plain words.
        criteria: String,
    },
    /// Any substantive reply completes the step.
    FreeResponse,
}

impl Completion {
    /// The mode's name: `items`, `confirmation`, `judged` or `free_response`.
    pub const fn mode_name(&self) -> &'static str {
        match self {
            Completion::Items { .. } => "items",
            Completion::Confirmation => "confirmation",
            Completion::Judged { .. } => "judged",
            Completion::FreeResponse => "free_response",
        }
    }
}

/// An inclusive numeric range a rating step asks for (e.g. 1–10).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RatingRange {
    /// Lowest accepted number.
    pub min: u32,
    /// Highest accepted number.
    pub max: u32,
}

/// One step of an exercise.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Step {
    /// Step id, unique within the exercise (e.g. `see`).
    pub id: String,
    /// What to ask the person to do.
    pub instruction: String,
    /// A simpler re-explanation for when the person is stuck.
    pub simpler: String,
    /// How the step counts as done.
    pub completion: Completion,
    /// When set, the step asks for a number in this range and is complete
    /// only when the reply gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rating: Option<RatingRange>,
    /// Meaningful words a judged reply needs in deterministic mode
    /// (default [`DEFAULT_JUDGED_MIN_WORDS`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_words: Option<u32>,
}

/// Meaningful words a judged reply needs when the step sets no `min_words`.
pub const DEFAULT_JUDGED_MIN_WORDS: u32 = 3;

/// One guided exercise: metadata, offer/intro/closing wording and steps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Exercise {
    /// Catalog id, equal to the file name (e.g. `grounding_5_4_3_2_1`).
    pub id: String,
    /// Script version; bump on any change to the steps.
    pub version: u32,
    /// Name shown to the person.
    pub display_name: String,
    /// Exercise family.
    pub category: Category,
    /// Free-form tags for selection.
    pub tags: Vec<String>,
    /// Approaches the exercise fits. `none` marks an approach-neutral exercise.
    pub approaches: Vec<Approach>,
    /// Approach pinned when the exercise starts without one.
    pub default_approach: Approach,
    /// When the exercise helps, in one sentence.
    pub use_case: String,
    /// Other names people use for it.
    pub aliases: Vec<String>,
    /// Typical duration.
    pub duration_seconds: u32,
    /// How demanding it feels.
    pub intensity: Level,
    /// How much thinking it asks for.
    pub cognitive_load: Level,
    /// Shape of the interaction (e.g. `sensory_listing`).
    pub interaction_pattern: String,
    /// Fit for text channels.
    pub text_fit: Fit,
    /// Fit for spoken delivery.
    pub voice_fit: Fit,
    /// Offer wording (asks for consent; starts nothing).
    pub offer: String,
    /// Opening line once the person has agreed.
    pub intro: String,
    /// Closing reflection after the last step.
    pub closing: String,
    /// The steps, in order.
    pub steps: Vec<Step>,
}

impl Exercise {
    /// Ordered step ids, as the state machine wants them.
    pub fn step_ids(&self) -> Vec<&str> {
        self.steps.iter().map(|s| s.id.as_str()).collect()
    }

    /// The step at a zero-based index.
    pub fn step(&self, index: usize) -> Option<&Step> {
        self.steps.get(index)
    }

    /// The step an exercise state points at, if the state belongs to this
    /// exercise and its index and id agree with the catalog.
    pub fn current_step(&self, state: &ExerciseState) -> Option<&Step> {
        let step = self.steps.get(usize::try_from(state.exercise_step).ok()?)?;
        (state.exercise_type == self.id && step.id == state.exercise_step_id).then_some(step)
    }

    /// Whether the exercise may be delivered on `channel` (voice needs a
    /// voice fit better than poor; other channels need a text fit).
    pub fn fits_channel(&self, channel: Channel) -> bool {
        match channel {
            Channel::Voice => self.voice_fit != Fit::Poor,
            _ => self.text_fit != Fit::Poor,
        }
    }

    /// Whether the exercise fits `approach`: tagged with it, or
    /// approach-neutral (tagged `none`). `none` itself fits everything.
    pub fn fits_approach(&self, approach: Approach) -> bool {
        approach == Approach::None
            || self.approaches.contains(&approach)
            || self.approaches.contains(&Approach::None)
    }

    /// A fresh state at step 1, pinning `approach` or the default approach.
    pub fn start(&self, approach: Option<Approach>) -> ExerciseState {
        let first = self.steps.first().map_or("", |s| s.id.as_str());
        machine::start(
            &self.id,
            self.version,
            first,
            approach,
            self.default_approach,
        )
    }

    /// Applies a step outcome to a state of this exercise (see
    /// [`opencouch_core::exercise::transition`]).
    pub fn transition(
        &self,
        state: &ExerciseState,
        outcome: StepOutcome,
        expected_step_id: &str,
    ) -> Result<Transition, InvalidExerciseState> {
        machine::transition(state, outcome, &self.id, expected_step_id, &self.step_ids())
    }

    /// Metadata only, for listing tools.
    pub fn summary(&self) -> ExerciseSummary {
        ExerciseSummary {
            id: self.id.clone(),
            display_name: self.display_name.clone(),
            category: self.category,
            use_case: self.use_case.clone(),
            approaches: self.approaches.clone(),
            default_approach: self.default_approach,
            duration_seconds: self.duration_seconds,
            intensity: self.intensity,
            step_count: self.steps.len(),
            voice_fit: self.voice_fit,
            version: self.version,
        }
    }

    /// Every name the exercise answers to: id, display name, aliases.
    fn names(&self) -> impl Iterator<Item = &str> {
        [self.id.as_str(), self.display_name.as_str()]
            .into_iter()
            .chain(self.aliases.iter().map(String::as_str))
    }
}

/// Metadata-only view of an exercise (what `list_guided_exercise_skills`
/// returns: no step texts).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ExerciseSummary {
    /// Catalog id.
    pub id: String,
    /// Name shown to the person.
    pub display_name: String,
    /// Exercise family.
    pub category: Category,
    /// When the exercise helps.
    pub use_case: String,
    /// Approach tags.
    pub approaches: Vec<Approach>,
    /// Approach pinned when none is given.
    pub default_approach: Approach,
    /// Typical duration.
    pub duration_seconds: u32,
    /// How demanding it feels.
    pub intensity: Level,
    /// Number of steps.
    pub step_count: usize,
    /// Fit for spoken delivery.
    pub voice_fit: Fit,
    /// Script version.
    pub version: u32,
}

/// A catalog file failed to load or validate. Messages name the file and
/// the rule; they contain catalog data only, never user text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CatalogError {
    /// The TOML did not parse into an exercise.
    #[error("catalog file {file}: {message}")]
    Parse {
        /// File stem.
        file: String,
        /// Parser message.
        message: String,
    },
    /// The `id` field differs from the file name.
    #[error("catalog file {file}: id differs from the file name")]
    IdMismatch {
        /// File stem.
        file: String,
    },
    /// Two files declare the same id.
    #[error("exercise id {0} appears twice")]
    DuplicateId(String),
    /// A rule on one exercise is broken.
    #[error("exercise {id}: {rule}")]
    Invalid {
        /// Exercise id.
        id: String,
        /// The broken rule.
        rule: String,
    },
    /// A name or alias resolves to more than one exercise.
    #[error("alias `{alias}` names both {first} and {second}")]
    AmbiguousAlias {
        /// The alias as written.
        alias: String,
        /// First exercise id.
        first: String,
        /// Second exercise id.
        second: String,
    },
}

/// One name of an exercise, normalized for matching.
#[derive(Debug, Clone)]
struct NameEntry {
    /// Lower-cased words (for whole-text lookup and ordinary mentions).
    words: Vec<String>,
    /// Words in their written case (for case-sensitive mentions).
    cased: Vec<String>,
    /// Single upper-case words (acronyms such as `IMPROVE`, `PMR`) only match
    /// in upper case inside free text, so "improve my sleep" names nothing.
    case_sensitive: bool,
    exercise: usize,
}

/// The loaded, validated exercise catalog.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    exercises: Vec<Exercise>,
    names: Vec<NameEntry>,
}

static BUILTIN: LazyLock<Result<Catalog, CatalogError>> =
    LazyLock::new(|| Catalog::from_sources(BUILTIN_SOURCES));
static EMPTY: LazyLock<Catalog> = LazyLock::new(Catalog::default);

impl Catalog {
    /// The built-in catalog, parsed once. A load failure is a bug caught by
    /// the tests; at run time it is logged and an empty catalog is returned
    /// (no exercise can start), never a panic.
    pub fn builtin() -> &'static Catalog {
        match &*BUILTIN {
            Ok(c) => c,
            Err(err) => {
                tracing::error!(error = %err, "built-in exercise catalog failed to load");
                &EMPTY
            }
        }
    }

    /// The built-in catalog or its load error.
    pub fn try_builtin() -> Result<&'static Catalog, &'static CatalogError> {
        BUILTIN.as_ref()
    }

    /// Parses and validates catalog files given as (file stem, TOML) pairs.
    pub fn from_sources(sources: &[(&str, &str)]) -> Result<Catalog, CatalogError> {
        let mut exercises = Vec::with_capacity(sources.len());
        let mut seen = HashSet::new();
        for (file, src) in sources {
            let ex: Exercise = toml::from_str(src).map_err(|e| CatalogError::Parse {
                file: (*file).to_owned(),
                message: e.message().to_owned(),
            })?;
            if ex.id != *file {
                return Err(CatalogError::IdMismatch {
                    file: (*file).to_owned(),
                });
            }
            if !seen.insert(ex.id.clone()) {
                return Err(CatalogError::DuplicateId(ex.id));
            }
            validate(&ex)?;
            exercises.push(ex);
        }
        let names = index_names(&exercises)?;
        Ok(Catalog { exercises, names })
    }

    /// Every exercise, in catalog order.
    pub fn all(&self) -> &[Exercise] {
        &self.exercises
    }

    /// The exercise with this id.
    pub fn get(&self, id: &str) -> Option<&Exercise> {
        self.exercises.iter().find(|e| e.id == id)
    }

    /// The exercise whose id, display name or alias equals `text`
    /// (ignoring case, punctuation and spacing), e.g. "box breathing",
    /// "5-4-3-2-1", "PMR", "leaves on a stream".
    pub fn resolve_alias(&self, text: &str) -> Option<&Exercise> {
        if let Some(e) = self.get(text.trim()) {
            return Some(e);
        }
        let w = words(text);
        if w.is_empty() {
            return None;
        }
        self.names
            .iter()
            .find(|n| n.words == w)
            .map(|n| &self.exercises[n.exercise])
    }

    /// The exercise named inside free text, if any: the longest name found
    /// wins, then the earliest.
    pub fn find_mention(&self, text: &str) -> Option<&Exercise> {
        self.mentions(text).into_iter().next()
    }

    /// Every distinct exercise named inside free text, ordered by length of
    /// the matched name (longest first), then by position. Shorter names
    /// that lie inside a longer match are ignored, so "grounding box
    /// breathing" is box breathing only.
    pub fn mentions(&self, text: &str) -> Vec<&Exercise> {
        let lower = words(text);
        let cased = split_words(text, false);
        // (start, len, exercise)
        let mut hits: Vec<(usize, usize, usize)> = Vec::new();
        for n in &self.names {
            let (hay, needle) = if n.case_sensitive {
                (&cased, &n.cased)
            } else {
                (&lower, &n.words)
            };
            let mut from = 0;
            while let Some(i) = find(&hay[from..], needle) {
                hits.push((from + i, needle.len(), n.exercise));
                from += i + 1;
            }
        }
        hits.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let mut covered: Vec<std::ops::Range<usize>> = Vec::new();
        let mut out: Vec<&Exercise> = Vec::new();
        for (start, len, idx) in hits {
            let span = start..start + len;
            if covered
                .iter()
                .any(|c| c.start < span.end && span.start < c.end)
            {
                continue;
            }
            covered.push(span);
            let ex = &self.exercises[idx];
            if !out.iter().any(|e| e.id == ex.id) {
                out.push(ex);
            }
        }
        out
    }

    /// Exercises for a channel and approach, in catalog order. Voice lists
    /// only voice-suitable exercises. `approach` `None` (or
    /// `Some(Approach::None)`) means no filter; otherwise an exercise is
    /// listed when tagged with the approach or approach-neutral.
    pub fn list(&self, channel: Channel, approach: Option<Approach>) -> Vec<&Exercise> {
        self.exercises
            .iter()
            .filter(|e| e.fits_channel(channel))
            .filter(|e| approach.is_none_or(|a| e.fits_approach(a)))
            .collect()
    }
}

fn invalid(id: &str, rule: impl Into<String>) -> CatalogError {
    CatalogError::Invalid {
        id: id.to_owned(),
        rule: rule.into(),
    }
}

fn validate(ex: &Exercise) -> Result<(), CatalogError> {
    let id = ex.id.as_str();
    if ex.steps.is_empty() {
        return Err(invalid(id, "has no steps"));
    }
    if ex.version == 0 {
        return Err(invalid(id, "version must be at least 1"));
    }
    if !DURATION_RANGE.contains(&ex.duration_seconds) {
        return Err(invalid(id, "duration_seconds outside 180-600"));
    }
    if !ex.approaches.contains(&ex.default_approach) {
        return Err(invalid(id, "default_approach is not one of its approaches"));
    }
    for (name, text) in [
        ("display_name", &ex.display_name),
        ("use_case", &ex.use_case),
        ("offer", &ex.offer),
        ("intro", &ex.intro),
        ("closing", &ex.closing),
        ("interaction_pattern", &ex.interaction_pattern),
    ] {
        if text.trim().is_empty() {
            return Err(invalid(id, format!("{name} is empty")));
        }
    }
    let mut step_ids = HashSet::new();
    for step in &ex.steps {
        if step.id.trim().is_empty() || !step_ids.insert(step.id.as_str()) {
            return Err(invalid(
                id,
                format!("step id `{}` is empty or repeated", step.id),
            ));
        }
        if step.instruction.trim().is_empty() || step.simpler.trim().is_empty() {
            return Err(invalid(
                id,
                format!("step `{}` needs an instruction and a simpler text", step.id),
            ));
        }
        match &step.completion {
            Completion::Items { target, min } if *min == 0 || min > target => {
                return Err(invalid(
                    id,
                    format!("step `{}` needs 1 <= min <= target", step.id),
                ));
            }
            Completion::Judged { criteria } if criteria.trim().is_empty() => {
                return Err(invalid(
                    id,
                    format!("step `{}` has empty criteria", step.id),
                ));
            }
            _ => {}
        }
        if let Some(r) = step.rating {
            if r.min >= r.max {
                return Err(invalid(
                    id,
                    format!("step `{}` rating needs min < max", step.id),
                ));
            }
            if matches!(step.completion, Completion::Items { .. }) {
                return Err(invalid(
                    id,
                    format!("step `{}` cannot be both items and rating", step.id),
                ));
            }
        }
        if step.min_words == Some(0) {
            return Err(invalid(
                id,
                format!("step `{}` min_words must be at least 1", step.id),
            ));
        }
    }
    Ok(())
}

fn index_names(exercises: &[Exercise]) -> Result<Vec<NameEntry>, CatalogError> {
    let mut owner: HashMap<Vec<String>, usize> = HashMap::new();
    let mut out = Vec::new();
    for (idx, ex) in exercises.iter().enumerate() {
        for name in ex.names() {
            let w = words(name);
            if w.is_empty() {
                return Err(invalid(&ex.id, "has an empty alias"));
            }
            match owner.get(&w) {
                Some(&other) if other != idx => {
                    return Err(CatalogError::AmbiguousAlias {
                        alias: name.to_owned(),
                        first: exercises[other].id.clone(),
                        second: ex.id.clone(),
                    });
                }
                Some(_) => continue,
                None => {
                    owner.insert(w.clone(), idx);
                }
            }
            let trimmed = name.trim();
            let case_sensitive = !trimmed.contains(char::is_whitespace)
                && trimmed.chars().any(char::is_alphabetic)
                && trimmed
                    .chars()
                    .all(|c| !c.is_alphabetic() || c.is_uppercase());
            let cased = split_words(trimmed, false);
            out.push(NameEntry {
                words: w,
                cased,
                case_sensitive,
                exercise: idx,
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const VOICE_TEN: &[&str] = &[
        "grounding_5_4_3_2_1",
        "grounding_box_breathing",
        "grounding_stop_technique",
        "grounding_muscle_relaxation",
        "thought_work_continuum",
        "behavioral_activation_tiny_action",
        "defusion_values_compass",
        "self_compassion_break",
        "emotion_regulation_improve",
        "emotion_regulation_gratitude",
    ];

    fn cat() -> &'static Catalog {
        Catalog::try_builtin().expect("built-in catalog loads")
    }

    #[test]
    fn thirteen_exercises_with_inventory_shape() {
        // (id, steps, modes in order: i=items c=confirmation j=judged f=free_response, default approach)
        let table: &[(&str, &str, Approach)] = &[
            ("grounding_5_4_3_2_1", "iiiii", Approach::DbtSkills),
            ("grounding_box_breathing", "cccc", Approach::DbtSkills),
            ("grounding_stop_technique", "ccfj", Approach::DbtSkills),
            ("grounding_muscle_relaxation", "ccccc", Approach::DbtSkills),
            ("thought_work_simple_record", "ffjj", Approach::Cbt),
            ("thought_work_behavioral_experiment", "fjfj", Approach::Cbt),
            ("thought_work_continuum", "fjjfj", Approach::Cbt),
            ("self_compassion_break", "ccj", Approach::None),
            ("emotion_regulation_improve", "cffj", Approach::DbtSkills),
            ("emotion_regulation_gratitude", "ijf", Approach::None),
            ("defusion_leaves_on_stream", "fccfj", Approach::Act),
            ("defusion_values_compass", "fjfj", Approach::Act),
            ("behavioral_activation_tiny_action", "fjff", Approach::Cbt),
        ];
        assert_eq!(cat().all().len(), 13);
        for (id, modes, default) in table {
            let ex = cat().get(id).unwrap_or_else(|| panic!("missing {id}"));
            let got: String = ex
                .steps
                .iter()
                .map(|s| s.completion.mode_name().chars().next().unwrap_or('?'))
                .collect();
            assert_eq!(&got, modes, "{id}");
            assert_eq!(ex.default_approach, *default, "{id}");
        }
        let items: Vec<(u32, u32)> = cat()
            .get("grounding_5_4_3_2_1")
            .unwrap()
            .steps
            .iter()
            .map(|s| match s.completion {
                Completion::Items { target, min } => (target, min),
                _ => (0, 0),
            })
            .collect();
        assert_eq!(items, vec![(5, 3), (4, 2), (3, 2), (2, 1), (1, 1)]);
        assert_eq!(
            cat().get("emotion_regulation_gratitude").unwrap().steps[0].completion,
            Completion::Items { target: 3, min: 2 }
        );
    }

    #[test]
    fn ids_steps_durations_and_items_are_consistent() {
        let files: Vec<&str> = BUILTIN_SOURCES.iter().map(|(f, _)| *f).collect();
        let mut ids = HashSet::new();
        for (ex, file) in cat().all().iter().zip(&files) {
            assert_eq!(ex.id, *file);
            assert!(ids.insert(ex.id.as_str()), "duplicate {}", ex.id);
            assert!(!ex.steps.is_empty());
            let step_ids: HashSet<&str> = ex.steps.iter().map(|s| s.id.as_str()).collect();
            assert_eq!(step_ids.len(), ex.steps.len(), "{}", ex.id);
            assert!(DURATION_RANGE.contains(&ex.duration_seconds), "{}", ex.id);
            assert!(ex.approaches.contains(&ex.default_approach));
            for s in &ex.steps {
                if let Completion::Items { target, min } = s.completion {
                    assert!(1 <= min && min <= target, "{}:{}", ex.id, s.id);
                }
                assert_ne!(
                    s.instruction, s.simpler,
                    "{}:{} simpler must differ",
                    ex.id, s.id
                );
            }
        }
        // The files on disk are exactly the embedded ones.
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/catalog");
        let mut on_disk: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| {
                e.unwrap()
                    .file_name()
                    .to_string_lossy()
                    .trim_end_matches(".toml")
                    .to_owned()
            })
            .collect();
        on_disk.sort();
        let mut embedded: Vec<String> = files.iter().map(|s| s.to_string()).collect();
        embedded.sort();
        assert_eq!(on_disk, embedded);
    }

    #[test]
    fn voice_lists_exactly_the_ten() {
        let voice: Vec<&str> = cat()
            .list(Channel::Voice, None)
            .iter()
            .map(|e| e.id.as_str())
            .collect();
        let mut want = VOICE_TEN.to_vec();
        let mut got = voice.clone();
        want.sort();
        got.sort();
        assert_eq!(got, want);
        assert_eq!(cat().list(Channel::Web, None).len(), 13);
        assert_eq!(
            cat().list(Channel::Telegram, Some(Approach::None)).len(),
            13
        );
    }

    #[test]
    fn approach_filter_table() {
        // (channel, approach, must include, must exclude)
        let cases: &[(Channel, Approach, &str, &str)] = &[
            (
                Channel::Web,
                Approach::Cbt,
                "thought_work_simple_record",
                "defusion_values_compass",
            ),
            (
                Channel::Web,
                Approach::Act,
                "defusion_leaves_on_stream",
                "thought_work_continuum",
            ),
            (
                Channel::Web,
                Approach::DbtSkills,
                "emotion_regulation_improve",
                "thought_work_simple_record",
            ),
            (
                Channel::Web,
                Approach::Cbt,
                "emotion_regulation_gratitude",
                "emotion_regulation_improve",
            ),
            (
                Channel::Voice,
                Approach::Act,
                "defusion_values_compass",
                "defusion_leaves_on_stream",
            ),
            (
                Channel::Voice,
                Approach::Cbt,
                "thought_work_continuum",
                "thought_work_simple_record",
            ),
            (
                Channel::Web,
                Approach::GriefSupport,
                "grounding_5_4_3_2_1",
                "thought_work_continuum",
            ),
        ];
        for (channel, approach, yes, no) in cases {
            let ids: Vec<&str> = cat()
                .list(*channel, Some(*approach))
                .iter()
                .map(|e| e.id.as_str())
                .collect();
            assert!(ids.contains(yes), "{channel} {approach} should list {yes}");
            assert!(
                !ids.contains(no),
                "{channel} {approach} should not list {no}"
            );
        }
    }

    #[test]
    fn every_alias_resolves_to_exactly_its_exercise() {
        let mut total = 0;
        for ex in cat().all() {
            for name in ex.names() {
                let owners: Vec<&str> = cat()
                    .all()
                    .iter()
                    .filter(|other| other.names().any(|n| words(n) == words(name)))
                    .map(|e| e.id.as_str())
                    .collect();
                assert_eq!(owners, vec![ex.id.as_str()], "alias {name}");
                assert_eq!(
                    cat().resolve_alias(name).map(|e| e.id.as_str()),
                    Some(ex.id.as_str()),
                    "alias {name}"
                );
                total += 1;
            }
        }
        assert!(total >= 13 * 4);
    }

    #[test]
    fn alias_table() {
        let cases: &[(&str, Option<&str>)] = &[
            ("5-4-3-2-1", Some("grounding_5_4_3_2_1")),
            ("54321", Some("grounding_5_4_3_2_1")),
            ("Grounding", Some("grounding_5_4_3_2_1")),
            ("box breathing", Some("grounding_box_breathing")),
            ("thought record", Some("thought_work_simple_record")),
            ("Leaves on a stream", Some("defusion_leaves_on_stream")),
            ("values compass", Some("defusion_values_compass")),
            ("tiny action", Some("behavioral_activation_tiny_action")),
            ("pmr", Some("grounding_muscle_relaxation")),
            (
                "progressive muscle relaxation",
                Some("grounding_muscle_relaxation"),
            ),
            ("gratitude", Some("emotion_regulation_gratitude")),
            ("self-compassion break", Some("self_compassion_break")),
            ("IMPROVE", Some("emotion_regulation_improve")),
            ("STOP skill", Some("grounding_stop_technique")),
            ("grounding_box_breathing", Some("grounding_box_breathing")),
            ("yoga", None),
            ("", None),
        ];
        for (text, want) in cases {
            assert_eq!(
                cat().resolve_alias(text).map(|e| e.id.as_str()),
                *want,
                "{text}"
            );
        }
    }

    #[test]
    fn mention_table() {
        let cases: &[(&str, &[&str])] = &[
            ("can we do the 5-4-3-2-1 thing", &["grounding_5_4_3_2_1"]),
            (
                "maybe some grounding box breathing",
                &["grounding_box_breathing"],
            ),
            ("I want to improve my sleep", &[]),
            ("let's try IMPROVE", &["emotion_regulation_improve"]),
            (
                "PMR or the values compass?",
                &["defusion_values_compass", "grounding_muscle_relaxation"],
            ),
            ("nothing here", &[]),
        ];
        for (text, want) in cases {
            let got: Vec<&str> = cat().mentions(text).iter().map(|e| e.id.as_str()).collect();
            assert_eq!(got, *want, "{text}");
        }
    }

    #[test]
    fn validation_rejects_broken_files() {
        let good = BUILTIN_SOURCES[1].1;
        let cases: Vec<(&str, String, &str)> = vec![
            (
                "grounding_box_breathing",
                good.replace("duration_seconds = 180", "duration_seconds = 60"),
                "duration",
            ),
            ("wrong_name", good.to_owned(), "id differs"),
            (
                "grounding_box_breathing",
                good.replace("id = \"inhale\"", "id = \"exhale\""),
                "repeated",
            ),
            (
                "grounding_box_breathing",
                good.replace(
                    "default_approach = \"dbt_skills\"",
                    "default_approach = \"act\"",
                ),
                "default_approach",
            ),
            (
                "grounding_box_breathing",
                good.replace("version = 1", "version = 1\nsurprise = true"),
                "unknown field",
            ),
            (
                "grounding_box_breathing",
                good.replace(
                    "mode = \"confirmation\" }",
                    "mode = \"items\", target = 2, min = 3 }",
                ),
                "min <= target",
            ),
        ];
        for (file, src, needle) in cases {
            let err = Catalog::from_sources(&[(file, &src)])
                .unwrap_err()
                .to_string();
            assert!(err.contains(needle), "{needle}: {err}");
        }
        let dup = Catalog::from_sources(&[BUILTIN_SOURCES[1], BUILTIN_SOURCES[1]]).unwrap_err();
        assert_eq!(
            dup,
            CatalogError::DuplicateId("grounding_box_breathing".into())
        );
        let clash = BUILTIN_SOURCES[2].1.replace(
            "\"stop and observe\"",
            "\"stop and observe\", \"box breathing\"",
        );
        let err =
            Catalog::from_sources(&[BUILTIN_SOURCES[1], ("grounding_stop_technique", &clash)])
                .unwrap_err();
        assert!(matches!(err, CatalogError::AmbiguousAlias { .. }), "{err}");
    }

    #[test]
    fn start_pins_default_and_transition_uses_catalog_steps() {
        let ex = cat().get("grounding_5_4_3_2_1").unwrap();
        let state = ex.start(None);
        assert_eq!(state.exercise_therapeutic_approach, Approach::DbtSkills);
        assert_eq!(state.exercise_step_id, "see");
        assert_eq!(ex.current_step(&state).map(|s| s.id.as_str()), Some("see"));
        let t = ex.transition(&state, StepOutcome::Complete, "see").unwrap();
        assert_eq!(
            t.state_after().map(|s| s.exercise_step_id.as_str()),
            Some("hear")
        );
        assert_eq!(
            ex.transition(&state, StepOutcome::Complete, "hear"),
            Err(InvalidExerciseState::StepIdMismatch { step: 0 })
        );
        assert_eq!(
            ex.start(Some(Approach::Act)).exercise_therapeutic_approach,
            Approach::Act
        );
        let summary = serde_json::to_value(ex.summary()).unwrap();
        assert_eq!(summary["step_count"], 5);
        assert!(summary.get("steps").is_none(), "summary is metadata only");
    }
}
