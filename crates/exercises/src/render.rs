//! Deterministic rendering: the catalog's own text wrapped in reviewed
//! phrases (`data/responses.toml`), and the model-facing skill block
//! (`data/skill_block.md`).

use std::sync::LazyLock;

use opencouch_core::Approach;
use opencouch_core::exercise::{ExerciseState, Transition, TransitionKind};
use serde::Deserialize;

use crate::catalog::{Catalog, Completion, Exercise, Step};
use crate::classify::items_remaining;

const RESPONSES_TOML: &str = include_str!("../data/responses.toml");
const SKILL_BLOCK_MD: &str = include_str!("../data/skill_block.md");

/// How to present a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RenderMode {
    /// First presentation: "Step 2 of 4: …".
    Normal,
    /// Re-explained with the step's simpler text (after `stuck`).
    Simpler,
    /// The same instruction again (after `hold`).
    Repeat,
}

/// Reviewed responder wording (see the data file for placeholders).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Responses {
    pub(crate) step: String,
    pub(crate) simpler: String,
    pub(crate) repeat: String,
    pub(crate) advance: String,
    pub(crate) items_more_one: String,
    pub(crate) items_more_many: String,
    pub(crate) resume: String,
    pub(crate) cancel: String,
}

static RESPONSES: LazyLock<Result<Responses, String>> = LazyLock::new(|| {
    toml::from_str(RESPONSES_TOML).map_err(|e: toml::de::Error| e.message().to_owned())
});
static FALLBACK: LazyLock<Responses> = LazyLock::new(|| Responses {
    step: "Step {n} of {total}: {text}".into(),
    simpler: "Step {n} of {total}: {text}".into(),
    repeat: "Step {n} of {total}: {text}".into(),
    ..Responses::default()
});

/// The built-in responder wording's load error, if any.
pub(crate) fn check() -> Result<(), String> {
    RESPONSES.as_ref().map(|_| ()).map_err(Clone::clone)
}

impl Responses {
    /// The built-in wording; a parse failure (a bug caught by tests) falls
    /// back to bare step headers.
    pub(crate) fn builtin() -> &'static Responses {
        match &*RESPONSES {
            Ok(r) => r,
            Err(err) => {
                tracing::error!(error = %err, "built-in exercise response wording failed to load");
                &FALLBACK
            }
        }
    }
}

/// Fills `{key}` placeholders in one pass (values are never re-scanned, so a
/// step text containing braces is left as is).
pub(crate) fn fill(template: &str, values: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(template.len() + 64);
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match after.find('}').map(|close| (&after[..close], close)) {
            Some((key, close)) if values.iter().any(|(k, _)| *k == key) => {
                let value = values
                    .iter()
                    .find(|(k, _)| *k == key)
                    .map_or("", |(_, v)| *v);
                out.push_str(value);
                rest = &after[close + 1..];
            }
            _ => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The offer wording: asks for consent, starts nothing.
pub fn render_offer(exercise: &Exercise) -> String {
    exercise.offer.clone()
}

/// The opening line once the person has agreed.
pub fn render_intro(exercise: &Exercise) -> String {
    exercise.intro.clone()
}

/// Intro followed by step 1: the first exercise turn.
pub fn render_start(exercise: &Exercise) -> String {
    match render_step(exercise, 0, RenderMode::Normal) {
        Some(step) => format!("{}\n\n{}", exercise.intro, step),
        None => exercise.intro.clone(),
    }
}

/// A step as "Step 2 of 4: …" in the given mode; `None` when the index is
/// out of range.
pub fn render_step(exercise: &Exercise, step_index: usize, mode: RenderMode) -> Option<String> {
    let step = exercise.step(step_index)?;
    let r = Responses::builtin();
    let (template, text) = match mode {
        RenderMode::Normal => (&r.step, &step.instruction),
        RenderMode::Simpler => (&r.simpler, &step.simpler),
        RenderMode::Repeat => (&r.repeat, &step.instruction),
    };
    let n = (step_index + 1).to_string();
    let total = exercise.steps.len().to_string();
    Some(fill(
        template,
        &[("n", &n), ("total", &total), ("text", text)],
    ))
}

/// "Can you find 2 more?" for an items step that is short of its minimum,
/// given this step's replies so far; `None` for other steps or when enough.
pub fn render_items_progress(step: &Step, replies: &[&str]) -> Option<String> {
    let r = Responses::builtin();
    match items_remaining(step, replies)? {
        0 => None,
        1 => Some(r.items_more_one.clone()),
        n => Some(fill(&r.items_more_many, &[("count", &n.to_string())])),
    }
}

/// The step again after a hold, with the items hint first when it applies.
pub fn render_hold(exercise: &Exercise, step_index: usize, replies: &[&str]) -> Option<String> {
    let repeat = render_step(exercise, step_index, RenderMode::Repeat)?;
    let hint = exercise
        .step(step_index)
        .and_then(|s| render_items_progress(s, replies));
    Some(match hint {
        Some(h) => format!("{h}\n\n{repeat}"),
        None => repeat,
    })
}

/// The closing reflection after the last step.
pub fn render_completion(exercise: &Exercise) -> String {
    exercise.closing.clone()
}

/// The reply when the person stops the exercise.
pub fn render_cancel() -> String {
    Responses::builtin().cancel.clone()
}

/// Back from a side-turn: the resume line and the current step.
pub fn render_resume(exercise: &Exercise, step_index: usize) -> Option<String> {
    let step = render_step(exercise, step_index, RenderMode::Normal)?;
    let line = fill(
        &Responses::builtin().resume,
        &[("name", &exercise.display_name)],
    );
    Some(format!("{line}\n\n{step}"))
}

/// The deterministic reply for a transition. `state_before` is the state the
/// outcome was applied to, `replies` the person's replies to that step so
/// far (for the items hint). `None` for [`Transition::Crisis`]: the crisis
/// path writes that reply.
pub fn render_transition(
    exercise: &Exercise,
    state_before: &ExerciseState,
    transition: &Transition,
    replies: &[&str],
) -> Option<String> {
    let index = usize::try_from(state_before.exercise_step).ok()?;
    match transition {
        Transition::Advance(next) => {
            let next_index = usize::try_from(next.exercise_step).ok()?;
            let step = render_step(exercise, next_index, RenderMode::Normal)?;
            Some(format!("{}\n\n{}", Responses::builtin().advance, step))
        }
        Transition::Completed => Some(render_completion(exercise)),
        Transition::Hold(_) => render_hold(exercise, index, replies),
        Transition::Simplify(_) => render_step(exercise, index, RenderMode::Simpler),
        Transition::Cancel => Some(render_cancel()),
        Transition::Crisis => None,
    }
}

/// The model-facing guidance block for one step and runtime action (what
/// `load_guided_exercise_skill` returns). `None` when the index is out of
/// range.
pub fn render_skill_block(
    exercise: &Exercise,
    step_index: usize,
    action: TransitionKind,
    approach: Approach,
) -> Option<String> {
    let step = exercise.step(step_index)?;
    let text = if action == TransitionKind::Simplify {
        &step.simpler
    } else {
        &step.instruction
    };
    let completion = match &step.completion {
        Completion::Items { target, min } => {
            format!("the person names {target} things (at least {min} is enough).")
        }
        Completion::Confirmation => "the person says they have done it.".to_owned(),
        Completion::Judged { criteria } => criteria.clone(),
        Completion::FreeResponse => "any genuine answer.".to_owned(),
    };
    let completion = match step.rating {
        Some(r) => format!(
            "{completion} The answer is a number from {} to {}.",
            r.min, r.max
        ),
        None => completion,
    };
    let n = (step_index + 1).to_string();
    let total = exercise.steps.len().to_string();
    Some(fill(
        SKILL_BLOCK_MD,
        &[
            ("name", &exercise.display_name),
            ("n", &n),
            ("total", &total),
            ("action", action.as_str()),
            ("approach", approach.as_str()),
            ("text", text),
            ("completion", &completion),
        ],
    ))
}

/// One line describing the active exercise for prompts (triage, the
/// therapeutic turn and the exercise turn all use it).
pub fn context_line(ex: &ExerciseState) -> String {
    let total = Catalog::builtin()
        .get(&ex.exercise_type)
        .map(|e| e.steps.len())
        .unwrap_or(0);
    format!(
        "Active guided exercise: {} (step {} of {}, step id {}, approach {}).",
        ex.exercise_type,
        ex.exercise_step + 1,
        total,
        ex.exercise_step_id,
        ex.exercise_therapeutic_approach
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Catalog;
    use opencouch_core::exercise::StepOutcome;

    fn ex(id: &str) -> &'static Exercise {
        Catalog::try_builtin().unwrap().get(id).unwrap()
    }

    #[test]
    fn responses_load_and_fill_is_single_pass() {
        assert!(RESPONSES.is_ok(), "{:?}", RESPONSES.as_ref().err());
        assert_eq!(
            fill("{a}-{b}-{c}", &[("a", "{b}"), ("b", "2")]),
            "{b}-2-{c}"
        );
        assert_eq!(fill("no braces", &[]), "no braces");
        assert_eq!(fill("open { only", &[("x", "y")]), "open { only");
    }

    #[test]
    fn step_rendering_table() {
        let g = ex("grounding_5_4_3_2_1");
        let cases: &[(usize, RenderMode, &str)] = &[
            (
                0,
                RenderMode::Normal,
                "Step 1 of 5: Look around you and name five things you can see.",
            ),
            (
                1,
                RenderMode::Normal,
                "Step 2 of 5: Now listen for a moment.",
            ),
            (
                1,
                RenderMode::Simpler,
                "Let's make this one simpler. Step 2 of 5: Stay quiet",
            ),
            (
                4,
                RenderMode::Repeat,
                "No rush, take your time with step 5 of 5. Whenever you're ready",
            ),
        ];
        for (i, mode, prefix) in cases {
            let got = render_step(g, *i, *mode).unwrap();
            assert!(got.starts_with(prefix), "{got}");
        }
        assert_eq!(render_step(g, 5, RenderMode::Normal), None);
        assert!(render_start(g).starts_with(&g.intro));
        assert!(render_start(g).ends_with(&g.steps[0].instruction));
        assert_eq!(render_completion(g), g.closing);
        assert_eq!(render_offer(g), g.offer);
        assert_eq!(render_intro(g), g.intro);
        assert!(render_resume(g, 2).unwrap().contains("Step 3 of 5"));
    }

    #[test]
    fn items_progress_says_how_many_more() {
        let g = ex("grounding_5_4_3_2_1");
        let see = &g.steps[0];
        assert_eq!(
            render_items_progress(see, &["a lamp"]).as_deref(),
            Some("That's a good start. Can you find 2 more?")
        );
        assert_eq!(
            render_items_progress(see, &["a lamp", "a mug"]).as_deref(),
            Some("That's a good start. Can you find one more?")
        );
        assert_eq!(render_items_progress(see, &["a lamp, a mug, a pen"]), None);
        let hold = render_hold(g, 0, &["a lamp"]).unwrap();
        assert!(
            hold.starts_with("That's a good start. Can you find 2 more?\n\nNo rush"),
            "{hold}"
        );
    }

    #[test]
    fn transition_rendering() {
        let g = ex("grounding_box_breathing");
        let s0 = g.start(None);
        let adv = g.transition(&s0, StepOutcome::Complete, "inhale").unwrap();
        assert!(
            render_transition(g, &s0, &adv, &[])
                .unwrap()
                .contains("Step 2 of 4")
        );
        let simp = g.transition(&s0, StepOutcome::Stuck, "inhale").unwrap();
        assert!(
            render_transition(g, &s0, &simp, &[])
                .unwrap()
                .contains(&g.steps[0].simpler)
        );
        let cancel = g.transition(&s0, StepOutcome::Exit, "inhale").unwrap();
        assert_eq!(
            render_transition(g, &s0, &cancel, &[]),
            Some(render_cancel())
        );
        assert_eq!(render_transition(g, &s0, &Transition::Crisis, &[]), None);
    }

    #[test]
    fn skill_block_names_step_and_action() {
        let v = ex("defusion_values_compass");
        let block = render_skill_block(v, 2, TransitionKind::Simplify, Approach::Act).unwrap();
        assert!(block.contains("step 3 of 4"));
        assert!(block.contains(&v.steps[2].simpler));
        assert!(block.contains("from 1 to 10"));
        assert!(block.contains("**simplify**"));
        assert!(!block.contains('{'), "all placeholders filled: {block}");
        assert_eq!(
            render_skill_block(v, 9, TransitionKind::Advance, Approach::Act),
            None
        );
    }
}
