//! Guided-exercise state and the pure state machine that drives it.
//!
//! The catalog (step texts, completion modes, aliases) lives in the
//! `opencouch-exercises` crate; this module only knows what it needs to keep
//! the persisted [`ExerciseState`] consistent: the exercise id, its version
//! and the ordered step ids. Callers hand those in as plain data, so the
//! state machine has no dependency on the catalog and can be tested with
//! tables of cases.
//!
//! **Invariant:** every transition is validated before it is applied. A
//! state whose exercise type, step index or step id disagrees with what the
//! caller expects is rejected with [`InvalidExerciseState`] and nothing
//! changes. The one exception is [`StepOutcome::Unsafe`]: the crisis path
//! must never be blocked by exercise bookkeeping, so an unsafe outcome always
//! clears the exercise and hands the turn to the crisis path.
//!
//! Transition table:
//!
//! | outcome                      | transition   | state after          |
//! |------------------------------|--------------|----------------------|
//! | complete, not the last step  | `Advance`    | next step            |
//! | complete on the last step    | `Completed`  | cleared              |
//! | partial (voice only)         | `Hold`       | same step            |
//! | hold                         | `Hold`       | same step            |
//! | stuck                        | `Simplify`   | same step, simpler   |
//! | exit                         | `Cancel`     | cleared              |
//! | unsafe                       | `Crisis`     | cleared, crisis path |

use serde::{Deserialize, Serialize};

use crate::enums::Approach;
use crate::string_enum;

/// The active exercise of a thread. `None` in the thread state means no
/// exercise is running.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ExerciseState {
    /// Exercise id from the catalog, e.g. `grounding_5_4_3_2_1`.
    pub exercise_type: String,
    /// Zero-based index of the current step.
    pub exercise_step: u32,
    /// Id of the current step (checked against the index on every update).
    pub exercise_step_id: String,
    /// Catalog version the exercise started with.
    pub exercise_version: u32,
    /// Approach pinned when the exercise started.
    pub exercise_therapeutic_approach: Approach,
}

/// How a pipeline stage changes the exercise state of a thread (applied by
/// `ThreadState::apply`).
#[derive(Debug, Clone, Default, PartialEq)]
pub enum ExerciseUpdate {
    #[default]
    Keep,
    Set(ExerciseState),
    Clear,
}

string_enum! {
    /// How the person's latest reply relates to the current step.
    ///
    /// `partial` is accepted only from the voice tool
    /// (`record_guided_exercise_progress`): the person did some of the step
    /// but not all of it. It is treated exactly like `hold` (stay on the
    /// step, encourage the rest), because advancing on half a step would
    /// skip work and cancelling would throw it away. The text classifiers
    /// never produce it. `unsafe` is produced by the runtime when the crisis
    /// gate fires during an exercise, never by a step classifier.
    pub enum StepOutcome: "exercise_step_outcome" {
        Complete = "complete",
        Partial = "partial",
        Hold = "hold",
        Stuck = "stuck",
        Exit = "exit",
        Unsafe = "unsafe",
    }
}

impl StepOutcome {
    /// Whether only the voice surface may report this outcome.
    pub const fn is_voice_only(self) -> bool {
        matches!(self, StepOutcome::Partial)
    }
}

string_enum! {
    /// The name of a transition, for diagnostics and tool results.
    pub enum TransitionKind: "exercise_transition" {
        Advance = "advance",
        Complete = "complete",
        Hold = "hold",
        Simplify = "simplify",
        Cancel = "cancel",
        Crisis = "crisis",
    }
}

/// What the runtime should do after a step outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transition {
    /// Move on: the new state points at the next step.
    Advance(ExerciseState),
    /// The last step was completed: the state is cleared; render the closing.
    Completed,
    /// Stay on the same step (unchanged state) and invite the person to keep
    /// going or repeat it.
    Hold(ExerciseState),
    /// Stay on the same step (unchanged state) and re-explain it with the
    /// step's simpler wording.
    Simplify(ExerciseState),
    /// The person chose to stop: the state is cleared.
    Cancel,
    /// Safety concern: the state is cleared and the turn goes to the crisis path.
    Crisis,
}

impl Transition {
    /// The transition's name.
    pub const fn kind(&self) -> TransitionKind {
        match self {
            Transition::Advance(_) => TransitionKind::Advance,
            Transition::Completed => TransitionKind::Complete,
            Transition::Hold(_) => TransitionKind::Hold,
            Transition::Simplify(_) => TransitionKind::Simplify,
            Transition::Cancel => TransitionKind::Cancel,
            Transition::Crisis => TransitionKind::Crisis,
        }
    }

    /// The exercise state after the transition (`None` = cleared).
    pub fn state_after(&self) -> Option<&ExerciseState> {
        match self {
            Transition::Advance(s) | Transition::Hold(s) | Transition::Simplify(s) => Some(s),
            Transition::Completed | Transition::Cancel | Transition::Crisis => None,
        }
    }

    /// Whether the exercise is over after this transition.
    pub const fn clears_state(&self) -> bool {
        matches!(
            self,
            Transition::Completed | Transition::Cancel | Transition::Crisis
        )
    }

    /// The state delta to apply to the thread: advance sets the new state,
    /// hold and simplify keep it, the clearing transitions clear it.
    pub fn into_update(self) -> ExerciseUpdate {
        match self {
            Transition::Advance(s) => ExerciseUpdate::Set(s),
            Transition::Hold(_) | Transition::Simplify(_) => ExerciseUpdate::Keep,
            Transition::Completed | Transition::Cancel | Transition::Crisis => {
                ExerciseUpdate::Clear
            }
        }
    }
}

/// A transition was requested against a state it does not fit. The state is
/// left unchanged.
///
/// Messages carry only step numbers, never ids: the expected values may come
/// from a model's tool call and are not echoed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidExerciseState {
    /// The active exercise is not the one the caller expected.
    #[error("invalid exercise state: the active exercise is not the expected one")]
    TypeMismatch,
    /// The caller's expected step id is not the active step.
    #[error("invalid exercise state: step {step} is not the expected step")]
    StepIdMismatch {
        /// Zero-based index of the active step.
        step: u32,
    },
    /// The stored step id does not match the catalog's step at that index.
    #[error("invalid exercise state: stored step id disagrees with step {step} of the catalog")]
    StoredStepIdMismatch {
        /// Zero-based index of the active step.
        step: u32,
    },
    /// The stored step index is beyond the exercise's steps.
    #[error("invalid exercise state: step {step} is out of range for {step_count} steps")]
    StepOutOfRange {
        /// Zero-based index of the stored step.
        step: u32,
        /// How many steps the exercise has.
        step_count: usize,
    },
}

/// Starts an exercise at its first step and pins the approach.
///
/// `approach` is the approach the person or triage asked for. When it is
/// absent, or is [`Approach::None`] (no overlay chosen), the exercise's
/// `default_approach` from the catalog is pinned, so 5-4-3-2-1 grounding
/// started with no approach runs under `dbt_skills`. The pinned approach then
/// survives side-turns until the exercise is cleared.
pub fn start(
    exercise_id: &str,
    version: u32,
    first_step_id: &str,
    approach: Option<Approach>,
    default_approach: Approach,
) -> ExerciseState {
    let pinned = match approach {
        Some(a) if a != Approach::None => a,
        _ => default_approach,
    };
    ExerciseState {
        exercise_type: exercise_id.to_owned(),
        exercise_step: 0,
        exercise_step_id: first_step_id.to_owned(),
        exercise_version: version,
        exercise_therapeutic_approach: pinned,
    }
}

/// Applies one step outcome to the active exercise.
///
/// `expected_type` and `expected_step_id` are what the caller believes is
/// active (the runtime's view, or a voice tool call's `expected_skill_id` and
/// `expected_step_id`); `step_ids` are the exercise's ordered step ids from
/// the catalog. Validation order: exercise type, step range, stored step id
/// against the catalog, expected step id against the stored one. Any mismatch
/// is an [`InvalidExerciseState`] and the state is untouched.
///
/// [`StepOutcome::Unsafe`] skips validation and always yields
/// [`Transition::Crisis`]: safety never waits on bookkeeping.
pub fn transition<S: AsRef<str>>(
    state: &ExerciseState,
    outcome: StepOutcome,
    expected_type: &str,
    expected_step_id: &str,
    step_ids: &[S],
) -> Result<Transition, InvalidExerciseState> {
    if outcome == StepOutcome::Unsafe {
        return Ok(Transition::Crisis);
    }
    if state.exercise_type != expected_type {
        return Err(InvalidExerciseState::TypeMismatch);
    }
    let step = state.exercise_step;
    let index = usize::try_from(step).unwrap_or(usize::MAX);
    let Some(catalog_step_id) = step_ids.get(index) else {
        return Err(InvalidExerciseState::StepOutOfRange {
            step,
            step_count: step_ids.len(),
        });
    };
    if catalog_step_id.as_ref() != state.exercise_step_id {
        return Err(InvalidExerciseState::StoredStepIdMismatch { step });
    }
    if expected_step_id != state.exercise_step_id {
        return Err(InvalidExerciseState::StepIdMismatch { step });
    }
    Ok(match outcome {
        StepOutcome::Complete => match step_ids.get(index + 1) {
            Some(next_id) => Transition::Advance(ExerciseState {
                exercise_step: step + 1,
                exercise_step_id: next_id.as_ref().to_owned(),
                ..state.clone()
            }),
            None => Transition::Completed,
        },
        StepOutcome::Partial | StepOutcome::Hold => Transition::Hold(state.clone()),
        StepOutcome::Stuck => Transition::Simplify(state.clone()),
        StepOutcome::Exit => Transition::Cancel,
        StepOutcome::Unsafe => Transition::Crisis,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const STEPS: &[&str] = &["see", "hear", "feel"];

    fn at(step: u32) -> ExerciseState {
        ExerciseState {
            exercise_type: "grounding_5_4_3_2_1".into(),
            exercise_step: step,
            exercise_step_id: STEPS.get(step as usize).copied().unwrap_or("ghost").into(),
            exercise_version: 1,
            exercise_therapeutic_approach: Approach::DbtSkills,
        }
    }

    /// (step, outcome, expected kind, expected state after as (step, id))
    type TransitionCase = (
        u32,
        StepOutcome,
        TransitionKind,
        Option<(u32, &'static str)>,
    );

    #[test]
    fn transition_table() {
        let cases: &[TransitionCase] = &[
            (
                0,
                StepOutcome::Complete,
                TransitionKind::Advance,
                Some((1, "hear")),
            ),
            (
                1,
                StepOutcome::Complete,
                TransitionKind::Advance,
                Some((2, "feel")),
            ),
            (2, StepOutcome::Complete, TransitionKind::Complete, None),
            (0, StepOutcome::Hold, TransitionKind::Hold, Some((0, "see"))),
            (
                2,
                StepOutcome::Hold,
                TransitionKind::Hold,
                Some((2, "feel")),
            ),
            (
                1,
                StepOutcome::Partial,
                TransitionKind::Hold,
                Some((1, "hear")),
            ),
            (
                1,
                StepOutcome::Stuck,
                TransitionKind::Simplify,
                Some((1, "hear")),
            ),
            (
                2,
                StepOutcome::Stuck,
                TransitionKind::Simplify,
                Some((2, "feel")),
            ),
            (0, StepOutcome::Exit, TransitionKind::Cancel, None),
            (1, StepOutcome::Exit, TransitionKind::Cancel, None),
            (0, StepOutcome::Unsafe, TransitionKind::Crisis, None),
            (2, StepOutcome::Unsafe, TransitionKind::Crisis, None),
        ];
        for &(step, outcome, kind, after) in cases {
            let state = at(step);
            let expected_id = state.exercise_step_id.clone();
            let t =
                transition(&state, outcome, "grounding_5_4_3_2_1", &expected_id, STEPS).unwrap();
            assert_eq!(t.kind(), kind, "step {step} {outcome}");
            let got = t
                .state_after()
                .map(|s| (s.exercise_step, s.exercise_step_id.as_str()));
            assert_eq!(got, after, "step {step} {outcome}");
            assert_eq!(t.clears_state(), after.is_none());
            if let Some(s) = t.state_after() {
                assert_eq!(
                    s.exercise_therapeutic_approach,
                    Approach::DbtSkills,
                    "approach stays pinned"
                );
                assert_eq!(s.exercise_version, 1);
            }
        }
    }

    #[test]
    fn invalid_states_are_rejected_for_every_non_unsafe_outcome() {
        let mut stale_id = at(1);
        stale_id.exercise_step_id = "see".into();
        // (state, expected type, expected step id, error)
        let cases: Vec<(ExerciseState, &str, &str, InvalidExerciseState)> = vec![
            (
                at(0),
                "grounding_box_breathing",
                "see",
                InvalidExerciseState::TypeMismatch,
            ),
            (
                at(0),
                "grounding_5_4_3_2_1",
                "hear",
                InvalidExerciseState::StepIdMismatch { step: 0 },
            ),
            (
                at(3),
                "grounding_5_4_3_2_1",
                "ghost",
                InvalidExerciseState::StepOutOfRange {
                    step: 3,
                    step_count: 3,
                },
            ),
            (
                stale_id,
                "grounding_5_4_3_2_1",
                "see",
                InvalidExerciseState::StoredStepIdMismatch { step: 1 },
            ),
        ];
        for (state, ty, step_id, err) in cases {
            for outcome in StepOutcome::ALL
                .iter()
                .copied()
                .filter(|o| *o != StepOutcome::Unsafe)
            {
                let before = state.clone();
                assert_eq!(
                    transition(&state, outcome, ty, step_id, STEPS),
                    Err(err.clone()),
                    "{outcome}"
                );
                assert_eq!(state, before, "state unchanged");
            }
            // Unsafe always reaches the crisis path.
            assert_eq!(
                transition(&state, StepOutcome::Unsafe, ty, step_id, STEPS),
                Ok(Transition::Crisis)
            );
        }
    }

    #[test]
    fn errors_do_not_echo_ids() {
        let err = transition(
            &at(0),
            StepOutcome::Complete,
            "secret-type",
            "secret-step",
            STEPS,
        )
        .unwrap_err();
        assert!(!err.to_string().contains("secret"));
        let err = transition(
            &at(0),
            StepOutcome::Complete,
            "grounding_5_4_3_2_1",
            "secret-step",
            STEPS,
        )
        .unwrap_err();
        assert!(!err.to_string().contains("secret"));
    }

    #[test]
    fn start_pins_the_approach() {
        let cases: &[(Option<Approach>, Approach, Approach)] = &[
            (None, Approach::DbtSkills, Approach::DbtSkills),
            (
                Some(Approach::None),
                Approach::DbtSkills,
                Approach::DbtSkills,
            ),
            (Some(Approach::Act), Approach::DbtSkills, Approach::Act),
            (Some(Approach::Cbt), Approach::None, Approach::Cbt),
            (None, Approach::None, Approach::None),
        ];
        for &(given, default, pinned) in cases {
            let s = start("grounding_5_4_3_2_1", 2, "see", given, default);
            assert_eq!(s.exercise_therapeutic_approach, pinned, "{given:?}");
            assert_eq!(
                (
                    s.exercise_step,
                    s.exercise_step_id.as_str(),
                    s.exercise_version
                ),
                (0, "see", 2)
            );
        }
    }

    #[test]
    fn updates_follow_the_transition() {
        assert_eq!(
            Transition::Advance(at(1)).into_update(),
            ExerciseUpdate::Set(at(1))
        );
        assert_eq!(Transition::Hold(at(1)).into_update(), ExerciseUpdate::Keep);
        assert_eq!(
            Transition::Simplify(at(1)).into_update(),
            ExerciseUpdate::Keep
        );
        for t in [
            Transition::Completed,
            Transition::Cancel,
            Transition::Crisis,
        ] {
            assert_eq!(t.into_update(), ExerciseUpdate::Clear);
        }
    }

    #[test]
    fn walk_to_completion_and_partial_is_voice_only() {
        let mut state = start(
            "grounding_5_4_3_2_1",
            1,
            STEPS[0],
            None,
            Approach::DbtSkills,
        );
        for i in 0..STEPS.len() {
            let id = state.exercise_step_id.clone();
            match transition(
                &state,
                StepOutcome::Complete,
                "grounding_5_4_3_2_1",
                &id,
                STEPS,
            )
            .unwrap()
            {
                Transition::Advance(next) => state = next,
                Transition::Completed => assert_eq!(i, STEPS.len() - 1),
                other => panic!("unexpected {other:?}"),
            }
        }
        assert!(StepOutcome::Partial.is_voice_only());
        assert!(
            StepOutcome::ALL
                .iter()
                .filter(|o| o.is_voice_only())
                .count()
                == 1
        );
        assert_eq!("partial".parse::<StepOutcome>(), Ok(StepOutcome::Partial));
    }
}
