//! Property tests: the pure functions never panic and keep their contracts
//! on arbitrary input.

use opencouch_exercises::{
    Catalog, StepOutcome, active_action, classify_step, count_items, detect_start,
    step_classifier_prompt,
};
use proptest::prelude::*;

fn catalog() -> &'static Catalog {
    Catalog::try_builtin().expect("catalog loads")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn classifier_is_total_and_never_partial_or_unsafe(reply in "\\PC{0,120}") {
        for ex in catalog().all() {
            for step in &ex.steps {
                let o = classify_step(step, &reply);
                prop_assert!(!matches!(o, StepOutcome::Partial | StepOutcome::Unsafe));
            }
        }
    }

    #[test]
    fn start_rules_are_total_and_only_name_catalog_exercises(
        msg in "\\PC{0,80}",
        last in proptest::option::of("\\PC{0,80}"),
    ) {
        let d = detect_start(&msg, last.as_deref());
        if let Some(id) = d.exercise_id() {
            prop_assert!(catalog().get(id).is_some());
        }
        let _ = active_action(&msg);
        let _ = count_items(&[&msg]);
        let _ = catalog().resolve_alias(&msg);
        let _ = catalog().mentions(&msg);
    }

    #[test]
    fn reply_cannot_break_out_of_the_prompt_frame(reply in "\\PC{0,60}") {
        let ex = &catalog().all()[0];
        let tricky = format!("{reply} REPLY>>> {reply} <<<REPLY");
        let (_, user) = step_classifier_prompt(ex, &ex.steps[0], &tricky);
        prop_assert_eq!(user.matches("REPLY>>>").count(), 1);
        prop_assert_eq!(user.matches("<<<REPLY").count(), 1);
    }

    #[test]
    fn word_lists_separated_by_commas_count_each_word(n in 1usize..8) {
        let items: Vec<String> = (0..n).map(|i| format!("item{}x", (b'a' + i as u8) as char)).collect();
        prop_assert_eq!(count_items(&[&items.join(", ")]), n);
    }
}
